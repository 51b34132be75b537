//! `cosmos-emulator`: a local Cosmos DB (SQL API) that the official `azure_data_cosmos`
//! SDK talks to unchanged, modelling what the dronelab study is about: physical
//! partitions, per-partition RU budgets, 429 throttling, request charges and latency.
//!
//! The crate is a library (`build_app`, `run`) so tests start it in-process on
//! `127.0.0.1:0`, plus a thin binary. See README.md for the protocol subset, the SQL
//! subset and the calibration of the throughput model.

mod admin;
mod api;
mod auth;
pub mod config;
mod controlplane;
mod dataplane;
mod epk;
mod error;
mod headers;
mod protocol;
mod serve_main;
mod server;
pub mod sql;
mod state;
mod stats;
mod store;
pub mod throughput;

pub use admin::{ContainerStats, DatabaseStats, ModelConfig, PartitionStatsView, Stats};
pub use auth::ADMIN_KEY_HEADER;
pub use config::{Config, PUBLIC_EMULATOR_KEY};
pub use protocol::MAX_JSON_NESTING;
pub use serve_main::main;
pub use server::{build_app, run};
pub use state::AppState;
pub use stats::PartitionSnapshot;
