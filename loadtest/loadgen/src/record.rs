//! A load generator's whole result, mergeable: per interval of the run (a second for
//! runs up to [`MAX_INTERVALS`] seconds, longer beyond, so a record's size does not grow
//! with the run) its users, its outcome counts and its latency histogram, plus one
//! histogram of the whole run at full precision. Histograms are HDR histograms in the
//! standard V2 format, as base64. Several generators' records merge exactly: counts and
//! users add up, histograms add bucket by bucket, intervals align on the common start.
//!
//! A record read from JSON has been checked field by field ("parse, don't validate"):
//! a valid shard and profile, intervals and samples within what the profile can have
//! made, histograms within the common bounds. An edited or damaged file is refused with
//! the field named, never a panic or a giant allocation.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::profile::Profile;
use crate::shard::Shard;

/// Most intervals a record holds: runs up to this many seconds get one per second.
pub const MAX_INTERVALS: u64 = 1200;
/// Most latencies a record keeps one by one (`--record-samples`, 8 MB).
pub const MAX_SAMPLES: usize = 1_000_000;
/// The most that generators of one run may start apart and still merge.
pub const MAX_START_SPREAD: Duration = Duration::from_secs(600);
/// The longest a request may be given: the latency histograms' range.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Latencies are recorded from 1 µs to [`MAX_TIMEOUT`].
const HIGHEST_US: u64 = 600_000_000;
/// Significant figures of the whole-run histogram and of each interval's.
const TOTAL_FIGURES: u8 = 3;
const INTERVAL_FIGURES: u8 = 2;
/// Start times a record may have: from 2001 to 2286 (ms since the Unix epoch).
const START_RANGE_MS: std::ops::RangeInclusive<u64> = 1_000_000_000_000..=9_999_999_999_999;

/// Outcome classes counted per interval and in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// A 2xx answer with the target's partial marker (an aggregate with a part missing).
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

/// One interval of a run in numbers; `requests`, `ok` and `errors` are counts over the
/// interval (per second where the interval is a second).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalSample {
    /// Seconds from the start to the interval's start.
    pub t: u64,
    pub users: usize,
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub latency_ms: Percentiles,
    /// The interval's latencies (µs, 2 significant figures, HDR V2 as base64): a stage's
    /// percentiles recomputed over any of its intervals (`loadtest compare` resamples
    /// them).
    #[serde(
        default,
        serialize_with = "serialize_optional",
        deserialize_with = "interval_optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub latency_histogram: Option<Histogram<u64>>,
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
    /// Seconds per entry of `series` (1 for runs up to [`MAX_INTERVALS`] seconds).
    #[serde(default = "one_second")]
    pub interval_secs: u64,
    pub series: Vec<IntervalSample>,
}

fn one_second() -> u64 {
    1
}

/// The whole-run latency histogram every generator uses: microseconds, 1 µs to 10 min,
/// 3 significant figures, so any two merge without loss.
pub fn latency_histogram() -> Histogram<u64> {
    histogram(TOTAL_FIGURES)
}

fn histogram(figures: u8) -> Histogram<u64> {
    // Constant, valid bounds.
    Histogram::new_with_bounds(1, HIGHEST_US, figures).expect("valid histogram bounds")
}

/// The seconds per interval of a run of `profile`: 1 up to [`MAX_INTERVALS`] seconds.
pub fn interval_secs(profile: &Profile) -> u64 {
    profile.duration().as_secs().div_ceil(MAX_INTERVALS).max(1)
}

/// One interval of a run, counted by when requests started (or were meant to).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalRecord {
    pub users: usize,
    pub outcomes: BTreeMap<Outcome, u64>,
    /// 2 significant figures (the whole run's histogram has 3).
    #[serde(serialize_with = "serialize_histogram", deserialize_with = "interval")]
    pub latency: Histogram<u64>,
    /// Open loop: how late each request left against its schedule (µs).
    #[serde(
        default,
        serialize_with = "serialize_optional",
        deserialize_with = "interval_optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub send_lateness: Option<Histogram<u64>>,
}

impl Default for IntervalRecord {
    fn default() -> Self {
        Self {
            users: 0,
            outcomes: BTreeMap::new(),
            latency: histogram(INTERVAL_FIGURES),
            send_lateness: None,
        }
    }
}

