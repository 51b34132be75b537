//! `loadtest up`: the local stack, seeded, until Ctrl-C.

use dronelab_contract::lab::LabKnobs;
use dronelab_contract::{QueryKnobs, QueryParallelism, Service};
use dronelab_seed::SeedArgs;
use dronelab_study::{DataSet, EmulatorModel};
use local_stack::Stack;

use crate::emulator::{self, EmulatorAdmin};

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

pub async fn up(args: UpArgs) -> Result<(), String> {
    let model = EmulatorModel::default();
    let mut stack = Stack::start(&args.logs, args.partitions, &model)
        .await
        .map_err(|e| e.to_string())?;
    let mut seed = args.seed.clone();
    seed.cosmos.endpoint = stack.emulator.url.to_string();
    emulator::seed(Some(&EmulatorAdmin::of_stack(&stack)), &seed)
        .await
        .map_err(|e| e.to_string())?;
    stack
        .start_services(
            QueryKnobs {
                parallelism: args.query_parallelism,
                use_partition_key: args.use_partition_key,
            },
            &LabKnobs::default(),
        )
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
            DataSet::owner_id(0)
        );
    }
    println!(
        "Prometheus targets: {} (dashboards/prometheus/local.yml reads it)",
        stack.prometheus_targets().display()
    );
    println!("Ctrl-C stops everything.");
    let outcome = tokio::select! {
        _ = service_kit::server::shutdown_signal() => Ok(()),
        (name, status) = stack.crashed() => Err(format!("{name} exited unexpectedly ({status}); stopping the stack")),
    };
    stack.shutdown().await;
    outcome
}
