//! A load generator's whole result, mergeable: per second of the run its users, its
//! outcome counts and its latency histogram (HDR, 3 significant figures, serialized in
//! the standard V2 format as base64). Several generators' records merge exactly: counts
//! and users add up, histograms add bucket by bucket, seconds align on the common start.

use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::profile::Profile;
use crate::shard::Shard;

/// Outcome classes counted per second and in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// `200` with `"partial": true`: a backend failed.
    Partial,
    Http4xx,
    Http5xx,
    Timeout,
    /// The connection failed after it was made (reset, or closed before an answer).
    Connection,
    /// No connection could be made: refused, unreachable, or none within 2 s.
    ConnectFailed,
    /// Open loop only: the request could not start (too many in flight).
    Dropped,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Partial => "partial",
            Self::Http4xx => "http_4xx",
            Self::Http5xx => "http_5xx",
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::ConnectFailed => "connect_failed",
            Self::Dropped => "dropped",
        }
    }
}

/// Latency statistics in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub avg: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| (us as f64 / 10.0).round() / 100.0;
        Self {
            avg: (h.mean() / 10.0).round() / 100.0,
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondSample {
    pub t: u64,
    pub users: usize,
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub latency_ms: Percentiles,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    pub requests: u64,
    pub successful_requests: u64,
    pub failed_requests: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    pub duration_secs: f64,
    pub throughput_rps: f64,
    pub latency_ms: Percentiles,
    /// Open loop only: how late requests left against their schedule (an open-loop
    /// generator that cannot keep its schedule understates the load it reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lateness_ms: Option<Percentiles>,
    pub series: Vec<SecondSample>,
}

/// The latency histogram every generator uses: microseconds, 1 µs to 10 min, 3
/// significant figures, so any two merge without loss.
pub fn latency_histogram() -> Histogram<u64> {
    // Constant, valid bounds.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// One second of a run, counted by when requests started (or were meant to).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondRecord {
    pub users: usize,
    pub outcomes: BTreeMap<Outcome, u64>,
    #[serde(with = "histogram_base64")]
    pub latency: Histogram<u64>,
    /// Open loop: how late each request left against its schedule (µs; empty in a
    /// closed loop).
    #[serde(
        default = "latency_histogram",
        with = "histogram_base64",
        skip_serializing_if = "Histogram::is_empty"
    )]
    pub send_lateness: Histogram<u64>,
}

impl Default for SecondRecord {
    fn default() -> Self {
        Self {
            users: 0,
            outcomes: BTreeMap::new(),
            latency: latency_histogram(),
            send_lateness: latency_histogram(),
        }
    }
}

/// What `loadtest run --record` writes and `loadtest merge` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadRecord {
    /// Which part of the profile this is (`0/1` for a whole run or a merge).
    pub shard: Shard,
    /// The whole profile (not this shard's part of it).
    pub profile: Profile,
    /// When second 0 began, in ms since the Unix epoch: the generators' common start.
    pub started_at_unix_ms: u64,
    pub seconds: Vec<SecondRecord>,
    /// Every latency in µs, with `--record-samples` (to check a merge against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_us: Option<Vec<u64>>,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("the records ran different profiles ({0:?} and {1:?})")]
    Profiles(Profile, Profile),
    #[error("the records are shards of {0} and of {1} generators")]
    Counts(u32, u32),
    #[error("shard {0} is there twice")]
    Twice(Shard),
    #[error("shard {missing} of {count} is missing")]
    Missing { missing: u32, count: u32 },
    #[error("the histograms do not merge: {0}")]
    Histogram(String),
}

impl LoadRecord {
    /// A record file's text, or a log whose last record line is taken (a load pod's
    /// log holds its stderr lines too).
    pub fn from_log(text: &str) -> Result<LoadRecord, String> {
        if let Ok(record) = serde_json::from_str(text) {
            return Ok(record);
        }
        text.lines()
            .rev()
            .filter(|line| line.starts_with('{'))
            .find_map(|line| serde_json::from_str(line).ok())
            .ok_or_else(|| "no load record in it (written by `loadtest run --record`)".to_owned())
    }

    /// Totals and the per-second series, as one generator's run reports them.
    pub fn summary(&self) -> LoadSummary {
        let mut total = latency_histogram();
        let mut send_lateness = latency_histogram();
        let mut outcomes: BTreeMap<Outcome, u64> = BTreeMap::new();
        let mut series = Vec::with_capacity(self.seconds.len());
        for (t, s) in self.seconds.iter().enumerate() {
            let _ = total.add(&s.latency);
            let _ = send_lateness.add(&s.send_lateness);
            for (o, n) in &s.outcomes {
                *outcomes.entry(*o).or_default() += n;
            }
            let requests: u64 = s.outcomes.values().sum();
            let ok = s.outcomes.get(&Outcome::Ok).copied().unwrap_or(0);
            series.push(SecondSample {
                t: t as u64,
                users: s.users,
                requests,
                ok,
                errors: requests - ok,
                latency_ms: Percentiles::of(&s.latency),
            });
        }
        let requests: u64 = outcomes.values().sum();
        let successful = outcomes.get(&Outcome::Ok).copied().unwrap_or(0);
        let secs = self.profile.duration().as_secs_f64().max(1e-9);
        LoadSummary {
            requests,
            successful_requests: successful,
            failed_requests: requests - successful,
            outcomes,
            duration_secs: secs,
            throughput_rps: successful as f64 / secs,
            latency_ms: Percentiles::of(&total),
            send_lateness_ms: (!send_lateness.is_empty()).then(|| Percentiles::of(&send_lateness)),
            series,
        }
    }

