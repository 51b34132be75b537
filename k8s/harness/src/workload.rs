//! Deployments and StatefulSets as one thing: a pod template run `replicas` times, and
//! each container's environment resolved the way the kubelet resolves it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use sha2::{Digest, Sha256};

use crate::render::Manifests;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

/// A Deployment or a StatefulSet.
#[derive(Debug, Clone)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub selector: BTreeMap<String, String>,
    pub replicas: i32,
    pub template: PodTemplateSpec,
    /// The names of a StatefulSet's volume claim templates.
    pub volume_claims: Vec<String>,
}

/// The namespace a render without one is applied to.
pub const DEFAULT_NAMESPACE: &str = "default";

impl Manifests {
    /// Every Deployment and StatefulSet.
    pub fn workloads(&self) -> Vec<Workload> {
        let deployments = self.deployments.iter().filter_map(|d| {
            let spec = d.spec.as_ref()?;
            Workload::new(
                WorkloadKind::Deployment,
                &d.metadata,
                &spec.selector,
                spec.replicas,
                &spec.template,
                Vec::new(),
            )
        });
        let stateful_sets = self.stateful_sets.iter().filter_map(|s| {
            let spec = s.spec.as_ref()?;
            let claims = spec
                .volume_claim_templates
                .iter()
                .flatten()
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            Workload::new(
                WorkloadKind::StatefulSet,
                &s.metadata,
                &spec.selector,
                spec.replicas,
                &spec.template,
                claims,
            )
        });
        deployments.chain(stateful_sets).collect()
    }
}

fn namespace(ns: Option<&String>) -> String {
    ns.cloned().unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}

impl Workload {
    fn new(
        kind: WorkloadKind,
        metadata: &ObjectMeta,
        selector: &LabelSelector,
        replicas: Option<i32>,
        template: &PodTemplateSpec,
        volume_claims: Vec<String>,
    ) -> Option<Self> {
        Some(Self {
            kind,
            name: metadata.name.clone()?,
            namespace: namespace(metadata.namespace.as_ref()),
            labels: metadata.labels.clone().unwrap_or_default(),
            selector: selector.match_labels.clone().unwrap_or_default(),
            replicas: replicas.unwrap_or(1),
            template: template.clone(),
            volume_claims,
        })
    }

    pub fn pod_spec(&self) -> Option<&PodSpec> {
        self.template.spec.as_ref()
    }

    pub fn containers(&self) -> &[Container] {
        self.pod_spec().map_or(&[], |s| s.containers.as_slice())
    }

    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }

    /// Whether a Service selector picks this workload's pods.
    pub fn selected_by(&self, selector: &BTreeMap<String, String>) -> bool {
        let labels = self.pod_labels();
        !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    /// A hash of the pod template, as a Deployment's `pod-template-hash`: it changes when
    /// anything in the template changes, a generated ConfigMap's name included.
    pub fn template_hash(&self) -> String {
        let json = serde_json::to_vec(&self.template).unwrap_or_default();
        let digest = Sha256::digest(&json);
        digest.iter().take(5).map(|b| format!("{b:02x}")).collect()
    }

    /// The pod name of replica `index`: `<name>-<template hash>-<index>` for a
    /// Deployment (Kubernetes adds a random suffix instead of the index), `<name>-<index>`
    /// for a StatefulSet.
    pub fn pod_name(&self, index: i32) -> String {
        match self.kind {
            WorkloadKind::Deployment => format!("{}-{}-{index}", self.name, self.template_hash()),
            WorkloadKind::StatefulSet => format!("{}-{index}", self.name),
        }
    }
}

/// A container's environment as the kubelet builds it: `envFrom` sources in order, then
/// `env` in order (a later name replaces an earlier one), ConfigMap and Secret keys
/// looked up in the render, the downward API filled from the pod, and `$(NAME)` in a
/// value replaced by a variable defined before it (`$$` escapes).
pub fn resolve_env(
    manifests: &Manifests,
    workload: &Workload,
    container: &Container,
    pod_name: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, name: String, value: String| match env
        .iter_mut()
        .find(|(n, _)| *n == name)
    {
        Some(slot) => slot.1 = value,
        None => env.push((name, value)),
    };
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        if let Some(cm) = &source.config_map_ref {
            let map = manifests
                .config_map(&cm.name)
                .ok_or_else(|| format!("envFrom ConfigMap {} is not in the render", cm.name))?;
            for (k, v) in map.data.iter().flatten() {
                set(&mut env, format!("{prefix}{k}"), v.clone());
            }
        }
        if let Some(secret) = &source.secret_ref {
            let data = secret_data(manifests, &secret.name)?;
            for (k, v) in data {
                set(&mut env, format!("{prefix}{k}"), v);
            }
        }
    }
    for var in container.env.iter().flatten() {
        // An optional key that is absent leaves the variable unset.
        if let Some(value) = env_value(manifests, workload, pod_name, var, &env)? {
            set(&mut env, var.name.clone(), value);
        }
    }
    Ok(env)
}

