//! The thin layer that talks to the Kubernetes API server: connecting through a
//! kubeconfig context, server-side apply of a rendered overlay, waiting for a rollout,
//! port-forwards, and running the load generators' Job and reading its pods' logs.
//! Nothing here can run on a machine without a cluster; everything it decides on is
//! plain data tested elsewhere (`pods`, `prune`, `rollout`, `schedule`, and the objects
//! and calls in `k8s-manifests`). Every request names its [`Call`], whose RBAC rule
//! `k8s/rbac/tune.yaml` grants.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{DynamicObject, GroupVersion, TypeMeta};
use kube::discovery::{ApiGroup, Scope};

use super::pods::{log_tail, pod_problem, ready_pod, JOB_UID_LABEL};
use super::prune::{stale_config_maps, PART_OF};
use super::rollout::{rollout, Rollout};
use k8s_manifests::access::Call;
use k8s_manifests::loadgen_job::{self, LoadgenJob};
use k8s_manifests::overlay;
use loadgen::LoadRecord;

/// The field manager of everything the run applies.
pub const FIELD_MANAGER: &str = "dronelab-tune";
/// Log lines of a failed load pod shown in the error.
const FAILED_LOG_LINES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no kubeconfig: {0} (set KUBECONFIG, or run where ~/.kube/config exists)")]
    NoKubeconfig(String),
    #[error("context {context:?} is not in the kubeconfig; it has: {known}")]
    UnknownContext { context: String, known: String },
    #[error("cannot reach the cluster of context {context:?}: {reason}")]
    Connect { context: String, reason: String },
    #[error(
        "forbidden: {call} in namespace {namespace} ({message}); k8s/rbac/tune.yaml grants what a run needs — apply it and bind it to you (k8s/README.md)"
    )]
    Forbidden {
        call: String,
        namespace: String,
        message: String,
    },
    #[error("{call}: {reason}")]
    Api { call: String, reason: String },
    #[error(
        "the cluster does not serve {api_version} {kind} ({reason}): install what provides it, or leave the component that renders it out of the overlay"
    )]
    NotServed {
        api_version: String,
        kind: String,
        reason: String,
    },
    #[error("{deployment} did not finish rolling out within {secs} s: {why}")]
    RolloutTimeout {
        deployment: String,
        secs: u64,
        why: String,
    },
    #[error("{deployment} failed to roll out: {why}")]
    RolloutFailed { deployment: String, why: String },
    #[error("port-forward to {app}: {reason}")]
    Forward { app: String, reason: String },
    #[error("the load generators failed: {0}")]
    Loadgen(String),
}

/// A port-forward to an in-cluster app; it stops when dropped.
pub struct PortForward {
    pub url: url::Url,
    /// The pod the first connection reached (later ones follow rollouts).
    pub pod: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn not_served(types: &TypeMeta, reason: String) -> ClusterError {
    ClusterError::NotServed {
        api_version: types.api_version.clone(),
        kind: types.kind.clone(),
        reason,
    }
}

/// A connection to one namespace of one cluster (cheap to clone: one connection pool).
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    pub namespace: String,
    pub context: String,
}

