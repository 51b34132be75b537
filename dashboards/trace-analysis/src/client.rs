//! A client of a Jaeger-compatible query API (the trace viewer, or Jaeger's query
//! service) that reads an entry operation's traces in a time window and diagnoses them.

use std::time::Duration;

use dronelab_contract::telemetry::attribute;

pub use crate::diagnosis::TraceLinks;
use crate::diagnosis::{answered_ok, diagnose_with_half, entry_traces, Diagnosis};
pub use crate::evidence::WARM_UP_SHARE;
use crate::jaeger::{Envelope, Trace};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the trace API at {url}: {source}")]
    Unreachable { url: String, source: reqwest::Error },
    #[error("the trace API at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the trace API at {url} did not answer Jaeger JSON: {source}")]
    Shape { url: String, source: reqwest::Error },
    #[error(
        "no {operation:?} traces of {service} in the window; is tracing on and exported to {api}?"
    )]
    NoTraces {
        service: String,
        operation: String,
        api: String,
    },
}

/// Sends a request; an answer other than 2xx is an error quoting the start of its body.
async fn send(
    request: reqwest::RequestBuilder,
    shown: &str,
) -> Result<reqwest::Response, ClientError> {
    let response = request
        .send()
        .await
        .map_err(|source| ClientError::Unreachable {
            url: shown.to_owned(),
            source,
        })?;
    if !response.status().is_success() {
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        return Err(ClientError::Status {
            url: shown.to_owned(),
            status,
            body: body.chars().take(300).collect(),
        });
    }
    Ok(response)
}

/// Which traces to read.
#[derive(Debug, Clone)]
pub struct TraceWindow {
    pub service: String,
    pub operation: String,
    /// µs since the epoch, or `lookback`.
    pub start_us: Option<u64>,
    pub end_us: Option<u64>,
    pub lookback: Option<String>,
    pub limit: u32,
    /// Requests the load sent in each second from `start_us`, when known: a sample
    /// draws from each slice in proportion to them ([`TraceApi::sample`]).
    pub load_per_second: Vec<u64>,
}

/// Slices of a window a sample is drawn from (after its [`WARM_UP_SHARE`]). 600 traces
/// (the tuning run's sample) put a share's standard error at 2 points at most; ten
/// slices of a 60-second quick stage are 5 s each.
pub const SLICES: u64 = 10;

/// A Jaeger API client.
#[derive(Debug, Clone)]
pub struct TraceApi {
    base: url::Url,
    http: reqwest::Client,
}

impl TraceApi {
    /// `base` may carry a path prefix (Jaeger's `--query.base-path`).
    pub fn new(mut base: url::Url) -> Self {
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Self {
            base,
            http: reqwest::Client::new(),
        }
    }

    pub fn trace_link(&self, trace_id: &str) -> String {
        format!("{}trace/{trace_id}", self.base)
    }

    /// The viewer's stage page for a window: its critical path by operation.
    pub fn critical_path_link(&self, window: &TraceWindow) -> Option<String> {
        let (start, end) = (window.start_us?, window.end_us?);
        let mut url = self.base.join("stage").ok()?;
        url.query_pairs_mut()
            .append_pair("service", &window.service)
            .append_pair("operation", &window.operation)
            .append_pair("start", &start.to_string())
            .append_pair("end", &end.to_string());
        Some(url.into())
    }

