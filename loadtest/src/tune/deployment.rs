//! Where the run's load goes and how a stage is put in place: the local stack this
//! process starts, or an existing deployment (`--target`) whose query knobs a
//! `--stage-command` rolls out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use azure_data_cosmos::models::ThroughputProperties;
use azure_data_cosmos::CosmosClient;
use dronelab_contract::{Container, QueryKnobs, Service};
use trace_analysis::client::TraceApi;

use super::{TuneArgs, TuneError};
use crate::calibration::EmulatorModel;
use crate::cluster::{manifests, Cluster, PortForward};
use crate::emulator::{self, EmulatorAdmin};
use crate::seed::SeedArgs;
use crate::stack::Stack;
use crate::stages::Stage;

/// The system under load.
pub struct Deployment {
    pub gateway: url::Url,
    /// dronelab's emulator, when Cosmos DB is one: its counters go into the report.
    pub emulator: Option<EmulatorAdmin>,
    /// The local stack, when this run started it.
    pub stack: Option<Stack>,
    /// Where to read traces for the per-stage diagnosis.
    pub traces: Option<TraceApi>,
    /// utilization-service, for its `/metrics`.
    pub utilization: Option<url::Url>,
    /// Where to change RU/s and seed: the seeding arguments with the actual endpoint.
    pub seed: SeedArgs,
    /// The cluster, in cluster mode, and where its stage overlays are.
    pub cluster: Option<(Cluster, PathBuf, Duration)>,
    /// Port-forwards to in-cluster parts, alive as long as the run.
    forwards: Vec<PortForward>,
    /// The query knobs utilization-service runs with now.
    knobs: QueryKnobs,
}

impl Deployment {
    /// Starts the local stack, or finds out what `--target` is; seeds unless told not to.
    pub async fn prepare(
        args: &TuneArgs,
        first: &Stage,
        dir: &Path,
        model: &EmulatorModel,
        http: &reqwest::Client,
    ) -> Result<Self, TuneError> {
        // Connect first: a wrong context or missing rights should stop the run before
        // minutes of seeding.
        let cluster = match args.cluster {
            true => Some(Cluster::connect(args.kube_context.as_deref(), &args.namespace).await?),
            false => None,
        };
        // In-cluster parts the run reaches from here: through the API server unless the
        // user gave an address.
        let mut args = args.clone();
        let mut forwards = Vec::new();
        if let Some(cluster) = &cluster {
            forwards = forward_in_cluster_parts(cluster, &mut args).await;
        }
        let args = &args;
        let mut deployment = match (&args.target, &cluster) {
            (Some(target), _) => Self::existing(args, first, target, http).await?,
            (None, Some(_)) if args.load_pods.is_some() => {
                Self::existing(args, first, &in_cluster_gateway(), http).await?
            }
            (None, Some(_)) => return Err(TuneError::NoLoadSource),
            (None, None) => Self::local(args, first, dir, model).await?,
        };
        deployment.forwards = forwards;
        if let Some(cluster) = cluster {
            eprintln!(
                "cluster mode: context {}, namespace {}, overlays from {}",
                cluster.context,
                cluster.namespace,
                args.overlays.display()
            );
            deployment.cluster = Some((
                cluster,
                args.overlays.clone(),
                Duration::from_secs(args.rollout_timeout_secs),
            ));
        }
        deployment.traces = args
            .traces_api
            .clone()
            .or_else(|| deployment.viewer().cloned())
            .map(TraceApi::new);
        if let Some(viewer) = deployment.viewer() {
            eprintln!("trace viewer: {viewer}");
        }
        Ok(deployment)
    }

    async fn existing(
        args: &TuneArgs,
        first: &Stage,
        target: &url::Url,
        http: &reqwest::Client,
    ) -> Result<Self, TuneError> {
        let seed = args.seed.clone();
        let emulator = EmulatorAdmin::detect(
            http.clone(),
            &seed.cosmos.endpoint,
            seed.cosmos.key().clone(),
        )
        .await;
        match &emulator {
            Some(e) => eprintln!(
                "Cosmos DB at {} is dronelab's emulator: its counters go into the report",
                e.url()
            ),
            None => eprintln!(
                "Cosmos DB at {} is not dronelab's emulator: 429s and RU/s per partition are in Azure Monitor, not in this report",
                seed.cosmos.endpoint
            ),
        }
        if !args.skip_seed {
            let started = Instant::now();
            let written = emulator::seed(emulator.as_ref(), &seed).await?;
            report_seeded(written, started);
        }
        Ok(Self {
            gateway: target.clone(),
            emulator,
            stack: None,
            traces: None,
            utilization: args.utilization_url.clone(),
            seed,
            cluster: None,
            forwards: Vec::new(),
            // As deployed for the first stage; a differing one is applied when it comes.
            knobs: first.config.knobs(),
        })
    }

