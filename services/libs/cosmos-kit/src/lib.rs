//! `cosmos-kit`: Cosmos DB access shared by the backends (the gateway does not link the
//! SDK): connection settings, the SDK client, and
//! turning the SDK's per-attempt diagnostics into client spans and metrics.
//!
//! The SDK retries 429s itself; it does not emit spans we can parent. After each
//! operation its diagnostics list every HTTP attempt with status, sub-status, charge,
//! session token (whose prefix is the partition key range id) and start/end instants.
//! [`CosmosTelemetry::record`] replays those attempts as spans at their real times, so a
//! 429 and the wait before its retry show as the gap they are.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use azure_core::credentials::Secret;
use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::options::{OperationOptionsBuilder, ThrottlingRetryOptionsBuilder};
use azure_data_cosmos::{AccountEndpoint, AccountReference, CosmosClient, RoutingStrategy};
use azure_data_cosmos_driver::diagnostics::DiagnosticsContext;
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{Context, KeyValue};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use dronelab_contract::{Service, DATABASE};
use service_kit::metrics::MetricsRegistry;
use service_kit::Telemetry;

/// The public key of the Cosmos DB emulator (also dronelab's emulator default).
pub const PUBLIC_EMULATOR_KEY: &str =
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";

/// Environment variables the Cosmos SDK reads itself: `AZURE_COSMOS_EMULATOR_HOST`
/// names an emulator host (other than localhost) whose `http://` endpoint it accepts.
pub const SDK_ENVIRONMENT: &[&str] = &["AZURE_COSMOS_EMULATOR_HOST"];

/// A secret that never appears in logs or `Debug` output.
#[derive(Clone)]
pub struct SecretString(String);

impl SecretString {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// [`PUBLIC_EMULATOR_KEY`], the local stack's key.
    pub fn public_emulator_key() -> Self {
        Self(PUBLIC_EMULATOR_KEY.to_owned())
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for SecretString {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            Err("must not be empty".into())
        } else {
            Ok(Self(s.trim().to_owned()))
        }
    }
}

/// Where the Cosmos account is and how the SDK retries throttled requests.
#[derive(Debug, Clone, clap::Args)]
pub struct CosmosArgs {
    /// Cosmos DB account endpoint.
    #[arg(
        long = "cosmos-endpoint",
        env = "COSMOS_ENDPOINT",
        default_value_t = format!("http://{}", Service::CosmosEmulator.default_listen())
    )]
    pub endpoint: String,
    /// Cosmos DB master key. Prefer the COSMOS_KEY environment variable (from a
    /// Kubernetes Secret, say) or --cosmos-key-file: a value on the command line is
    /// visible to every user in the process list.
    #[arg(long = "cosmos-key", env = "COSMOS_KEY", default_value = PUBLIC_EMULATOR_KEY,
          hide_default_value = true, hide_env_values = true)]
    pub key: SecretString,
    /// A file holding the Cosmos DB master key (e.g. a mounted Secret); wins over
    /// --cosmos-key.
    #[arg(long = "cosmos-key-file", env = "COSMOS_KEY_FILE", value_parser = key_from_file)]
    pub key_file: Option<SecretString>,
    /// Database holding the lab's containers.
    #[arg(
        long = "cosmos-database",
        env = "COSMOS_DATABASE",
        default_value = DATABASE
    )]
    pub database: String,
    /// Retries of a throttled (429) request before giving up (SDK default: 9).
    #[arg(long = "cosmos-max-retries", env = "COSMOS_MAX_RETRIES")]
    pub max_retries: Option<u32>,
    /// Longest total wait across 429 retries, in seconds (SDK default: 30).
    #[arg(
        long = "cosmos-max-retry-wait-secs",
        env = "COSMOS_MAX_RETRY_WAIT_SECS"
    )]
    pub max_retry_wait_secs: Option<u64>,
    /// The Azure region the service runs in (the SDK prefers the account's nearest).
    #[arg(
        long = "cosmos-region",
        env = "COSMOS_REGION",
        default_value = "South Central US"
    )]
    pub region: String,
}

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

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid Cosmos endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("cannot reach Cosmos DB at {endpoint}: {source}")]
    Client {
        endpoint: String,
        source: azure_data_cosmos::CosmosError,
    },
}

/// The key in `path` (surrounding whitespace and a final newline ignored).
fn key_from_file(path: &str) -> Result<SecretString, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    text.parse().map_err(|e| format!("{path}: the key {e}"))
}

