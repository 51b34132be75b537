//! Calling one backend: within its adaptive limit of calls in flight ([`crate::limit`]:
//! beyond it the call fails at once and the invoice is answered without that section),
//! a per-call timeout, and a retry on connection failure or 503 with exponential backoff
//! and full jitter, capped by a retry budget so retries can never multiply the load on a
//! struggling backend (the Retry Storm antipattern). The antipattern lab's storm
//! (`--retry-storm on`) drops all three: up to [`STORM_RETRIES`] retries, at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Uri;
use dronelab_contract::lab::STORM_RETRIES;
use dronelab_contract::telemetry::span;
use dronelab_contract::{Section, SectionError};
use opentelemetry::Context;
use rand::Rng;
use serde::de::DeserializeOwned;
use service_kit::client::{CallOutcome, TracedClient};
use tower::retry::budget::{Budget, TpsBudget};

use crate::limit::{AdaptiveLimit, Permit};
use crate::metrics::{self, GatewayMetrics};

/// A backend the gateway aggregates.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The invoice section it fills; its name is in `errors[].backend` and span names.
    pub section: Section,
    /// The endpoint, without a query.
    pub url: url::Url,
    /// `GET <section>`, the client span's name.
    span_name: &'static str,
    /// Its calls in flight, adaptively limited.
    pub limit: Arc<AdaptiveLimit>,
}

impl Backend {
    /// The backend filling `section` at `url` (its query, if any, is dropped), whose
    /// calls `limit` admits.
    pub fn new(section: Section, mut url: url::Url, limit: Arc<AdaptiveLimit>) -> Self {
        url.set_query(None);
        let span_name = match section {
            Section::Deliveries => span::CALL_DELIVERIES,
            Section::Packages => span::CALL_PACKAGES,
            Section::Utilization => span::CALL_UTILIZATION,
        };
        Self {
            section,
            url,
            span_name,
            limit,
        }
    }

    /// The backend's URL with `query`, put together without the formatting machinery
    /// (`format!` took ~750 instructions a call).
    fn url_with(&self, query: &str) -> String {
        let base = self.url.as_str();
        let mut url = String::with_capacity(base.len() + 1 + query.len());
        url.push_str(base);
        url.push('?');
        url.push_str(query);
        url
    }
}

/// How calls to backends behave.
#[derive(Debug, Clone, Copy)]
pub struct CallPolicy {
    pub timeout: Duration,
    pub max_retries: u32,
    pub backoff_base: Duration,
    /// Retry at once, unbudgeted, up to [`STORM_RETRIES`] times (the lab's Retry Storm).
    pub storm: bool,
}

/// Retries allowed: 20% of recent calls (over 10 s), and at least 5 per second.
pub fn retry_budget() -> Arc<TpsBudget> {
    Arc::new(TpsBudget::new(Duration::from_secs(10), 5, 0.2))
}

/// What every backend call shares.
pub struct Caller<'a> {
    pub client: &'a TracedClient,
    pub budget: &'a TpsBudget,
    pub policy: CallPolicy,
    pub metrics: &'a GatewayMetrics,
}

