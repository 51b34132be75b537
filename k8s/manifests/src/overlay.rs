//! A stage's overlay as the objects to apply. Rendering shells out to `kubectl
//! kustomize`: kustomize has no Rust implementation, rendering needs no cluster, and the
//! overlays are the ones users apply with `kubectl apply -k`, so both paths render them
//! the same way. Everything sent to the API server goes through kube, not kubectl.

use std::path::Path;
use std::process::Command;

use kube_core::DynamicObject;

/// `kubectl kustomize <overlay>` (`KUBECTL` names another kubectl).
pub fn render(overlay: &Path) -> Result<String, String> {
    let kubectl = std::env::var("KUBECTL")
        .ok()
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| "kubectl".into());
    let output = Command::new(&kubectl)
        .arg("kustomize")
        .arg(overlay)
        .output()
        .map_err(|e| format!("{kubectl} kustomize {}: {e}", overlay.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{kubectl} kustomize {}: {}",
            overlay.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| e.to_string())
}

/// The namespaced objects of a rendered overlay. The Namespace itself is cluster-scoped
/// and created once by whoever installs dronelab (`kubectl apply -k`), so a tuning run
/// needs no cluster-wide rights.
pub fn objects(yaml: &str) -> Result<Vec<DynamicObject>, String> {
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| format!("the rendered YAML: {e}"))?;
    documents
        .into_iter()
        .filter(|d| !d.is_null())
        .filter(|d| d["kind"] != "Namespace")
        .map(|d| serde_json::from_value(d).map_err(|e| format!("a rendered object: {e}")))
        .collect()
}

/// Puts a rendered object where it is applied: a namespaced one into `namespace` (the
/// overlays render `dronelab`; a run in another namespace would otherwise be refused
/// with a namespace mismatch), a cluster-scoped one (`None`) into none.
pub fn place(object: &mut DynamicObject, namespace: Option<&str>) {
    object.metadata.namespace = namespace.map(str::to_owned);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_objects_only_with_their_types() {
        let yaml = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dronelab\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: utilization-query-abc\n  namespace: dronelab\ndata:\n  UTILIZATION_QUERY_PARALLELISM: \"-1\"\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: utilization-service\nspec: {}\n";
        let objects = objects(yaml).expect("objects");
        let kinds: Vec<String> = objects
            .iter()
            .filter_map(|o| {
                o.types
                    .as_ref()
                    .map(|t| format!("{}/{}", t.api_version, t.kind))
            })
            .collect();
        assert_eq!(kinds, ["v1/ConfigMap", "apps/v1/Deployment"]);
        assert_eq!(
            objects[0].data["data"]["UTILIZATION_QUERY_PARALLELISM"],
            "-1"
        );
        assert!(super::objects("kind: [").is_err());
    }

    #[test]
    fn objects_are_placed_in_the_run_namespace_or_none() {
        let yaml = "apiVersion: v1\nkind: Service\nmetadata:\n  name: gateway\n  namespace: dronelab\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: reader\n  namespace: dronelab\n";
        let mut objects = objects(yaml).expect("objects");
        place(&mut objects[0], Some("lab-2"));
        place(&mut objects[1], None);
        assert_eq!(objects[0].metadata.namespace.as_deref(), Some("lab-2"));
        assert_eq!(objects[1].metadata.namespace, None);
    }
}
