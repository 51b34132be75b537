//! Critical paths aggregated over many traces (a stage's window): how much of the
//! end-to-end time each service and operation is responsible for. The method is that
//! of Uber's CRISP (critical paths of many traces, summed per operation): an operation
//! that runs in parallel with a longer one costs nothing here, however long it is; one
//! that the request waits for costs all of its time.
//!
//! Per request, an operation's critical-path time is the sum of its sections on that
//! request's path (zero when it is not on it); its percentiles are over every request
//! of the window, zeros included, so they read as "what a request waits for it".
//! `share` is the operation's critical-path time over the sum of the requests'
//! end-to-end times: the shares of one window add up to 1.

use std::collections::HashMap;

use serde::Serialize;

use crate::critical_path::{critical_path, PathSpan};

/// What a span is, for the breakdown.
#[derive(Debug, Clone, Copy)]
pub struct SpanLabel<'a> {
    pub service: &'a str,
    pub operation: &'a str,
    /// A database call (a span with `db.system.name`), so a reader can add up "the
    /// time in Cosmos DB" without knowing each operation's name.
    pub database: bool,
}

/// Nearest-rank percentiles, in the unit of the input (the viewer uses µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    /// Of `values` and `zeros` more zeros; `values` is sorted here.
    pub fn of(values: &mut [u64], zeros: usize) -> Self {
        values.sort_unstable();
        let n = values.len() + zeros;
        let at = |q: f64| -> u64 {
            if n == 0 {
                return 0;
            }
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            if rank <= zeros {
                0
            } else {
                values[rank - zeros - 1]
            }
        };
        Self {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

/// One service and operation's part of a window's critical paths.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationShare {
    pub service: String,
    pub operation: String,
    pub database: bool,
    /// Sum over the window's requests.
    pub critical_path_us: u64,
    /// Of the sum of the requests' end-to-end times.
    pub share: f64,
    /// Requests whose path passes through it.
    pub requests: u64,
    /// Its sections on the paths (a serial fan-out of nine visits gives nine a request).
    pub sections: u64,
    /// Per request, zeros included.
    pub per_request_us: Percentiles,
}

/// A window's breakdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageBreakdown {
    pub requests: u64,
    pub end_to_end_us: Percentiles,
    /// Sum of the requests' end-to-end times (the shares' denominator).
    pub total_us: u64,
    /// Share of the path spent in database calls.
    pub database_share: f64,
    /// Largest critical-path time first.
    pub operations: Vec<OperationShare>,
}

#[derive(Debug)]
struct Row {
    service: String,
    operation: String,
    database: bool,
    total: u64,
    sections: u64,
    per_request: Vec<u64>,
}

/// Adds traces' critical paths up; [`StagePath::finish`] gives the breakdown.
#[derive(Debug, Default)]
pub struct StagePath {
    rows: Vec<Row>,
    /// service → operation → row (two levels, so a lookup borrows the span's names).
    index: HashMap<String, HashMap<String, usize>>,
    end_to_end: Vec<u64>,
    /// This request's time per row, reused between requests.
    scratch: Vec<(usize, u64)>,
}

impl StagePath {
    pub fn new() -> Self {
        Self::default()
    }

    fn row(&mut self, label: SpanLabel<'_>) -> usize {
        if let Some(&row) = self
            .index
            .get(label.service)
            .and_then(|ops| ops.get(label.operation))
        {
            return row;
        }
        let row = self.rows.len();
        self.rows.push(Row {
            service: label.service.to_owned(),
            operation: label.operation.to_owned(),
            database: label.database,
            total: 0,
            sections: 0,
            per_request: Vec::new(),
        });
        self.index
            .entry(label.service.to_owned())
            .or_default()
            .insert(label.operation.to_owned(), row);
        row
    }

