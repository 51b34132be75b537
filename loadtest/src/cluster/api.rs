//! The thin layer that talks to the Kubernetes API server: connecting through a
//! kubeconfig context, server-side apply of a rendered overlay, waiting for a rollout,
//! and running the load generators' Job and reading its pods' logs. Nothing here can run
//! on a machine without a cluster; everything it decides on is plain data tested
//! elsewhere (`rollout`, and the objects in `k8s-manifests`).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{DynamicObject, GroupVersionKind};

use super::rollout::{rollout, Rollout};
use k8s_manifests::loadgen_job::{self, LoadgenJob};
use loadgen::LoadRecord;

/// The field manager of everything the run applies.
const FIELD_MANAGER: &str = "dronelab-tune";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no kubeconfig: {0} (set KUBECONFIG, or run where ~/.kube/config exists)")]
    NoKubeconfig(String),
    #[error("context {context:?} is not in the kubeconfig; it has: {known}")]
    UnknownContext { context: String, known: String },
    #[error("cannot reach the cluster of context {context:?}: {reason}")]
    Connect { context: String, reason: String },
    #[error(
        "forbidden: {verb} on {resource} in namespace {namespace} ({message}); grant it with k8s/rbac/tune.yaml"
    )]
    Forbidden {
        verb: &'static str,
        resource: String,
        namespace: String,
        message: String,
    },
    #[error("{verb} {resource}: {reason}")]
    Api {
        verb: &'static str,
        resource: String,
        reason: String,
    },
    #[error("{deployment} did not finish rolling out within {secs} s: {why}")]
    RolloutTimeout {
        deployment: String,
        secs: u64,
        why: String,
    },
    #[error("the load generators failed: {0}")]
    Loadgen(String),
}

/// A port-forward to an in-cluster service; it stops when dropped.
pub struct PortForward {
    pub url: url::Url,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection to one namespace of one cluster.
pub struct Cluster {
    client: kube::Client,
    pub namespace: String,
    pub context: String,
}

impl Cluster {
    /// The API client (cheap to clone: it shares one connection pool).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Connects through `context` of the kubeconfig (its current context if `None`).
    pub async fn connect(context: Option<&str>, namespace: &str) -> Result<Self, ClusterError> {
        let kubeconfig =
            Kubeconfig::read().map_err(|e| ClusterError::NoKubeconfig(e.to_string()))?;
        let context = match context {
            Some(c) => c.to_owned(),
            None => kubeconfig.current_context.clone().unwrap_or_default(),
        };
        if !kubeconfig.contexts.iter().any(|c| c.name == context) {
            let known: Vec<&str> = kubeconfig
                .contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(ClusterError::UnknownContext {
                context,
                known: known.join(", "),
            });
        }
        let options = KubeConfigOptions {
            context: Some(context.clone()),
            ..KubeConfigOptions::default()
        };
        let connect = |reason: String| ClusterError::Connect {
            context: context.clone(),
            reason,
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| connect(e.to_string()))?;
        let client = kube::Client::try_from(config).map_err(|e| connect(e.to_string()))?;
        client
            .apiserver_version()
            .await
            .map_err(|e| connect(e.to_string()))?;
        Ok(Self {
            client,
            namespace: namespace.to_owned(),
            context,
        })
    }

    fn error(
        &self,
        verb: &'static str,
        resource: impl Into<String>,
        e: kube::Error,
    ) -> ClusterError {
        let resource = resource.into();
        match e {
            kube::Error::Api(status) if status.code == 403 => ClusterError::Forbidden {
                verb,
                resource,
                namespace: self.namespace.clone(),
                message: status.message,
            },
            other => ClusterError::Api {
                verb,
                resource,
                reason: other.to_string(),
            },
        }
    }

