//! `loadgen`: drives HTTP/1.1 load at one target and records what came back.
//!
//! - [`profile`]: how much load over time: closed-loop users (stepped or constant) or an
//!   open-loop arrival rate;
//! - [`target`]: where the requests go and what each one asks for ([`Requests`]);
//! - [`run`]: the load loops; latencies counted from each request's intended start in the
//!   open loop (no coordinated omission); every run bounded by its duration;
//! - [`connection`]: keep-alive connections, each with its I/O in a task of its own;
//! - [`record`]: a run's result per interval (outcomes, users, HDR histograms) and in
//!   total, bounded whatever the run's length, checked when read, mergeable;
//! - [`schedule`]: the open loop's request times, taken in order by its lanes;
//! - `busy`: how busy the runtime is, which the open loop asks before it adds a lane;
//! - `pace_timer`: the open loop's pacer timer, precise to microseconds on Linux;
//! - [`shard`]: one generator's exact part of a profile that several drive together;
//! - [`start`]: when a shard starts, on time or late, given the common start.
//!
//! It knows nothing of the system under load: what a request asks for comes from the
//! caller's [`Requests`], and a 2xx answer counts as partial only if the caller names a
//! marker for that ([`Target::counting_partial`]).

mod busy;
pub mod connection;
mod pace_timer;
pub mod profile;
pub mod record;
pub mod run;
pub mod schedule;
pub mod shard;
pub mod start;
pub mod target;

/// The URI type of [`Requests`]: hyper's.
pub use hyper::Uri;
pub use profile::Profile;
pub use record::{IntervalSample, LoadRecord, LoadSummary, MergeError, Outcome, Percentiles};
pub use run::{run, run_recorded, run_recorded_watched, unix_ms, RunFuture, RunOptions, StopCheck};
pub use shard::Shard;
pub use target::{Requests, Target};
