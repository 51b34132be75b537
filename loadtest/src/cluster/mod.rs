//! The tuning run on a Kubernetes cluster. What is built here is plain data (the load
//! generators' Job); talking to the API server stays behind this module's boundary.

pub mod loadgen;
