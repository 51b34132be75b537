//! The command line: `seed`, `run`, `up`, `tune`, `diagnose`, and the hidden `component` the local
//! stack uses to start each service as its own process.

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use crate::calibration::EmulatorModel;
use crate::load::{self, Profile, Target};
use crate::seed::SeedArgs;
use crate::stack::Stack;
use crate::tune::TuneArgs;
use dronelab_contract::{QueryKnobs, QueryParallelism, Service};

#[derive(Parser)]
#[command(
    name = "loadtest",
    version,
    about = "dronelab: seed, load, local stack and the four-stage tuning run"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create the database and containers and upsert the deterministic data set.
    Seed(SeedArgs),
    /// Drive load against a gateway and write a report.
    Run(RunArgs),
    /// Start the local stack (trace viewer, emulator, backends, gateway), seed it, and
    /// keep it up.
    Up(UpArgs),
    /// The main job: run the study's four tuning stages and report beside its numbers.
    Tune(Box<TuneArgs>),
    /// Read traces from a Jaeger-compatible API and name the bottleneck and the next step.
    Diagnose(crate::diagnose::DiagnoseArgs),
    /// Run one component of the local stack in this process (used by `up` and `tune`).
    #[command(hide = true, subcommand)]
    Component(Component),
}

#[derive(Subcommand)]
pub enum Component {
    CosmosEmulator(cosmos_emulator::Config),
    DeliveryService(SummaryComponent),
    PackageService(SummaryComponent),
    UtilizationService(UtilizationComponent),
    Gateway(GatewayComponent),
    TraceViewer(trace_viewer::Config),
}

#[derive(clap::Args)]
pub struct SummaryComponent {
    #[arg(long)]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    args: summary_backend::SummaryArgs,
}

#[derive(clap::Args)]
pub struct UtilizationComponent {
    #[arg(long)]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    args: utilization_service::UtilizationArgs,
}

