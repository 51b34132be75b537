//! `report.md` and the table the run prints: each stage's measured row with the study's
//! published row beneath it.

use std::fmt::Write as _;

use super::model::{describe_load, Report, StageReport};

impl Report {
    /// Each stage's measured row with the study's published row beneath it.
    pub fn markdown_table(&self) -> String {
        let mut out = String::from(
            "| stage | | throughput (req/s) | utilization avg (ms) | p50/p95/p99 (ms) | successful | throttled (429) | RU/op | calls/op | max RU/s per partition (provisioned) |\n|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.stages {
            let u = &s.utilization_latency_ms;
            let c = &s.cosmos;
            let _ = writeln!(
                out,
                "| {} | measured | {:.1} | {:.0} | {:.0}/{:.0}/{:.0} | {} | {} | {:.1} | {:.2} | {:.0} ({:.0}) |",
                s.name, s.throughput_rps, u.avg, u.p50, u.p95, u.p99, s.successful_requests,
                c.throttled_requests, c.ru_per_operation, c.calls_per_operation,
                c.max_ru_per_partition_per_sec, c.provisioned_ru_per_partition
            );
            if let Some(p) = &s.study {
                let _ = writeln!(
                    out,
                    "| | study | {:.0} | {:.0} | {:.0}/{:.0}/{:.0} | {} | {} | {:.1} | {:.0} | {:.0} ({:.0}) |",
                    p.throughput_rps, p.utilization_avg_ms, p.utilization_p50_ms, p.utilization_p95_ms,
                    p.utilization_p99_ms, p.successful_requests, p.throttled_requests, p.ru_per_operation,
                    p.calls_per_operation, p.max_ru_per_partition_per_sec, p.provisioned_ru_per_partition
                );
            }
        }
        out
    }

    /// The whole report as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "# dronelab tuning run {}\n\nProfile `{:?}` ({:.0} s per stage), {:.0} s in all, on {} CPUs. Load: {}.\n\n{}\n",
            self.run_id,
            self.profile,
            self.load.duration().as_secs_f64(),
            self.duration_secs,
            self.machine.cpus,
            describe_load(&self.load),
            self.markdown_table()
        );
        if !self.sampling.is_empty() {
            let _ = writeln!(out, "Traces: {}.\n", self.sampling);
        }
        out.push_str(&self.lab_markdown());
        out.push_str(&self.spread_markdown());
        out.push_str(&self.capacity_markdown());
        out.push_str(
            "\nThroughput counts successful (complete, 200) invoices. Utilization latency is server side (the utilization service's own histogram, the study's figure); the study's absolute numbers come from a cluster in Azure, ours from the emulator's calibrated model: compare the shape (what each change does), not the values.\n",
        );
        for s in &self.stages {
            let outcomes = s
                .outcomes
                .iter()
                .map(|(outcome, n)| format!("{} {n}", outcome.name()))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                out,
                "\n## {}\n\n{}\n\n- client latency (end to end): avg {:.0} ms, p50 {:.0}, p90 {:.0}, p95 {:.0}, p99 {:.0}, max {:.0}\n- outcomes: {}\n- Cosmos: {} calls, {} throttled, {:.0} RU in total\n",
                s.name, s.description, s.latency_ms.avg, s.latency_ms.p50, s.latency_ms.p90, s.latency_ms.p95,
                s.latency_ms.p99, s.latency_ms.max, outcomes, s.cosmos.requests, s.cosmos.throttled_requests,
                s.cosmos.ru_total
            );
            if !s.knobs.is_empty() {
                let _ = writeln!(out, "- antipattern lab knobs on: `{}`", s.knobs.describe());
            }
            out.push_str(&s.resources_markdown());
            out.push_str(&s.diagnosis_markdown());
        }
        out
    }
}

impl StageReport {
    /// CPU and memory per component, as a Markdown table (or why they are missing).
    pub fn resources_markdown(&self) -> String {
        let Some(r) = &self.resources else {
            return self
                .resources_unavailable
                .as_ref()
                .map(|reason| format!("- CPU and memory: {reason}\n"))
                .unwrap_or_default();
        };
        let mut out = String::new();
        if r.cpus > 0 {
            let _ = writeln!(
                out,
                "- CPU and memory ({}): the machine's {} CPUs {:.0}% busy on average, {:.0}% at the busiest 5 s\n",
                r.source,
                r.cpus,
                r.machine_cpu_mean_share * 100.0,
                r.machine_cpu_sustained_share * 100.0
            );
        } else {
            let _ = writeln!(out, "- CPU and memory ({}):\n", r.source);
        }
        out.push_str("| component | CPU mean (cores) | CPU max (cores) | hottest thread (cores, 5 s) | RSS max (MB) |\n|---|---:|---:|---:|---:|\n");
        for c in &r.components {
            let thread = c
                .hottest_thread_cores
                .map_or_else(|| "–".to_owned(), |t| format!("{t:.2}"));
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.2} | {thread} | {:.0} |",
                c.name, c.cpu_mean_cores, c.cpu_max_cores, c.rss_max_mb
            );
        }
        out.push('\n');
        out
    }

    /// The stage's findings as Markdown list items.
    pub fn diagnosis_markdown(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.diagnosis {
            let _ = writeln!(out, "- diagnosis from {} traces:", d.traces);
            for (i, f) in d.findings.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  - {}**{}** — {}. Next: {}.",
                    if i == 0 { "" } else { "also: " },
                    f.title,
                    f.evidence,
                    f.next_step
                );
            }
            for caveat in d.caveats() {
                let _ = writeln!(out, "  - {caveat}");
            }
        }
        if let Some(warning) = self.spans.as_ref().and_then(|s| s.warning()) {
            let _ = writeln!(out, "- **spans lost**: {warning}");
        }
        let links = self.link_list();
        if !links.is_empty() {
            let links: Vec<String> = links
                .into_iter()
                .map(|(label, link)| format!("[{label}]({link})"))
                .collect();
            let _ = writeln!(out, "- traces: {}", links.join(" · "));
        }
        out
    }
}