impl CosmosArgs {
    /// The master key: from --cosmos-key-file if given, else --cosmos-key / COSMOS_KEY.
    pub fn key(&self) -> &SecretString {
        self.key_file.as_ref().unwrap_or(&self.key)
    }

    /// Builds the SDK client (reads the account once).
    pub async fn connect(&self) -> Result<CosmosClient, ConnectError> {
        let endpoint: AccountEndpoint =
            self.endpoint
                .parse()
                .map_err(|e: azure_data_cosmos::CosmosError| ConnectError::Endpoint {
                    endpoint: self.endpoint.clone(),
                    reason: e.to_string(),
                })?;
        let account = AccountReference::with_authentication_key(
            endpoint,
            Secret::from(self.key().expose().to_owned()),
        );
        let mut builder = CosmosClient::builder();
        if self.max_retries.is_some() || self.max_retry_wait_secs.is_some() {
            let mut retry = ThrottlingRetryOptionsBuilder::new();
            if let Some(n) = self.max_retries {
                retry = retry.with_max_retry_count(n);
            }
            if let Some(secs) = self.max_retry_wait_secs {
                retry = retry.with_max_retry_wait_time(Duration::from_secs(secs));
            }
            builder = builder.with_default_operation_options(
                OperationOptionsBuilder::new()
                    .with_throttling_retry_options(retry.build())
                    .build(),
            );
        }
        builder
            .build(
                account,
                RoutingStrategy::ProximityTo(self.region.clone().into()),
            )
            .await
            .map_err(|source| ConnectError::Client {
                endpoint: self.endpoint.clone(),
                source,
            })
    }
}

/// A container client that connects in the background, so a service starts serving (and
/// answers `/healthz`) at once and reports not ready — `/readyz` and its API answer 503 —
/// until Cosmos DB and the container answer. In Kubernetes the database, or the seed that
/// creates the containers, may come up after the service; exiting instead would put the
/// pod into a crash-loop back-off of up to five minutes.
pub struct LazyContainer {
    name: &'static str,
    client: std::sync::OnceLock<ContainerClient>,
    last_error: std::sync::Mutex<String>,
    connected: tokio::sync::Notify,
}

/// How long [`LazyContainer::connect`] waits for the first connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// First and longest pause between connection attempts.
const RECONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(200), Duration::from_secs(5));

impl LazyContainer {
    /// Starts connecting to `name` in the background; retries with backoff until it
    /// answers.
    pub fn connect_in_background(args: CosmosArgs, name: &'static str) -> Arc<Self> {
        let this = Arc::new(Self {
            name,
            client: std::sync::OnceLock::new(),
            last_error: std::sync::Mutex::new(format!("connecting to container {name}")),
            connected: tokio::sync::Notify::new(),
        });
        tokio::spawn(Self::keep_connecting(this.clone(), args));
        this
    }

    /// Connects now: the background connection, awaited for at most `timeout`.
    pub async fn connect(
        args: CosmosArgs,
        name: &'static str,
        timeout: Duration,
    ) -> Result<Arc<Self>, String> {
        let this = Self::connect_in_background(args, name);
        let in_time = {
            let connected = this.connected.notified();
            this.client.get().is_some() || tokio::time::timeout(timeout, connected).await.is_ok()
        };
        if in_time {
            Ok(this)
        } else {
            Err(this.last_error())
        }
    }