    /// Server-side applies every object (forcing ownership of the fields it sets).
    pub async fn apply(&self, objects: &[DynamicObject]) -> Result<(), ClusterError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for object in objects {
            let types = object.types.clone().unwrap_or_default();
            let gvk = GroupVersionKind::try_from(&types).map_err(|e| ClusterError::Api {
                verb: "apply",
                resource: format!("{types:?}"),
                reason: e.to_string(),
            })?;
            let name = object.metadata.name.clone().unwrap_or_default();
            let resource = format!("{}/{name}", gvk.kind);
            let (api_resource, _) = kube::discovery::pinned_kind(&self.client, &gvk)
                .await
                .map_err(|e| self.error("discover", gvk.kind.clone(), e))?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.namespace, &api_resource);
            api.patch(&name, &params, &Patch::Apply(object))
                .await
                .map_err(|e| self.error("patch", resource, e))?;
        }
        Ok(())
    }

    /// Forwards a fresh loopback port to `port` of a running pod of `app`
    /// (`app.kubernetes.io/name`) through the API server, as `kubectl port-forward`
    /// does; each connection gets its own stream. Lasts as long as the returned guard.
    pub async fn port_forward(&self, app: &str, port: u16) -> Result<PortForward, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = ListParams::default()
            .labels(&format!("app.kubernetes.io/name={app}"))
            .fields("status.phase=Running");
        let pod = pods
            .list(&selector)
            .await
            .map_err(|e| self.error("list", "pods", e))?
            .items
            .into_iter()
            .find_map(|p| p.metadata.name)
            .ok_or_else(|| ClusterError::Api {
                verb: "port-forward",
                resource: format!("pods of {app}"),
                reason: "none is running".into(),
            })?;
        let failed = |reason: String| ClusterError::Api {
            verb: "port-forward",
            resource: format!("pods/{pod}"),
            reason,
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let local = listener.local_addr().map_err(|e| failed(e.to_string()))?;
        let url =
            url::Url::parse(&format!("http://{local}/")).map_err(|e| failed(e.to_string()))?;
        let forwarding = tokio::spawn(async move {
            while let Ok((mut connection, _)) = listener.accept().await {
                let (pods, pod) = (pods.clone(), pod.clone());
                tokio::spawn(async move {
                    let Ok(mut forwarder) = pods.portforward(&pod, &[port]).await else {
                        return;
                    };
                    if let Some(mut upstream) = forwarder.take_stream(port) {
                        let _ = tokio::io::copy_bidirectional(&mut connection, &mut upstream).await;
                    }
                    forwarder.abort();
                });
            }
        });
        Ok(PortForward {
            url,
            task: forwarding,
        })
    }

    /// The image a Deployment's first container runs (the load generators use the same).
    pub async fn image_of(&self, deployment: &str) -> Result<String, ClusterError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let found = api
            .get(deployment)
            .await
            .map_err(|e| self.error("get", format!("deployments/{deployment}"), e))?;
        Ok(found
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_else(|| "dronelab".into()))
    }

    /// Waits until `deployment` has rolled out; on timeout, says which pods hold it up.
    pub async fn wait_rollout(
        &self,
        deployment: &str,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let started = Instant::now();
        loop {
            let current = api
                .get(deployment)
                .await
                .map_err(|e| self.error("get", format!("deployments/{deployment}"), e))?;
            let why = match rollout(&current) {
                Rollout::Complete => return Ok(()),
                Rollout::Waiting(why) => why,
            };
            if started.elapsed() > timeout {
                let pods = self.pod_problems(deployment).await;
                return Err(ClusterError::RolloutTimeout {
                    deployment: deployment.to_owned(),
                    secs: timeout.as_secs(),
                    why: format!("{why}; {pods}"),
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// What is wrong with the pods of `app` (`app.kubernetes.io/name`): their unready
    /// conditions, waiting containers, and warning events.
    async fn pod_problems(&self, app: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = ListParams::default().labels(&format!("app.kubernetes.io/name={app}"));
        let Ok(list) = pods.list(&selector).await else {
            return "its pods could not be listed".into();
        };
        let mut lines = Vec::new();
        for pod in list {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let status = pod.status.unwrap_or_default();
            let waiting: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| c.state?.waiting)
                .map(|w| {
                    format!(
                        "{} ({})",
                        w.reason.unwrap_or_default(),
                        w.message.unwrap_or_default()
                    )
                })
                .collect();
            let unready: Vec<String> = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c.status != "True")
                .map(|c| format!("{} {}", c.type_, c.reason.unwrap_or_default()))
                .collect();
            let warnings: Vec<String> = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter(|e| e.type_.as_deref() == Some("Warning"))
                        .filter_map(|e| e.message)
                        .collect()
                })
                .unwrap_or_default();
            lines.push(format!(
                "pod {name}: waiting [{}], not ready [{}], warnings [{}]",
                waiting.join("; "),
                unready.join("; "),
                warnings.join("; ")
            ));
        }
        if lines.is_empty() {
            format!("no pods of {app}")
        } else {
            lines.join(" | ")
        }
    }

    /// Runs the load generators' Job (replacing a previous one) and returns every
    /// pod's record.
    pub async fn run_loadgen(
        &self,
        spec: &LoadgenJob,
        timeout: Duration,
    ) -> Result<Vec<LoadRecord>, ClusterError> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        let resource = format!("jobs/{}", loadgen_job::NAME);
        match jobs
            .delete(loadgen_job::NAME, &DeleteParams::background())
            .await
        {
            Ok(_) => self.wait_gone(&jobs).await?,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(self.error("delete", resource, e)),
        }
        jobs.create(&PostParams::default(), &spec.job())
            .await
            .map_err(|e| self.error("create", resource.clone(), e))?;
        let started = Instant::now();
        loop {
            let job = jobs
                .get(loadgen_job::NAME)
                .await
                .map_err(|e| self.error("get", resource.clone(), e))?;
            let status = job.status.unwrap_or_default();
            if status.failed.unwrap_or(0) > 0 {
                return Err(ClusterError::Loadgen(
                    self.pod_problems(loadgen_job::NAME).await,
                ));
            }
            if status.succeeded.unwrap_or(0) >= i32::try_from(spec.pods).unwrap_or(i32::MAX) {
                break;
            }
            if started.elapsed() > timeout {
                return Err(ClusterError::Loadgen(format!(
                    "not done within {} s: {}",
                    timeout.as_secs(),
                    self.pod_problems(loadgen_job::NAME).await
                )));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        self.records().await
    }

    async fn wait_gone(&self, jobs: &Api<Job>) -> Result<(), ClusterError> {
        for _ in 0..60 {
            if jobs
                .get_opt(loadgen_job::NAME)
                .await
                .map_err(|e| self.error("get", format!("jobs/{}", loadgen_job::NAME), e))?
                .is_none()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err(ClusterError::Loadgen(
            "the previous Job is still being deleted".into(),
        ))
    }

    /// The last record line of every load-generator pod's log.
    async fn records(&self) -> Result<Vec<LoadRecord>, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = ListParams::default().labels(&format!("job-name={}", loadgen_job::NAME));
        let list = pods
            .list(&selector)
            .await
            .map_err(|e| self.error("list", "pods", e))?;
        let mut records = Vec::new();
        for pod in list {
            let name = pod.metadata.name.unwrap_or_default();
            let log = pods
                .logs(&name, &LogParams::default())
                .await
                .map_err(|e| self.error("get", format!("pods/{name}/log"), e))?;
            let record = LoadRecord::from_log(&log)
                .map_err(|e| ClusterError::Loadgen(format!("pod {name}: {e}")))?;
            records.push(record);
        }
        Ok(records)
    }
}
