use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use k8s_harness::podman::Lab;
use k8s_harness::{contract, image, proof, render};

/// dronelab's Kubernetes manifests without a cluster: render and check every overlay, or
/// run one as podman containers.
#[derive(Parser)]
#[command(name = "k8s-harness", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Render every overlay and check it against the binaries and the stage files.
    Check,
    /// Build the dronelab image from binaries built on this machine.
    Images {
        /// Where the binaries are (default: the `dist` profile's, as the image builds them).
        #[arg(long)]
        binaries: Option<PathBuf>,
    },
    /// Render an overlay and run it as containers; replace those whose pod template
    /// changed, like a rollout.
    Apply {
        /// The overlay directory, e.g. k8s/overlays/local/1-baseline.
        overlay: PathBuf,
        /// Return once every workload passes its readiness probe.
        #[arg(long)]
        wait: bool,
        /// Longest wait for readiness, in seconds.
        #[arg(long, default_value_t = 180)]
        timeout: u64,
        #[command(flatten)]
        lab: LabArgs,
    },
    /// List the lab's containers and their loopback addresses.
    Status {
        #[command(flatten)]
        lab: LabArgs,
    },
    /// Remove the lab's containers, network and volumes.
    Down {
        /// Keep the volumes (the emulator's documents).
        #[arg(long)]
        keep_volumes: bool,
        #[command(flatten)]
        lab: LabArgs,
    },
    /// The whole proof: build the binaries and the image, run the local overlays as
    /// containers, check readiness and liveness, run the quick tuning run against them
    /// through the stage overlays, and check its verdicts and trace links.
    Proof(proof::ProofArgs),
    /// Print the load generators' Job as `loadtest tune` builds it (the file
    /// `k8s/components/loadgen/job.yaml` is this; a test keeps them equal).
    Loadgen,
}

#[derive(clap::Args)]
struct LabArgs {
    /// The lab's name: its podman network, and the label on its containers and volumes
    /// (a letter or digit, then letters, digits, '-' or '_').
    #[arg(long, default_value = "dronelab", value_parser = k8s_harness::proof::lab_name)]
    lab: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    lifecycle::init_logging("warn");
    let outcome = match Cli::parse().command {
        Command::Check => check(),
        Command::Images { binaries } => {
            let lab = Lab::new("dronelab");
            let dir = binaries.unwrap_or_else(proof::image_binaries_dir);
            image::build(&lab, &dir, contract::VERSION)
                .await
                .map(|built| {
                    println!("{}: {:.1} MB", built.base, built.base_bytes as f64 / 1e6);
                    println!("{}: {:.1} MB", built.image, built.image_bytes as f64 / 1e6);
                })
                .map_err(|e| e.to_string())
        }
        Command::Apply {
            overlay,
            wait,
            timeout,
            lab,
        } => {
            apply(
                &Lab::new(&lab.lab),
                &overlay,
                wait,
                Duration::from_secs(timeout),
            )
            .await
        }
        Command::Status { lab } => status(&Lab::new(&lab.lab)).await,
        Command::Down { keep_volumes, lab } => Lab::new(&lab.lab)
            .down(keep_volumes)
            .await
            .map_err(|e| e.to_string()),
        Command::Proof(args) => proof::run(args).await,
        Command::Loadgen => k8s_harness::loadgen_yaml().map(|yaml| print!("{yaml}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("k8s-harness: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check() -> Result<(), String> {
    let overlays_dir = k8s_harness::k8s_dir().join("overlays");
    let problems = k8s_harness::check_overlays(&overlays_dir, |overlay, manifests| {
        println!(
            "{overlay:22} {:3} objects, {:4} lines",
            manifests.count(),
            manifests.lines
        );
    })
    .map_err(|e| e.to_string())?;
    if problems.is_empty() {
        println!("every overlay keeps the contract");
        Ok(())
    } else {
        for p in &problems {
            println!("  {p}");
        }
        Err(format!("{} problems", problems.len()))
    }
}

async fn apply(
    lab: &Lab,
    overlay: &std::path::Path,
    wait: bool,
    timeout: Duration,
) -> Result<(), String> {
    let manifests = render::render(overlay).map_err(|e| e.to_string())?;
    let changed = lab.apply(&manifests).await.map_err(|e| e.to_string())?;
    if changed.is_empty() {
        eprintln!("{}: unchanged", overlay.display());
    } else {
        eprintln!("{}: rolled out {}", overlay.display(), changed.join(", "));
    }
    if wait {
        for workload in manifests.workloads() {
            lab.wait_ready(&manifests, &workload.name, timeout)
                .await
                .map_err(|e| e.to_string())?;
        }
        eprintln!("every workload is ready");
    }
    Ok(())
}

async fn status(lab: &Lab) -> Result<(), String> {
    for c in lab.containers().await.map_err(|e| e.to_string())? {
        let ports: Vec<String> = c
            .ports
            .iter()
            .map(|(port, address)| format!("{port} → http://{address}/"))
            .collect();
        println!("{:22} {:44} {}", c.workload, c.name, ports.join(", "));
    }
    Ok(())
}
