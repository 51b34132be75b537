//! `k8s-manifests`: dronelab's Kubernetes objects as plain data.
//!
//! - [`overlay`]: a stage's overlay rendered with `kubectl kustomize` into the
//!   namespaced objects the tuning run applies;
//! - [`loadgen_job`]: the load generators' Indexed Job, whose pods each drive their
//!   shard of a stage's load (`k8s/components/loadgen/job.yaml` is its default).

pub mod loadgen_job;
pub mod overlay;

pub use loadgen_job::LoadgenJob;
