//! RFC 9457 problem details (`application/problem+json`), the error body of every
//! dronelab service.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

pub const CONTENT_TYPE: &str = "application/problem+json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvalidParam {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The RFC 9457 extension for validation errors: one entry per bad parameter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_params: Vec<InvalidParam>,
    /// Seconds a client should wait before retrying (sent as `Retry-After` too).
    #[serde(skip)]
    pub retry_after_secs: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, title: impl Into<String>) -> Self {
        Self {
            kind: "about:blank".into(),
            title: title.into(),
            status: status.as_u16(),
            detail: None,
            invalid_params: Vec::new(),
            retry_after_secs: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// A `400` naming each bad parameter and why.
    pub fn invalid_parameters(errors: Vec<(String, String)>) -> Self {
        let detail = errors
            .iter()
            .map(|(name, reason)| format!("{name} {reason}"))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            kind: "https://dronelab.dev/problems/invalid-parameters".into(),
            detail: Some(detail),
            invalid_params: errors
                .into_iter()
                .map(|(name, reason)| InvalidParam { name, reason })
                .collect(),
            ..Self::new(StatusCode::BAD_REQUEST, "Invalid request parameters")
        }
    }

    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl From<dronelab_contract::InvalidParams> for Problem {
    fn from(invalid: dronelab_contract::InvalidParams) -> Self {
        Self::invalid_parameters(invalid.0)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let retry_after = self.retry_after_secs;
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        if let Some(secs) = retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
