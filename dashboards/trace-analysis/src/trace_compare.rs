//! One trace's statistics table (count, total and self time per service and operation,
//! as Jaeger UI's "Trace Statistics" view) and two traces set side by side by it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::critical_path::{path_spans, root_of, self_times};
use crate::jaeger::Trace;

/// A service and operation's spans in one trace (µs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatisticsRow {
    pub service: String,
    pub operation: String,
    pub count: u64,
    /// Sum of the spans' durations.
    pub total_us: u64,
    /// Sum of the spans' self times (what no child covers).
    pub self_us: u64,
    /// The time at least one of them was running: equal to `total_us` when they ran one
    /// after another, less when they overlapped.
    pub wall_us: u64,
}

impl StatisticsRow {
    /// How much of the spans' time ran at once with another of them (0 serial, near 1
    /// all at once).
    pub fn overlap(&self) -> f64 {
        if self.total_us == 0 {
            0.0
        } else {
            1.0 - self.wall_us as f64 / self.total_us as f64
        }
    }
}

/// The statistics rows of a trace, by service then operation.
pub fn statistics(trace: &Trace) -> Vec<StatisticsRow> {
    let spans = path_spans(trace);
    let selves = root_of(&spans).map_or_else(|| vec![0; spans.len()], |r| self_times(&spans, r));
    let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, span) in trace.spans.iter().enumerate() {
        let service = trace
            .processes
            .get(&span.process_id)
            .map_or("", |p| p.service_name.as_str());
        groups
            .entry((service, span.operation_name.as_str()))
            .or_default()
            .push(i);
    }
    groups
        .into_iter()
        .map(|((service, operation), members)| {
            let mut intervals: Vec<(u64, u64)> = members
                .iter()
                .map(|&i| (spans[i].start, spans[i].end))
                .collect();
            intervals.sort_unstable();
            let (mut wall, mut reach) = (0, 0);
            for (start, end) in intervals {
                let from = start.max(reach);
                if end > from {
                    wall += end - from;
                    reach = end;
                }
            }
            StatisticsRow {
                service: service.to_owned(),
                operation: operation.to_owned(),
                count: members.len() as u64,
                total_us: members.iter().map(|&i| trace.spans[i].duration).sum(),
                self_us: members.iter().map(|&i| selves[i]).sum(),
                wall_us: wall,
            }
        })
        .collect()
}

/// How B's row differs from A's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Only in B.
    Added,
    /// Only in A.
    Missing,
    Longer,
    Shorter,
    Same,
}

/// A total differs when it moved by at least this fraction of the larger total…
pub const CHANGE_FRACTION: f64 = 0.25;
/// …and by at least this much (µs): sub-100 µs spans jitter by more than 25 %.
pub const CHANGE_MIN_US: u64 = 100;

/// One service and operation in both traces.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompareRow {
    pub service: String,
    pub operation: String,
    pub a: Option<StatisticsRow>,
    pub b: Option<StatisticsRow>,
    /// By the total time; counts are set side by side in `a` and `b`.
    pub verdict: Verdict,
}

/// A's and B's statistics matched by service and operation.
pub fn compare(a: &[StatisticsRow], b: &[StatisticsRow]) -> Vec<CompareRow> {
    type Sides<'a> = (Option<&'a StatisticsRow>, Option<&'a StatisticsRow>);
    let mut rows: BTreeMap<(&str, &str), Sides<'_>> = BTreeMap::new();
    for row in a {
        rows.entry((&row.service, &row.operation)).or_default().0 = Some(row);
    }
    for row in b {
        rows.entry((&row.service, &row.operation)).or_default().1 = Some(row);
    }
    rows.into_iter()
        .map(|((service, operation), (a, b))| CompareRow {
            service: service.to_owned(),
            operation: operation.to_owned(),
            verdict: verdict(a, b),
            a: a.cloned(),
            b: b.cloned(),
        })
        .collect()
}