    /// Adds one request: the critical path under `entry` (its entry span), each section
    /// named by `label`.
    pub fn add<'a>(
        &mut self,
        spans: &[PathSpan],
        entry: usize,
        label: impl Fn(usize) -> SpanLabel<'a>,
    ) {
        let Some(root) = spans.get(entry) else {
            return;
        };
        self.end_to_end.push(root.end.saturating_sub(root.start));
        self.scratch.clear();
        for section in critical_path(spans, entry) {
            let row = self.row(label(section.span));
            self.rows[row].sections += 1;
            match self.scratch.iter_mut().find(|(r, _)| *r == row) {
                Some((_, time)) => *time += section.duration(),
                None => self.scratch.push((row, section.duration())),
            }
        }
        for &(row, time) in &self.scratch {
            self.rows[row].total += time;
            self.rows[row].per_request.push(time);
        }
    }

    pub fn finish(mut self) -> StageBreakdown {
        let requests = self.end_to_end.len();
        let total_us: u64 = self.end_to_end.iter().sum();
        let share = |t: u64| {
            if total_us == 0 {
                0.0
            } else {
                t as f64 / total_us as f64
            }
        };
        let mut operations: Vec<OperationShare> = self
            .rows
            .into_iter()
            .map(|mut row| {
                let on_path = row.per_request.len();
                OperationShare {
                    share: share(row.total),
                    requests: on_path as u64,
                    per_request_us: Percentiles::of(
                        &mut row.per_request,
                        requests.saturating_sub(on_path),
                    ),
                    service: row.service,
                    operation: row.operation,
                    database: row.database,
                    critical_path_us: row.total,
                    sections: row.sections,
                }
            })
            .collect();
        operations.sort_by(|a, b| {
            b.critical_path_us
                .cmp(&a.critical_path_us)
                .then_with(|| (&a.service, &a.operation).cmp(&(&b.service, &b.operation)))
        });
        let database_us = operations
            .iter()
            .filter(|o| o.database)
            .map(|o| o.critical_path_us)
            .sum();
        StageBreakdown {
            requests: requests as u64,
            end_to_end_us: Percentiles::of(&mut self.end_to_end, 0),
            total_us,
            database_share: share(database_us),
            operations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(parent: Option<usize>, start: u64, end: u64) -> PathSpan {
        PathSpan { parent, start, end }
    }

    /// gateway 0..100 → utilization 5..95 → `visits` Cosmos calls, serial or at once.
    fn request(visits: u64, serial: bool) -> Vec<PathSpan> {
        let mut spans = vec![span(None, 0, 100), span(Some(0), 5, 95)];
        for i in 0..visits {
            spans.push(if serial {
                span(Some(1), 10 + i * 9, 18 + i * 9)
            } else {
                span(Some(1), 10, 20 + i)
            });
        }
        spans
    }

    fn label(i: usize) -> SpanLabel<'static> {
        match i {
            0 => SpanLabel {
                service: "gateway",
                operation: "GET /api/invoices",
                database: false,
            },
            1 => SpanLabel {
                service: "utilization-service",
                operation: "GET /api/utilization",
                database: false,
            },
            _ => SpanLabel {
                service: "utilization-service",
                operation: "query_items utilization",
                database: true,
            },
        }
    }

    fn cosmos(breakdown: &StageBreakdown) -> &OperationShare {
        breakdown
            .operations
            .iter()
            .find(|o| o.database)
            .expect("a database row")
    }

    #[test]
    fn serial_visits_carry_the_path_and_parallel_ones_do_not() {
        let mut serial = StagePath::new();
        let mut parallel = StagePath::new();
        for _ in 0..4 {
            serial.add(&request(9, true), 0, label);
            parallel.add(&request(9, false), 0, label);
        }
        let serial = serial.finish();
        let parallel = parallel.finish();
        assert_eq!(serial.requests, 4);
        assert_eq!(serial.total_us, 400);
        // Nine visits of 8 µs each on the path: 72 of 100.
        assert_eq!(cosmos(&serial).critical_path_us, 4 * 72);
        assert_eq!(cosmos(&serial).sections, 4 * 9);
        assert!((serial.database_share - 0.72).abs() < 1e-9);
        // At once: only the last to finish (10..28) is on the path.
        assert_eq!(cosmos(&parallel).critical_path_us, 4 * 18);
        assert_eq!(cosmos(&parallel).sections, 4);
        let shares: f64 = serial.operations.iter().map(|o| o.share).sum();
        assert!((shares - 1.0).abs() < 1e-9, "{shares}");
    }

    #[test]
    fn per_request_percentiles_count_requests_that_skip_the_operation_as_zero() {
        let mut stage = StagePath::new();
        for _ in 0..3 {
            stage.add(&request(0, true), 0, label);
        }
        stage.add(&request(1, true), 0, label);
        let breakdown = stage.finish();
        let row = cosmos(&breakdown);
        assert_eq!(row.requests, 1);
        assert_eq!(row.per_request_us.p50, 0);
        assert_eq!(row.per_request_us.p99, 8);
        assert_eq!(breakdown.end_to_end_us.p50, 100);
    }

    #[test]
    fn an_empty_window_is_all_zeros() {
        let breakdown = StagePath::new().finish();
        assert_eq!(breakdown.requests, 0);
        assert_eq!(breakdown.database_share, 0.0);
        assert!(breakdown.operations.is_empty());
    }
}
