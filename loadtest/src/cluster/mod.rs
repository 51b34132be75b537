//! The tuning run on a Kubernetes cluster: each stage's overlay server-side applied
//! through the API, the rollout of utilization-service awaited, the load driven from an
//! Indexed Job inside the cluster, and the pods' CPU and memory read from the metrics
//! API. The objects themselves are plain data in `k8s-manifests`; what the run decides
//! on is plain data here too (`pods`, `prune`, `rollout`, `schedule`; the calls and
//! the RBAC rules they need are in `k8s_manifests::access`);
//! talking to the API server stays in `api`.

mod api;
pub mod metrics;
pub mod pods;
pub mod prune;
pub mod rollout;
pub mod schedule;

pub use api::{Cluster, ClusterError, PortForward, FIELD_MANAGER};
pub use schedule::common_start;
