//! **Serial cross-partition fan-out**: an operation queries several partition key ranges
//! one after the other.

use super::{Evidence, Rule};
use crate::evidence::{CosmosEvidence, Finding, FindingKind};

/// An operation counts as cross-partition from this many ranges on average.
const CROSS_PARTITION_RANGES: f64 = 1.5;

/// Shared with the cross-partition cost rule.
pub(crate) fn cross_partition(c: &CosmosEvidence) -> bool {
    c.partition_ranges_per_operation >= CROSS_PARTITION_RANGES
}

pub struct SerialFanOut;

impl Rule for SerialFanOut {
    fn kind(&self) -> FindingKind {
        FindingKind::SerialFanOut
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let c = e.cosmos;
        (cross_partition(c) && c.fan_out_concurrency_p50 <= 1.0).then(|| Finding {
            kind: self.kind(),
            title: "Serial cross-partition fan-out".into(),
            evidence: format!(
                "each operation queries {:.1} partition key ranges ({:.2} calls) but never more than {} at a time (median max concurrency {:.0})",
                c.partition_ranges_per_operation,
                c.calls_per_operation,
                c.fan_out_concurrency_max,
                c.fan_out_concurrency_p50
            ),
            next_step: "query the partitions in parallel (query parallelism -1)".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{cosmos, Fixture};

    fn judged(ranges: f64, concurrency: f64) -> bool {
        let f = Fixture {
            cosmos: cosmos(0.0, 0.0, ranges, concurrency),
            ..Fixture::default()
        };
        SerialFanOut.judge(&f.evidence()).is_some()
    }

    #[test]
    fn several_ranges_one_at_a_time() {
        assert!(judged(9.0, 1.0));
        assert!(judged(1.5, 1.0));
        assert!(!judged(9.0, 2.0), "in parallel");
        assert!(!judged(1.4, 1.0), "one range");
    }
}
