//! A Kubernetes cluster driven through its API (`--cluster`): each stage's overlay
//! server-side applied and the rollouts it starts awaited; the load from here at
//! `--target`, or from `--load-pods` pods of an Indexed Job inside the cluster; CPU and
//! memory from the metrics API; the in-cluster trace viewer, emulator and
//! utilization-service reached through port-forwards unless the user names others.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dronelab_contract::Service;
use dronelab_study::Stage;
use k8s_manifests::{overlay, LoadgenJob};
use loadgen::{LoadRecord, LoadSummary};

use super::{drive_here, reach_existing, Environment, Reach, ResourceSampling, StageLoad};
use crate::cluster::metrics::LoadStart;
use crate::cluster::schedule::start_spread;
use crate::cluster::{Cluster, ClusterError, PortForward};
use crate::tune::{TuneArgs, TuneError};

/// Load pods that start further apart than this are worth a word.
const START_SPREAD_NOTICE: Duration = Duration::from_secs(2);

pub struct ClusterEnvironment {
    cluster: Cluster,
    reach: Reach,
    overlays: PathBuf,
    rollout_timeout: Duration,
    /// Load from this many pods in the cluster instead of from this process.
    load_pods: Option<u32>,
    /// How long after the Job is created its pods start the load together.
    load_start_lead: Duration,
    /// When the current stage's load started, for the CPU and memory sampler.
    load_start: LoadStart,
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
        let forwards = forward_in_cluster_parts(&cluster, &mut args).await?;
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
            load_start_lead: Duration::from_secs(args.load_start_lead_secs),
            load_start: LoadStart::default(),
            _forwards: forwards,
        })
    }

    /// The cluster, to clean up after an interrupted run.
    pub fn cluster(&self) -> Cluster {
        self.cluster.clone()
    }
}

impl Environment for ClusterEnvironment {
    fn reach(&self) -> &Reach {
        &self.reach
    }

    async fn apply_knobs(&mut self, stage: &Stage) -> Result<(), TuneError> {
        apply_overlay(
            &self.cluster,
            &self.overlays.join(stage.overlay()),
            &stage.name,
            self.rollout_timeout,
        )
        .await
    }

    fn sample_resources(&self) -> ResourceSampling {
        self.load_start.clear();
        ResourceSampling::Pods(self.cluster.pod_metrics_sampler(self.load_start.clone()))
    }

    async fn drive(&self, load: &StageLoad<'_>) -> Result<LoadSummary, TuneError> {
        if load.stage.busy_threads > 0 {
            eprintln!(
                "  busy_threads = {} is for local runs: a cluster's nodes are not this machine, nothing is started",
                load.stage.busy_threads
            );
        }
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
            popularity: load.stage.popularity,
            // Set once the Job can be created, from the API server's clock.
            start_at_unix_ms: None,
        };
        eprintln!(
            "  load from {pods} pods in the cluster (Job {}), starting together {} s after it is created",
            k8s_manifests::loadgen_job::NAME,
            self.load_start_lead.as_secs()
        );
        // Late pods still run (up to `loadtest run`'s limit on a late start), then the
        // load itself, every request's timeout included.
        let timeout = self.load_start_lead
            + loadgen::start::MAX_LATE_START
            + load.profile.duration()
            + load.target.timeout
            + Duration::from_secs(60);
        let (records, start) = self
            .cluster
            .run_loadgen(spec, self.load_start_lead, timeout)
            .await?;
        self.load_start.set(start);
        let starts: Vec<u64> = records.iter().map(|r| r.started_at_unix_ms).collect();
        let spread = start_spread(&starts);
        if spread > START_SPREAD_NOTICE {
            eprintln!(
                "  the load pods started {:.1} s apart (image pulls, slow nodes or clock skew): the merged figures place each pod's load where it ran, so the first seconds had fewer users; raise --load-start-lead-secs",
                spread.as_secs_f64()
            );
        }
        let merged = LoadRecord::merge(records).map_err(TuneError::Merge)?;
        Ok(merged.summary())
    }

    async fn close(self, _keep_up: bool) {}
}

/// Forwards to the in-cluster trace viewer (unless `--traces-api` names one), to the
/// in-cluster emulator (unless `--cosmos-endpoint` points elsewhere than the default)
/// and to utilization-service for its `/metrics` (unless `--utilization-url` names
/// it); puts the forwarded addresses into `args`. A part that does not run is left out
/// with a word; refused rights end the run here, before any stage.
async fn forward_in_cluster_parts(
    cluster: &Cluster,
    args: &mut TuneArgs,
) -> Result<Vec<PortForward>, TuneError> {
    let mut forwards = Vec::new();
    if args.traces_api.is_none() {
        if let Some(forward) =
            forward(cluster, Service::TraceViewer, "the stages' diagnosis").await?
        {
            args.traces_api = Some(forward.url.clone());
            forwards.push(forward);
        }
    }
    let default_endpoint = format!("http://{}", Service::CosmosEmulator.default_listen());
    if args.seed.cosmos.endpoint.trim_end_matches('/') == default_endpoint {
        if let Some(forward) = forward(
            cluster,
            Service::CosmosEmulator,
            "seeding and the emulator's counters",
        )
        .await?
        {
            args.seed.cosmos.endpoint = forward.url.to_string();
            forwards.push(forward);
        }
    }
    if args.utilization_url.is_none() {
        let why = "server-side latency, RU and calls per operation";
        if let Some(forward) = forward(cluster, Service::Utilization, why).await? {
            eprintln!(
                "  utilization-service's /metrics are read from its newest ready pod: with more than one replica, the per-operation figures are that pod's share of the load"
            );
            args.utilization_url = Some(forward.url.clone());
            forwards.push(forward);
        }
    }
    Ok(forwards)
}

/// A forward to `service`'s pods, `None` (said) when none is ready; an error when the
/// forward itself is refused.
async fn forward(
    cluster: &Cluster,
    service: Service,
    for_what: &str,
) -> Result<Option<PortForward>, TuneError> {
    match cluster
        .port_forward(service.name(), service.default_port())
        .await
    {
        Ok(forward) => {
            eprintln!(
                "{} in the cluster (pod {}), forwarded to {}",
                service.name(),
                forward.pod,
                forward.url
            );
            Ok(Some(forward))
        }
        Err(ClusterError::Forward { app, reason }) => {
            eprintln!("no {app} to forward to ({reason}): {for_what} left out");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
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

/// Server-side applies a stage's overlay and waits for the rollouts it can start:
/// utilization-service's (the query's knobs) and those of every service an antipattern
/// lab knob belongs to (the lab's ConfigMap is in their environment too, so its new hash
/// rolls them all; an unchanged deployment is ready at once).
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
    let config_maps = cluster.apply(objects).await?;
    let mut rolled = vec![Service::Utilization];
    for knob in &dronelab_contract::lab::KNOBS {
        if !rolled.contains(&knob.service) {
            rolled.push(knob.service);
        }
    }
    for service in rolled {
        cluster.wait_rollout(service.name(), timeout).await?;
        eprintln!("  {} rolled out", service.name());
    }
    cluster.prune_config_maps(&config_maps).await;
    Ok(())
}
