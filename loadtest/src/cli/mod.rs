//! The command line: `seed`, `run`, `merge`, `up`, `tune`, `lab`, `capacity`, `compare`, `diagnose`, and the hidden `component`
//! the local stack uses to start each service as its own process. One module per command
//! that is not a library module of its own (`seed`, `tune`, `diagnose`).

mod compare;
mod merge;
pub mod run;
mod up;

use std::time::Instant;

use clap::{Parser, Subcommand};
use dronelab_study::SeedArgs;
use local_stack::component::{self, Component};

use crate::tune::TuneArgs;

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
    Run(run::RunArgs),
    /// Start the local stack (trace viewer, emulator, backends, gateway), seed it, and
    /// keep it up.
    Up(up::UpArgs),
    /// The main job: run the study's four tuning stages and report beside its numbers.
    Tune(Box<TuneArgs>),
    /// The antipattern lab: the study's four stages and every antipattern pair under
    /// `loadtest/stages/antipatterns` (`--only <antipattern>,study`), ending with the
    /// confusion matrix of the problem each stage expects against the one diagnosed.
    Lab(Box<TuneArgs>),
    /// Each stage's capacity at a latency objective: a calibration, the predicted knee,
    /// then a bounded search of open-loop steps for the highest rate whose p99 stays
    /// within `--slo-p99-ms` (the same as `tune --capacity`).
    Capacity(Box<TuneArgs>),
    /// Combine the records of a run's shards (`run --shard i/N --record`) into one.
    Merge(merge::MergeArgs),
    /// Two runs' reports side by side: per stage and figure the difference and whether
    /// it is significant, and a page overlaying their series.
    Compare(compare::CompareArgs),
    /// Read traces from a Jaeger-compatible API and name the bottleneck and the next step.
    Diagnose(crate::diagnose::DiagnoseArgs),
    /// Run one component of the local stack in this process (used by `up` and `tune`).
    #[command(hide = true, subcommand)]
    Component(Component),
}

/// Runs the command on a multi-threaded runtime. The runtime is built here rather than
/// in the binary because a future is compiled where it is polled: with the `block_on` in
/// `main.rs`, the whole async call tree was compiled in the binary crate, after this
/// one instead of beside the other crates (35 s at the end of a release build).
pub fn main(cli: Cli) -> std::process::ExitCode {
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(execute(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn execute(cli: Cli) -> std::process::ExitCode {
    use std::process::ExitCode;
    match cli.command {
        Command::Component(component) => return component::run(component).await,
        Command::Seed(args) => {
            init_logging();
            let started = Instant::now();
            match dronelab_study::seed::seed(&args, true).await {
                Ok(n) => println!(
                    "seeded {n} documents in {:.1} s",
                    started.elapsed().as_secs_f64()
                ),
                Err(e) => return fail(e),
            }
        }
        Command::Run(args) => {
            init_logging();
            if let Err(e) = run::run(args).await {
                return fail(e);
            }
        }
        Command::Up(args) => {
            init_logging();
            if let Err(e) = up::up(args).await {
                return fail(e);
            }
        }
        Command::Merge(args) => {
            init_logging();
            if let Err(e) = merge::merge(args) {
                return fail(e);
            }
        }
        Command::Compare(args) => {
            if let Err(e) = compare::run(args) {
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
        Command::Capacity(mut args) => {
            init_logging();
            args.capacity.capacity = true;
            if let Err(e) = crate::tune::tune(*args).await {
                return fail(e);
            }
        }
        Command::Lab(args) => {
            init_logging();
            if let Err(e) = crate::tune::lab(*args).await {
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
