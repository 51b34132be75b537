//! **CPU limit**: the machine's CPUs, busy with the stack's own processes, or one thread
//! of a component, are saturated.

use super::{Evidence, Rule};
use crate::evidence::{CpuEvidence, Finding, FindingKind, CPU_LIMIT_SHARE};

pub struct CpuLimit;

/// The stack's processes took at least as much of the busy CPU as the rest of the
/// machine: the saturation is the stack's own (otherwise `busy_machine`).
pub(crate) fn mostly_others(cpu: &CpuEvidence) -> bool {
    cpu.rest_share() > cpu.own_share
}

impl Rule for CpuLimit {
    fn kind(&self) -> FindingKind {
        FindingKind::CpuLimit
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let cpu = e.cpu?;
        let generator_note = |component: &str| {
            if component == cpu.load_generator {
                " — the load generator itself, so this measures the generator, not the app: drive the load from more cores or machines (e.g. `--load-pods` on a cluster)".to_owned()
            } else {
                String::new()
            }
        };
        if cpu.machine_share >= CPU_LIMIT_SHARE {
            if mostly_others(cpu) {
                return None;
            }
            return Some(Finding {
                kind: self.kind(),
                title: "CPU saturated".into(),
                evidence: format!(
                    "the machine's {} CPUs were {:.0}% busy (5-second mean), {:.0}% of them the stack's own processes; {}{}",
                    cpu.cpus,
                    cpu.machine_share * 100.0,
                    cpu.own_share * 100.0,
                    cpu.busiest_line(),
                    generator_note(&cpu.busiest)
                ),
                next_step: format!(
                    "scale out on CPU: more replicas (or nodes) for {}, the largest consumer",
                    cpu.busiest
                ),
            });
        }
        let (component, cores) = cpu.hottest_thread.as_ref()?;
        (*cores >= CPU_LIMIT_SHARE).then(|| Finding {
            kind: self.kind(),
            title: "Single-threaded CPU hot spot".into(),
            evidence: format!(
                "one thread of {component} ran at {:.0}% of a core (5-second mean) while the machine was {:.0}% busy{}",
                cores * 100.0,
                cpu.machine_share * 100.0,
                generator_note(component)
            ),
            next_step: format!(
                "spread {component}'s work over more threads or replicas: one core is its ceiling"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{cosmos, cpu, Fixture};

    fn at(machine: f64, thread: f64, busiest: &str, own: f64) -> Fixture {
        Fixture::default().with(|f| f.cpu = Some(cpu(machine, thread, busiest, own)))
    }

    #[test]
    fn named_only_when_measured_at_its_limit() {
        use FindingKind::*;
        let spare = at(0.40, 0.50, "gateway", 0.38);
        assert_eq!(spare.kinds(), [NoCosmosBottleneck]);
        let machine = at(0.90, 0.50, "gateway", 0.80);
        assert_eq!(machine.kinds(), [NoCosmosBottleneck, CpuLimit]);
        let thread = at(0.30, 0.97, "gateway", 0.28);
        assert_eq!(thread.kinds(), [NoCosmosBottleneck, CpuLimit]);
        let f = super::CpuLimit
            .judge(&at(0.95, 0.5, "loadtest", 0.9).evidence())
            .expect("cpu");
        assert!(
            f.evidence.contains("the load generator itself"),
            "{}",
            f.evidence
        );
        // A Cosmos finding stays first; the CPU limit follows it.
        let throttled =
            at(0.95, 0.5, "gateway", 0.9).with(|f| f.cosmos = cosmos(0.3, 0.2, 1.0, 1.0));
        assert_eq!(throttled.kinds(), [Throttling, CpuLimit]);
    }

    #[test]
    fn not_when_other_processes_keep_the_machine_busy() {
        assert!(super::CpuLimit
            .judge(&at(0.95, 0.3, "gateway", 0.15).evidence())
            .is_none());
    }
}