impl Cluster {
    /// The API client.
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
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| ClusterError::Connect {
                context: context.clone(),
                reason: e.to_string(),
            })?;
        Self::from_config(config, namespace, &context).await
    }

    /// Connects with a ready configuration (what `connect` reads from the kubeconfig),
    /// checking that the API server answers.
    pub async fn from_config(
        config: kube::Config,
        namespace: &str,
        context: &str,
    ) -> Result<Self, ClusterError> {
        let connect = |reason: String| ClusterError::Connect {
            context: context.to_owned(),
            reason,
        };
        let client = kube::Client::try_from(config).map_err(|e| connect(e.to_string()))?;
        client
            .apiserver_version()
            .await
            .map_err(|e| connect(e.to_string()))?;
        Ok(Self {
            client,
            namespace: namespace.to_owned(),
            context: context.to_owned(),
        })
    }

    fn error(&self, call: impl Into<String>, e: kube::Error) -> ClusterError {
        let call = call.into();
        match e {
            kube::Error::Api(status) if status.code == 403 => ClusterError::Forbidden {
                call,
                namespace: self.namespace.clone(),
                message: status.message,
            },
            other => ClusterError::Api {
                call,
                reason: other.to_string(),
            },
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The API server's clock (its `Date` header), which the pods' nodes follow more
    /// closely than this machine does; `None` if it sends none.
    pub async fn server_time(&self) -> Option<SystemTime> {
        let request = http::Request::get("/version")
            .body(kube::client::Body::from(Vec::new()))
            .ok()?;
        let response = self.client.send(request).await.ok()?;
        let date = response.headers().get(http::header::DATE)?.to_str().ok()?;
        httpdate::parse_http_date(date).ok()
    }

    /// Server-side applies every object (forcing ownership of the fields it sets), each
    /// where its discovered scope puts it: namespaced ones into the run's namespace.
    /// Returns the names of the ConfigMaps applied (see [`Cluster::prune_config_maps`]).
    pub async fn apply(
        &self,
        objects: Vec<DynamicObject>,
    ) -> Result<BTreeSet<String>, ClusterError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // One discovery request per group version, however many objects it has.
        let mut groups: BTreeMap<String, ApiGroup> = BTreeMap::new();
        let mut config_maps = BTreeSet::new();
        for mut object in objects {
            let types = object.types.clone().unwrap_or_default();
            if !groups.contains_key(&types.api_version) {
                groups.insert(types.api_version.clone(), self.discover(&types).await?);
            }
            let found = groups
                .get(&types.api_version)
                .and_then(|group| group.recommended_kind(&types.kind));
            let Some((resource, capabilities)) = found else {
                return Err(not_served(&types, "no such kind in its group".into()));
            };
            let name = object.metadata.name.clone().unwrap_or_default();
            let api: Api<DynamicObject> = match capabilities.scope {
                Scope::Namespaced => {
                    overlay::place(&mut object, Some(&self.namespace));
                    Api::namespaced_with(self.client.clone(), &self.namespace, &resource)
                }
                Scope::Cluster => {
                    overlay::place(&mut object, None);
                    Api::all_with(self.client.clone(), &resource)
                }
            };
            api.patch(&name, &params, &Patch::Apply(&object))
                .await
                .map_err(|e| {
                    self.error(
                        format!("apply (create+patch) {}/{name}", resource.plural),
                        e,
                    )
                })?;
            if types.kind == "ConfigMap" {
                config_maps.insert(name);
            }
        }
        Ok(config_maps)
    }

    /// The resources of an object's group version, as the API server serves them.
    async fn discover(&self, types: &TypeMeta) -> Result<ApiGroup, ClusterError> {
        let version: GroupVersion =
            types
                .api_version
                .parse()
                .map_err(|e: kube::core::gvk::ParseGroupVersionError| {
                    not_served(types, e.to_string())
                })?;
        match kube::discovery::pinned_group(&self.client, &version).await {
            Ok(group) => Ok(group),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(not_served(types, format!("404 {}", status.message)))
            }
            Err(e @ kube::Error::Discovery(_)) => Err(not_served(types, e.to_string())),
            Err(e) => Err(self.error(format!("discover {}", types.api_version), e)),
        }
    }

    /// Deletes the ConfigMaps an earlier apply made that `applied` (the current
    /// overlay's) no longer holds. Failures are reported, never fatal: the run's
    /// figures do not depend on them.
    pub async fn prune_config_maps(&self, applied: &BTreeSet<String>) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let existing = match api.list(&ListParams::default().labels(PART_OF)).await {
            Ok(list) => list.items,
            Err(e) => {
                eprintln!("  {}", self.error(Call::ListConfigMaps.describe(), e));
                return;
            }
        };
        for name in stale_config_maps(&existing, applied, FIELD_MANAGER) {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => eprintln!("  pruned ConfigMap {name} (an earlier stage's)"),
                Err(e) => eprintln!(
                    "  {}",
                    self.error(format!("{} {name}", Call::DeleteConfigMap.describe()), e)
                ),
            }
        }
    }

    /// A Ready, not terminating pod of `app` (`app.kubernetes.io/name`).
    async fn ready_pod_of(&self, app: &str) -> Result<String, ClusterError> {
        let selector = ListParams::default().labels(&format!("app.kubernetes.io/name={app}"));
        let pods = self
            .pods()
            .list(&selector)
            .await
            .map_err(|e| self.error(Call::ListPods.describe(), e))?;
        ready_pod(&pods.items)
            .map(str::to_owned)
            .ok_or_else(|| ClusterError::Forward {
                app: app.to_owned(),
                reason: format!("none of its {} pods is ready", pods.items.len()),
            })
    }

    /// Forwards a fresh loopback port to `port` of a ready pod of `app`
    /// (`app.kubernetes.io/name`) through the API server, as `kubectl port-forward`
    /// does. One forward is opened at once, so missing rights or a missing app fail
    /// here, clearly; then each connection gets its own stream to the newest ready pod
    /// (a rollout or a restart does not break the forward). Lasts as long as the guard.
    pub async fn port_forward(&self, app: &str, port: u16) -> Result<PortForward, ClusterError> {
        let pod = self.ready_pod_of(app).await?;
        let forwarder = self
            .pods()
            .portforward(&pod, &[port])
            .await
            .map_err(|e| self.error(format!("{} ({pod})", Call::PortForward.describe()), e))?;
        forwarder.abort();
        let failed = |reason: String| ClusterError::Forward {
            app: app.to_owned(),
            reason,
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let local = listener.local_addr().map_err(|e| failed(e.to_string()))?;
        let url =
            url::Url::parse(&format!("http://{local}/")).map_err(|e| failed(e.to_string()))?;
        let cluster = self.clone();
        let app = app.to_owned();
        let errors = Arc::new(AtomicU64::new(0));
        let forwarding = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                let (cluster, app, errors) = (cluster.clone(), app.clone(), errors.clone());
                tokio::spawn(async move {
                    if let Err(e) = cluster.forward_one(connection, &app, port).await {
                        // Said the first few times and then every 100th: a broken forward
                        // shows, a long run's log does not fill with it.
                        let n = errors.fetch_add(1, Ordering::Relaxed);
                        if n < 3 || n % 100 == 0 {
                            eprintln!("  {e} (failed forwards so far: {})", n + 1);
                        }
                    }
                });
            }
        });
        Ok(PortForward {
            url,
            pod,
            task: forwarding,
        })
    }

    /// One forwarded connection, to the pod of `app` that is ready now.
    async fn forward_one(
        &self,
        mut connection: tokio::net::TcpStream,
        app: &str,
        port: u16,
    ) -> Result<(), ClusterError> {
        let pod = self.ready_pod_of(app).await?;
        let mut forwarder = self
            .pods()
            .portforward(&pod, &[port])
            .await
            .map_err(|e| self.error(format!("{} ({pod})", Call::PortForward.describe()), e))?;
        let Some(mut upstream) = forwarder.take_stream(port) else {
            forwarder.abort();
            return Err(ClusterError::Forward {
                app: app.to_owned(),
                reason: format!("no stream to port {port} of {pod}"),
            });
        };
        // The connection ends when either side closes; its errors are the caller's.
        let _ = tokio::io::copy_bidirectional(&mut connection, &mut upstream).await;
        forwarder.abort();
        Ok(())
    }

    /// The image a Deployment's first container runs (the load generators use the same).
    pub async fn image_of(&self, deployment: &str) -> Result<String, ClusterError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let found = api.get(deployment).await.map_err(|e| {
            self.error(
                format!("{} ({deployment})", Call::GetDeployment.describe()),
                e,
            )
        })?;
        Ok(found
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_else(|| "dronelab".into()))
    }

    /// Waits until `deployment` has rolled out; on timeout or when the controller gives
    /// up, says which pods hold it up.
    pub async fn wait_rollout(
        &self,
        deployment: &str,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let pods_of = format!("app.kubernetes.io/name={deployment}");
        let started = Instant::now();
        loop {
            let current = api.get(deployment).await.map_err(|e| {
                self.error(
                    format!("{} ({deployment})", Call::GetDeployment.describe()),
                    e,
                )
            })?;
            let why = match rollout(&current) {
                Rollout::Complete => return Ok(()),
                Rollout::Failed(why) => {
                    let pods = self.problems_of(&pods_of).await;
                    return Err(ClusterError::RolloutFailed {
                        deployment: deployment.to_owned(),
                        why: format!("{why}; {pods}"),
                    });
                }
                Rollout::Waiting(why) => why,
            };
            if started.elapsed() > timeout {
                let pods = self.problems_of(&pods_of).await;
                return Err(ClusterError::RolloutTimeout {
                    deployment: deployment.to_owned(),
                    secs: timeout.as_secs(),
                    why: format!("{why}; {pods}"),
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// What is wrong with the pods `selector` picks: each one's problem and its
    /// warning events; for a failed load pod, the last lines of its log.
    async fn problems_of(&self, selector: &str) -> String {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = match self
            .pods()
            .list(&ListParams::default().labels(selector))
            .await
        {
            Ok(list) => list.items,
            Err(e) => return format!("its pods could not be listed ({e})"),
        };
        let mut lines = Vec::new();
        for pod in &list {
            let Some(mut line) = pod_problem(pod) else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
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
            if !warnings.is_empty() {
                line.push_str(&format!("; warnings: {}", warnings.join("; ")));
            }
            if pod
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(JOB_UID_LABEL))
            {
                if let Ok(log) = self.loadgen_log(&name, Some(FAILED_LOG_LINES)).await {
                    line.push_str(&format!(
                        "; its log ends: {}",
                        log_tail(&log, FAILED_LOG_LINES)
                    ));
                }
            }
            lines.push(line);
        }
        match (lines.is_empty(), list.len()) {
            (_, 0) => format!("no pods match {selector}"),
            (true, n) => format!("its {n} pods show no problem"),
            (false, _) => lines.join(" | "),
        }
    }

    /// A load generator pod's log, from its own container (a mesh may add sidecars).
    async fn loadgen_log(&self, pod: &str, tail: Option<usize>) -> Result<String, ClusterError> {
        let params = LogParams {
            container: Some(loadgen_job::NAME.to_owned()),
            tail_lines: tail.map(|n| n as i64),
            ..LogParams::default()
        };
        self.pods()
            .logs(pod, &params)
            .await
            .map_err(|e| self.error(format!("{} ({pod})", Call::GetPodLog.describe()), e))
    }

    /// Runs the load generators' Job (replacing a previous one) with its pods' common
    /// start `lead` after the API server's time once the old Job is gone, and returns
    /// every pod's record and that start. The Job is deleted on every way out.
    pub async fn run_loadgen(
        &self,
        mut spec: LoadgenJob,
        lead: Duration,
        timeout: Duration,
    ) -> Result<(Vec<LoadRecord>, SystemTime), ClusterError> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        match jobs
            .delete(loadgen_job::NAME, &DeleteParams::foreground())
            .await
        {
            Ok(_) => self.wait_gone(&jobs).await?,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(self.error(Call::DeleteJob.describe(), e)),
        }
        let start = super::common_start(self.server_time().await, SystemTime::now(), lead);
        spec.start_at_unix_ms = Some(loadgen::unix_ms(start));
        let created = jobs
            .create(&PostParams::default(), &spec.job())
            .await
            .map_err(|e| self.error(Call::CreateJob.describe(), e))?;
        let outcome = match created.metadata.uid {
            Some(uid) => self.follow_job(&jobs, &uid, spec.pods, timeout).await,
            None => Err(ClusterError::Loadgen("the created Job has no uid".into())),
        };
        self.delete_loadgen().await;
        outcome.map(|records| (records, start))
    }

    /// Waits for the Job to succeed or fail and collects the records.
    async fn follow_job(
        &self,
        jobs: &Api<Job>,
        uid: &str,
        pods: u32,
        timeout: Duration,
    ) -> Result<Vec<LoadRecord>, ClusterError> {
        let selector = format!("{JOB_UID_LABEL}={uid}");
        let started = Instant::now();
        loop {
            let job = jobs
                .get(loadgen_job::NAME)
                .await
                .map_err(|e| self.error(Call::GetJob.describe(), e))?;
            let status = job.status.unwrap_or_default();
            if status.failed.unwrap_or(0) > 0 {
                return Err(ClusterError::Loadgen(self.problems_of(&selector).await));
            }
            if status.succeeded.unwrap_or(0) >= i32::try_from(pods).unwrap_or(i32::MAX) {
                return self.records(&selector).await;
            }
            if started.elapsed() > timeout {
                return Err(ClusterError::Loadgen(format!(
                    "not done within {} s: {}",
                    timeout.as_secs(),
                    self.problems_of(&selector).await
                )));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Deletes the load generators' Job and its pods (foreground: the Job goes once its
    /// pods have), saying so if it cannot.
    pub async fn delete_loadgen(&self) {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        match jobs
            .delete(loadgen_job::NAME, &DeleteParams::foreground())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => eprintln!(
                "  the load generators' Job is left running: {}",
                self.error(Call::DeleteJob.describe(), e)
            ),
        }
    }

    async fn wait_gone(&self, jobs: &Api<Job>) -> Result<(), ClusterError> {
        for _ in 0..60 {
            if jobs
                .get_opt(loadgen_job::NAME)
                .await
                .map_err(|e| self.error(Call::GetJob.describe(), e))?
                .is_none()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err(ClusterError::Loadgen(
            "the previous Job is still being deleted after 60 s".into(),
        ))
    }

    /// The last record line of every pod of this Job.
    async fn records(&self, selector: &str) -> Result<Vec<LoadRecord>, ClusterError> {
        let list = self
            .pods()
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| self.error(Call::ListPods.describe(), e))?;
        let mut records = Vec::new();
        for pod in list {
            let name = pod.metadata.name.unwrap_or_default();
            let log = self.loadgen_log(&name, None).await?;
            let record = LoadRecord::from_log(&log)
                .map_err(|e| ClusterError::Loadgen(format!("pod {name}: {e}")))?;
            records.push(record);
        }
        Ok(records)
    }
}
