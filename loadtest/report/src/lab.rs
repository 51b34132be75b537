//! The antipattern lab's part of a report (`loadtest lab`): the confusion matrix — for
//! every stage that says what it expects, the main problem expected and the one the
//! diagnosis named — and, per antipattern, its bad and fixed stages side by side.

use std::fmt::Write as _;

use trace_analysis::diagnosis::FindingKind;

use crate::{Report, StageReport};

/// One stage of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabRow {
    pub stage: String,
    /// The antipattern pair it belongs to (`None`: a study stage).
    pub antipattern: Option<String>,
    /// The stage file's `expect`, as written.
    pub expect: String,
    /// `None` when the stage file's `expect` is not a list of finding kinds.
    pub expected: Option<Vec<FindingKind>>,
    /// Every finding the diagnosis named, in order; `None` when the stage has none.
    pub named: Option<Vec<FindingKind>>,
}

impl LabRow {
    /// Right when every expected kind is named and no antipattern that was not expected
    /// is. A study finding (throttling, a fan-out, a cross-partition cost) may come with
    /// an antipattern's base configuration, and a finding about the machine that
    /// measured (a CPU limit, a machine busy with other work) with any stage; a
    /// look-alike must not name the antipattern it looks like.
    pub fn agrees(&self) -> bool {
        let (Some(expected), Some(named)) = (&self.expected, &self.named) else {
            return false;
        };
        let about_the_machine =
            |k: &FindingKind| matches!(k, FindingKind::CpuLimit | FindingKind::BusyMachine);
        expected.iter().all(|k| named.contains(k))
            && named
                .iter()
                .all(|k| k.about().is_none() || about_the_machine(k) || expected.contains(k))
    }

    /// The named kinds, as the matrix shows them.
    pub fn named_text(&self) -> String {
        match &self.named {
            Some(kinds) => kinds
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
            None => "–".to_owned(),
        }
    }
}

impl StageReport {
    /// The main problem its diagnosis named: the first finding that is not about the
    /// machine. A CPU limit or a busy machine is about the machine that measured (on a
    /// shared 2-core machine it can top any stage); the report shows it in the stage's
    /// findings.
    pub fn named_problem(&self) -> Option<FindingKind> {
        self.diagnosis.as_ref().and_then(|d| {
            d.findings
                .iter()
                .map(|f| f.kind)
                .find(|k| !matches!(k, FindingKind::CpuLimit | FindingKind::BusyMachine))
        })
    }
}

impl StageReport {
    /// Its row of the matrix, when its stage file says what it expects.
    pub fn lab_row(&self) -> Option<LabRow> {
        let expect = self.expect.as_deref()?;
        Some(LabRow {
            stage: self.name.clone(),
            antipattern: self.antipattern.clone(),
            expect: expect.to_owned(),
            expected: FindingKind::parse_list(expect),
            named: self.diagnosis.as_ref().map(|d| d.kinds()),
        })
    }
}

impl Report {
    /// Every stage with an expectation, in run order.
    pub fn lab_matrix(&self) -> Vec<LabRow> {
        self.stages
            .iter()
            .filter_map(StageReport::lab_row)
            .collect()
    }

    /// The antipattern pairs in run order, each with its stages.
    pub fn antipatterns(&self) -> Vec<(&str, Vec<&StageReport>)> {
        let mut pairs: Vec<(&str, Vec<&StageReport>)> = Vec::new();
        for stage in &self.stages {
            let Some(kind) = stage.antipattern.as_deref() else {
                continue;
            };
            match pairs.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, stages)) => stages.push(stage),
                None => pairs.push((kind, vec![stage])),
            }
        }
        pairs
    }

    /// The matrix and a section per antipattern, as Markdown ("" outside `lab`).
    pub fn lab_markdown(&self) -> String {
        let pairs = self.antipatterns();
        if pairs.is_empty() {
            return String::new();
        }
        let matrix = self.lab_matrix();
        let agree = matrix.iter().filter(|r| r.agrees()).count();
        let mut out = format!(
            "\n## Antipattern lab\n\n{agree} of {} stages named as expected: every expected kind among the findings, and no antipattern that was not expected.\n\n| stage | antipattern | expected | named | |\n|---|---|---|---|---|\n",
            matrix.len()
        );
        for row in &matrix {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                row.stage,
                row.antipattern.as_deref().unwrap_or("study"),
                row.expect,
                row.named_text(),
                if row.agrees() { "✓" } else { "✗" }
            );
        }
        for (name, stages) in pairs {
            out.push_str(&pair_markdown(name, &stages));
        }
        out
    }
}

