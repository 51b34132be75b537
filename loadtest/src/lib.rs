//! `loadtest`: dronelab's main job, the command line over the lab's parts. It seeds the
//! data (`dronelab-study`), drives load (`loadgen`), starts the local stack
//! (`local-stack`) or works on a cluster (`cluster`, with `k8s-manifests`; only with the
//! `cluster` feature), runs the study's tuning stages (`tune`), names each stage's
//! bottleneck from its traces (`trace-analysis`), and writes the report
//! (`dronelab-report`).

pub mod cli;
pub mod client_url;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod cpu_burner;
pub mod criteria;
pub mod diagnose;
pub mod emulator;
pub mod promtext;
pub mod tune;