    /// Tells the trace viewer a stage's name and window (`POST /api/stages`), for its
    /// stage filter and stage page. A Jaeger query service has no such endpoint: the
    /// error says so and the caller goes on without.
    pub async fn announce_stage(
        &self,
        name: &str,
        start_us: u64,
        end_us: u64,
    ) -> Result<(), ClientError> {
        let url = self
            .base
            .join("api/stages")
            .unwrap_or_else(|_| self.base.clone());
        let shown = url.to_string();
        let request = self
            .http
            .post(url)
            .timeout(Duration::from_secs(10))
            .json(&serde_json::json!({ "name": name, "start": start_us, "end": end_us }));
        send(request, &shown).await.map(drop)
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, ClientError> {
        let mut url = self.base.join(path).unwrap_or_else(|_| self.base.clone());
        url.query_pairs_mut().clear().extend_pairs(query);
        let shown = url.to_string();
        let request = self.http.get(url).timeout(Duration::from_secs(60));
        send(request, &shown)
            .await?
            .json()
            .await
            .map_err(|source| ClientError::Shape { url: shown, source })
    }

    fn window_params(window: &TraceWindow) -> Vec<(&'static str, String)> {
        let mut q = vec![
            ("service", window.service.clone()),
            ("limit", window.limit.to_string()),
        ];
        if let Some(s) = window.start_us {
            q.push(("start", s.to_string()));
        }
        if let Some(e) = window.end_us {
            q.push(("end", e.to_string()));
        }
        if let Some(l) = &window.lookback {
            q.push(("lookback", l.clone()));
        }
        q
    }

    /// The entry operation's traces in the window, newest first.
    pub async fn traces(&self, window: &TraceWindow) -> Result<Vec<Trace>, ClientError> {
        let mut q = Self::window_params(window);
        q.push(("operation", window.operation.clone()));
        let found: Envelope<Vec<Trace>> = self.get("api/traces", &q).await?;
        Ok(found.data)
    }

    /// The window's traces drawn across it rather than its newest: the window after its
    /// first [`WARM_UP_SHARE`] (the load's first step, connections being opened) cut
    /// into [`SLICES`] equal slices, the newest of each in proportion to the requests
    /// the load sent in it (equal shares without [`TraceWindow::load_per_second`]), so
    /// that the sample's per-request figures weigh every request alike, as the stage's
    /// counters do: under a rising step load, equal shares would weigh the first slices'
    /// requests several times the last ones'. Without both ends, the newest `limit`.
    /// Returns the traces and how they were drawn.
    pub async fn sample(&self, window: &TraceWindow) -> Result<(Vec<Trace>, String), ClientError> {
        let (Some(start), Some(end)) = (window.start_us, window.end_us) else {
            let traces = self.traces(window).await?;
            let how = format!("the newest {} traces", traces.len());
            return Ok((traces, how));
        };
        let from = start + ((end.saturating_sub(start)) as f64 * WARM_UP_SHARE) as u64;
        let width = end.saturating_sub(from) / SLICES;
        let quotas = slice_quotas(window, from - start, width);
        let mut traces: Vec<Trace> = Vec::new();
        for (i, quota) in (0..SLICES).zip(&quotas).filter(|(_, q)| **q > 0) {
            let slice = TraceWindow {
                start_us: Some(from + i * width),
                end_us: Some(if i + 1 == SLICES {
                    end
                } else {
                    from + (i + 1) * width
                }),
                limit: *quota,
                ..window.clone()
            };
            for trace in self.traces(&slice).await? {
                if !traces.iter().any(|t| t.trace_id == trace.trace_id) {
                    traces.push(trace);
                }
            }
        }
        let per_slice = if window.load_per_second.is_empty() {
            format!("the newest {} of each", quotas[0])
        } else {
            "the newest of each in proportion to its requests".to_owned()
        };
        let how = format!(
            "{} traces: {per_slice} of {SLICES} equal slices of the stage after its first {:.0}%",
            traces.len(),
            WARM_UP_SHARE * 100.0
        );
        Ok((traces, how))
    }

    /// One answered entry trace in the window with a throttled (429) Cosmos attempt.
    pub async fn throttled_trace(
        &self,
        window: &TraceWindow,
        backend: &str,
    ) -> Result<Option<String>, ClientError> {
        let mut q = Self::window_params(&TraceWindow {
            service: backend.to_owned(),
            limit: 20,
            ..window.clone()
        });
        q.push((
            "tags",
            serde_json::json!({ attribute::DB_RESPONSE_STATUS_CODE: "429" }).to_string(),
        ));
        let found: Envelope<Vec<Trace>> = self.get("api/traces", &q).await?;
        Ok(
            entry_traces(&found.data, &window.service, &window.operation)
                .first()
                .map(|t| t.trace_id.clone()),
        )
    }
}

/// How many traces each of the [`SLICES`] slices gives: `limit` shared in proportion
/// to the requests of the seconds whose middle falls in the slice (`offset_us` from the
/// window's start to the first slice, each `width_us` wide), at least one from a slice
/// with requests; equal shares without the load's counts.
fn slice_quotas(window: &TraceWindow, offset_us: u64, width_us: u64) -> Vec<u32> {
    let equal = vec![(window.limit / SLICES as u32).max(1); SLICES as usize];
    if width_us == 0 {
        return equal;
    }
    let mut requests = vec![0u64; SLICES as usize];
    for (second, n) in window.load_per_second.iter().enumerate() {
        let middle = second as u64 * 1_000_000 + 500_000;
        if let Some(slice) = middle.checked_sub(offset_us).map(|us| us / width_us) {
            requests[slice.min(SLICES - 1) as usize] += n;
        }
    }
    let total: u64 = requests.iter().sum();
    if total == 0 {
        return equal;
    }
    requests
        .iter()
        .map(|&n| {
            let share = (f64::from(window.limit) * n as f64 / total as f64).round() as u32;
            if n > 0 {
                share.max(1)
            } else {
                0
            }
        })
        .collect()
}

pub fn pick_links(
    api: &TraceApi,
    window: &TraceWindow,
    traces: &[&Trace],
    throttled: Option<String>,
) -> TraceLinks {
    let mut by_duration: Vec<(u64, &str)> = traces
        .iter()
        .filter_map(|t| t.root().map(|r| (r.duration, t.trace_id.as_str())))
        .collect();
    by_duration.sort_unstable();
    TraceLinks {
        typical: by_duration
            .get(by_duration.len() / 2)
            .map(|(_, id)| api.trace_link(id)),
        slowest: by_duration.last().map(|(_, id)| api.trace_link(id)),
        throttled: throttled.map(|id| api.trace_link(&id)),
        critical_path: api.critical_path_link(window),
    }
}

/// Reads the window's traces and diagnoses them; also picks the links.
pub async fn diagnose_window(
    api: &TraceApi,
    window: &TraceWindow,
) -> Result<(Diagnosis, TraceLinks), ClientError> {
    let (traces, how) = api.sample(window).await?;
    let entry = entry_traces(&traces, &window.service, &window.operation);
    if entry.is_empty() {
        return Err(ClientError::NoTraces {
            service: window.service.clone(),
            operation: window.operation.clone(),
            api: api.base.to_string(),
        });
    }
    let mut diagnosis = diagnose_with_half(&entry, &window.service);
    let ok: Vec<&Trace> = entry.iter().copied().filter(|t| answered_ok(t)).collect();
    diagnosis.sample = format!(
        "{how}; {} of them answered entry traces, {} with 200",
        entry.len(),
        ok.len()
    );
    let has_429 = |t: &Trace| {
        t.spans
            .iter()
            .any(|s| s.tag_text(attribute::DB_RESPONSE_STATUS_CODE).as_deref() == Some("429"))
    };
    let throttled = match ok.iter().find(|t| has_429(t)) {
        Some(t) => Some(t.trace_id.clone()),
        None if diagnosis.cosmos.throttled_per_operation > 0.0 => {
            api.throttled_trace(window, &diagnosis.cosmos.service)
                .await?
        }
        None => None,
    };
    let links = pick_links(api, window, &ok, throttled);
    Ok((diagnosis, links))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(load_per_second: Vec<u64>) -> TraceWindow {
        TraceWindow {
            service: "gateway".into(),
            operation: "GET /api/invoices".into(),
            start_us: Some(0),
            end_us: Some(100_000_000),
            lookback: None,
            limit: 600,
            load_per_second,
        }
    }

    #[test]
    fn slices_give_traces_in_proportion_to_their_requests() {
        // 100 s, the first 10 left out, ten slices of 9 s; the rate rises from 10 to
        // 100 requests a second: the last slice gives about ten times the first's.
        let rising: Vec<u64> = (0..100).map(|s| 10 + s * 90 / 99).collect();
        let quotas = slice_quotas(&window(rising), 10_000_000, 9_000_000);
        assert_eq!(quotas.len(), 10);
        assert!(quotas[9] > 3 * quotas[0], "{quotas:?}");
        let total: u32 = quotas.iter().sum();
        assert!((595..=605).contains(&total), "{quotas:?}");
        // A slice without requests gives none; without the load's counts, equal shares.
        let mut gap = vec![50; 100];
        gap[10..19].iter_mut().for_each(|n| *n = 0);
        assert_eq!(slice_quotas(&window(gap), 10_000_000, 9_000_000)[0], 0);
        assert_eq!(
            slice_quotas(&window(Vec::new()), 10_000_000, 9_000_000),
            vec![60; 10]
        );
    }

    #[test]
    fn links_and_requests_keep_a_base_path() {
        let api = TraceApi::new("http://127.0.0.1:16686/jaeger".parse().expect("url"));
        assert_eq!(
            api.trace_link("ab"),
            "http://127.0.0.1:16686/jaeger/trace/ab"
        );
        let plain = TraceApi::new("http://127.0.0.1:16686".parse().expect("url"));
        assert_eq!(plain.trace_link("ab"), "http://127.0.0.1:16686/trace/ab");
    }
}
