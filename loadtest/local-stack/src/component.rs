//! `<binary> component <name>`: one component of the local stack in this process. The stack
//! starts each child as its own binary re-executed with this subcommand.

use clap::Subcommand;

/// Each service's own command line: the local stack starts a component exactly as its
/// binary would start.
#[derive(Subcommand)]
pub enum Component {
    CosmosEmulator(cosmos_emulator::Config),
    DeliveryService(delivery_service::Cli),
    PackageService(package_service::Cli),
    UtilizationService(utilization_service::Cli),
    Gateway(gateway::Cli),
    TraceViewer(trace_viewer::Config),
}

pub async fn run(component: Component) -> std::process::ExitCode {
    use service_kit::server::launch;
    match component {
        Component::CosmosEmulator(config) => cosmos_emulator::main(config).await,
        Component::DeliveryService(cli) => launch(cli).await,
        Component::PackageService(cli) => launch(cli).await,
        Component::UtilizationService(cli) => launch(cli).await,
        Component::Gateway(cli) => launch(cli).await,
        Component::TraceViewer(config) => trace_viewer::main(config).await,
    }
}
