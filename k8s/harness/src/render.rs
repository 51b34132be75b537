//! Rendering an overlay with `kubectl kustomize` (no cluster needed) and reading the
//! result as typed Kubernetes objects.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("kubectl not found: install it, or set KUBECTL to its path")]
    NoKubectl,
    /// Names the command and the directory.
    #[error("{0}")]
    Kustomize(String),
    #[error("the rendered YAML of {dir} does not parse: {reason}")]
    Yaml { dir: String, reason: String },
    #[error("{kind}/{name} in {dir}: {reason}")]
    Object {
        dir: String,
        kind: String,
        name: String,
        reason: String,
    },
}

/// One rendered overlay.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    pub deployments: Vec<Deployment>,
    pub stateful_sets: Vec<StatefulSet>,
    pub services: Vec<Service>,
    pub config_maps: Vec<ConfigMap>,
    pub secrets: Vec<Secret>,
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    pub network_policies: Vec<NetworkPolicy>,
    /// Kinds the harness only counts (ServiceAccount, HorizontalPodAutoscaler, …), as
    /// `(kind, name)`.
    pub others: Vec<(String, String)>,
    /// Lines of YAML `kubectl kustomize` printed.
    pub lines: usize,
}

/// `$KUBECTL`, else `kubectl` on the `PATH`.
pub fn kubectl() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    })
}

/// The YAML `kubectl kustomize dir` prints (rendered as `loadtest tune --cluster`
/// renders a stage).
pub fn render_yaml(dir: &Path) -> Result<String, RenderError> {
    kubectl().ok_or(RenderError::NoKubectl)?;
    k8s_manifests::overlay::render(dir).map_err(RenderError::Kustomize)
}

/// Renders `dir` and reads the objects.
pub fn render(dir: &Path) -> Result<Manifests, RenderError> {
    parse(&dir.display().to_string(), &render_yaml(dir)?)
}

/// Reads a multi-document YAML stream of Kubernetes objects.
pub fn parse(dir: &str, yaml: &str) -> Result<Manifests, RenderError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| RenderError::Yaml {
            dir: dir.to_owned(),
            reason: e.to_string(),
        })?;
    let mut manifests = Manifests {
        lines: yaml.lines().count(),
        ..Manifests::default()
    };
    for mut document in documents {
        // Like the API server (Go's base64), ignore the line breaks kustomize puts into
        // long Secret values.
        let is_secret = document["kind"] == "Secret";
        if let Some(data) = document.get_mut("data").and_then(Value::as_object_mut) {
            for value in data.values_mut().filter(|_| is_secret) {
                if let Some(text) = value.as_str() {
                    *value = Value::String(text.split_whitespace().collect());
                }
            }
        }
        let kind = document["kind"].as_str().unwrap_or_default().to_owned();
        let name = document["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let object_error = |e: serde_json::Error| RenderError::Object {
            dir: dir.to_owned(),
            kind: kind.clone(),
            name: name.clone(),
            reason: e.to_string(),
        };
        match kind.as_str() {
            "Deployment" => manifests
                .deployments
                .push(serde_json::from_value(document).map_err(object_error)?),
            "StatefulSet" => manifests
                .stateful_sets
                .push(serde_json::from_value(document).map_err(object_error)?),
            "Service" => manifests
                .services
                .push(serde_json::from_value(document).map_err(object_error)?),
            "ConfigMap" => manifests
                .config_maps
                .push(serde_json::from_value(document).map_err(object_error)?),
            "Secret" => manifests
                .secrets
                .push(serde_json::from_value(document).map_err(object_error)?),
            "PodDisruptionBudget" => manifests
                .pod_disruption_budgets
                .push(serde_json::from_value(document).map_err(object_error)?),
            "NetworkPolicy" => manifests
                .network_policies
                .push(serde_json::from_value(document).map_err(object_error)?),
            _ => manifests.others.push((kind, name)),
        }
    }
    Ok(manifests)
}

impl Manifests {
    pub fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
    }

    pub fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    }

    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    }

    /// How many objects the render holds.
    pub fn count(&self) -> usize {
        self.deployments.len()
            + self.stateful_sets.len()
            + self.services.len()
            + self.config_maps.len()
            + self.secrets.len()
            + self.pod_disruption_budgets.len()
            + self.network_policies.len()
            + self.others.len()
    }
}
