//! Where the load goes, what each request asks for, and what its answer counts as.

use std::sync::Arc;
use std::time::Duration;

use hyper::Uri;

use crate::connection::{Endpoint, Reply, UserConnection};
use crate::record::Outcome;

/// What each request asks for: the origin-form URI (path and query) of the next request,
/// e.g. `/api/invoices?ownerId=o00042&year=2026&month=3`. Called once per request, from
/// many tasks at once; an error is recorded as a failed request, and a closed-loop user
/// that meets one stops.
pub trait Requests: Send + Sync {
    fn next_uri(&self) -> Result<Uri, String>;
}

/// Every request asks for the same path and query (a clone shares its buffer).
impl Requests for Uri {
    fn next_uri(&self) -> Result<Uri, String> {
        Ok(self.clone())
    }
}

/// An `http://` server, the requests to send it, and how long one may take.
#[derive(Clone)]
pub struct Target {
    pub base: url::Url,
    /// Client-side timeout of one request.
    pub timeout: Duration,
    /// `base`'s host and port, checked when the target is made.
    pub(crate) endpoint: Endpoint,
    requests: Arc<dyn Requests>,
    /// A 2xx answer whose body contains this counts as [`Outcome::Partial`].
    partial_marker: Option<&'static [u8]>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("base", &self.base.as_str())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// A target at `base`, which must be an `http://` URL with a host.
    pub fn new(
        base: url::Url,
        requests: impl Requests + 'static,
        timeout: Duration,
    ) -> Result<Self, String> {
        if base.scheme() != "http" {
            return Err(format!(
                "{base}: the load generator speaks plain http:// (got {}://)",
                base.scheme()
            ));
        }
        Ok(Self {
            endpoint: Endpoint::of(&base)?,
            base,
            timeout,
            requests: Arc::new(requests),
            partial_marker: None,
        })
    }

    /// Counts a 2xx answer whose body contains `marker` as partial rather than ok (an
    /// aggregating gateway that answers 200 with a section missing, say).
    pub fn counting_partial(mut self, marker: &'static [u8]) -> Self {
        self.partial_marker = Some(marker).filter(|m| !m.is_empty());
        self
    }

    /// Whether anything accepts connections at the target (within 2 s): a run against
    /// nothing would only count failures.
    pub async fn check_reachable(&self) -> Result<(), String> {
        self.endpoint.check_reachable().await
    }

    /// A connection to the target that looks for its partial marker in each answer.
    pub(crate) fn connection(&self) -> UserConnection {
        UserConnection::new(self.endpoint.clone(), self.partial_marker)
    }

    /// The next request's path and query.
    pub(crate) fn next_uri(&self) -> Result<Uri, String> {
        self.requests.next_uri()
    }

    /// What an answer counts as.
    pub(crate) fn classify(&self, reply: &Reply) -> Outcome {
        match reply {
            Reply::Response { status, marked } if (200..300).contains(status) => {
                if *marked {
                    Outcome::Partial
                } else {
                    Outcome::Ok
                }
            }
            Reply::Response { status, .. } if *status >= 500 => Outcome::Http5xx,
            Reply::Response { .. } => Outcome::Http4xx,
            Reply::TimedOut => Outcome::Timeout,
            Reply::ConnectFailed(_) => Outcome::ConnectFailed,
            Reply::Failed(_) | Reply::ClosedUnanswered(_) => Outcome::Connection,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Result<Target, String> {
        Target::new(
            url::Url::parse(url).expect("url"),
            Uri::from_static("/"),
            Duration::from_secs(1),
        )
    }

    #[test]
    fn a_target_must_be_plain_http() {
        assert!(target("http://127.0.0.1:8080/").is_ok());
        assert!(target("http://[::1]:8080/").is_ok());
        let https = target("https://127.0.0.1/").expect_err("https is refused");
        assert!(https.contains("https://"), "{https}");
    }

    #[test]
    fn answers_are_classified_by_status_and_marker() {
        let target = target("http://127.0.0.1:1/").expect("target");
        let answer = |status, marked| Reply::Response { status, marked };
        assert_eq!(target.classify(&answer(200, false)), Outcome::Ok);
        assert_eq!(target.classify(&answer(204, true)), Outcome::Partial);
        // Only a successful answer can be partial.
        assert_eq!(target.classify(&answer(503, true)), Outcome::Http5xx);
        assert_eq!(target.classify(&answer(404, false)), Outcome::Http4xx);
        assert_eq!(target.classify(&Reply::TimedOut), Outcome::Timeout);
        assert_eq!(
            target.classify(&Reply::ConnectFailed("refused".into())),
            Outcome::ConnectFailed
        );
        assert_eq!(
            target.classify(&Reply::Failed("reset".into())),
            Outcome::Connection
        );
        assert_eq!(
            target.classify(&Reply::ClosedUnanswered("closed".into())),
            Outcome::Connection
        );
    }
}
