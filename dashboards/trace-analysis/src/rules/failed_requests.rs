//! **Failed requests**: more than a small share of the stage's requests failed (an error,
//! or an answer with a part missing). Not an antipattern of its own: the symptom the
//! user sees, named with the call that failed, so that no verdict says "nothing is
//! saturated" while requests fail.

use super::{pct, Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// From 1 % of the requests failed: above what a service-level objective of "two
/// nines" allows, and well above the odd timeout a healthy stage shows (the study's
/// throttled first stage: 0.1–0.3 %).
pub(crate) const FAILED_SHARE: f64 = 0.01;

pub struct FailedRequests;

impl Rule for FailedRequests {
    fn kind(&self) -> FindingKind {
        FindingKind::FailedRequests
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let f = e.failures;
        // The load generator counted every request; the sample only some.
        let counted = e.counters.and_then(|k| Some((k, k.failed_share()?)));
        let share = counted.map_or(f.failed_share(), |(_, share)| share);
        if share < FAILED_SHARE {
            return None;
        }
        let mut evidence = match counted {
            Some((k, share)) => {
                let outcomes: Vec<String> = k
                    .failed_by_outcome
                    .iter()
                    .map(|(outcome, n)| format!("{n} {outcome}"))
                    .collect();
                format!(
                    "{} of the stage's requests failed in its steady state ({} of {}; over the stage: {})",
                    pct(share),
                    k.steady_failed,
                    k.steady_requests,
                    outcomes.join(", ")
                )
            }
            None => format!(
                "{} of the sampled requests failed ({} of {})",
                pct(share),
                f.failed,
                f.answered
            ),
        };
        let next_step = match &f.failing_call {
            Some(call) => {
                evidence.push_str(&format!(
                    "; {} of {} sampled traces failed, {} of them at {}",
                    f.failed, f.answered, call.traces, call.call
                ));
                if call.origin != call.call {
                    evidence.push_str(&format!(", where it began at {}", call.origin));
                }
                if call.cause.contains("429") {
                    "the 429s outlast the SDK's retries: remove the throttling and these requests stop failing".to_owned()
                } else {
                    format!(
                        "find why {} fails: open one of its failed traces; until it answers, requests fail or lose that part",
                        call.origin
                    )
                }
            }
            None => {
                evidence.push_str(&format!(
                    "; none of the {} sampled traces failed: the failures left no trace the viewer holds (requests cut off by the client's timeout, or outside the sample)",
                    f.answered
                ));
                "read the load generator's outcomes and the services' logs: the traces cannot say which call failed".to_owned()
            }
        };
        Some(Finding {
            kind: self.kind(),
            title: "Requests failed".into(),
            evidence,
            next_step,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{FailingCall, FailureEvidence};
    use crate::rules::testing::Fixture;

    fn failing(answered: usize, failed: usize, call: Option<FailingCall>) -> FailureEvidence {
        FailureEvidence {
            answered,
            failed,
            failing_call: call,
        }
    }

    fn deliveries() -> FailingCall {
        FailingCall {
            call: "gateway GET deliveries (HTTP 503)".into(),
            origin: "delivery-service GET /api/deliveries (HTTP 503)".into(),
            cause: "HTTP 503".into(),
            traces: 290,
        }
    }

    #[test]
    fn counted_failures_name_the_call_the_traces_show() {
        let stage = Fixture::default().counted(3, 1.0).with(|f| {
            f.failures = failing(600, 330, Some(deliveries()));
            if let Some(k) = f.counters.as_mut() {
                k.steady_requests = 5000;
                k.steady_failed = 2800;
                k.failed_by_outcome = [("partial".to_owned(), 3136)].into();
            }
        });
        // Not a Cosmos bottleneck: the failures are the verdict.
        assert_eq!(stage.kinds(), [FindingKind::FailedRequests]);
        let f = FailedRequests.judge(&stage.evidence()).expect("failed");
        assert!(
            f.evidence
                .starts_with("56.0% of the stage's requests failed"),
            "{}",
            f.evidence
        );
        assert!(f.evidence.contains("3136 partial"), "{}", f.evidence);
        assert!(f.evidence.contains("290 of them at gateway GET deliveries (HTTP 503), where it began at delivery-service"), "{}", f.evidence);
        assert!(f.next_step.contains("delivery-service"), "{}", f.next_step);
    }

    #[test]
    fn failures_no_trace_caught_are_said_so() {
        let stage = Fixture::default().counted(3, 1.0).with(|f| {
            f.failures = failing(600, 0, None);
            if let Some(k) = f.counters.as_mut() {
                k.steady_requests = 1000;
                k.steady_failed = 30;
            }
        });
        let f = FailedRequests.judge(&stage.evidence()).expect("failed");
        assert!(
            f.evidence.contains("none of the 600 sampled traces failed"),
            "{}",
            f.evidence
        );
    }

    #[test]
    fn below_a_percent_or_without_counters_the_sample_decides() {
        let few = Fixture::default().counted(3, 1.0).with(|f| {
            f.failures = failing(600, 30, Some(deliveries()));
            if let Some(k) = f.counters.as_mut() {
                k.steady_requests = 1000;
                k.steady_failed = 9;
            }
        });
        assert!(
            FailedRequests.judge(&few.evidence()).is_none(),
            "the counters outweigh the sample"
        );
        let sampled =
            Fixture::default().with(|f| f.failures = failing(600, 30, Some(deliveries())));
        let f = FailedRequests
            .judge(&sampled.evidence())
            .expect("from the sample");
        assert!(
            f.evidence
                .starts_with("5.0% of the sampled requests failed"),
            "{}",
            f.evidence
        );
    }
}
