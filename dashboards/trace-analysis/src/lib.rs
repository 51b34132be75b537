//! `trace-analysis`: reading Jaeger-shaped traces and judging them.
//!
//! - [`jaeger`]: the Jaeger query API's JSON model;
//! - [`summary`]: one trace in numbers (per service time, Cosmos attempts, 429s, retry
//!   waits, fan-out concurrency, partition key ranges); the trace viewer serves it;
//! - [`critical_path`]: a trace's critical path (as Jaeger UI computes it) and self
//!   times;
//! - [`trace_compare`]: a trace's statistics table, and two traces side by side;
//! - [`stage_path`]: critical paths summed over a window of traces (a stage): each
//!   operation's share of the end-to-end time;
//! - [`diagnosis`]: an operation's traces judged by the study's rules (throttling, serial
//!   fan-out, cross-partition cost), with evidence and the next step;
//! - [`failure`]: which entry traces failed, and the call that failed in them;
//! - [`consistency`]: the sample's figures beside the stage's counters;
//! - `client` (feature `client`): reads traces from any Jaeger-compatible query API and
//!   diagnoses a window of them; `loadtest diagnose` and the tuning run use it.

#[cfg(feature = "client")]
pub mod client;
pub mod consistency;
pub mod critical_path;
pub mod diagnosis;
pub mod evidence;
pub mod failure;
pub mod jaeger;
pub mod rules;
pub mod stage_path;
pub mod summary;
pub mod trace_compare;
