//! Test helpers: start the emulator on `127.0.0.1:0` and build real SDK clients for it.
#![allow(dead_code)]

pub mod tool;

use std::net::SocketAddr;

use azure_core::credentials::Secret;
use azure_data_cosmos::options::{OperationOptionsBuilder, ThrottlingRetryOptionsBuilder};
use azure_data_cosmos::{AccountEndpoint, AccountReference, CosmosClient, RoutingStrategy};
use cosmos_emulator::{AppState, Config, Stats};
use dronelab_contract::PUBLIC_EMULATOR_KEY;
use tokio::sync::oneshot;

pub struct Emulator {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Emulator {
    pub async fn start(config: Config) -> Self {
        let state = AppState::new(&config).expect("emulator state");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            cosmos_emulator::run(listener, state, async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        });
        Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub async fn client(&self) -> CosmosClient {
        client_for(&self.endpoint(), PUBLIC_EMULATOR_KEY, None).await
    }

    /// A client that surfaces the first 429 instead of retrying it.
    pub async fn client_without_retries(&self) -> CosmosClient {
        client_for(&self.endpoint(), PUBLIC_EMULATOR_KEY, Some(0)).await
    }

    pub async fn stats(&self) -> Stats {
        let body = reqwest::get(format!("{}_emulator/stats", self.endpoint()))
            .await
            .expect("stats request")
            .text()
            .await
            .expect("stats body");
        serde_json::from_str(&body).expect("stats json")
    }

    pub async fn reset_stats(&self) {
        reqwest::Client::new()
            .post(format!("{}_emulator/stats/reset", self.endpoint()))
            .header(cosmos_emulator::ADMIN_KEY_HEADER, PUBLIC_EMULATOR_KEY)
            .send()
            .await
            .expect("reset")
            .error_for_status()
            .expect("reset ok");
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

pub async fn client_for(
    endpoint: &str,
    key: &str,
    max_throttle_retries: Option<u32>,
) -> CosmosClient {
    let endpoint: AccountEndpoint = endpoint.parse().expect("endpoint");
    let account = AccountReference::with_authentication_key(endpoint, Secret::from(key.to_owned()));
    let mut builder = CosmosClient::builder();
    if let Some(retries) = max_throttle_retries {
        builder = builder.with_default_operation_options(
            OperationOptionsBuilder::new()
                .with_throttling_retry_options(
                    ThrottlingRetryOptionsBuilder::new()
                        .with_max_retry_count(retries)
                        .build(),
                )
                .build(),
        );
    }
    builder
        .build(
            account,
            RoutingStrategy::ProximityTo("South Central US".into()),
        )
        .await
        .expect("client builds against the emulator")
}

/// In-memory emulator with `partitions` per container, throttling on and latency off.
pub fn config(partitions: u16) -> Config {
    let mut config = Config::for_tests();
    config.partitions = partitions;
    config
}
