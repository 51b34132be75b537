//! The command line: `seed`, `run`, `merge`, `up`, `tune`, `lab`, `capacity`, `compare`, `diagnose`, and the hidden `component`
//! the local stack uses to start each service as its own process. One module per command
//! that is not a library module of its own (`seed`, `tune`, `diagnose`).

mod compare;
mod merge;
pub mod run;
mod up;

use std::time::Instant;

use clap::{Parser, Subcommand};
use dronelab_seed::SeedArgs;
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
    /// Keep CPUs busy for a while, as other work on the machine (a stage's
    /// `busy_threads`).
    #[command(hide = true)]
    BurnCpu(crate::cpu_burner::BurnArgs),
}

/// Runs the command on the runtime [`runtime_for`] picks. The runtime is built here rather
/// than in the binary because a future is compiled where it is polled: with the
/// `block_on` in `main.rs`, the whole async call tree was compiled in the binary crate,
/// after this one instead of beside the other crates (35 s at the end of a release build).
pub fn main(cli: Cli) -> std::process::ExitCode {
    let worker_threads = std::env::var("TOKIO_WORKER_THREADS").ok();
    match runtime_for(&cli.command, worker_threads.as_deref()) {
        Ok(runtime) => runtime.block_on(execute(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A multi-threaded runtime (`worker_threads` is Tokio's `TOKIO_WORKER_THREADS`), but
/// for `run` with one worker, which gets a current-thread runtime: one thread runs the
/// load's tasks, polls their sockets and runs the command itself, where the
/// multi-threaded runtime's worker passes tasks through queues shared between threads
/// and takes turns on the core with the main thread running the command. On one core
/// (`bench/run loadgen`) that answered ~3 % more requests a second (134k against 131k),
/// and the open loop's sends were late by p99 1.3 ms rather than 1.9 ms at 45k/s.
fn runtime_for(
    command: &Command,
    worker_threads: Option<&str>,
) -> std::io::Result<tokio::runtime::Runtime> {
    let one_worker = worker_threads.is_some_and(|n| n.trim() == "1");
    if one_worker && matches!(command, Command::Run(_)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

async fn execute(cli: Cli) -> std::process::ExitCode {
    use std::process::ExitCode;
    match cli.command {
        Command::Component(component) => return component::run(component).await,
        Command::BurnCpu(args) => {
            if let Err(e) =
                tokio::task::spawn_blocking(move || crate::cpu_burner::burn(&args)).await
            {
                return fail(e);
            }
        }
        Command::Seed(args) => {
            init_logging();
            let started = Instant::now();
            match dronelab_seed::seed(&args, true).await {
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
                eprintln!("loadtest: {e}");
                return ExitCode::from(e.exit_code());
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

#[cfg(test)]
mod tests {
    use tokio::runtime::RuntimeFlavor;

    use super::*;

    fn flavor(args: &[&str], worker_threads: Option<&str>) -> RuntimeFlavor {
        let cli = Cli::try_parse_from(args).expect("valid arguments");
        let runtime = runtime_for(&cli.command, worker_threads).expect("runtime");
        runtime.handle().runtime_flavor()
    }

    #[test]
    fn only_run_with_one_worker_gets_a_current_thread_runtime() {
        let run = ["loadtest", "run", "--target", "http://127.0.0.1:1/"];
        assert_eq!(flavor(&run, Some("1")), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(&run, Some(" 1 ")), RuntimeFlavor::CurrentThread);
        for workers in [None, Some("2"), Some("")] {
            assert_eq!(
                flavor(&run, workers),
                RuntimeFlavor::MultiThread,
                "{workers:?}"
            );
        }
        let tune = ["loadtest", "tune"];
        assert_eq!(flavor(&tune, Some("1")), RuntimeFlavor::MultiThread);
    }
}