/// What `loadtest run --record` writes and `loadtest merge` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "UncheckedRecord")]
pub struct LoadRecord {
    /// Which part of the profile this is (`0/1` for a whole run or a merge).
    pub shard: Shard,
    /// The whole profile (not this shard's part of it).
    pub profile: Profile,
    /// When the first interval began, in ms since the Unix epoch: the generators'
    /// common start.
    pub started_at_unix_ms: u64,
    /// Seconds per interval ([`interval_secs`] of the profile).
    pub interval_secs: u64,
    pub intervals: Vec<IntervalRecord>,
    /// The whole run's latencies at full precision.
    #[serde(serialize_with = "serialize_histogram", deserialize_with = "total")]
    pub latency: Histogram<u64>,
    /// Open loop: the whole run's send lateness.
    #[serde(
        default,
        serialize_with = "serialize_optional",
        deserialize_with = "total_optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub send_lateness: Option<Histogram<u64>>,
    /// Every latency in µs, with `--record-samples` (to check a merge against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_us: Option<Vec<u64>>,
    /// The run was stopped this many seconds in, before its profile's end (a threshold
    /// crossed with `--abort-on-fail`); rates are over this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_after_secs: Option<f64>,
}

/// A record as written, before it is checked.
#[derive(Deserialize)]
struct UncheckedRecord {
    shard: Shard,
    profile: Profile,
    started_at_unix_ms: u64,
    interval_secs: u64,
    intervals: Vec<IntervalRecord>,
    #[serde(deserialize_with = "total")]
    latency: Histogram<u64>,
    #[serde(default, deserialize_with = "total_optional")]
    send_lateness: Option<Histogram<u64>>,
    #[serde(default)]
    samples_us: Option<Vec<u64>>,
    #[serde(default)]
    stopped_after_secs: Option<f64>,
}

impl TryFrom<UncheckedRecord> for LoadRecord {
    type Error = String;

    fn try_from(r: UncheckedRecord) -> Result<Self, String> {
        if !START_RANGE_MS.contains(&r.started_at_unix_ms) {
            return Err(format!(
                "started_at_unix_ms is {}: not a time this century (ms since the Unix epoch)",
                r.started_at_unix_ms
            ));
        }
        let interval = interval_secs(&r.profile);
        if r.interval_secs != interval {
            return Err(format!(
                "interval_secs is {}, but a run of this profile has {interval} s intervals",
                r.interval_secs
            ));
        }
        let most = max_intervals(&r.profile);
        if r.intervals.len() > most {
            return Err(format!(
                "intervals: {} of them, but a run of this profile has at most {most}",
                r.intervals.len()
            ));
        }
        if r.samples_us.as_ref().is_some_and(|s| s.len() > MAX_SAMPLES) {
            return Err(format!("samples_us: more than {MAX_SAMPLES} samples"));
        }
        let longest = r.profile.duration().as_secs_f64();
        if r.stopped_after_secs
            .is_some_and(|s| !(s.is_finite() && (0.0..=longest).contains(&s)))
        {
            return Err(format!(
                "stopped_after_secs must be between 0 and the profile's {longest} s"
            ));
        }
        Ok(Self {
            shard: r.shard,
            profile: r.profile,
            started_at_unix_ms: r.started_at_unix_ms,
            interval_secs: r.interval_secs,
            intervals: r.intervals,
            latency: r.latency,
            send_lateness: r.send_lateness,
            samples_us: r.samples_us,
            stopped_after_secs: r.stopped_after_secs,
        })
    }
}

/// The most intervals a run of `profile` can fill: its duration, plus the longest
/// request timeout a generator allows, over the interval.
fn max_intervals(profile: &Profile) -> usize {
    let secs = profile.duration().as_secs() + 1 + MAX_TIMEOUT.as_secs();
    usize::try_from(secs.div_ceil(interval_secs(profile))).unwrap_or(usize::MAX)
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
    #[error("the shards started {spread_secs} s apart; they merge only within {} s", MAX_START_SPREAD.as_secs())]
    StartSpread { spread_secs: u64 },
    #[error("the histograms do not merge: {0}")]
    Histogram(String),
}

