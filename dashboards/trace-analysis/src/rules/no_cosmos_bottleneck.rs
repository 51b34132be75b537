//! **No Cosmos bottleneck left**: no rule holds (one range, no 429s, no antipattern);
//! what remains is the round trip and the services' own work. Not a rule of its own: the
//! finding when no other names the application.

use super::{pct, Evidence};
use crate::evidence::{Finding, FindingKind};

/// `cpu_named`: a CPU finding follows (it says what to do about the machine).
pub(crate) fn finding(e: &Evidence, cpu_named: bool) -> Finding {
    let c = e.cosmos;
    let dominant = e
        .backends
        .first()
        .map(|b| format!("; {} is {} of latency", b.service, pct(b.share_of_latency)))
        .unwrap_or_default();
    // How much was throttled and failed: the stage's counters where they were read
    // (below the rules' lines, or this would not be the finding), else the sample.
    let throttled = match e.counters.and_then(|k| k.throttled_share()) {
        Some(share) => format!("{} of the container's calls throttled", pct(share)),
        None => format!("{} throttled", pct(c.throttled_share)),
    };
    let failed = match e.counters.and_then(|k| k.failed_share()) {
        Some(share) => format!(", {} of requests failed", pct(share)),
        None => String::new(),
    };
    let mut evidence = format!(
        "{:.2} calls and {:.1} RU per operation on a single partition key range, {throttled}{failed}, {:.0} ms mean latency{dominant}",
        c.calls_per_operation,
        c.ru_per_operation,
        e.latency_us / 1e3
    );
    let next_step = match e.cpu {
        Some(cpu) if !cpu_named => {
            evidence.push_str(&format!(
                "; CPU is not the limit: {}, the machine {:.0}% busy at most{}",
                cpu.busiest_line(),
                cpu.machine_share * 100.0,
                cpu.hottest_thread
                    .as_ref()
                    .map(|(c, cores)| format!(
                        ", the hottest thread ({c}) at {:.0}% of a core",
                        cores * 100.0
                    ))
                    .unwrap_or_default()
            ));
            format!(
                "nothing here is saturated: add users until a limit shows (then scale out {} first, it uses the most CPU); the rest of the latency is the database round trip",
                cpu.busiest
            )
        }
        Some(_) => "see the CPU finding below; the rest of the latency is the database round trip".into(),
        None => "scale out on CPU: add replicas of the busiest service when its CPU saturates; the rest of the latency is the database round trip".into(),
    };
    Finding {
        kind: FindingKind::NoCosmosBottleneck,
        title: "No Cosmos bottleneck left".into(),
        evidence,
        next_step,
    }
}

#[cfg(test)]
mod tests {
    use crate::rules::judge;
    use crate::rules::testing::{cpu, Fixture};

    #[test]
    fn says_how_much_cpu_was_left() {
        let spare = Fixture::default().with(|f| f.cpu = Some(cpu(0.4, 0.5, "gateway", 0.38)));
        let f = &judge(&spare.evidence())[0];
        assert!(
            f.evidence.contains("CPU is not the limit"),
            "{}",
            f.evidence
        );
        assert!(
            f.evidence.contains("gateway at 1.60 cores"),
            "{}",
            f.evidence
        );
        assert!(!f.next_step.contains("scale out on CPU"), "{}", f.next_step);
    }
}