fn env_value(
    manifests: &Manifests,
    workload: &Workload,
    pod_name: &str,
    var: &EnvVar,
    defined: &[(String, String)],
) -> Result<Option<String>, String> {
    if let Some(value) = &var.value {
        return Ok(Some(expand(value, defined)));
    }
    let Some(source) = &var.value_from else {
        return Ok(Some(String::new()));
    };
    let missing = |what: &str, name: &str, key: &str, optional: Option<bool>| {
        if optional == Some(true) {
            Ok(None)
        } else {
            Err(format!("{}: {what} key {name}/{key} not found", var.name))
        }
    };
    if let Some(key) = &source.config_map_key_ref {
        let value = manifests
            .config_map(&key.name)
            .and_then(|cm| cm.data.as_ref()?.get(&key.key).cloned());
        return match value {
            Some(v) => Ok(Some(v)),
            None => missing("ConfigMap", &key.name, &key.key, key.optional),
        };
    }
    if let Some(key) = &source.secret_key_ref {
        return match secret_data(manifests, &key.name)?.remove(&key.key) {
            Some(v) => Ok(Some(v)),
            None => missing("Secret", &key.name, &key.key, key.optional),
        };
    }
    if let Some(field) = &source.field_ref {
        return downward(workload, pod_name, &field.field_path)
            .map(Some)
            .ok_or_else(|| format!("{}: unsupported fieldRef {}", var.name, field.field_path));
    }
    Err(format!("{}: unsupported valueFrom", var.name))
}

/// The downward API fields dronelab uses.
fn downward(workload: &Workload, pod_name: &str, path: &str) -> Option<String> {
    match path {
        "metadata.name" => Some(pod_name.to_owned()),
        "metadata.namespace" => Some(workload.namespace.clone()),
        _ => {
            let label = path.strip_prefix("metadata.labels['")?.strip_suffix("']")?;
            workload.pod_labels().get(label).cloned()
        }
    }
}

/// A Secret's data as text (`data` is base64, decoded by the typed object already).
fn secret_data(manifests: &Manifests, name: &str) -> Result<BTreeMap<String, String>, String> {
    let secret = manifests
        .secret(name)
        .ok_or_else(|| format!("Secret {name} is not in the render"))?;
    let mut out: BTreeMap<String, String> = secret.string_data.clone().unwrap_or_default();
    for (k, v) in secret.data.iter().flatten() {
        out.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    Ok(out)
}

/// Kubernetes' `$(NAME)` expansion: a defined name is replaced, an undefined one stays
/// as written, and `$$` is a literal `$`.
pub fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = tail.strip_prefix("$(").and_then(|t| t.split_once(')'))
        {
            match defined.iter().find(|(n, _)| n == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = after;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Names referenced as `$(NAME)` in the container's `env` values.
pub fn referenced_names(container: &Container) -> Vec<String> {
    let mut names = Vec::new();
    for value in container
        .env
        .iter()
        .flatten()
        .filter_map(|v| v.value.as_deref())
    {
        let mut rest = value;
        while let Some(at) = rest.find("$(") {
            let tail = &rest[at + 2..];
            match tail.split_once(')') {
                Some((name, after)) => {
                    names.push(name.to_owned());
                    rest = after;
                }
                None => break,
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn expansion_follows_kubernetes() {
        let defined = vec![("A".to_owned(), "x".to_owned())];
        assert_eq!(expand("a=$(A),b=$(B)", &defined), "a=x,b=$(B)");
        assert_eq!(expand("$$(A) costs $5", &defined), "$(A) costs $5");
        assert_eq!(expand("$(A", &defined), "$(A");
    }
}
