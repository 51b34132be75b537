//! `cosmos-emulator`: a local Cosmos DB (SQL API) that the official SDKs talk to
//! unchanged, modelling what the dronelab study is about: physical partitions,
//! per-partition RU budgets, 429 throttling, request charges and latency.
//!
//! Two parts, each with one job:
//!
//! - the **engine** (crate `cosmos-engine`, `engine/`): the store, the SQL subset,
//!   effective partition keys, the throughput model and the counters, with no HTTP;
//! - the **HTTP surface** ([`http`]): the Cosmos REST protocol, its authentication, the
//!   control and data planes over the engine, and the admin routes.
//!
//! Around them: [`config`] (the command line), [`state`] (what every handler shares),
//! `metrics` (the store's counters as Prometheus metrics),
//! and [`main`] / [`InProcess`] (running it as a process of its own or inside another). The crate is a library (`build_app`, `run`)
//! so tests start it in-process on `127.0.0.1:0`, plus a thin binary. See README.md for
//! the protocol subset, the SQL subset and the calibration of the throughput model.

pub mod config;
mod http;
mod metrics;
mod process;
pub mod state;

pub use config::Config;
pub use cosmos_engine::stats::{
    ContainerStats, DatabaseStats, PartitionSnapshot, PartitionStatsView, Stats,
};
pub use http::admin::ModelConfig;
pub use http::auth::ADMIN_KEY_HEADER;
pub use http::protocol::MAX_JSON_NESTING;
pub use http::{build_app, run};
pub use process::{main, InProcess};
pub use state::AppState;