impl LoadRecord {
    /// An empty record of `shard` of `profile`, started at `started_at_unix_ms`.
    pub fn new(shard: Shard, profile: Profile, started_at_unix_ms: u64) -> Self {
        Self {
            shard,
            profile,
            started_at_unix_ms,
            interval_secs: interval_secs(&profile),
            intervals: Vec::new(),
            latency: latency_histogram(),
            send_lateness: None,
            samples_us: None,
            stopped_after_secs: None,
        }
    }

    /// The interval `elapsed` into the run (the last one a run can have, for anything
    /// later: a generator never records past its timeouts).
    pub fn interval_at(&mut self, elapsed: Duration) -> &mut IntervalRecord {
        let index = usize::try_from(elapsed.as_secs() / self.interval_secs).unwrap_or(usize::MAX);
        // Most requests fall in an interval already there: no need to work out the last
        // one a run can have (two float conversions of the profile's duration).
        if index < self.intervals.len() {
            return &mut self.intervals[index];
        }
        let index = index.min(max_intervals(&self.profile).saturating_sub(1));
        if self.intervals.len() <= index {
            self.intervals
                .resize_with(index + 1, IntervalRecord::default);
        }
        &mut self.intervals[index]
    }

    /// Records one request that started (or was meant to) `elapsed` into the run.
    pub fn record(&mut self, elapsed: Duration, outcome: Outcome, latency_us: u64) {
        let interval = self.interval_at(elapsed);
        *interval.outcomes.entry(outcome).or_default() += 1;
        if outcome != Outcome::Dropped {
            let _ = interval.latency.record(latency_us);
            let _ = self.latency.record(latency_us);
        }
    }

    /// Records how late a request scheduled `elapsed` into the run left.
    pub fn record_send_lateness(&mut self, elapsed: Duration, lateness_us: u64) {
        let interval = self.interval_at(elapsed);
        let _ = interval
            .send_lateness
            .get_or_insert_with(|| histogram(INTERVAL_FIGURES))
            .record(lateness_us);
        let _ = self
            .send_lateness
            .get_or_insert_with(latency_histogram)
            .record(lateness_us);
    }

    /// A record file's text, or a log whose last record line is taken (a load pod's
    /// log holds its stderr lines too). A line that is a record but fails its checks is
    /// an error naming the field, not "no record".
    pub fn from_log(text: &str) -> Result<LoadRecord, String> {
        if let Ok(record) = serde_json::from_str(text) {
            return Ok(record);
        }
        let looks_like_record = |line: &str| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line)
                .is_ok_and(|m| m.contains_key("shard") && m.contains_key("profile"))
        };
        match text.lines().rev().find(|line| looks_like_record(line)) {
            Some(line) => {
                serde_json::from_str(line).map_err(|e| format!("a record that is not valid: {e}"))
            }
            None => Err("no load record in it (written by `loadtest run --record`)".to_owned()),
        }
    }

    /// Totals and the per-interval series, as one generator's run reports them.
    pub fn summary(&self) -> LoadSummary {
        let mut outcomes: BTreeMap<Outcome, u64> = BTreeMap::new();
        let mut series = Vec::with_capacity(self.intervals.len());
        for (i, interval) in self.intervals.iter().enumerate() {
            for (o, n) in &interval.outcomes {
                *outcomes.entry(*o).or_default() += n;
            }
            let requests: u64 = interval.outcomes.values().sum();
            let ok = interval.outcomes.get(&Outcome::Ok).copied().unwrap_or(0);
            series.push(IntervalSample {
                t: i as u64 * self.interval_secs,
                users: interval.users,
                requests,
                ok,
                errors: requests - ok,
                latency_ms: Percentiles::of(&interval.latency),
                latency_histogram: Some(interval.latency.clone()),
            });
        }
        let requests: u64 = outcomes.values().sum();
        let successful = outcomes.get(&Outcome::Ok).copied().unwrap_or(0);
        let secs = self
            .stopped_after_secs
            .unwrap_or_else(|| self.profile.duration().as_secs_f64())
            .max(1e-9);
        LoadSummary {
            requests,
            successful_requests: successful,
            failed_requests: requests - successful,
            outcomes,
            duration_secs: secs,
            throughput_rps: successful as f64 / secs,
            latency_ms: Percentiles::of(&self.latency),
            send_lateness_ms: self.send_lateness.as_ref().map(Percentiles::of),
            interval_secs: self.interval_secs,
            series,
        }
    }

    /// Merges every shard of one profile into one record, as if one generator had run
    /// it: all shards must be there once, with the same profile, started within
    /// [`MAX_START_SPREAD`] of each other.
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
        let starts = records.iter().map(|r| r.started_at_unix_ms);
        let (start, end) = (starts.clone().min().unwrap_or(0), starts.max().unwrap_or(0));
        let spread = Duration::from_millis(end - start);
        if spread > MAX_START_SPREAD {
            return Err(MergeError::StartSpread {
                spread_secs: spread.as_secs(),
            });
        }
        let mut merged = LoadRecord::new(Shard::WHOLE, profile, start);
        // The merged run stopped early only if every shard did, when the last one did.
        merged.stopped_after_secs = records
            .iter()
            .map(|r| {
                let offset = Duration::from_millis(r.started_at_unix_ms - start);
                r.stopped_after_secs.map(|s| s + offset.as_secs_f64())
            })
            .collect::<Option<Vec<f64>>>()
            .and_then(|stops| stops.into_iter().reduce(f64::max));
        let mut samples: Option<Vec<u64>> = Some(Vec::new());
        let histogram = |e: hdrhistogram::AdditionError| MergeError::Histogram(format!("{e:?}"));
        for record in records {
            // A generator that started late adds into the intervals it really ran in.
            let offset = Duration::from_millis(record.started_at_unix_ms - start);

            for (i, interval) in record.intervals.into_iter().enumerate() {
                let at = offset + Duration::from_secs(i as u64 * record.interval_secs);
                let into = merged.interval_at(at);
                into.users += interval.users;
                for (o, n) in interval.outcomes {
                    *into.outcomes.entry(o).or_default() += n;
                }
                into.latency.add(&interval.latency).map_err(histogram)?;
                add_optional(
                    &mut into.send_lateness,
                    interval.send_lateness,
                    INTERVAL_FIGURES,
                )
                .map_err(histogram)?;
            }
            merged.latency.add(&record.latency).map_err(histogram)?;
            add_optional(
                &mut merged.send_lateness,
                record.send_lateness,
                TOTAL_FIGURES,
            )
            .map_err(histogram)?;
            samples = match (samples, record.samples_us) {
                (Some(mut all), Some(more)) if all.len() + more.len() <= MAX_SAMPLES => {
                    all.extend(more);
                    Some(all)
                }
                _ => None,
            };
        }
        merged.samples_us = samples;
        Ok(merged)
    }
}

