//! `local-stack`: dronelab on one machine, each component its own OS process.
//!
//! - [`stack`]: starts the trace viewer, the emulator, the backends and the gateway on
//!   free loopback ports, waits until each is ready, restarts utilization-service with
//!   new query knobs (as a rollout would), and never leaves a child behind;
//! - [`component`]: the `component <name>` subcommand a binary using [`Stack`] must
//!   dispatch: each child is that binary re-executed to run one component, exactly as
//!   the component's own binary starts it;
//! - [`resources`]: CPU (cores, busiest thread) and memory of every component and of the
//!   caller itself, from `/proc` every second, and the figures a stage reports.

pub mod component;
pub mod resources;
pub mod stack;

pub use stack::{Component, Stack, StackError, PROMETHEUS_TARGETS, SAMPLER};
