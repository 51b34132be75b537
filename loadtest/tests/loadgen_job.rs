//! The load generators' Job starts `loadtest run` in every pod: its arguments, as
//! Kubernetes expands them, must parse to the same profile, the pod's shard and the
//! common start.

use clap::Parser as _;
use k8s_manifests::LoadgenJob;
use loadgen::Profile;
use loadtest::cli::{Cli, Command};

#[test]
fn every_pod_runs_its_shard_of_the_same_profile() {
    let spec = LoadgenJob {
        start_at_unix_ms: Some(1_700_000_000_000),
        ..LoadgenJob::default()
    };
    let job = spec.job();
    let job_spec = job.spec.as_ref().expect("spec");
    assert_eq!(job_spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!(
        (job_spec.completions, job_spec.parallelism),
        (Some(4), Some(4))
    );
    // What Kubernetes runs in pod 2, after expanding $(SHARD_INDEX):
    let args: Vec<String> = std::iter::once("loadtest".to_owned())
        .chain(
            spec.args()
                .into_iter()
                .map(|a| a.replace("$(SHARD_INDEX)", "2")),
        )
        .collect();
    let Ok(Cli {
        command: Command::Run(run),
    }) = Cli::try_parse_from(&args)
    else {
        panic!("not a valid `loadtest run`: {args:?}");
    };
    assert_eq!(run.profile().expect("profile"), spec.profile);
    assert_eq!(run.shard.to_string(), "2/4");
    assert_eq!(run.start_at, spec.start_at_unix_ms);
    assert_eq!((run.owners, run.months), (1000, 12));
    assert_eq!(run.record.as_deref(), Some(std::path::Path::new("-")));
}

#[test]
fn every_profile_survives_the_command_line() {
    for profile in [
        Profile::study_step(90.0),
        Profile::Constant {
            users: 7,
            duration_secs: 12.5,
        },
        Profile::Arrival {
            rate_per_sec: 33.3,
            duration_secs: 30.0,
            max_in_flight: 250,
        },
    ] {
        let spec = LoadgenJob {
            profile,
            ..LoadgenJob::default()
        };
        let args: Vec<String> = std::iter::once("loadtest".to_owned())
            .chain(
                spec.args()
                    .into_iter()
                    .map(|a| a.replace("$(SHARD_INDEX)", "0")),
            )
            .collect();
        match Cli::try_parse_from(&args) {
            Ok(Cli {
                command: Command::Run(run),
            }) => assert_eq!(run.profile().expect("profile"), profile),
            _ => panic!("{args:?}"),
        }
    }
}
