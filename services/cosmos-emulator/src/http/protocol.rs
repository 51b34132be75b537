//! The Cosmos REST protocol as the handlers see it: a decoded request and an answer with
//! the headers every Cosmos response carries.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::headers;
use cosmos_engine::sql::{PreparedQuery, QuerySpec};
use cosmos_engine::throughput::charge;

/// A request as the handlers see it: decoded path segments, headers and a JSON body.
pub struct CosmosRequest {
    pub method: Method,
    /// The address the client used (HTTP/2 `:authority` or HTTP/1.1 `Host`).
    pub authority: Option<String>,
    pub segments: Vec<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl CosmosRequest {
    /// Decodes the path into segments and finds the address the client used.
    pub fn new(method: Method, uri: &Uri, headers: HeaderMap, body: Bytes) -> Self {
        let segments = uri
            .path()
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
            .collect();
        let authority = uri.authority().map(|a| a.to_string()).or_else(|| {
            headers
                .get("host")
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        });
        Self {
            method,
            authority,
            segments,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn flag(&self, name: &str) -> bool {
        self.header(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// The body as JSON; Cosmos binary JSON (first byte 0x80) is accepted too. Either
    /// way it may nest at most [`MAX_JSON_NESTING`] levels.
    pub fn json(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Err(ApiError::BadRequest("the request has no body".into()));
        }
        let value: Value = if azure_data_cosmos_driver::binary_json::is_binary(&self.body) {
            azure_data_cosmos_driver::binary_json::decode(&self.body).map_err(|e| {
                ApiError::BadRequest(format!("the binary JSON body could not be decoded: {e}"))
            })?
        } else {
            serde_json::from_slice(&self.body)
                .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?
        };
        if nesting(&value) > MAX_JSON_NESTING {
            return Err(ApiError::BadRequest(format!(
                "the body nests objects and arrays more than {MAX_JSON_NESTING} levels deep"
            )));
        }
        Ok(value)
    }

    pub fn query_spec(&self) -> ApiResult<PreparedQuery> {
        let spec: QuerySpec = serde_json::from_value(self.json()?).map_err(|e| {
            ApiError::BadRequest(format!(
                "a query body must be {{\"query\": \"...\", \"parameters\": [...]}}: {e}"
            ))
        })?;
        PreparedQuery::prepare(&spec)
            .map_err(|e| ApiError::BadRequest(format!("Syntax error: {e}")))
    }

    /// Provisioned throughput requested with a create (`x-ms-offer-throughput`).
    pub fn offer_throughput(&self) -> ApiResult<Option<f64>> {
        if self.header(headers::AUTOPILOT_SETTINGS).is_some() {
            return Err(ApiError::BadRequest(
                "autoscale throughput is not supported by this emulator; use manual throughput (x-ms-offer-throughput)".into(),
            ));
        }
        self.header(headers::OFFER_THROUGHPUT)
            .map(|v| parse_throughput(&Value::String(v.to_owned())))
            .transpose()
    }
}

/// Accepted throughput: 1–1,000,000 RU/s (below Azure's 400 minimum on purpose, so a
/// lab can provoke throttling with little load).
pub fn parse_throughput(value: &Value) -> ApiResult<f64> {
    let ru = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match ru {
        Some(ru) if (1.0..=1_000_000.0).contains(&ru) && ru.fract() == 0.0 => Ok(ru),
        _ => Err(ApiError::BadRequest(format!(
            "throughput must be a whole number of RU/s between 1 and 1000000, got {value}"
        ))),
    }
}

/// A successful answer with the headers every Cosmos response carries.
pub struct CosmosResponse {
    pub status: StatusCode,
    pub body: Option<Value>,
    pub charge: f64,
    pub headers: Vec<(&'static str, String)>,
}

impl CosmosResponse {
    pub fn ok(body: Value, charge: f64) -> Self {
        Self {
            status: StatusCode::OK,
            body: Some(body),
            charge,
            headers: Vec::new(),
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// `204`, as deletes answer.
    pub fn no_content() -> Self {
        Self {
            status: StatusCode::NO_CONTENT,
            body: None,
            charge: charge::METADATA,
            headers: Vec::new(),
        }
    }
}

impl IntoResponse for CosmosResponse {
    fn into_response(self) -> Response {
        let mut response = match self.body {
            Some(body) => (self.status, axum::Json(body)).into_response(),
            None => self.status.into_response(),
        };
        let h = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&charge::round(self.charge).to_string()) {
            h.insert(headers::REQUEST_CHARGE, v);
        }
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                h.insert(HeaderName::from_static(name), v);
            }
        }
        response
    }
}

/// The deepest nesting of objects and arrays a request body may have: what serde_json's
/// text reader accepts (it stops at 128), which is how the data log reads everything
/// back. Binary JSON's decoder would take 256, so the limit is checked after decoding,
/// whatever the encoding.
pub const MAX_JSON_NESTING: usize = 127;

/// Levels of objects and arrays in `value` (a scalar is 0), without recursion.
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1)];
    while let Some((value, level)) = pending.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(level);
                pending.extend(items.iter().map(|child| (child, level + 1)));
            }
            Value::Object(fields) => {
                deepest = deepest.max(level);
                pending.extend(fields.values().map(|child| (child, level + 1)));
            }
            _ => {}
        }
    }
    deepest
}
