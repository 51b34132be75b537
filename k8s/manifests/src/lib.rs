//! `k8s-manifests`: dronelab's Kubernetes objects as plain data.
//!
//! - [`overlay`]: a stage's overlay rendered with `kubectl kustomize` into the
//!   namespaced objects the tuning run applies;
//! - [`loadgen_job`]: the load generators' Indexed Job, whose pods each drive their
//!   shard of a stage's load (`k8s/components/loadgen/job.yaml` is its default);
//! - [`access`]: every call the tuning run's cluster mode makes to the API server, as
//!   the RBAC rules it needs (`k8s/rbac/tune.yaml` grants exactly those).

pub mod access;
pub mod loadgen_job;
pub mod overlay;

pub use loadgen_job::LoadgenJob;
