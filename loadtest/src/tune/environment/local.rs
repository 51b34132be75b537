//! The local stack: every component started here as its own process, seeded with the
//! emulator's latency model off, a service restarted when a stage changes its query or
//! lab knobs (as a rollout would), CPU and memory read from `/proc`.

use std::path::Path;

use dronelab_contract::lab::LabKnobs;
use dronelab_contract::{QueryKnobs, Service};
use dronelab_study::{EmulatorModel, Stage};
use local_stack::resources::ResourceSampler;
use local_stack::Stack;
use trace_analysis::client::TraceApi;

use loadgen::LoadSummary;

use super::{drive_here, Environment, Reach, ResourceSampling, StageLoad};
use crate::cpu_burner::OtherCpuLoad;
use crate::emulator::EmulatorAdmin;
use crate::tune::{TuneArgs, TuneError};

pub struct LocalStack {
    stack: Stack,
    reach: Reach,
    /// The query knobs utilization-service runs with now.
    knobs: QueryKnobs,
    /// Its antipattern lab knobs now.
    lab: LabKnobs,
}

impl LocalStack {
    /// Starts the stack with `first`'s partitions and knobs, logs in `dir/logs`, and seeds
    /// it unless `--skip-seed`.
    pub async fn start(
        args: &TuneArgs,
        first: &Stage,
        dir: &Path,
        model: &EmulatorModel,
    ) -> Result<Self, TuneError> {
        eprintln!("starting the local stack (logs in {}/logs)", dir.display());
        let mut stack = Stack::start(&dir.join("logs"), first.config.partitions, model).await?;
        let emulator = EmulatorAdmin::of_stack(&stack);
        let mut seed = args.seed.clone();
        seed.cosmos.endpoint = stack.emulator.url.to_string();
        if !args.skip_seed {
            crate::emulator::seed(Some(&emulator), &seed).await?;
        }
        let knobs = first.config.knobs();
        let lab = first.knobs.clone();
        stack.start_services(knobs, &lab).await?;
        let viewer = stack.trace_viewer.as_ref().map(|v| v.url.clone());
        if let Some(viewer) = &viewer {
            eprintln!("trace viewer: {viewer}");
        }
        let reach = Reach {
            gateway: stack
                .url(Service::Gateway.name())
                .cloned()
                .ok_or_else(|| TuneError::Target("the stack has no gateway".into()))?,
            seed,
            emulator: Some(emulator),
            traces: args.traces_api.clone().or(viewer).map(TraceApi::new),
            utilization: stack.url(Service::Utilization.name()).cloned(),
            spans: [
                Service::Gateway,
                Service::Delivery,
                Service::Package,
                Service::Utilization,
            ]
            .into_iter()
            .filter_map(|s| Some((s.name().to_owned(), stack.url(s.name())?.clone())))
            .collect(),
            sampling: format!(
                "every request traced (the local stack runs each service with OTEL_TRACES_SAMPLER={}): the diagnosis reads every trace",
                local_stack::SAMPLER
            ),
        };
        Ok(Self {
            stack,
            reach,
            knobs,
            lab,
        })
    }
}

impl Environment for LocalStack {
    fn reach(&self) -> &Reach {
        &self.reach
    }

    /// Drives the load from this process, with the stage's other CPU work beside it.
    async fn drive(&self, load: &StageLoad<'_>) -> Result<LoadSummary, TuneError> {
        let _other_work = OtherCpuLoad::start(
            load.stage.busy_threads,
            load.profile.duration() + load.target.timeout,
        )
        .map_err(|e| TuneError::Target(format!("cannot start busy_threads: {e}")))?;
        Ok(drive_here(load).await)
    }

    async fn apply_knobs(&mut self, stage: &Stage) -> Result<(), TuneError> {
        let wanted = stage.config.knobs();
        for service in local_stack::stack::SERVICES {
            let query_changed = service == Service::Utilization && wanted != self.knobs;
            if query_changed || stage.knobs.for_service(service) != self.lab.for_service(service) {
                self.stack.restart(service, wanted, &stage.knobs).await?;
            }
        }
        self.reach.utilization = self.stack.url(Service::Utilization.name()).cloned();
        self.knobs = wanted;
        self.lab = stage.knobs.clone();
        Ok(())
    }

    fn sample_resources(&self) -> ResourceSampling {
        let processes = self
            .stack
            .components()
            .filter_map(|c| Some((c.name.to_owned(), c.pid()?)))
            .collect();
        ResourceSampling::Processes(ResourceSampler::start(processes))
    }

    async fn close(self, keep_up: bool) {
        if keep_up {
            println!("\nthe stack stays up (Ctrl-C stops it):");
            for c in self.stack.components() {
                println!("  {:20} {}", c.name, c.url);
            }
            service_kit::server::shutdown_signal().await;
        }
        self.stack.shutdown().await;
    }
}