/// Adds `more` into `into` (made with `figures` significant figures where absent).
fn add_optional(
    into: &mut Option<Histogram<u64>>,
    more: Option<Histogram<u64>>,
    figures: u8,
) -> Result<(), hdrhistogram::AdditionError> {
    match more {
        Some(more) => into.get_or_insert_with(|| histogram(figures)).add(&more),
        None => Ok(()),
    }
}

/// The V2 header fields a histogram is read with, checked before it is decoded: a
/// decoder would otherwise allocate whatever range and precision the bytes claim.
fn check_v2_header(bytes: &[u8]) -> Result<(), String> {
    let field = |at: usize, len: usize| {
        bytes
            .get(at..at + len)
            .ok_or("a histogram too short to read")
    };
    let payload = u32::from_be_bytes(field(4, 4)?.try_into().map_err(|_| "bad header")?);
    let figures = u32::from_be_bytes(field(12, 4)?.try_into().map_err(|_| "bad header")?);
    let highest = u64::from_be_bytes(field(24, 8)?.try_into().map_err(|_| "bad header")?);
    // The decoder reserves the payload length the header claims before reading it.
    if usize::try_from(payload).map_or(true, |n| n > bytes.len().saturating_sub(40)) {
        return Err(format!(
            "a histogram whose header claims {payload} bytes of counts; it has {}",
            bytes.len().saturating_sub(40)
        ));
    }
    if figures > u32::from(TOTAL_FIGURES) || highest > 2 * HIGHEST_US {
        return Err(format!(
            "a histogram of {figures} significant figures up to {highest} µs; at most {TOTAL_FIGURES} up to {HIGHEST_US}"
        ));
    }
    Ok(())
}

/// Reads a base64 V2 histogram back into `figures` significant figures and the common
/// bounds, so any two merge.
fn decode_histogram(text: &str, figures: u8) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|e| format!("a histogram that is not base64: {e}"))?;
    check_v2_header(&bytes)?;
    let decoded: Histogram<u64> = Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("a histogram that does not decode: {e:?}"))?;
    let mut histogram = histogram(figures);
    histogram
        .add(&decoded)
        .map_err(|e| format!("a histogram out of bounds: {e:?}"))?;
    Ok(histogram)
}

