//! A stage's per-interval latency histograms, flattened for resampling: a percentile of
//! any selection of its intervals merged (the figure a report shows, over the seconds a
//! bootstrap resample drew) without merging histograms thousands of times.

use hdrhistogram::Histogram;

/// Every interval's recorded latency buckets as (index into the distinct bucket values,
/// count).
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalLatencies {
    /// The distinct bucket values of all intervals (µs), ascending.
    values: Vec<u64>,
    intervals: Vec<Vec<(usize, u64)>>,
}

impl IntervalLatencies {
    pub fn new(histograms: &[&Histogram<u64>]) -> Self {
        let buckets = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
            h.iter_recorded()
                .map(|v| {
                    (
                        h.highest_equivalent(v.value_iterated_to()),
                        v.count_at_value(),
                    )
                })
                .collect()
        };
        let recorded: Vec<Vec<(u64, u64)>> = histograms.iter().map(|h| buckets(h)).collect();
        let mut values: Vec<u64> = recorded.iter().flatten().map(|(v, _)| *v).collect();
        values.sort_unstable();
        values.dedup();
        let intervals = recorded
            .into_iter()
            .map(|counts| {
                counts
                    .into_iter()
                    .filter_map(|(v, n)| Some((values.binary_search(&v).ok()?, n)))
                    .collect()
            })
            .collect();
        Self { values, intervals }
    }

    pub fn len(&self) -> usize {
        self.intervals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }

    /// The `quantile` (0–1) of the latencies of the intervals at `indices` (an interval
    /// drawn twice counts twice), in ms: the lowest bucket value with at least that
    /// share of them at or below it, as HDR histograms report it; 0 without latencies.
    pub fn quantile_ms(&self, indices: &[usize], quantile: f64) -> f64 {
        let mut merged = vec![0u64; self.values.len()];
        let mut total = 0u64;
        for counts in indices.iter().filter_map(|&i| self.intervals.get(i)) {
            for &(value, n) in counts {
                merged[value] += n;
                total += n;
            }
        }
        if total == 0 {
            return 0.0;
        }
        let rank = ((quantile * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (value, n) in self.values.iter().zip(&merged) {
            seen += n;
            if seen >= rank {
                return *value as f64 / 1000.0;
            }
        }
        self.values.last().map_or(0.0, |v| *v as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values_us: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 600_000_000, 2).expect("bounds");
        for v in values_us {
            h.record(*v).expect("in range");
        }
        h
    }

    #[test]
    fn a_percentile_of_merged_intervals_is_the_merged_histograms() {
        let first = histogram(&(1..=100).map(|i| i * 1000).collect::<Vec<_>>());
        let second = histogram(&[500_000; 100]);
        let flat = IntervalLatencies::new(&[&first, &second]);
        let mut merged = first.clone();
        merged.add(&second).expect("same bounds");
        for q in [0.5, 0.95, 0.99] {
            let expected = merged.value_at_quantile(q) as f64 / 1000.0;
            assert_eq!(flat.quantile_ms(&[0, 1], q), expected, "q {q}");
        }
        // One interval alone, and one drawn twice, which weighs it double.
        assert_eq!(
            flat.quantile_ms(&[0], 0.5),
            first.value_at_quantile(0.5) as f64 / 1000.0
        );
        assert!(flat.quantile_ms(&[1, 1, 0], 0.5) >= 499.0);
        assert_eq!(flat.quantile_ms(&[], 0.5), 0.0);
    }
}
