//! **Synchronous I/O**: a blocking call inside an async handler. Judged on blocking
//! itself, as the runtime sees it: every server span carries the time its request's
//! future spent in polls longer than [`dronelab_contract::telemetry::SLOW_POLL`]
//! (`tokio-metrics`' slow polls), during which it held one of the runtime's worker
//! threads, and the thread CPU time its polls took. Awaited I/O, however slow, returns
//! from `poll` at once; a blocking call holds the poll without computing. Slow polls that
//! compute (a join of many responses under heavy throttling: 6.4 ms per request in the
//! held-out `parallel-throttled`) are not a blocking call. A span around the call changes
//! nothing: the fixed stage has the same spans.

use super::{Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// Time per request in slow polls beyond the CPU its polls took. Handling a request
/// (parsing, serialising an answer of thousands of records) polls in well under a
/// millisecond here; 5 ms per request of waiting inside polls is a call, not code.
const BLOCKED_MS: f64 = 5.0;

pub struct SynchronousIo;

impl Rule for SynchronousIo {
    fn kind(&self) -> FindingKind {
        FindingKind::SynchronousIo
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let b = e
            .backends
            .iter()
            .filter(|b| b.blocked_ms >= BLOCKED_MS)
            .max_by(|a, b| a.blocked_ms.total_cmp(&b.blocked_ms))?;
        let machine = e
            .cpu
            .map(|cpu| {
                format!(
                    "; the machine was {:.0}% busy at most: the workers wait, they do not compute",
                    cpu.machine_share * 100.0
                )
            })
            .unwrap_or_default();
        Some(Finding {
            kind: self.kind(),
            title: "Synchronous I/O".into(),
            evidence: format!(
                "{}'s handler held a runtime worker for {:.1} ms per request in polls that neither returned nor computed (of {:.1} ms per request): a call that blocks instead of awaiting, and every other request on that worker waits{machine}",
                b.service, b.blocked_ms, b.avg_ms
            ),
            next_step: format!(
                "find the blocking call in {}'s handler (a synchronous client, file or lock) and await an asynchronous one, or move it off the runtime's workers (spawn_blocking)",
                b.service
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::BackendShare;
    use crate::rules::testing::{cpu, Fixture};

    fn backend(avg_ms: f64, blocked_ms: f64) -> Fixture {
        Fixture {
            backends: vec![BackendShare {
                service: "utilization-service".into(),
                avg_ms,
                share_of_latency: 0.5,
                blocked_ms,
            }],
            ..Fixture::default()
        }
    }

    #[test]
    fn blocked_polls_per_request() {
        use FindingKind::*;
        // The 20 ms blocking write, whatever span it runs under.
        assert_eq!(backend(331.0, 20.2).kinds(), [SynchronousIo]);
        assert_eq!(backend(100.0, 5.0).kinds(), [SynchronousIo]);
        assert_eq!(backend(100.0, 4.9).kinds(), [NoCosmosBottleneck]);
        // The awaited write of the fixed stage: as long a request, no blocked poll.
        assert_eq!(backend(331.0, 0.1).kinds(), [NoCosmosBottleneck]);
    }

    #[test]
    fn at_low_cpu_it_says_the_workers_wait() {
        let idle = backend(331.0, 20.2).with(|f| f.cpu = Some(cpu(0.3, 0.2, "gateway", 0.3)));
        let f = SynchronousIo.judge(&idle.evidence()).expect("blocked");
        assert!(f.evidence.contains("30% busy at most"), "{}", f.evidence);
    }
}
