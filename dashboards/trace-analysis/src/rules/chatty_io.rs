//! **Chatty I/O**: round trips one query could combine — a list and a point read per
//! item instead of one query.
//!
//! Judged against what one query would do: a query visits each partition key range it
//! needs once (the SDK's per-range requests of a cross-partition query are one
//! operation per range at most), so every further logical operation that reaches a range
//! the request already reached is a round trip one query could have saved. The figure
//! does not depend on the data: one drone per owner makes one extra round trip, ten make
//! ten.

use super::{Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// Extra round trips per request: at least one on average. Every study shape and every
/// lab stage without the knob makes none (one query per range reached); the smallest
/// chatty request (a list and one read) makes one.
const EXTRA_OPERATIONS: f64 = 1.0;

pub struct ChattyIo;

impl Rule for ChattyIo {
    fn kind(&self) -> FindingKind {
        FindingKind::ChattyIo
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let c = e.cosmos;
        (c.extra_operations_per_request >= EXTRA_OPERATIONS).then(|| Finding {
            kind: self.kind(),
            title: "Chatty I/O".into(),
            evidence: format!(
                "{}'s requests that reached Cosmos made {:.1} round trips each to partition key ranges they had already reached ({:.1} Cosmos operations, {:.2} calls and {:.1} RU per invoice): round trips one query could combine",
                c.service,
                c.extra_operations_per_request,
                c.operations_per_request,
                c.calls_per_operation,
                c.ru_per_operation
            ),
            next_step: "read the records with one query (the study's SELECT over the owner's partition) instead of a list and a point read per item".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{cosmos, study_stages, Fixture};

    fn chatty(ranges: f64, concurrency: f64, operations: f64, extra: f64) -> Fixture {
        let mut c = cosmos(0.0, 0.0, ranges, concurrency);
        c.operations_per_request = operations;
        c.extra_operations_per_request = extra;
        Fixture {
            cosmos: c,
            ..Fixture::default()
        }
    }

    #[test]
    fn round_trips_beyond_one_per_range() {
        use FindingKind::*;
        // A list and two reads in the owner's partition.
        assert_eq!(chatty(1.0, 1.0, 3.0, 2.0).kinds(), [ChattyIo]);
        // One drone per owner: a list and one read.
        assert_eq!(chatty(1.0, 1.0, 2.0, 1.0).kinds(), [ChattyIo]);
        assert_eq!(chatty(1.0, 1.0, 2.0, 0.9).kinds(), [NoCosmosBottleneck]);
        // On the serial cross-partition query: named beside the fan-out, not hidden by it.
        assert_eq!(
            chatty(9.0, 1.0, 3.0, 2.0).kinds(),
            [ChattyIo, SerialFanOut, CrossPartitionCost]
        );
    }

    #[test]
    fn silent_on_the_study_stages() {
        // Stage 3 makes nine operations, one per range: a fan-out, not chatter.
        for stage in study_stages() {
            assert!(ChattyIo.judge(&stage.evidence()).is_none());
        }
    }
}