#[derive(clap::Args)]
pub struct GatewayComponent {
    #[arg(long)]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    args: gateway::GatewayArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ProfileKind {
    Step,
    Constant,
    Arrival,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Gateway base URL.
    #[arg(long, default_value_t = Service::Gateway.default_url())]
    pub target: url::Url,
    /// Path to request, with `?ownerId&year&month` added (a backend's route works too).
    #[arg(long, default_value = dronelab_contract::routes::INVOICES)]
    pub path: String,
    #[arg(long, value_enum, default_value = "step")]
    pub profile: ProfileKind,
    /// Run length in seconds.
    #[arg(long, default_value_t = 480.0)]
    pub duration: f64,
    /// Step: users at the start.
    #[arg(long, default_value_t = 4)]
    pub start_users: usize,
    /// Step: users added per step.
    #[arg(long, default_value_t = 4)]
    pub step_users: usize,
    /// Step: seconds per step.
    #[arg(long, default_value_t = 10.0)]
    pub step_secs: f64,
    /// Step: most users; constant: the users.
    #[arg(long, default_value_t = 40)]
    pub users: usize,
    /// Arrival: requests per second (open loop).
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Arrival: most requests in flight before new ones are dropped.
    #[arg(long, default_value_t = 1000)]
    pub max_in_flight: usize,
    /// Request timeout in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// The seeded data set the requests pick from.
    #[arg(long, default_value_t = 1000)]
    pub owners: usize,
    #[arg(long, default_value_t = 12)]
    pub months: usize,
    /// Write the summary (JSON) here.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

impl RunArgs {
    fn profile(&self) -> Result<Profile, String> {
        if !(self.duration > 0.0 && self.duration <= 24.0 * 3600.0) {
            return Err("--duration must be between 0 and 86400 seconds".into());
        }
        Ok(match self.profile {
            ProfileKind::Step => Profile::Step {
                start_users: self.start_users,
                step_users: self.step_users,
                step_secs: self.step_secs,
                max_users: self.users,
                duration_secs: self.duration,
            },
            ProfileKind::Constant => Profile::Constant {
                users: self.users,
                duration_secs: self.duration,
            },
            ProfileKind::Arrival => {
                if !(self.rate > 0.0 && self.rate <= 100_000.0) {
                    return Err("--rate must be between 0 and 100000 requests/s".into());
                }
                Profile::Arrival {
                    rate_per_sec: self.rate,
                    duration_secs: self.duration,
                    max_in_flight: self.max_in_flight.max(1),
                }
            }
        })
    }
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// Physical partitions of each container.
    #[arg(long, default_value_t = 9)]
    pub partitions: u16,
    /// Utilization query parallelism (0, -1 or N).
    #[arg(long, default_value = "0", allow_negative_numbers = true)]
    pub query_parallelism: QueryParallelism,
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub use_partition_key: bool,
    /// Directory for the components' logs.
    #[arg(long, default_value = "reports/stack-logs")]
    pub logs: std::path::PathBuf,
    #[command(flatten)]
    pub seed: SeedArgs,
}

pub async fn main(cli: Cli) -> std::process::ExitCode {
    use std::process::ExitCode;
    match cli.command {
        Command::Component(component) => return run_component(component).await,
        Command::Seed(args) => {
            init_logging();
            let started = Instant::now();
            match crate::seed::seed(&args, true).await {
                Ok(n) => println!(
                    "seeded {n} documents in {:.1} s",
                    started.elapsed().as_secs_f64()
                ),
                Err(e) => return fail(e),
            }
        }
        Command::Run(args) => {
            init_logging();
            let profile = match args.profile() {
                Ok(p) => p,
                Err(e) => return fail(e),
            };
            let target = Target {
                gateway: args.target.clone(),
                path: args.path.clone(),
                data: crate::data::DataSet {
                    seed: 0,
                    owners: args.owners,
                    months: args.months,
                    drones_per_owner: 1,
                },
                timeout: Duration::from_secs(args.timeout.max(1)),
            };
            let summary = load::run(target, profile, true, "run").await;
            println!(
                "{} requests, {} ok, {} failed, {:.1} req/s; latency ms avg {:.1} p50 {:.1} p90 {:.1} p95 {:.1} p99 {:.1} max {:.1}",
                summary.requests, summary.successful_requests, summary.failed_requests, summary.throughput_rps,
                summary.latency_ms.avg, summary.latency_ms.p50, summary.latency_ms.p90, summary.latency_ms.p95,
                summary.latency_ms.p99, summary.latency_ms.max
            );
            if let Some(path) = args.out {
                let written = serde_json::to_vec_pretty(&summary)
                    .map_err(std::io::Error::other)
                    .and_then(|json| std::fs::write(&path, json));
                if let Err(e) = written {
                    return fail(format!("writing {}: {e}", path.display()));
                }
            }
        }
        Command::Up(args) => {
            init_logging();
            if let Err(e) = up(args).await {
                return fail(e);
            }
        }
        Command::Diagnose(args) => {
            init_logging();
            if let Err(e) = crate::diagnose::run(args).await {
                return fail(e);
            }
        }
        Command::Tune(args) => {
            init_logging();
            if let Err(e) = crate::tune::tune(*args).await {
                return fail(e);
            }
        }
    }
    ExitCode::SUCCESS
}

fn fail(e: impl std::fmt::Display) -> std::process::ExitCode {
    eprintln!("loadtest: {e}");
    std::process::ExitCode::FAILURE
}

/// Quiet by default: the progress lines are the interface; `RUST_LOG=info` shows more.
fn init_logging() {
    lifecycle::init_logging("warn");
}

async fn up(args: UpArgs) -> Result<(), String> {
    let model = EmulatorModel::default();
    let mut stack = Stack::start(&args.logs, args.partitions, &model)
        .await
        .map_err(|e| e.to_string())?;
    stack.seed(&args.seed).await.map_err(|e| e.to_string())?;
    stack
        .start_services(QueryKnobs {
            parallelism: args.query_parallelism,
            use_partition_key: args.use_partition_key,
        })
        .await
        .map_err(|e| e.to_string())?;
    println!("dronelab is up (logs in {}):", args.logs.display());
    for c in stack.components() {
        println!("  {:20} {}", c.name, c.url);
    }
    if let Some(gateway) = stack.url(Service::Gateway.name()) {
        println!(
            "try: curl '{}api/invoices?ownerId={}&year=2026&month=12'",
            gateway,
            crate::data::DataSet::owner_id(0)
        );
    }
    println!("Ctrl-C stops everything.");
    let outcome = tokio::select! {
        _ = service_kit::server::shutdown_signal() => Ok(()),
        (name, status) = stack.crashed() => Err(format!("{name} exited unexpectedly ({status}); stopping the stack")),
    };
    stack.shutdown().await;
    outcome
}

async fn run_component(component: Component) -> std::process::ExitCode {
    match component {
        Component::CosmosEmulator(config) => cosmos_emulator::main(config).await,
        Component::DeliveryService(c) => {
            summary_backend::main::<delivery_service::Deliveries>(
                delivery_service::SERVICE_NAME,
                c.listen,
                c.args,
            )
            .await
        }
        Component::PackageService(c) => {
            summary_backend::main::<package_service::Packages>(
                package_service::SERVICE_NAME,
                c.listen,
                c.args,
            )
            .await
        }
        Component::UtilizationService(c) => utilization_service::main(c.listen, c.args).await,
        Component::Gateway(c) => gateway::main(c.listen, c.args).await,
        Component::TraceViewer(config) => trace_viewer::main(config).await,
    }
}
