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
        // The stage's counters say how much; a sample that caught no 429 does not
        // make the container's throttling go away.
        let counted = e
            .counters
            .and_then(|k| k.throttled_share())
            .filter(|share| *share >= THROTTLED_SHARE);
        if !throttled(c) && counted.is_none() {
            return None;
        }
        let mut evidence = format!(
            "{} of {}'s Cosmos attempts were throttled ({:.2} per operation); {} of its time went to waiting for and retrying them",
            pct(c.throttled_share),
            c.service,
            c.throttled_per_operation,
            pct(c.retry_wait_share)
        );
        if let Some(share) = counted {
            evidence.push_str(&format!(
                "; the stage's counters: {} of the container's calls throttled",
                pct(share)
            ));
        }
        Some(Finding {
            kind: self.kind(),
            title: "Cosmos DB throttling (HTTP 429)".into(),
            evidence,
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
    fn the_stages_counters_name_it_when_the_sample_caught_no_429() {
        // 6,799 of 11,641 calls throttled, none in the sampled traces.
        let hidden = Fixture::default().counted(3, 1.0).with(|f| {
            if let Some(k) = f.counters.as_mut() {
                k.throttled_by_range = [("0".into(), 6799)].into();
                k.cosmos_calls = 11_641;
            }
        });
        assert_eq!(hidden.kinds(), [FindingKind::Throttling]);
        let f = Throttling.judge(&hidden.evidence()).expect("throttled");
        assert!(
            f.evidence.contains("58.4% of the container's calls"),
            "{}",
            f.evidence
        );
        // Counted below the line, or not counted: the sample alone decides.
        let few = Fixture::default().counted(3, 1.0).with(|f| {
            if let Some(k) = f.counters.as_mut() {
                k.throttled_by_range = [("0".into(), 9)].into();
                k.cosmos_calls = 1000;
            }
        });
        assert!(Throttling.judge(&few.evidence()).is_none());
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
