//! Which ConfigMaps an earlier stage left behind. Each stage's knobs are a ConfigMap
//! whose generated name carries a hash of its data, so every stage applies a new one;
//! without pruning, a namespace collects one per stage per run.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;

/// The label every dronelab object carries; pruning looks no further.
pub const PART_OF: &str = "app.kubernetes.io/part-of=dronelab";

/// The ConfigMaps `manager` server-side applied that are not among `applied` (the
/// names the current overlay holds). Ones someone else created or last applied, even
/// with dronelab's label, are left alone.
pub fn stale_config_maps<'a>(
    existing: &'a [ConfigMap],
    applied: &BTreeSet<String>,
    manager: &str,
) -> Vec<&'a str> {
    existing
        .iter()
        .filter(|c| {
            c.metadata.managed_fields.iter().flatten().any(|f| {
                f.manager.as_deref() == Some(manager) && f.operation.as_deref() == Some("Apply")
            })
        })
        .filter_map(|c| c.metadata.name.as_deref())
        .filter(|name| !applied.contains(*name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map(name: &str, manager: &str, operation: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "managedFields": [{"manager": manager, "operation": operation}]
            }
        }))
        .expect("a ConfigMap")
    }

    #[test]
    fn only_what_the_run_applied_and_no_longer_holds_is_stale() {
        let existing = [
            config_map("utilization-query-old", "dronelab-tune", "Apply"),
            config_map("utilization-query-new", "dronelab-tune", "Apply"),
            config_map("by-hand", "kubectl-client-side-apply", "Update"),
            config_map("kubectl-applied", "kubectl", "Apply"),
        ];
        let applied = BTreeSet::from(["utilization-query-new".to_owned()]);
        assert_eq!(
            stale_config_maps(&existing, &applied, "dronelab-tune"),
            ["utilization-query-old"]
        );
    }
}