    /// Merges every shard of one profile into one record, as if one generator had run
    /// it: all shards must be there once, with the same profile.
    pub fn merge(records: Vec<LoadRecord>) -> Result<LoadRecord, MergeError> {
        let first = records.first().ok_or(MergeError::Empty)?;
        let (profile, count) = (first.profile, first.shard.count);
        let mut seen = vec![false; count as usize];
        for r in &records {
            if r.profile != profile {
                return Err(MergeError::Profiles(profile, r.profile));
            }
            if r.shard.count != count {
                return Err(MergeError::Counts(count, r.shard.count));
            }
            let slot = &mut seen[r.shard.index as usize];
            if *slot {
                return Err(MergeError::Twice(r.shard));
            }
            *slot = true;
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(MergeError::Missing {
                missing: missing as u32,
                count,
            });
        }
        let start = records
            .iter()
            .map(|r| r.started_at_unix_ms)
            .min()
            .unwrap_or(0);
        let mut seconds: Vec<SecondRecord> = Vec::new();
        let mut samples: Option<Vec<u64>> = Some(Vec::new());
        for record in records {
            // A generator that started late adds into the seconds it really ran in.
            let offset = ((record.started_at_unix_ms - start) / 1000) as usize;
            for (i, second) in record.seconds.into_iter().enumerate() {
                let at = offset + i;
                if seconds.len() <= at {
                    seconds.resize_with(at + 1, SecondRecord::default);
                }
                let merged = &mut seconds[at];
                merged.users += second.users;
                for (o, n) in second.outcomes {
                    *merged.outcomes.entry(o).or_default() += n;
                }
                merged
                    .latency
                    .add(&second.latency)
                    .and_then(|()| merged.send_lateness.add(&second.send_lateness))
                    .map_err(|e| MergeError::Histogram(format!("{e:?}")))?;
            }
            samples = match (samples, record.samples_us) {
                (Some(mut all), Some(more)) => {
                    all.extend(more);
                    Some(all)
                }
                _ => None,
            };
        }
        Ok(LoadRecord {
            shard: Shard::WHOLE,
            profile,
            started_at_unix_ms: start,
            seconds,
            samples_us: samples,
        })
    }
}

mod histogram_base64 {
    use super::*;

    pub fn serialize<S: serde::Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::new();
        V2Serializer::new()
            .serialize(h, &mut bytes)
            .map_err(|e| serde::ser::Error::custom(format!("{e:?}")))?;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| serde::de::Error::custom(format!("{e:?}")))?;
        // Back into the common bounds, so any two records merge.
        let mut histogram = latency_histogram();
        histogram
            .add(&decoded)
            .map_err(|e| serde::de::Error::custom(format!("{e:?}")))?;
        Ok(histogram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(shard: Shard, start_ms: u64, latencies: &[&[u64]]) -> LoadRecord {
        let seconds = latencies
            .iter()
            .map(|second| {
                let mut s = SecondRecord {
                    users: 1,
                    ..SecondRecord::default()
                };
                for &us in *second {
                    let _ = s.latency.record(us);
                    *s.outcomes.entry(Outcome::Ok).or_default() += 1;
                }
                s
            })
            .collect();
        LoadRecord {
            shard,
            profile: Profile::Constant {
                users: 2,
                duration_secs: 3.0,
            },
            started_at_unix_ms: start_ms,
            seconds,
            samples_us: Some(latencies.iter().flat_map(|s| s.iter().copied()).collect()),
        }
    }

    #[test]
    fn a_merge_equals_one_histogram_of_every_sample() {
        let a = record(
            Shard::new(0, 2).expect("shard"),
            10_000,
            &[&[1_000, 2_000], &[50_000]],
        );
        let b = record(
            Shard::new(1, 2).expect("shard"),
            11_000,
            &[&[3_000, 900_000, 7], &[12_345]],
        );
        // Through JSON, as the generators hand them over.
        let json = |r: &LoadRecord| serde_json::to_string(r).expect("json");
        let back = |s: String| serde_json::from_str::<LoadRecord>(&s).expect("record");
        let merged = LoadRecord::merge(vec![back(json(&a)), back(json(&b))]).expect("merge");
        assert_eq!(merged.started_at_unix_ms, 10_000);
        assert_eq!(merged.seconds.len(), 3, "b started a second later");
        assert_eq!(merged.seconds[1].users, 2);
        assert_eq!(merged.seconds[1].outcomes[&Outcome::Ok], 4);
        let mut all = latency_histogram();
        for &us in merged.samples_us.as_deref().unwrap_or_default() {
            let _ = all.record(us);
        }
        let summary = merged.summary();
        assert_eq!(summary.requests, 7);
        assert_eq!(summary.requests, all.len());
        assert_eq!(summary.latency_ms, Percentiles::of(&all));
    }

    #[test]
    fn incomplete_or_mixed_shards_are_refused() {
        let shard = |i| Shard::new(i, 3).expect("shard");
        let r = |i| record(shard(i), 0, &[&[1]]);
        assert!(matches!(
            LoadRecord::merge(vec![r(0), r(2)]),
            Err(MergeError::Missing {
                missing: 1,
                count: 3
            })
        ));
        assert!(matches!(
            LoadRecord::merge(vec![r(0), r(1), r(1), r(2)]),
            Err(MergeError::Twice(_))
        ));
        let mut other = r(2);
        other.profile = Profile::Constant {
            users: 9,
            duration_secs: 3.0,
        };
        assert!(matches!(
            LoadRecord::merge(vec![r(0), r(1), other]),
            Err(MergeError::Profiles(..))
        ));
        assert!(matches!(
            LoadRecord::merge(Vec::new()),
            Err(MergeError::Empty)
        ));
    }
}
