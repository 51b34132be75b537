//! Whether a Deployment's rollout is complete, from its status alone (as `kubectl
//! rollout status` judges it): the controller has seen the newest spec, every replica
//! runs it, every one is available, and no old one is left; or it has failed, when the
//! controller gave up on progress (`progressDeadlineSeconds`, condition Progressing with
//! reason ProgressDeadlineExceeded).

use k8s_openapi::api::apps::v1::Deployment;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    Complete,
    /// Still rolling out, and why in words.
    Waiting(String),
    /// The controller stopped trying, with its message: waiting longer will not help.
    Failed(String),
}

pub fn rollout(deployment: &Deployment) -> Rollout {
    let generation = deployment.metadata.generation.unwrap_or(0);
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return Rollout::Waiting("no status yet".into());
    };
    let observed = status.observed_generation.unwrap_or(0);
    let (replicas, updated, available) = (
        status.replicas.unwrap_or(0),
        status.updated_replicas.unwrap_or(0),
        status.available_replicas.unwrap_or(0),
    );
    let gave_up = status.conditions.iter().flatten().find(|c| {
        c.type_ == "Progressing"
            && c.status == "False"
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if let (Some(condition), true) = (gave_up, observed >= generation) {
        return Rollout::Failed(
            condition
                .message
                .clone()
                .unwrap_or_else(|| "ProgressDeadlineExceeded".into()),
        );
    }
    if observed < generation {
        Rollout::Waiting(format!(
            "the controller has not seen generation {generation} yet (at {observed})"
        ))
    } else if updated < wanted {
        Rollout::Waiting(format!("{updated} of {wanted} replicas updated"))
    } else if replicas > updated {
        Rollout::Waiting(format!("{} old replicas still running", replicas - updated))
    } else if available < updated {
        Rollout::Waiting(format!(
            "{available} of {updated} updated replicas available"
        ))
    } else {
        Rollout::Complete
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn deployment(generation: i64, status: Option<(i64, i32, i32, i32)>) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(2),
                ..DeploymentSpec::default()
            }),
            status: status.map(
                |(observed, replicas, updated, available)| DeploymentStatus {
                    observed_generation: Some(observed),
                    replicas: Some(replicas),
                    updated_replicas: Some(updated),
                    available_replicas: Some(available),
                    ..DeploymentStatus::default()
                },
            ),
        }
    }

    #[test]
    fn complete_only_when_every_replica_is_new_and_available() {
        let waiting = |d: &Deployment| matches!(rollout(d), Rollout::Waiting(_));
        assert!(waiting(&deployment(3, None)));
        assert!(
            waiting(&deployment(3, Some((2, 2, 2, 2)))),
            "an old generation"
        );
        assert!(waiting(&deployment(3, Some((3, 3, 1, 2)))), "one updated");
        assert!(
            waiting(&deployment(3, Some((3, 3, 2, 2)))),
            "an old pod left"
        );
        assert!(
            waiting(&deployment(3, Some((3, 2, 2, 1)))),
            "one not available"
        );
        assert_eq!(
            rollout(&deployment(3, Some((3, 2, 2, 2)))),
            Rollout::Complete
        );
        assert_eq!(
            rollout(&deployment(3, Some((3, 3, 1, 2)))),
            Rollout::Waiting("1 of 2 replicas updated".into())
        );
    }

    #[test]
    fn a_rollout_past_its_progress_deadline_has_failed() {
        let mut stuck = deployment(3, Some((3, 3, 1, 2)));
        let condition = |reason: &str| DeploymentCondition {
            type_: "Progressing".into(),
            status: "False".into(),
            reason: Some(reason.into()),
            message: Some(
                "ReplicaSet \"utilization-service-7d\" has timed out progressing.".into(),
            ),
            ..DeploymentCondition::default()
        };
        if let Some(status) = stuck.status.as_mut() {
            status.conditions = Some(vec![condition("ProgressDeadlineExceeded")]);
        }
        assert_eq!(
            rollout(&stuck),
            Rollout::Failed(
                "ReplicaSet \"utilization-service-7d\" has timed out progressing.".into()
            )
        );
        // A condition left from the generation before a new apply says nothing yet.
        stuck.metadata.generation = Some(4);
        assert!(matches!(rollout(&stuck), Rollout::Waiting(_)));
    }
}
