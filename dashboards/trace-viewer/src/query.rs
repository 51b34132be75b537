//! What every query endpoint shares: the one error type (Jaeger's envelope served as
//! problem+json), time parameters, and a stored trace by id.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use trace_analysis::jaeger::{self, ApiError};

use crate::jaeger::from_stored;
use crate::store::{parse_trace_id, Store};

/// The one error type of the query API: Jaeger's `errors` envelope, served as RFC 9457
/// problem+json so both Jaeger clients and people get a readable answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiProblem {
    #[error("invalid query parameter {name:?}: {detail}")]
    InvalidParam { name: &'static str, detail: String },
    /// A search with neither `service` nor `traceID` (Jaeger's words).
    #[error("parameter 'service' is required")]
    ServiceRequired,
    /// A malformed `traceID` of a search (Jaeger's words, and the value).
    #[error("cannot parse traceID param: {0:?}")]
    BadTraceIdParam(String),
    #[error("trace {0} not found")]
    TraceNotFound(String),
    /// A bug of the viewer's, not the caller's.
    #[error("{0}")]
    Internal(String),
}

impl IntoResponse for ApiProblem {
    fn into_response(self) -> Response {
        let (status, title, invalid) = match &self {
            ApiProblem::InvalidParam { name, detail } => (
                StatusCode::BAD_REQUEST,
                "Invalid query parameter",
                Some(serde_json::json!([{ "name": name, "reason": detail }])),
            ),
            ApiProblem::ServiceRequired => (
                StatusCode::BAD_REQUEST,
                "Invalid query parameter",
                Some(
                    serde_json::json!([{ "name": "service", "reason": "required without traceID" }]),
                ),
            ),
            ApiProblem::BadTraceIdParam(_) => (
                StatusCode::BAD_REQUEST,
                "Invalid query parameter",
                Some(
                    serde_json::json!([{ "name": "traceID", "reason": "1 to 32 hexadecimal digits" }]),
                ),
            ),
            ApiProblem::TraceNotFound(_) => (StatusCode::NOT_FOUND, "Not found", None),
            ApiProblem::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal error", None),
        };
        let mut body = serde_json::json!({
            "type": "about:blank",
            "title": title,
            "status": status.as_u16(),
            "detail": self.to_string(),
            "data": null,
            "total": 0,
            "limit": 0,
            "offset": 0,
            "errors": [ApiError { code: status.as_u16(), msg: self.to_string(), trace_id: None }],
        });
        if let (Some(invalid), Some(map)) = (invalid, body.as_object_mut()) {
            map.insert("invalidParams".into(), invalid);
        }
        (
            status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response()
    }
}

pub fn stored_trace(store: &Store, id: &str) -> Result<jaeger::Trace, ApiProblem> {
    let parsed = parse_trace_id(id).ok_or_else(|| ApiProblem::InvalidParam {
        name: "traceID",
        detail: "must be 1 to 32 hexadecimal digits".into(),
    })?;
    store
        .get(&parsed, from_stored)
        .ok_or_else(|| ApiProblem::TraceNotFound(id.to_owned()))
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub fn invalid(name: &'static str, detail: impl Into<String>) -> ApiProblem {
    ApiProblem::InvalidParam {
        name,
        detail: detail.into(),
    }
}

pub fn micros_param(name: &'static str, value: &str) -> Result<u64, ApiProblem> {
    value
        .parse::<u64>()
        .ok()
        .filter(|v| *v <= u64::MAX / 1_000)
        .ok_or_else(|| invalid(name, "must be microseconds since the Unix epoch"))
}