/// The antipattern's kind: what its first stage expects.
pub fn pair_kind(stages: &[&StageReport]) -> Option<FindingKind> {
    stages
        .first()
        .and_then(|s| s.expect.as_deref())
        .and_then(FindingKind::parse_list)
        .and_then(|kinds| kinds.first().copied())
}

/// One row per stage of a pair: the figures, the antipattern's own signal, the verdict
/// and a typical trace.
pub fn pair_rows(stages: &[&StageReport]) -> (String, Vec<[String; 8]>) {
    let kind = pair_kind(stages);
    let mut label = String::from("signal");
    let rows = stages
        .iter()
        .map(|s| {
            let signal = s
                .diagnosis
                .as_ref()
                .zip(kind)
                .and_then(|(d, k)| d.signal(k));
            if let Some((name, _)) = signal {
                label = name.to_owned();
            }
            // Per invoice, from the traces when diagnosed: the service's metrics count
            // per Cosmos operation, which hides a chatty request's several operations.
            let (ru, calls) = s.diagnosis.as_ref().map_or(
                (s.cosmos.ru_per_operation, s.cosmos.calls_per_operation),
                |d| (d.cosmos.ru_per_operation, d.cosmos.calls_per_operation),
            );
            let typical = s
                .trace_links
                .as_ref()
                .and_then(|l| l.typical.clone())
                .unwrap_or_default();
            [
                s.name.clone(),
                format!("{:.1}", s.throughput_rps),
                format!("{:.0}/{:.0}", s.latency_ms.p50, s.latency_ms.p99),
                format!("{ru:.1}"),
                format!("{calls:.2}"),
                signal.map_or_else(|| "–".to_owned(), |(_, v)| format!("{v:.2}")),
                s.named_problem()
                    .map_or_else(|| "–".to_owned(), FindingKind::name),
                typical,
            ]
        })
        .collect();
    (label, rows)
}

fn pair_markdown(name: &str, stages: &[&StageReport]) -> String {
    let about = pair_kind(stages)
        .and_then(FindingKind::about)
        .unwrap_or_default();
    let (signal, rows) = pair_rows(stages);
    let mut out = format!(
        "\n### {name}\n\n{about}.\n\n| stage | throughput (req/s) | e2e p50/p99 (ms) | RU/invoice | Cosmos calls/invoice | {signal} | named | typical trace |\n|---|---|---|---|---|---|---|---|\n"
    );
    for [stage, rps, latency, ru, calls, value, named, trace] in rows {
        let trace = if trace.is_empty() {
            "–".to_owned()
        } else {
            format!("[open]({trace})")
        };
        let _ = writeln!(
            out,
            "| {stage} | {rps} | {latency} | {ru} | {calls} | {value} | {named} | {trace} |"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use FindingKind::*;

    fn row(expect: &str, named: &[FindingKind]) -> LabRow {
        LabRow {
            stage: "s".into(),
            antipattern: None,
            expect: expect.into(),
            expected: FindingKind::parse_list(expect),
            named: Some(named.to_vec()),
        }
    }

    #[test]
    fn right_when_every_expected_kind_and_no_unexpected_antipattern_is_named() {
        assert!(row(
            "throttling",
            &[Throttling, SerialFanOut, CrossPartitionCost]
        )
        .agrees());
        assert!(row("synchronous_io, chatty_io", &[SynchronousIo, ChattyIo]).agrees());
        assert!(!row("synchronous_io, chatty_io", &[SynchronousIo]).agrees());
        // A look-alike naming the antipattern it looks like.
        assert!(!row("throttling", &[HotPartition]).agrees());
        assert!(!row("hot_partition", &[HotPartition, NoisyNeighbor]).agrees());
        // The machine that measured may be named beside anything.
        assert!(row("no_cosmos_bottleneck", &[NoCosmosBottleneck, BusyMachine]).agrees());
        assert!(row("cross_partition_cost", &[CrossPartitionCost, CpuLimit]).agrees());
        // Not a kind, or not diagnosed.
        assert!(!row("slowness", &[NoCosmosBottleneck]).agrees());
        let mut undiagnosed = row("throttling", &[]);
        undiagnosed.named = None;
        assert!(!undiagnosed.agrees());
    }
}
