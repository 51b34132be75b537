//! Every call `loadtest tune --cluster` makes to the API server, with the RBAC rule it
//! needs. Its API code names a [`Call`] for each request it sends (its errors say
//! which), and a contract test (`k8s/harness/tests/contract.rs`) checks that
//! `k8s/rbac/tune.yaml` grants exactly what these need: the fixed calls below plus
//! server-side apply of each kind the overlays render.

use std::collections::BTreeSet;

/// One permission: (API group, resource or `resource/subresource`, verb).
pub type Permission = (String, String, String);

/// A request the cluster code sends, other than applying the overlays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A Deployment's rollout status and its image.
    GetDeployment,
    /// Pods by label: the one to forward to, the load generators, why a rollout waits.
    ListPods,
    /// Warning events of a pod that holds a rollout up.
    ListEvents,
    /// A load generator's record (the last line of its log).
    GetPodLog,
    /// A port-forward: a websocket upgrade, authorized as `get` by API servers up to
    /// 1.34 and also as `create` from 1.35.
    PortForward,
    CreateJob,
    GetJob,
    DeleteJob,
    /// CPU and memory per pod from metrics-server.
    ListPodMetrics,
    /// Hashed ConfigMaps an earlier stage applied and the current one no longer holds.
    ListConfigMaps,
    DeleteConfigMap,
}

impl Call {
    pub const ALL: [Call; 11] = [
        Call::GetDeployment,
        Call::ListPods,
        Call::ListEvents,
        Call::GetPodLog,
        Call::PortForward,
        Call::CreateJob,
        Call::GetJob,
        Call::DeleteJob,
        Call::ListPodMetrics,
        Call::ListConfigMaps,
        Call::DeleteConfigMap,
    ];

    /// The API group, the resource and the verbs the API server checks.
    pub fn rule(self) -> (&'static str, &'static str, &'static [&'static str]) {
        match self {
            Call::GetDeployment => ("apps", "deployments", &["get"]),
            Call::ListPods => ("", "pods", &["list"]),
            Call::ListEvents => ("", "events", &["list"]),
            Call::GetPodLog => ("", "pods/log", &["get"]),
            Call::PortForward => ("", "pods/portforward", &["get", "create"]),
            Call::CreateJob => ("batch", "jobs", &["create"]),
            Call::GetJob => ("batch", "jobs", &["get"]),
            Call::DeleteJob => ("batch", "jobs", &["delete"]),
            Call::ListPodMetrics => ("metrics.k8s.io", "pods", &["list"]),
            Call::ListConfigMaps => ("", "configmaps", &["list"]),
            Call::DeleteConfigMap => ("", "configmaps", &["delete"]),
        }
    }

    /// How an error names the call: `get deployments`, `get+create pods/portforward`.
    pub fn describe(self) -> String {
        let (_, resource, verbs) = self.rule();
        format!("{} {resource}", verbs.join("+"))
    }
}

/// Server-side apply is a PATCH; for an object that does not exist yet the API server
/// also checks `create`.
pub const APPLY_VERBS: [&str; 2] = ["create", "patch"];

/// Every permission a run needs, given the (group, plural) of each kind it applies.
pub fn needed<'a>(applied: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeSet<Permission> {
    let fixed = Call::ALL.into_iter().flat_map(|call| {
        let (group, resource, verbs) = call.rule();
        verbs
            .iter()
            .map(move |verb| (group.to_owned(), resource.to_owned(), (*verb).to_owned()))
    });
    let applies = applied.into_iter().flat_map(|(group, plural)| {
        APPLY_VERBS
            .iter()
            .map(move |verb| (group.to_owned(), plural.to_owned(), (*verb).to_owned()))
    });
    fixed.chain(applies).collect()
}

/// Every permission the rules of a Role grant, one per (group, resource, verb).
pub fn granted(role: &k8s_openapi::api::rbac::v1::Role) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for rule in role.rules.iter().flatten() {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(yaml: &str) -> k8s_openapi::api::rbac::v1::Role {
        serde_saphyr::from_str(yaml).expect("a Role")
    }

    #[test]
    fn the_websocket_verbs_and_apply_verbs_are_needed() {
        let needed = needed([("apps", "statefulsets")]);
        let has = |g: &str, r: &str, v: &str| needed.contains(&(g.into(), r.into(), v.into()));
        assert!(has("", "pods/portforward", "get"), "a websocket GET");
        assert!(has("", "pods/portforward", "create"), "1.35 checks create");
        assert!(
            has("apps", "statefulsets", "create"),
            "apply of a new object"
        );
        assert!(has("apps", "statefulsets", "patch"));
        assert!(!has("apps", "statefulsets", "get"), "apply needs no get");
        assert!(
            !has("", "secrets", "list"),
            "listing Secrets reads them all"
        );
    }

    #[test]
    fn a_role_grants_each_group_resource_and_verb_it_lists() {
        let granted = granted(&role(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\nrules:\n  - apiGroups: ['', apps]\n    resources: [pods]\n    verbs: [get, list]\n",
        ));
        assert_eq!(granted.len(), 4);
        assert!(granted.contains(&("apps".into(), "pods".into(), "list".into())));
    }
}
