//! An HTTP client whose every request is a client span and carries the W3C trace context.

use std::time::Duration;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::telemetry::Telemetry;

#[derive(Clone, Debug)]
pub struct TracedClient {
    http: reqwest::Client,
    telemetry: Telemetry,
}

/// What came back from a backend: status and body, or why nothing came back.
#[derive(Debug)]
pub enum CallOutcome {
    Response {
        status: u16,
        body: bytes::Bytes,
    },
    /// The connection could not be made (refused, reset before any response).
    ConnectFailed(String),
    TimedOut,
    Failed(String),
}

impl TracedClient {
    /// A pooled client: keep-alive connections are reused across requests.
    pub fn new(telemetry: Telemetry, pool_per_host: usize) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(pool_per_host)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(Self { http, telemetry })
    }

    /// `GET url` as a child of `parent`, giving up after `timeout`.
    pub async fn get(
        &self,
        parent: &Context,
        span_name: &str,
        url: &url::Url,
        timeout: Duration,
    ) -> CallOutcome {
        let tracer = self.telemetry.tracer();
        let mut attributes = vec![
            KeyValue::new("http.request.method", "GET"),
            KeyValue::new("url.full", url.to_string()),
        ];
        if let Some(host) = url.host_str() {
            attributes.push(KeyValue::new("server.address", host.to_owned()));
        }
        if let Some(port) = url.port_or_known_default() {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        let span = tracer
            .span_builder(span_name.to_owned())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer, parent);
        let cx = parent.with_span(span);
        let mut headers = axum::http::HeaderMap::new();
        self.telemetry.inject(&cx, &mut headers);
        let sent = self
            .http
            .get(url.clone())
            .headers(headers)
            .timeout(timeout)
            .send()
            .await;
        let outcome = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(body) => CallOutcome::Response { status, body },
                    Err(e) if e.is_timeout() => CallOutcome::TimedOut,
                    Err(e) => CallOutcome::Failed(e.to_string()),
                }
            }
            Err(e) if e.is_timeout() => CallOutcome::TimedOut,
            Err(e) if e.is_connect() => CallOutcome::ConnectFailed(e.to_string()),
            Err(e) => CallOutcome::Failed(e.to_string()),
        };
        let span = cx.span();
        match &outcome {
            CallOutcome::Response { status, .. } => {
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(*status),
                ));
                if *status >= 400 {
                    span.set_status(Status::error(format!("HTTP {status}")));
                }
            }
            CallOutcome::TimedOut => {
                span.set_attribute(KeyValue::new("error.type", "timeout"));
                span.set_status(Status::error("timed out"));
            }
            CallOutcome::ConnectFailed(e) | CallOutcome::Failed(e) => {
                span.set_attribute(KeyValue::new("error.type", "connection"));
                span.set_status(Status::error(e.clone()));
            }
        }
        span.end();
        outcome
    }
}