    async fn local(
        args: &TuneArgs,
        first: &Stage,
        dir: &Path,
        model: &EmulatorModel,
    ) -> Result<Self, TuneError> {
        eprintln!("starting the local stack (logs in {}/logs)", dir.display());
        let mut stack = Stack::start(&dir.join("logs"), first.config.partitions, model).await?;
        let mut seed = args.seed.clone();
        seed.cosmos.endpoint = stack.emulator.url.to_string();
        if !args.skip_seed {
            let started = Instant::now();
            let written = stack.seed(&seed).await?;
            report_seeded(written, started);
        }
        let knobs = first.config.knobs();
        stack.start_services(knobs).await?;
        let gateway = stack
            .url(Service::Gateway.name())
            .cloned()
            .unwrap_or_else(|| stack.emulator.url.clone());
        Ok(Self {
            gateway,
            emulator: Some(stack.emulator_admin()),
            utilization: stack.url(Service::Utilization.name()).cloned(),
            stack: Some(stack),
            traces: None,
            seed,
            cluster: None,
            forwards: Vec::new(),
            knobs,
        })
    }

    fn viewer(&self) -> Option<&url::Url> {
        self.stack
            .as_ref()
            .and_then(|s| s.trace_viewer.as_ref())
            .map(|v| &v.url)
    }

    /// Puts the stage's query knobs in place: through `--stage-command` before every
    /// stage (applying is idempotent, and the command waits until the deployment is
    /// ready for load), by restarting the local utilization-service, or by asking.
    pub async fn apply(&mut self, stage: &Stage, command: Option<&str>) -> Result<(), TuneError> {
        let wanted = stage.config.knobs();
        if let Some((cluster, overlays, timeout)) = &self.cluster {
            apply_overlay(cluster, &overlays.join(&stage.name), &stage.name, *timeout).await?;
            self.knobs = wanted;
            return Ok(());
        }
        match (command, self.stack.as_mut()) {
            (Some(command), _) => apply_stage(command, &stage.name).await?,
            (None, Some(stack)) if wanted != self.knobs => {
                stack.restart_utilization(wanted).await?;
                self.utilization = stack.url(Service::Utilization.name()).cloned();
            }
            (None, None) if wanted != self.knobs => {
                eprintln!(
                    "  apply k8s/overlays/{} (parallelism {}, partition key {}) now; the run continues in 60 s (--stage-command does this for you)",
                    stage.name, wanted.parallelism, wanted.use_partition_key
                );
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            _ => {}
        }
        self.knobs = wanted;
        Ok(())
    }
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
pub fn in_cluster_gateway() -> url::Url {
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
    let objects =
        manifests::objects(&manifests::render(overlay).map_err(invalid)?).map_err(invalid)?;
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

fn report_seeded(written: usize, started: Instant) {
    eprintln!(
        "seeded {written} documents in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

pub async fn set_throughput(
    client: &CosmosClient,
    database: &str,
    ru: u64,
) -> Result<(), TuneError> {
    let db = client.database_client(database);
    for container in [Container::Utilization, Container::UtilizationByOwner].map(Container::name) {
        let c = db
            .container_client(container, None)
            .await
            .map_err(|e| TuneError::Cosmos(format!("{container}: {e}")))?;
        c.begin_replace_throughput(ThroughputProperties::manual(ru), None)
            .await
            .map_err(|e| TuneError::Cosmos(format!("replace throughput of {container}: {e}")))?
            .await
            .map_err(|e| TuneError::Cosmos(format!("replace throughput of {container}: {e}")))?;
    }
    Ok(())
}

/// Runs `--stage-command` for `stage` and waits for it.
pub async fn apply_stage(command: &str, stage: &str) -> Result<(), TuneError> {
    let line = command.replace("{stage}", stage);
    eprintln!("  applying the stage: {line}");
    let failed = |reason: String| TuneError::StageCommand {
        stage: stage.to_owned(),
        reason,
    };
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env("DRONELAB_STAGE", stage)
        .stdin(std::process::Stdio::null())
        // Its output is progress, like ours: stdout stays the run's result.
        .stdout(std::io::stderr())
        .status()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(failed(status.to_string()))
    }
}
