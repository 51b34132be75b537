//! A container client that connects in the background.

use std::sync::Arc;
use std::time::Duration;

use azure_data_cosmos::clients::ContainerClient;

use crate::{BackendError, CosmosArgs};

/// Builds a client and opens container `name` with it: the account and container
/// metadata reads, and new connections. A service does this once ([`LazyContainer`]);
/// doing it per request is the Improper Instantiation antipattern.
pub async fn open_container(args: &CosmosArgs, name: &str) -> Result<ContainerClient, String> {
    let client = args.connect().await.map_err(|e| e.to_string())?;
    client
        .database_client(&args.database)
        .container_client(name, None)
        .await
        .map_err(|e| format!("container {}/{name} is not reachable: {e}", args.database))
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
            match open_container(&args, self.name).await {
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
