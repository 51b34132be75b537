//! What a Cosmos-backed endpoint answers when it cannot answer with data.

/// Why a Cosmos-backed endpoint could not answer: the caller's mistake (400), Cosmos
/// throttling beyond the SDK's retries (503 + `Retry-After`), or another Cosmos failure
/// (502).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{}", .0.title)]
    BadRequest(service_kit::Problem),
    #[error("Cosmos DB is throttling requests (429) beyond the retry budget")]
    Throttled,
    #[error("Cosmos DB request failed: {0}")]
    Cosmos(String),
    #[error("not connected to Cosmos DB yet: {0}")]
    NotConnected(String),
    /// The service is at its capacity (the antipattern lab's overload fault).
    #[error("the service is at its capacity; retry later")]
    Overloaded,
}

impl axum::response::IntoResponse for BackendError {
    fn into_response(self) -> axum::response::Response {
        use axum::http::StatusCode;
        match self {
            BackendError::BadRequest(problem) => problem.into_response(),
            BackendError::Throttled => service_kit::Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Cosmos DB is throttling",
            )
            .with_detail(self.to_string())
            .with_retry_after(1)
            .into_response(),
            BackendError::Cosmos(_) => {
                service_kit::Problem::new(StatusCode::BAD_GATEWAY, "Cosmos DB request failed")
                    .with_detail(self.to_string())
                    .into_response()
            }
            BackendError::Overloaded => {
                service_kit::Problem::new(StatusCode::SERVICE_UNAVAILABLE, "Overloaded")
                    .with_detail(self.to_string())
                    .with_retry_after(1)
                    .into_response()
            }
            BackendError::NotConnected(_) => service_kit::Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not connected to Cosmos DB",
            )
            .with_detail(self.to_string())
            .with_retry_after(1)
            .into_response(),
        }
    }
}

impl From<azure_data_cosmos::CosmosError> for BackendError {
    fn from(e: azure_data_cosmos::CosmosError) -> Self {
        if u16::from(e.status().status_code()) == 429 {
            BackendError::Throttled
        } else {
            BackendError::Cosmos(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    #[test]
    fn errors_answer_as_the_caller_needs() {
        let throttled = BackendError::Throttled.into_response();
        assert_eq!(throttled.status(), 503);
        assert!(throttled.headers().contains_key("retry-after"));
        let waiting = BackendError::NotConnected("connecting".into()).into_response();
        assert_eq!(waiting.status(), 503);
        assert!(waiting.headers().contains_key("retry-after"));
        let overloaded = BackendError::Overloaded.into_response();
        assert_eq!(overloaded.status(), 503);
        assert!(overloaded.headers().contains_key("retry-after"));
        assert_eq!(
            BackendError::Cosmos("boom".into()).into_response().status(),
            502
        );
    }
}
