//! A Kubernetes cluster driven through its API (`--cluster`): each stage's overlay
//! server-side applied and utilization-service's rollout awaited; the load from here at
//! `--target`, or from `--load-pods` pods of an Indexed Job inside the cluster; CPU and
//! memory from the metrics API; the in-cluster trace viewer and emulator reached
//! through port-forwards unless the user names others.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use dronelab_contract::Service;
use dronelab_study::Stage;
use k8s_manifests::{overlay, LoadgenJob};
use loadgen::{LoadRecord, LoadSummary};

use super::{drive_here, reach_existing, Environment, Reach, ResourceSampling, StageLoad};
use crate::cluster::{Cluster, PortForward};
use crate::tune::{TuneArgs, TuneError};

/// How long after the Job is created its pods start the load together.
const LOAD_POD_START_DELAY: Duration = Duration::from_secs(30);

pub struct ClusterEnvironment {
    cluster: Cluster,
    reach: Reach,
    overlays: PathBuf,
    rollout_timeout: Duration,
    /// Load from this many pods in the cluster instead of from this process.
    load_pods: Option<u32>,
    /// Port-forwards to in-cluster parts, alive as long as the run.
    _forwards: Vec<PortForward>,
}

impl ClusterEnvironment {
    /// Connects first: a wrong context or missing rights should stop the run before
    /// minutes of seeding.
    pub async fn connect(args: &TuneArgs) -> Result<Self, TuneError> {
        let cluster = Cluster::connect(args.kube_context.as_deref(), &args.namespace).await?;
        let gateway = match (&args.target, args.load_pods) {
            (Some(target), _) => target.clone(),
            (None, Some(_)) => in_cluster_gateway(),
            (None, None) => return Err(TuneError::NoLoadSource),
        };
        let mut args = args.clone();
        let forwards = forward_in_cluster_parts(&cluster, &mut args).await;
        let reach = reach_existing(gateway, &args).await?;
        eprintln!(
            "cluster mode: context {}, namespace {}, overlays from {}",
            cluster.context,
            cluster.namespace,
            args.overlays.display()
        );
        Ok(Self {
            cluster,
            reach,
            overlays: args.overlays.clone(),
            rollout_timeout: Duration::from_secs(args.rollout_timeout_secs),
            load_pods: args.load_pods,
            _forwards: forwards,
        })
    }
}

impl Environment for ClusterEnvironment {
    fn reach(&self) -> &Reach {
        &self.reach
    }

    async fn apply_knobs(&mut self, stage: &Stage) -> Result<(), TuneError> {
        apply_overlay(
            &self.cluster,
            &self.overlays.join(&stage.name),
            &stage.name,
            self.rollout_timeout,
        )
        .await
    }

    fn sample_resources(&self) -> ResourceSampling {
        ResourceSampling::Pods(self.cluster.pod_metrics_sampler())
    }

    async fn drive(&self, load: &StageLoad<'_>) -> Result<LoadSummary, TuneError> {
        let Some(pods) = self.load_pods else {
            return Ok(drive_here(load).await);
        };
        let spec = LoadgenJob {
            namespace: self.cluster.namespace.clone(),
            image: self.cluster.image_of(Service::Gateway.name()).await?,
            pods,
            // Inside the cluster the pods reach the gateway through its Service.
            target: in_cluster_gateway().to_string(),
            profile: load.profile,
            data: self.reach.seed.data_set(),
            // Time for every pod to be scheduled and started before the common start.
            start_at_unix_ms: Some(
                loadgen::unix_ms(SystemTime::now()) + LOAD_POD_START_DELAY.as_millis() as u64,
            ),
        };
        eprintln!(
            "  load from {pods} pods in the cluster (Job {})",
            k8s_manifests::loadgen_job::NAME
        );
        let timeout = LOAD_POD_START_DELAY + load.longest() + Duration::from_secs(60);
        let records = self.cluster.run_loadgen(&spec, timeout).await?;
        let merged = LoadRecord::merge(records).map_err(TuneError::Merge)?;
        Ok(merged.summary())
    }

    async fn close(self, _keep_up: bool) {}
}

/// Forwards to the in-cluster trace viewer (unless `--traces-api` names one) and to the
/// in-cluster emulator (unless `--cosmos-endpoint` points elsewhere than the default),
/// when they run; puts the forwarded addresses into `args`.
async fn forward_in_cluster_parts(cluster: &Cluster, args: &mut TuneArgs) -> Vec<PortForward> {
    let mut forwards = Vec::new();
    if args.traces_api.is_none() {
        let viewer = Service::TraceViewer;
        if let Ok(forward) = cluster
            .port_forward(viewer.name(), viewer.default_port())
            .await
        {
            eprintln!("trace viewer in the cluster, forwarded to {}", forward.url);
            args.traces_api = Some(forward.url.clone());
            forwards.push(forward);
        }
    }
    let default_endpoint = format!("http://{}", Service::CosmosEmulator.default_listen());
    if args.seed.cosmos.endpoint.trim_end_matches('/') == default_endpoint {
        let emulator = Service::CosmosEmulator;
        if let Ok(forward) = cluster
            .port_forward(emulator.name(), emulator.default_port())
            .await
        {
            eprintln!(
                "Cosmos emulator in the cluster, forwarded to {}",
                forward.url
            );
            args.seed.cosmos.endpoint = forward.url.to_string();
            forwards.push(forward);
        }
    }
    forwards
}

/// The gateway's Service, as pods in the namespace reach it.
fn in_cluster_gateway() -> url::Url {
    let gateway = Service::Gateway;
    url::Url::parse(&format!(
        "http://{}:{}/",
        gateway.name(),
        gateway.default_port()
    ))
    .expect("a Service name and a port form a valid URL")
}

/// Server-side applies a stage's overlay and waits for utilization-service's rollout,
/// the one workload a stage changes.
async fn apply_overlay(
    cluster: &Cluster,
    overlay: &Path,
    stage: &str,
    timeout: Duration,
) -> Result<(), TuneError> {
    let invalid = |reason: String| TuneError::Overlay {
        stage: stage.to_owned(),
        reason,
    };
    let objects = overlay::objects(&overlay::render(overlay).map_err(invalid)?).map_err(invalid)?;
    eprintln!(
        "  applying {} ({} objects) through the Kubernetes API",
        overlay.display(),
        objects.len()
    );
    cluster.apply(&objects).await?;
    cluster
        .wait_rollout(Service::Utilization.name(), timeout)
        .await?;
    eprintln!("  utilization-service rolled out");
    Ok(())
}
