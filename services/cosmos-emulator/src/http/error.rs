//! The emulator's error type, rendered in Cosmos DB's error shape `{"code","message"}`.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::headers;
use cosmos_engine::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    NotFound(String),
    /// The database or container a request's resource lives in does not exist:
    /// 404 with sub-status 1003, which the SDKs tell apart from a missing document.
    #[error("{0}")]
    OwnerNotFound(String),
    /// A query that spans partitions and needs the SDK's pipeline (a sort, aggregate,
    /// DISTINCT, OFFSET/LIMIT): 400 with sub-status 1004 and, as Cosmos DB does, the
    /// query plan as JSON text in the body's `additionalErrorInfo` (some SDKs switch to
    /// their pipeline only when it is there); the SDK then runs the rewritten query per
    /// partition.
    #[error("{message}")]
    QueryNeedsPlan {
        message: String,
        plan: Option<String>,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body was too large, too slow, or over the server's budget of bodies in flight.
    #[error("{0}")]
    Body(lifecycle::http::BodyError),
    #[error("Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later.")]
    TooManyRequests { retry_after: Duration },
    #[error("{0}")]
    Internal(String),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::QueryNeedsPlan { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) | ApiError::OwnerNotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Body(e) => e.status(),
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) | ApiError::QueryNeedsPlan { .. } => "BadRequest",
            ApiError::Unauthorized(_) => "Unauthorized",
            ApiError::NotFound(_) | ApiError::OwnerNotFound(_) => "NotFound",
            ApiError::Conflict(_) => "Conflict",
            ApiError::PreconditionFailed(_) => "PreconditionFailed",
            ApiError::PayloadTooLarge(_) => "RequestEntityTooLarge",
            ApiError::Body(lifecycle::http::BodyError::TooLarge { .. }) => "RequestEntityTooLarge",
            ApiError::Body(lifecycle::http::BodyError::Busy) => "ServiceUnavailable",
            ApiError::Body(lifecycle::http::BodyError::TooSlow { .. }) => "RequestTimeout",
            ApiError::Body(lifecycle::http::BodyError::Failed(_)) => "BadRequest",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::Internal(_) => "InternalServerError",
        }
    }
}

impl ApiError {
    /// `e` when looking up the database or container of a document (or partition key
    /// range): a missing one is a missing owner.
    pub fn of_owner(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => Self::OwnerNotFound(m),
            other => other.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(m) => Self::BadRequest(m),
            StoreError::NotFound(m) => Self::NotFound(m),
            StoreError::Conflict(m) => Self::Conflict(m),
            StoreError::TooLarge(m) => Self::PayloadTooLarge(m),
            persist @ StoreError::Persist(_) => Self::Internal(persist.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let mut body = serde_json::json!({ "code": self.code(), "message": self.to_string() });
        if let (
            ApiError::QueryNeedsPlan {
                plan: Some(plan), ..
            },
            Some(map),
        ) = (&self, body.as_object_mut())
        {
            map.insert("additionalErrorInfo".into(), plan.clone().into());
        }
        let mut response = (self.status(), axum::Json(body)).into_response();
        let h = response.headers_mut();
        h.insert(headers::REQUEST_CHARGE, HeaderValue::from_static("0"));
        if let ApiError::OwnerNotFound(_) = &self {
            h.insert(headers::SUBSTATUS, HeaderValue::from_static("1003"));
        }
        if let ApiError::QueryNeedsPlan { .. } = &self {
            h.insert(headers::SUBSTATUS, HeaderValue::from_static("1004"));
        }
        if let ApiError::TooManyRequests { retry_after } = &self {
            h.insert(headers::SUBSTATUS, HeaderValue::from_static("3200"));
            let ms = retry_after.as_millis().max(1).to_string();
            if let Ok(v) = HeaderValue::from_str(&ms) {
                h.insert(headers::RETRY_AFTER_MS, v);
            }
        }
        response
    }
}
