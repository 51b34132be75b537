//! The tuning run on a Kubernetes cluster: each stage's overlay server-side applied
//! through the API, the rollout of utilization-service awaited, the load driven from an
//! Indexed Job inside the cluster, and the pods' CPU and memory read from the metrics
//! API. The objects themselves are plain data in `k8s-manifests`; what the run decides
//! on is plain data here too (`rollout`); talking to the API server stays in `api`.

mod api;
pub mod metrics;
pub mod rollout;

pub use api::{Cluster, ClusterError, PortForward};
