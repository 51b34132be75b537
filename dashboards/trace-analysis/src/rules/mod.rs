//! The diagnosis rules, one module each, behind one small trait: evidence in, a finding
//! or none out. Every rule is judged on its own evidence; [`judge`] lists every finding
//! that holds, in the order of [`RULES`] (what to fix first), so two antipatterns at once
//! are both named.
//!
//! Adding an antipattern touches this folder (a module and a line in [`RULES`]), a knob,
//! a stage pair under `loadtest/stages/antipatterns/` and `docs/antipatterns.md`.

mod busy_machine;
mod chatty_io;
mod cpu_limit;
mod cross_partition_cost;
mod failed_requests;
mod hot_partition;
mod improper_instantiation;
mod no_caching;
mod no_cosmos_bottleneck;
mod noisy_neighbor;
mod retry_storm;
mod serial_fan_out;
mod synchronous_io;
mod throttling;

#[cfg(test)]
pub(crate) mod testing;

use crate::evidence::{
    BackendShare, CosmosEvidence, CpuEvidence, FailureEvidence, Finding, FindingKind,
    RepeatEvidence, RetryEvidence, StageCounters,
};

/// What the rules read: the figures of a sample of traces, and what the stage measured
/// besides them (its Cosmos counters and CPU), when it did.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// The entry operation's mean latency (µs).
    pub latency_us: f64,
    /// The backends, slowest first.
    pub backends: &'a [BackendShare],
    pub cosmos: &'a CosmosEvidence,
    pub retries: &'a RetryEvidence,
    pub repeats: &'a RepeatEvidence,
    pub failures: &'a FailureEvidence,
    /// The stage's Cosmos counters (every client of the container), when measured.
    pub counters: Option<&'a StageCounters>,
    /// The stage's CPU measurement, when taken.
    pub cpu: Option<&'a CpuEvidence>,
}

/// One rule: the kind it names, and its judgement of the evidence.
pub trait Rule: Sync {
    fn kind(&self) -> FindingKind;
    fn judge(&self, evidence: &Evidence) -> Option<Finding>;
}

/// Every rule, in the order of what to fix first: a retry storm multiplies whatever
/// else fails; a neighbour's or a hot partition's 429s explain throttling before more
/// RU/s is bought; the lab's antipatterns next; the study's query shapes; failed
/// requests after the causes that explain them; the machine last (it is about where the
/// figures were measured).
pub const RULES: [&dyn Rule; 13] = [
    &retry_storm::RetryStorm,
    &noisy_neighbor::NoisyNeighbor,
    &hot_partition::HotPartition,
    &throttling::Throttling,
    &improper_instantiation::ImproperInstantiation,
    &synchronous_io::SynchronousIo,
    &chatty_io::ChattyIo,
    &serial_fan_out::SerialFanOut,
    &cross_partition_cost::CrossPartitionCost,
    &no_caching::NoCaching,
    &failed_requests::FailedRequests,
    &busy_machine::BusyMachine,
    &cpu_limit::CpuLimit,
];

/// Every finding that holds, in [`RULES`] order. Throttling gives way to the finding
/// that says where its 429s come from (a neighbour, a hot partition): "provision more
/// RU/s" would pay for the wrong thing. With nothing found but the machine, "no Cosmos
/// bottleneck left" comes first, with what the CPU measurement showed.
pub fn judge(evidence: &Evidence) -> Vec<Finding> {
    let mut findings: Vec<Finding> = RULES.iter().filter_map(|r| r.judge(evidence)).collect();
    let explained = findings.iter().any(|f| {
        matches!(
            f.kind,
            FindingKind::NoisyNeighbor | FindingKind::HotPartition
        )
    });
    if explained {
        findings.retain(|f| f.kind != FindingKind::Throttling);
    }
    fold_client_setup_into_instantiation(&mut findings);
    let about_the_app = findings
        .iter()
        .any(|f| !matches!(f.kind, FindingKind::CpuLimit | FindingKind::BusyMachine));
    if !about_the_app {
        let cpu_named = !findings.is_empty();
        findings.insert(0, no_cosmos_bottleneck::finding(evidence, cpu_named));
    }
    findings
}

/// Building a Cosmos client does setup work synchronously (measured 70 ms of blocked
/// polls per client in a debug build): a client built per request shows as blocked polls
/// too. Improper Instantiation explains them and its fix removes them, so Synchronous I/O
/// is folded into it rather than sending the user after a blocking call the code does
/// not make. (Both antipatterns at once are then named as one; the lab has no such case.)
fn fold_client_setup_into_instantiation(findings: &mut Vec<Finding>) {
    let Some(blocked) = findings
        .iter()
        .position(|f| f.kind == FindingKind::SynchronousIo)
    else {
        return;
    };
    if let Some(instantiation) = findings
        .iter()
        .position(|f| f.kind == FindingKind::ImproperInstantiation)
    {
        let blocking = findings.remove(blocked);
        let at = if blocked < instantiation {
            instantiation - 1
        } else {
            instantiation
        };
        findings[at].evidence.push_str(&format!(
            "; building each client also blocks the handler (Synchronous I/O's evidence: {})",
            blocking.evidence
        ));
    }
}

/// `0.123` as `12.3%`.
pub(crate) fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}