    async fn keep_connecting(self: Arc<Self>, args: CosmosArgs) {
        let mut backoff = RECONNECT_BACKOFF.0;
        for attempt in 1u64.. {
            match Self::open(&args, self.name).await {
                Ok(client) => {
                    tracing::info!(container = self.name, attempt, "connected to Cosmos DB");
                    let _ = self.client.set(client);
                    self.connected.notify_waiters();
                    return;
                }
                Err(e) => {
                    tracing::warn!(container = self.name, attempt, error = %e, "Cosmos DB not reachable yet; retrying");
                    if let Ok(mut last) = self.last_error.lock() {
                        *last = e;
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RECONNECT_BACKOFF.1);
        }
    }

    async fn open(args: &CosmosArgs, name: &str) -> Result<ContainerClient, String> {
        let client = args.connect().await.map_err(|e| e.to_string())?;
        client
            .database_client(&args.database)
            .container_client(name, None)
            .await
            .map_err(|e| format!("container {}/{name} is not reachable: {e}", args.database))
    }

    fn last_error(&self) -> String {
        self.last_error
            .lock()
            .map(|e| e.clone())
            .unwrap_or_else(|_| format!("connecting to container {}", self.name))
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The client, or 503 while not connected.
    pub fn get(&self) -> Result<&ContainerClient, BackendError> {
        self.client
            .get()
            .ok_or_else(|| BackendError::NotConnected(self.last_error()))
    }

    /// The service's readiness check (`/readyz`): [`Self::check_ready`].
    pub fn readiness(self: &Arc<Self>) -> service_kit::ReadinessCheck {
        let container = self.clone();
        Arc::new(move || {
            let container = container.clone();
            Box::pin(async move { container.check_ready().await })
        })
    }

    /// Readiness: connected, and the container still answers.
    pub async fn check_ready(&self) -> Result<(), String> {
        let container = self.get().map_err(|e| e.to_string())?;
        container
            .read(None)
            .await
            .map(|_| ())
            .map_err(|e| format!("container {} is not readable: {e}", self.name))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CosmosLabels {
    pub operation: String,
    pub container: String,
    pub status: u16,
    /// `x-ms-substatus` (e.g. 3200: the partition's RU budget is spent), 0 when absent.
    pub sub_status: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
    pub container: String,
}

/// Spans and metrics for Cosmos attempts.
#[derive(Clone)]
pub struct CosmosTelemetry {
    telemetry: Telemetry,
    requests: Family<CosmosLabels, Counter>,
    request_units: Family<OperationLabels, Histogram>,
    calls_per_operation: Family<OperationLabels, Histogram>,
}

/// What one logical operation cost, summed over its attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OperationCost {
    pub attempts: u32,
    pub throttled: u32,
    pub request_units: f64,
}

impl OperationCost {
    pub fn add(&mut self, other: OperationCost) {
        self.attempts += other.attempts;
        self.throttled += other.throttled;
        self.request_units += other.request_units;
    }
}

/// Maps the SDK's `Instant`s onto wall-clock time for span timestamps.
#[derive(Debug, Clone, Copy)]
pub struct ClockAnchor {
    instant: Instant,
    system: SystemTime,
}

impl ClockAnchor {
    pub fn now() -> Self {
        Self {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    pub fn to_system(self, at: Instant) -> SystemTime {
        if at >= self.instant {
            self.system + (at - self.instant)
        } else {
            self.system - (self.instant - at)
        }
    }
}

impl CosmosTelemetry {
    pub fn new(telemetry: Telemetry, registry: &MetricsRegistry) -> Self {
        let this = Self {
            telemetry,
            requests: Family::default(),
            request_units: Family::new_with_constructor(|| {
                Histogram::new([1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 250.0])
            }),
            calls_per_operation: Family::new_with_constructor(|| {
                Histogram::new([1.0, 2.0, 3.0, 5.0, 9.0, 10.0, 12.0, 15.0, 20.0, 40.0])
            }),
        };
        registry.register(
            "cosmos_requests",
            "Cosmos DB HTTP attempts by operation, container, status (429 = throttled) and sub-status",
            this.requests.clone(),
        );
        registry.register(
            "cosmos_request_units",
            "Request units charged per logical Cosmos operation",
            this.request_units.clone(),
        );
        registry.register(
            "cosmos_calls_per_operation",
            "Cosmos HTTP attempts per logical operation (fan-out and retries)",
            this.calls_per_operation.clone(),
        );
        this
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Records every attempt in `diagnostics` as a client span under `parent` and in
    /// the metrics; returns what the attempts cost.
    pub fn record(
        &self,
        parent: &Context,
        anchor: ClockAnchor,
        diagnostics: Option<&Arc<DiagnosticsContext>>,
        operation: &str,
        container: &str,
    ) -> OperationCost {
        let mut cost = OperationCost::default();
        let Some(diagnostics) = diagnostics else {
            return cost;
        };
        let tracer = self.telemetry.tracer();
        let requests = diagnostics.requests();
        let mut attempts_per_range: std::collections::HashMap<String, i64> = Default::default();
        for attempt in requests.iter() {
            let status = u16::from(attempt.status().status_code());
            let sub_status = attempt.status().sub_status().map(|s| i64::from(s.value()));
            let charge = attempt.request_charge().value();
            // Session tokens are "<partition key range id>:<token>".
            let range = attempt
                .session_token()
                .and_then(|t| t.split_once(':'))
                .map(|(range, _)| range.to_owned())
                .unwrap_or_default();
            let number = attempts_per_range.entry(range.clone()).or_insert(0);
            *number += 1;
            let start = anchor.to_system(attempt.started_at());
            let end = anchor.to_system(attempt.completed_at().unwrap_or_else(|| {
                attempt.started_at() + Duration::from_millis(attempt.duration_ms())
            }));
            let mut attributes = vec![
                KeyValue::new("db.system.name", "azure.cosmosdb"),
                KeyValue::new("db.operation.name", operation.to_owned()),
                KeyValue::new("db.collection.name", container.to_owned()),
                KeyValue::new("db.response.status_code", i64::from(status).to_string()),
                KeyValue::new("azure.cosmosdb.operation.request_charge", charge),
                KeyValue::new("azure.cosmosdb.attempt", *number),
                KeyValue::new(
                    "azure.cosmosdb.execution_context",
                    attempt.execution_context().as_str().to_owned(),
                ),
            ];
            if let Some(sub) = sub_status {
                attributes.push(KeyValue::new(
                    "azure.cosmosdb.response.sub_status_code",
                    sub,
                ));
            }
            if !range.is_empty() {
                attributes.push(KeyValue::new(
                    "azure.cosmosdb.partition_key_range_id",
                    range,
                ));
            }
            let mut span = tracer
                .span_builder(format!("{operation} {container}"))
                .with_kind(SpanKind::Client)
                .with_start_time(start)
                .with_attributes(attributes)
                .start_with_context(tracer, parent);
            if status == 429 {
                span.set_status(Status::error("throttled (429): request rate is large"));
                cost.throttled += 1;
            } else if status >= 400 && status != 404 {
                span.set_status(Status::error(format!("HTTP {status}")));
            }
            span.end_with_timestamp(end);
            cost.attempts += 1;
            cost.request_units += charge;
            self.requests
                .get_or_create(&CosmosLabels {
                    operation: operation.to_owned(),
                    container: container.to_owned(),
                    status,
                    sub_status: sub_status.and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
                })
                .inc();
        }
        cost
    }

    /// Records one logical operation's totals (RU and calls per operation).
    pub fn record_operation(&self, operation: &str, container: &str, cost: OperationCost) {
        let labels = OperationLabels {
            operation: operation.to_owned(),
            container: container.to_owned(),
        };
        self.request_units
            .get_or_create(&labels)
            .observe(cost.request_units);
        self.calls_per_operation
            .get_or_create(&labels)
            .observe(f64::from(cost.attempts));
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
        assert_eq!(
            BackendError::Cosmos("boom".into()).into_response().status(),
            502
        );
    }

    #[test]
    fn the_key_never_shows() {
        let key: SecretString = " s3cret ".parse().expect("a key");
        assert_eq!(key.expose(), "s3cret");
        assert_eq!(format!("{key:?}"), "<redacted>");
        assert!(" ".parse::<SecretString>().is_err());
    }

    #[test]
    fn a_key_file_wins_over_the_key() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cosmos: CosmosArgs,
        }
        let dir = std::env::temp_dir().join(format!("cosmos-kit-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("key");
        std::fs::write(&file, "from-the-file\n").expect("write");
        let path = file.to_string_lossy().into_owned();
        let cli = Cli::try_parse_from(["x", "--cosmos-key-file", &path]).expect("parses");
        assert_eq!(cli.cosmos.key().expose(), "from-the-file");
        let cli = Cli::try_parse_from(["x"]).expect("parses");
        assert_eq!(cli.cosmos.key().expose(), PUBLIC_EMULATOR_KEY);
        let missing = Cli::try_parse_from(["x", "--cosmos-key-file", "/no/such/key"]);
        let error = missing.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("cannot read /no/such/key"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn attempt_instants_map_onto_wall_clock_time() {
        let anchor = ClockAnchor::now();
        let later = anchor.instant + Duration::from_millis(250);
        let earlier = anchor.instant - Duration::from_millis(100);
        assert_eq!(
            anchor.to_system(later),
            anchor.system + Duration::from_millis(250)
        );
        assert_eq!(
            anchor.to_system(earlier),
            anchor.system - Duration::from_millis(100)
        );
    }
}