impl Caller<'_> {
    /// Calls `backend` with the owner-month query, admitted by `permit` (`None`: its
    /// limit was full, and the call fails at once); returns its answer or why not, and
    /// records the call's latency and outcome.
    pub async fn call<T: DeserializeOwned>(
        &self,
        cx: &Context,
        backend: &Backend,
        query: &str,
        permit: Option<Permit>,
    ) -> Result<T, SectionError> {
        let Some(permit) = permit else {
            self.metrics
                .backend_call(backend.section, metrics::CallOutcome::Refused, 0.0);
            return Err(SectionError {
                backend: backend.section,
                status: None,
                detail: format!(
                    "not called: {} calls were already in flight to it (its limit); answered without it",
                    backend.limit.current()
                ),
            });
        };
        let started = Instant::now();
        let outcome = self.attempts(cx, backend, query).await;
        // An answer says how long the backend takes and a timeout that it is behind; a
        // call that failed at once says nothing about its queue.
        match outcome {
            CallOutcome::Response { .. } => permit.answered(),
            CallOutcome::TimedOut => permit.timed_out(),
            CallOutcome::ConnectFailed(_) | CallOutcome::Failed(_) => drop(permit),
        }
        let mut label = metrics::CallOutcome::of(&outcome);
        let result = interpret(backend.section, outcome, self.policy.timeout);
        if result.is_err() && label == metrics::CallOutcome::Ok {
            // A 2xx whose body is not the section's JSON.
            label = metrics::CallOutcome::ErrorStatus;
        }
        self.metrics
            .backend_call(backend.section, label, started.elapsed().as_secs_f64());
        result
    }

    /// The call with its retries (within the budget); the last attempt's outcome.
    async fn attempts(&self, cx: &Context, backend: &Backend, query: &str) -> CallOutcome {
        // The owner-month query is ours (validated and re-encoded), so it always makes a URI.
        let uri = match Uri::try_from(backend.url_with(query)) {
            Ok(uri) => uri,
            Err(e) => return CallOutcome::Failed(format!("bad backend URI: {e}")),
        };
        self.budget.deposit();
        let mut attempt = 0;
        loop {
            let outcome = self
                .client
                .get(cx, backend.span_name, uri.clone(), self.policy.timeout)
                .await;
            let retryable = matches!(
                outcome,
                CallOutcome::ConnectFailed(_) | CallOutcome::Response { status: 503, .. }
            );
            if self.policy.storm {
                // The antipattern, on purpose: again at once, whatever the backend said.
                if retryable && attempt < STORM_RETRIES {
                    attempt += 1;
                    continue;
                }
                return outcome;
            }
            if retryable && attempt < self.policy.max_retries && self.budget.withdraw() {
                attempt += 1;
                tokio::time::sleep(backoff(self.policy.backoff_base, attempt)).await;
                continue;
            }
            return outcome;
        }
    }
}

/// Full jitter: uniformly random in `[0, base × 2^(attempt-1)]`.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let ceiling = base.saturating_mul(1 << attempt.saturating_sub(1).min(10));
    ceiling.mul_f64(rand::rng().random_range(0.0..=1.0))
}

fn interpret<T: DeserializeOwned>(
    backend: Section,
    outcome: CallOutcome,
    timeout: Duration,
) -> Result<T, SectionError> {
    let error = |status, detail: String| SectionError {
        backend,
        status,
        detail,
    };
    match outcome {
        CallOutcome::Response { status, body } if (200..300).contains(&status) => {
            serde_json::from_slice(&body).map_err(|e| {
                error(
                    Some(status),
                    format!("unexpected answer from the backend: {e}"),
                )
            })
        }
        CallOutcome::Response { status, body } => {
            // Backends answer problem+json; pass its title/detail through when present.
            let detail = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| {
                    v.get("detail")
                        .or_else(|| v.get("title"))
                        .and_then(|d| d.as_str())
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| format!("HTTP {status}"));
            Err(error(Some(status), detail))
        }
        CallOutcome::TimedOut => Err(error(
            None,
            format!("no answer within {} ms", timeout.as_millis()),
        )),
        CallOutcome::ConnectFailed(e) => Err(error(None, format!("connection failed: {e}"))),
        CallOutcome::Failed(e) => Err(error(None, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_by_the_exponential_ceiling() {
        let base = Duration::from_millis(50);
        for attempt in 1..6 {
            for _ in 0..50 {
                assert!(backoff(base, attempt) <= base * (1 << (attempt - 1)));
            }
        }
    }

    #[test]
    fn the_budget_caps_retries_to_a_fraction_of_calls() {
        let budget = TpsBudget::new(Duration::from_secs(10), 0, 0.2);
        for _ in 0..100 {
            budget.deposit();
        }
        let retries = (0..100).filter(|_| budget.withdraw()).count();
        assert!((15..=25).contains(&retries), "{retries}");
    }
}
