//! What the run decides from pods, as plain functions of their objects: which pod to
//! forward to, which pods belong to a Job, and what is wrong with a pod in words.

use k8s_openapi::api::core::v1::{ContainerState, Pod};

/// The label Kubernetes (1.27+) puts on a Job's pods: the Job's uid, unlike `job-name`,
/// never matches the pods of an earlier Job of the same name.
pub const JOB_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// A pod that can take a forwarded connection now: Ready and not terminating. Among
/// several, the newest (after a rollout, the one of the new ReplicaSet).
pub fn ready_pod(pods: &[Pod]) -> Option<&str> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| is_ready(p))
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .and_then(|p| p.metadata.name.as_deref())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What is wrong with a pod, in one line: containers waiting (image pulls, crash
/// loops) or terminated with an error (exit code, OOMKilled, the message it left),
/// conditions not met. `None` when nothing is.
pub fn pod_problem(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let mut parts: Vec<String> = Vec::new();
    for container in status.container_statuses.iter().flatten() {
        if let Some(state) = container.state.as_ref().and_then(container_problem) {
            parts.push(format!("{}: {state}", container.name));
        }
    }
    let unmet: Vec<String> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status != "True")
        .map(|c| match &c.reason {
            Some(reason) => format!("{} ({reason})", c.type_),
            None => c.type_.clone(),
        })
        .collect();
    if !unmet.is_empty() {
        parts.push(format!("not {}", unmet.join(", ")));
    }
    if parts.is_empty() {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    Some(format!("pod {name}: {}", parts.join("; ")))
}

fn container_problem(state: &ContainerState) -> Option<String> {
    if let Some(waiting) = &state.waiting {
        let reason = waiting.reason.as_deref().unwrap_or("waiting");
        return Some(match &waiting.message {
            Some(message) => format!("waiting, {reason}: {message}"),
            None => format!("waiting, {reason}"),
        });
    }
    let terminated = state.terminated.as_ref()?;
    if terminated.exit_code == 0 {
        return None;
    }
    let reason = terminated.reason.as_deref().unwrap_or("Error");
    let mut line = format!("terminated, {reason}, exit code {}", terminated.exit_code);
    if let Some(message) = terminated.message.as_deref().map(str::trim) {
        if !message.is_empty() {
            line.push_str(&format!(": {message}"));
        }
    }
    Some(line)
}

/// The last `n` non-empty lines of a log, for an error message.
pub fn log_tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("a pod")
    }

    fn ready(name: &str, created: &str, ready: bool, terminating: bool) -> Pod {
        let mut metadata = serde_json::json!({"name": name, "creationTimestamp": created});
        if terminating {
            metadata["deletionTimestamp"] = "2026-12-01T10:05:00Z".into();
        }
        pod(serde_json::json!({
            "metadata": metadata,
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        }))
    }

    #[test]
    fn the_newest_ready_pod_that_is_not_terminating_is_forwarded_to() {
        let pods = [
            ready("old", "2026-12-01T10:00:00Z", true, true),
            ready("starting", "2026-12-01T10:04:00Z", false, false),
            ready("older", "2026-12-01T09:00:00Z", true, false),
            ready("new", "2026-12-01T10:02:00Z", true, false),
        ];
        assert_eq!(ready_pod(&pods), Some("new"));
        assert_eq!(ready_pod(&pods[..2]), None, "terminating or not ready");
        assert_eq!(ready_pod(&[]), None);
    }

    #[test]
    fn a_failed_load_pod_says_how_it_ended() {
        let failed = pod(serde_json::json!({
            "metadata": {"name": "loadgen-2-abcde"},
            "status": {
                "phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
                "containerStatuses": [{
                    "name": "loadgen", "image": "dronelab:0.1.0", "imageID": "", "ready": false,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
                }]
            }
        }));
        assert_eq!(
            pod_problem(&failed).as_deref(),
            Some("pod loadgen-2-abcde: loadgen: terminated, OOMKilled, exit code 137; not Ready (PodCompleted)")
        );
        let one_container = |name: &str, container: &str, state: serde_json::Value| {
            pod(serde_json::json!({
                "metadata": {"name": name},
                "status": {"containerStatuses": [{
                    "name": container, "image": "", "imageID": "", "ready": false,
                    "restartCount": 0, "state": state
                }]}
            }))
        };
        let late = one_container(
            "loadgen-0",
            "loadgen",
            serde_json::json!({"terminated": {"exitCode": 1, "message": "--start-at was 400.0 s ago\n"}}),
        );
        assert_eq!(
            pod_problem(&late).as_deref(),
            Some("pod loadgen-0: loadgen: terminated, Error, exit code 1: --start-at was 400.0 s ago")
        );
        let pulling = one_container(
            "gateway-1",
            "gateway",
            serde_json::json!({"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}),
        );
        assert_eq!(
            pod_problem(&pulling).as_deref(),
            Some("pod gateway-1: gateway: waiting, ImagePullBackOff: not found")
        );
        let done = one_container(
            "loadgen-1",
            "loadgen",
            serde_json::json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
        );
        assert_eq!(pod_problem(&done), None);
    }

    #[test]
    fn a_log_tail_keeps_the_last_lines() {
        assert_eq!(log_tail("a\nb\n\nc\nd\n", 2), "c / d");
        assert_eq!(log_tail("only\n", 5), "only");
        assert_eq!(log_tail("", 3), "");
    }
}