fn verdict(a: Option<&StatisticsRow>, b: Option<&StatisticsRow>) -> Verdict {
    let (a, b) = match (a, b) {
        (None, _) => return Verdict::Added,
        (_, None) => return Verdict::Missing,
        (Some(a), Some(b)) => (a.total_us, b.total_us),
    };
    let moved = a.abs_diff(b);
    if moved < CHANGE_MIN_US || (moved as f64) < CHANGE_FRACTION * a.max(b) as f64 {
        Verdict::Same
    } else if b > a {
        Verdict::Longer
    } else {
        Verdict::Shorter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jaeger::{Process, Reference, Span};

    fn span(
        id: &str,
        parent: Option<&str>,
        process: &str,
        name: &str,
        start: u64,
        end: u64,
    ) -> Span {
        Span {
            trace_id: "1".into(),
            span_id: id.into(),
            flags: 1,
            operation_name: name.into(),
            references: parent
                .map(|p| Reference {
                    ref_type: "CHILD_OF".into(),
                    trace_id: "1".into(),
                    span_id: p.into(),
                })
                .into_iter()
                .collect(),
            start_time: start,
            duration: end - start,
            tags: Vec::new(),
            logs: Vec::new(),
            process_id: process.into(),
            warnings: None,
        }
    }

    /// gateway GET 0..1000 → utilization GET 100..950 → three Cosmos queries, serial
    /// (200 each) or at once (all 200..400, 200..420, 200..440).
    fn trace(serial: bool, with_packages: bool) -> Trace {
        let mut spans = vec![
            span("a", None, "p1", "GET /api/invoices", 0, 1000),
            span("b", Some("a"), "p2", "GET /api/utilization", 100, 950),
        ];
        for i in 0..3u64 {
            let (start, end) = if serial {
                (200 + i * 200, 400 + i * 200)
            } else {
                (200, 400 + i * 20)
            };
            spans.push(span(
                &format!("q{i}"),
                Some("b"),
                "p2",
                "query_items u",
                start,
                end,
            ));
        }
        if with_packages {
            spans.push(span("p", Some("a"), "p3", "GET /api/packages", 100, 300));
        }
        let process = |name: &str| Process {
            service_name: name.into(),
            tags: Vec::new(),
        };
        Trace {
            trace_id: "1".into(),
            spans,
            processes: [
                ("p1".to_owned(), process("gateway")),
                ("p2".to_owned(), process("utilization-service")),
                ("p3".to_owned(), process("package-service")),
            ]
            .into(),
            warnings: None,
        }
    }

    fn row<'a>(rows: &'a [StatisticsRow], operation: &str) -> &'a StatisticsRow {
        rows.iter()
            .find(|r| r.operation == operation)
            .expect("the operation")
    }

    #[test]
    fn statistics_count_total_self_and_wall_time_by_hand() {
        let serial = statistics(&trace(true, true));
        let gateway = row(&serial, "GET /api/invoices");
        // 0..1000 less the children 100..950 ∪ 100..300.
        assert_eq!(
            (gateway.count, gateway.total_us, gateway.self_us),
            (1, 1000, 150)
        );
        let utilization = row(&serial, "GET /api/utilization");
        // 850 less the queries 200..800.
        assert_eq!(utilization.self_us, 250);
        let queries = row(&serial, "query_items u");
        assert_eq!(
            (queries.count, queries.total_us, queries.self_us),
            (3, 600, 600)
        );
        assert_eq!(queries.wall_us, 600);
        assert_eq!(queries.overlap(), 0.0);

        let parallel = statistics(&trace(false, true));
        let queries = row(&parallel, "query_items u");
        assert_eq!(
            (queries.count, queries.total_us, queries.wall_us),
            (3, 660, 240)
        );
        assert!((queries.overlap() - (1.0 - 240.0 / 660.0)).abs() < 1e-9);
    }

    #[test]
    fn compare_marks_added_missing_longer_shorter_and_same() {
        let a = statistics(&trace(true, true));
        let b = statistics(&trace(false, false));
        let rows = compare(&a, &b);
        let verdict = |operation: &str| {
            rows.iter()
                .find(|r| r.operation == operation)
                .map(|r| r.verdict)
                .expect("the operation")
        };
        assert_eq!(verdict("GET /api/packages"), Verdict::Missing);
        assert_eq!(verdict("GET /api/invoices"), Verdict::Same);
        // 600 → 660 µs: 9 %, under the 25 % bar.
        assert_eq!(verdict("query_items u"), Verdict::Same);
        let back = compare(&b, &a);
        assert_eq!(
            back.iter()
                .find(|r| r.operation == "GET /api/packages")
                .map(|r| r.verdict),
            Some(Verdict::Added)
        );

        let mut longer = a.clone();
        for row in &mut longer {
            row.total_us *= 2;
        }
        assert!(compare(&a, &longer)
            .iter()
            .all(|r| r.verdict == Verdict::Longer));
        assert!(compare(&longer, &a)
            .iter()
            .all(|r| r.verdict == Verdict::Shorter));
    }

    #[test]
    fn small_moves_are_not_changes() {
        let a = vec![StatisticsRow {
            service: "s".into(),
            operation: "o".into(),
            count: 1,
            total_us: 50,
            self_us: 50,
            wall_us: 50,
        }];
        let mut b = a.clone();
        b[0].total_us = 120;
        assert_eq!(compare(&a, &b)[0].verdict, Verdict::Same);
    }
}