fn encode_histogram(h: &Histogram<u64>) -> Result<String, String> {
    let mut bytes = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut bytes)
        .map_err(|e| format!("{e:?}"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn serialize_histogram<S: serde::Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&encode_histogram(h).map_err(serde::ser::Error::custom)?)
}

fn serialize_optional<S: serde::Serializer>(
    h: &Option<Histogram<u64>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match h {
        Some(h) => serialize_histogram(h, s),
        None => s.serialize_none(),
    }
}

/// A whole run's histogram (3 significant figures).
fn total<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
    decode_histogram(&String::deserialize(d)?, TOTAL_FIGURES).map_err(serde::de::Error::custom)
}

fn total_optional<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Histogram<u64>>, D::Error> {
    optional(d, TOTAL_FIGURES)
}

/// An interval's histogram (2 significant figures).
fn interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
    decode_histogram(&String::deserialize(d)?, INTERVAL_FIGURES).map_err(serde::de::Error::custom)
}

fn interval_optional<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Histogram<u64>>, D::Error> {
    optional(d, INTERVAL_FIGURES)
}

fn optional<'de, D: serde::Deserializer<'de>>(
    d: D,
    figures: u8,
) -> Result<Option<Histogram<u64>>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|text| decode_histogram(&text, figures).map_err(serde::de::Error::custom))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: u64 = 1_700_000_000_000;

    fn profile() -> Profile {
        Profile::Constant {
            users: 2,
            duration_secs: 3.0,
        }
    }

    /// A record of `shard` started at `start_ms` whose second `i` holds `latencies[i]` (µs).
    fn record(shard: Shard, start_ms: u64, latencies: &[&[u64]]) -> LoadRecord {
        let mut record = LoadRecord::new(shard, profile(), start_ms);
        for (second, values) in latencies.iter().enumerate() {
            for &us in *values {
                record.record(Duration::from_secs(second as u64), Outcome::Ok, us);
            }
            record.interval_at(Duration::from_secs(second as u64)).users = 1;
        }
        record.samples_us = Some(latencies.iter().flat_map(|s| s.iter().copied()).collect());
        record
    }

    #[test]
    fn a_merge_equals_one_histogram_of_every_sample() {
        let a = record(
            Shard::new(0, 2).expect("shard"),
            START,
            &[&[1_000, 2_000], &[50_000]],
        );
        let b = record(
            Shard::new(1, 2).expect("shard"),
            START + 1_000,
            &[&[3_000, 900_000, 7], &[12_345]],
        );
        // Through JSON, as the generators hand them over.
        let json = |r: &LoadRecord| serde_json::to_string(r).expect("json");
        let back = |s: String| serde_json::from_str::<LoadRecord>(&s).expect("record");
        let merged = LoadRecord::merge(vec![back(json(&a)), back(json(&b))]).expect("merge");
        assert_eq!(merged.started_at_unix_ms, START);
        assert_eq!(merged.intervals.len(), 3, "b started a second later");
        assert_eq!(merged.intervals[1].users, 2);
        assert_eq!(merged.intervals[1].outcomes[&Outcome::Ok], 4);
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
    fn incomplete_mixed_or_far_apart_shards_are_refused() {
        let shard = |i| Shard::new(i, 3).expect("shard");
        let r = |i| record(shard(i), START, &[&[1]]);
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
        let late = record(shard(2), START + 86_400_000, &[&[1]]);
        assert!(matches!(
            LoadRecord::merge(vec![r(0), r(1), late]),
            Err(MergeError::StartSpread {
                spread_secs: 86_400
            })
        ));
        assert!(matches!(
            LoadRecord::merge(Vec::new()),
            Err(MergeError::Empty)
        ));
    }

    /// A valid record's JSON with `field` set to `value`, read back.
    fn edited(field: &[&str], value: serde_json::Value) -> Result<LoadRecord, String> {
        let mut json =
            serde_json::to_value(record(Shard::WHOLE, START, &[&[5], &[6]])).expect("json");
        let mut at = &mut json;
        for key in &field[..field.len() - 1] {
            at = match key.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*key],
            };
        }
        at[field[field.len() - 1]] = value;
        LoadRecord::from_log(&format!("some log line\n{json}\nsummary line\n"))
    }

    #[test]
    fn edited_records_are_refused_naming_what_is_wrong() {
        let refused = |field: &[&str], value: serde_json::Value, expected: &str| {
            let error = edited(field, value.clone())
                .err()
                .unwrap_or_else(|| panic!("{field:?} = {value} was accepted"));
            assert!(error.contains(expected), "{field:?} = {value}: {error}");
        };
        refused(&["shard", "index"], 1.into(), "index counts from 0");
        refused(&["shard", "count"], 0.into(), "below the count");
        refused(&["shard", "count"], u32::MAX.into(), "1 to 1024");
        refused(&["profile", "duration_secs"], 1e300.into(), "duration_secs");
        refused(&["profile", "users"], 100_000_000.into(), "--users");
        refused(
            &["started_at_unix_ms"],
            u64::MAX.into(),
            "started_at_unix_ms",
        );
        refused(&["interval_secs"], 7.into(), "interval_secs");
        let many: Vec<serde_json::Value> = (0..2000)
            .map(|_| serde_json::to_value(IntervalRecord::default()).expect("json"))
            .collect();
        refused(&["intervals"], many.into(), "intervals: 2000");
        // A histogram whose header claims 5 significant figures up to u64::MAX would
        // make the decoder allocate gigabytes.
        let mut header = vec![0u8; 40];
        header[..4].copy_from_slice(&0x1c84_9303u32.to_be_bytes());
        header[12..16].copy_from_slice(&5u32.to_be_bytes());
        header[24..32].copy_from_slice(&u64::MAX.to_be_bytes());
        let hostile = base64::engine::general_purpose::STANDARD.encode(header);
        refused(&["latency"], hostile.clone().into(), "significant figures");
        refused(
            &["intervals", "0", "latency"],
            hostile.into(),
            "significant figures",
        );
        // One whose header claims 4 GB of counts (found by fuzzing: the decoder
        // reserved them before reading).
        let mut header = vec![0u8; 48];
        header[..4].copy_from_slice(&0x1c84_9303u32.to_be_bytes());
        header[4..8].copy_from_slice(&0xf000_0028u32.to_be_bytes());
        header[12..16].copy_from_slice(&2u32.to_be_bytes());
        header[16..24].copy_from_slice(&1u64.to_be_bytes());
        header[24..32].copy_from_slice(&600_000_000u64.to_be_bytes());
        let claims_gigabytes = base64::engine::general_purpose::STANDARD.encode(header);
        refused(&["latency"], claims_gigabytes.into(), "bytes of counts");
        refused(&["latency"], "not base64!".into(), "not base64");
        assert!(edited(&["started_at_unix_ms"], (START + 5).into()).is_ok());
        assert_eq!(
            LoadRecord::from_log("no record here\n{\"not\": 1}\n"),
            Err("no load record in it (written by `loadtest run --record`)".to_owned())
        );
    }

    #[test]
    fn a_day_long_run_keeps_at_most_the_interval_limit() {
        let day = Profile::Constant {
            users: 1,
            duration_secs: 86_400.0,
        };
        let mut record = LoadRecord::new(Shard::WHOLE, day, START);
        assert_eq!(record.interval_secs, 72);
        for second in (0..86_400 + 600).step_by(7) {
            record.record(Duration::from_secs(second), Outcome::Ok, 1_000 + second);
            record.record_send_lateness(Duration::from_secs(second), 10);
        }
        assert!(
            record.intervals.len() as u64 <= MAX_INTERVALS + 10,
            "{}",
            record.intervals.len()
        );
        let json = serde_json::to_string(&record).expect("json");
        let back: LoadRecord = serde_json::from_str(&json).expect("back");
        assert_eq!(back.summary().requests, record.summary().requests);
        assert_eq!(back.summary().interval_secs, 72);
    }

    #[test]
    fn a_record_is_found_in_a_pod_log_among_other_lines() {
        let record = record(Shard::WHOLE, START, &[&[9]]);
        let json = serde_json::to_string(&record).expect("json");
        let log = format!("WARN starting\n{json}\n12 requests, 12 ok, 0 failed\n");
        assert_eq!(LoadRecord::from_log(&log), Ok(record));
    }
}
