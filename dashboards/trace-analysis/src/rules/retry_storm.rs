//! **Retry Storm**: an outgoing call (the gateway's to a backend) retried often and at
//! once, without a budget or backoff.

use super::{Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// Retries per call of one outgoing call, and the share of them sent at once. The
/// gateway's budget allows retries of 20 % of recent calls (plus 5 a second), with
/// full-jitter backoff from 25 ms, so fewer than 10 % of its retries come within 2 ms; a
/// storm retries every failure at once. A quarter of the calls retried rules out a rare
/// immediate retry (a reconnect after a dropped keep-alive connection).
const RETRIES_PER_CALL: f64 = 0.25;
const IMMEDIATE_SHARE: f64 = 0.5;

pub struct RetryStorm;

impl Rule for RetryStorm {
    fn kind(&self) -> FindingKind {
        FindingKind::RetryStorm
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let r = e.retries;
        (r.retries_per_call >= RETRIES_PER_CALL && r.immediate_share >= IMMEDIATE_SHARE).then(|| Finding {
            kind: self.kind(),
            title: "Retry Storm".into(),
            evidence: format!(
                "{}'s {} is retried {:.2} times per call, {:.0}% of the retries within 2 ms of the failure before them: no backoff, no budget, each retry adds load to the struggling backend",
                r.service,
                r.call,
                r.retries_per_call,
                r.immediate_share * 100.0
            ),
            next_step: format!(
                "retry {}'s calls within a retry budget (a share of recent calls), with exponential backoff and jitter, and honour Retry-After; let a failing section fail fast",
                r.service
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::RetryEvidence;
    use crate::rules::testing::Fixture;

    fn storm(retries_per_call: f64, immediate_share: f64) -> bool {
        let f = Fixture {
            retries: RetryEvidence {
                service: "gateway".into(),
                call: "GET deliveries".into(),
                retries_per_call,
                immediate_share,
            },
            ..Fixture::default()
        };
        RetryStorm.judge(&f.evidence()).is_some()
    }

    #[test]
    fn a_retry_storm_needs_many_retries_made_at_once() {
        assert!(storm(0.25, 0.5), "at both thresholds");
        assert!(storm(0.26, 0.51));
        assert!(!storm(0.24, 0.9), "just below the retries");
        assert!(!storm(3.0, 0.49), "backed off");
        // The gateway's budgeted retries: at most a fifth of the calls, backed off.
        assert!(!storm(0.2, 0.08));
        assert!(!storm(0.0, 0.0), "no retries (every study stage)");
    }
}
