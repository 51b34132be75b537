//! Just enough of the Prometheus text format to read the services' counters and
//! histograms, and to estimate percentiles from histogram buckets.

use std::collections::BTreeMap;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.trim().parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (head, ""),
    };
    let mut map = BTreeMap::new();
    for pair in labels.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"")?;
        map.insert(k.trim().to_owned(), v.trim_end_matches('"').to_owned());
    }
    Some(Sample {
        name: name.to_owned(),
        labels: map,
        value,
    })
}

/// Sum of the samples named `name` whose labels include all of `labels`.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && matches(s, labels))
        .map(|s| s.value)
        .sum()
}

fn matches(sample: &Sample, labels: &[(&str, &str)]) -> bool {
    labels
        .iter()
        .all(|(k, v)| sample.labels.get(*k).map(String::as_str) == Some(*v))
}

/// Cumulative bucket counts `(upper bound, count)` of a histogram, summed over series.
pub fn buckets(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let mut by_bound: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == format!("{name}_bucket") && matches(s, labels))
    {
        let bound = match s.labels.get("le").map(String::as_str) {
            Some("+Inf") => f64::INFINITY,
            Some(v) => match v.parse() {
                Ok(b) => b,
                Err(_) => continue,
            },
            None => continue,
        };
        let entry = by_bound.entry(bound.to_bits()).or_insert((bound, 0.0));
        entry.1 += s.value;
    }
    let mut out: Vec<(f64, f64)> = by_bound.into_values().collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Subtracts an earlier snapshot of the same histogram (counters are cumulative).
pub fn delta(after: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .iter()
        .map(|(bound, count)| {
            let earlier = before
                .iter()
                .find(|(b, _)| b == bound)
                .map(|(_, c)| *c)
                .unwrap_or(0.0);
            (*bound, (count - earlier).max(0.0))
        })
        .collect()
}

/// The `q` quantile, interpolating linearly inside the bucket that holds it (as
/// Prometheus's `histogram_quantile` does).
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return 0.0;
    };
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let mut lower_bound = 0.0;
    let mut lower_count = 0.0;
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return lower_bound;
            }
            let width = count - lower_count;
            let fraction = if width > 0.0 {
                (rank - lower_count) / width
            } else {
                0.0
            };
            return lower_bound + (bound - lower_bound) * fraction;
        }
        lower_bound = bound;
        lower_count = count;
    }
    lower_bound
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP x y
h_bucket{route="/a",le="0.1"} 10
h_bucket{route="/a",le="0.2"} 30
h_bucket{route="/a",le="+Inf"} 40
h_sum{route="/a"} 6.5
h_count{route="/a"} 40
c_total{status="200",op="q"} 7
c_total{status="429",op="q"} 3
"#;

    #[test]
    fn parses_and_estimates_quantiles() {
        let samples = parse(TEXT);
        assert_eq!(sum(&samples, "c_total", &[("op", "q")]), 10.0);
        assert_eq!(sum(&samples, "c_total", &[("status", "429")]), 3.0);
        let b = buckets(&samples, "h", &[("route", "/a")]);
        assert_eq!(b.len(), 3);
        assert!((quantile(&b, 0.25) - 0.1).abs() < 1e-9);
        assert!((quantile(&b, 0.5) - 0.15).abs() < 1e-9);
        assert_eq!(quantile(&b, 0.99), 0.2);
        let earlier = vec![(0.1, 5.0), (0.2, 5.0), (f64::INFINITY, 5.0)];
        assert_eq!(
            delta(&b, &earlier),
            vec![(0.1, 5.0), (0.2, 25.0), (f64::INFINITY, 35.0)]
        );
    }
}
