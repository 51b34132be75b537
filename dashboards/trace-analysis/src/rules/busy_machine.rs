//! **Busy machine**: the machine's CPUs are saturated, but mostly by processes that are
//! not the stack's. That is not the application's limit: no scale-out advice, and every
//! figure of the stage (latency, throughput) is distorted by the other work.

use super::cpu_limit::mostly_others;
use super::{pct, Evidence, Rule};
use crate::evidence::{Finding, FindingKind, CPU_LIMIT_SHARE};

pub struct BusyMachine;

impl Rule for BusyMachine {
    fn kind(&self) -> FindingKind {
        FindingKind::BusyMachine
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let cpu = e.cpu?;
        (cpu.machine_share >= CPU_LIMIT_SHARE && mostly_others(cpu)).then(|| Finding {
            kind: self.kind(),
            title: "Machine busy with other work".into(),
            evidence: format!(
                "the machine's {} CPUs were {:.0}% busy (5-second mean), but the stack's processes used {} of them on average and other processes {}; {}",
                cpu.cpus,
                cpu.machine_share * 100.0,
                pct(cpu.own_share),
                pct(cpu.rest_share()),
                cpu.busiest_line()
            ),
            next_step: "measure again on a quiet machine (or give the stack dedicated cores): this stage's latency and throughput include waiting for CPU that other work held, and more replicas would not help".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{cpu, Fixture};

    fn at(machine_share: f64, own: f64) -> Fixture {
        let mut busy = cpu(machine_share, 0.2, "cosmos-emulator", own);
        busy.machine_mean_share = machine_share;
        Fixture::default().with(|f| f.cpu = Some(busy))
    }

    #[test]
    fn saturated_by_processes_that_are_not_ours() {
        use FindingKind::*;
        // Stage 4 with other processes keeping both CPUs busy, ours at 0.3 cores of 2.
        let busy = at(0.97, 0.15);
        assert_eq!(busy.kinds(), [NoCosmosBottleneck, BusyMachine]);
        let f = super::BusyMachine.judge(&busy.evidence()).expect("busy");
        assert!(
            f.evidence.contains("15.0%")
                && f.evidence.contains("82.0%")
                && !f.next_step.contains("replicas for"),
            "{f:?}"
        );
        // Saturated by the stack itself: a CPU limit, not this.
        assert_eq!(at(0.97, 0.9).kinds(), [NoCosmosBottleneck, CpuLimit]);
        // Not saturated: nothing about the machine.
        assert_eq!(at(0.5, 0.1).kinds(), [NoCosmosBottleneck]);
    }
}
