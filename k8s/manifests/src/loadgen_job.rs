//! The distributed load generator: an Indexed Job whose N pods each run
//! `loadtest run --shard <index>/N --record -` against the gateway's Service, from a
//! common start time. Each pod prints its record as the last line of its log, where
//! the run collects it (`loadtest merge` reads pod logs too).
//!
//! `k8s/components/loadgen/job.yaml` is this Job as [`LoadgenJob::default`] builds it
//! (a test keeps them equal; `k8s-harness loadgen` writes it).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use dronelab_study::{DataSet, Popularity};
use loadgen::Profile;

/// The Job's name and its pods' `app.kubernetes.io/name`.
pub const NAME: &str = "loadgen";
/// Where Kubernetes puts an Indexed Job pod's completion index.
const COMPLETION_INDEX: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// What the load generators do.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadgenJob {
    pub namespace: String,
    /// The image holding `loadtest` (the project's one image).
    pub image: String,
    pub pods: u32,
    /// The gateway, as the pods reach it.
    pub target: String,
    pub profile: Profile,
    /// The seeded data set the requests pick owners and months from.
    pub data: DataSet,
    /// How often each owner-month is asked for.
    pub popularity: Popularity,
    /// The common start, ms since the Unix epoch; without it each pod starts at once.
    pub start_at_unix_ms: Option<u64>,
}

impl Default for LoadgenJob {
    /// Four pods driving the study's step load for 2 minutes at the in-cluster gateway.
    fn default() -> Self {
        Self {
            namespace: "dronelab".into(),
            image: "dronelab".into(),
            pods: 4,
            target: "http://gateway:8080/".into(),
            profile: Profile::study_step(120.0),
            data: DataSet {
                seed: 42,
                owners: 1000,
                months: 12,
                drones_per_owner: 2,
            },
            popularity: Popularity::Uniform,
            start_at_unix_ms: None,
        }
    }
}

impl LoadgenJob {
    /// The container's arguments: `loadtest` with these.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["run", "--target", &self.target]
            .into_iter()
            .map(str::to_owned)
            .collect();
        args.extend(self.profile.to_args());
        args.extend([
            "--owners".into(),
            self.data.owners.to_string(),
            "--months".into(),
            self.data.months.to_string(),
            // Kubernetes expands $(SHARD_INDEX) from the container's environment.
            "--shard".into(),
            format!("$(SHARD_INDEX)/{}", self.pods),
            "--record".into(),
            "-".into(),
        ]);
        if self.popularity != Popularity::Uniform {
            args.extend(["--popularity".into(), self.popularity.name().into()]);
        }
        if let Some(at) = self.start_at_unix_ms {
            args.extend(["--start-at".into(), at.to_string()]);
        }
        args
    }

    pub fn job(&self) -> Job {
        let labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), NAME.to_owned()),
            (
                "app.kubernetes.io/component".to_owned(),
                "load-generator".to_owned(),
            ),
            (
                "app.kubernetes.io/part-of".to_owned(),
                "dronelab".to_owned(),
            ),
        ]);
        let pods = i32::try_from(self.pods).unwrap_or(i32::MAX);
        Job {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                completion_mode: Some("Indexed".into()),
                completions: Some(pods),
                parallelism: Some(pods),
                // A failed shard makes the merge incomplete: fail the run, do not retry
                // one shard out of step with the others.
                backoff_limit: Some(0),
                ttl_seconds_after_finished: Some(3600),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(self.pod()),
                },
                ..JobSpec::default()
            }),
            status: None,
        }
    }

    fn pod(&self) -> PodSpec {
        let quantity = |q: &str| Quantity(q.to_owned());
        PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: NAME.into(),
                image: Some(self.image.clone()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["loadtest".into()]),
                args: Some(self.args()),
                env: Some(vec![EnvVar {
                    name: "SHARD_INDEX".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: COMPLETION_INDEX.into(),
                            ..ObjectFieldSelector::default()
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                }]),
                // One generator per core: past that it measures its own CPU.
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".to_owned(), quantity("1")),
                        ("memory".to_owned(), quantity("128Mi")),
                    ])),
                    limits: Some(BTreeMap::from([("memory".to_owned(), quantity("512Mi"))])),
                    ..ResourceRequirements::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Capabilities::default()
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }
    }
}
