//! The tuning run on a Kubernetes cluster: each stage's overlay server-side applied
//! through the API, the rollout of utilization-service awaited, and the load driven from
//! an Indexed Job inside the cluster. What the run decides on is plain data
//! (`rollout`, `loadgen`, `manifests`); talking to the API server stays in `api`.

mod api;
pub mod loadgen;
pub mod manifests;
pub mod metrics;
pub mod rollout;

pub use api::{Cluster, ClusterError, PortForward};
