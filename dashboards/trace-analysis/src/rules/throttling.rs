//! **Throttling**: Cosmos DB answers 429 (request rate too large) because the partitions
//! run out of their RU budget.

use super::{pct, Evidence, Rule};
use crate::evidence::{CosmosEvidence, Finding, FindingKind};

/// ≥ 1 % of the attempts throttled, or ≥ 5 % of the Cosmos service's time spent waiting
/// for and retrying 429s: below both, the SDK's retries absorb the odd 429 unseen.
const THROTTLED_SHARE: f64 = 0.01;
const RETRY_WAIT_SHARE: f64 = 0.05;

/// The condition shared with the rules that say where the 429s come from.
pub(crate) fn throttled(c: &CosmosEvidence) -> bool {
    c.throttled_share >= THROTTLED_SHARE || c.retry_wait_share >= RETRY_WAIT_SHARE
}

pub struct Throttling;

impl Rule for Throttling {
    fn kind(&self) -> FindingKind {
        FindingKind::Throttling
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let c = e.cosmos;
        throttled(c).then(|| Finding {
            kind: self.kind(),
            title: "Cosmos DB throttling (HTTP 429)".into(),
            evidence: format!(
                "{} of {}'s Cosmos attempts were throttled ({:.2} per operation); {} of its time went to waiting for and retrying them",
                pct(c.throttled_share),
                c.service,
                c.throttled_per_operation,
                pct(c.retry_wait_share)
            ),
            next_step: format!(
                "provision more RU/s: the demand is {:.1} RU per operation and the partitions run out of budget",
                c.ru_per_operation
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{cosmos, Fixture};

    fn with(throttled: f64, wait: f64) -> Option<Finding> {
        let f = Fixture {
            cosmos: cosmos(throttled, wait, 1.0, 1.0),
            ..Fixture::default()
        };
        Throttling.judge(&f.evidence())
    }

    #[test]
    fn a_share_of_429s_or_of_time_waiting_for_them() {
        assert!(with(0.01, 0.0).is_some());
        assert!(with(0.0, 0.05).is_some());
        assert!(with(0.009, 0.049).is_none());
        let f = with(0.2, 0.1).expect("throttled");
        assert!(
            f.evidence.starts_with("20.0% of utilization-service's"),
            "{}",
            f.evidence
        );
    }
}
