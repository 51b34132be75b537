//! An existing deployment at `--target`: the load goes from here to its gateway, RU/s
//! through `--cosmos-endpoint`, and each stage's query knobs through `--stage-command`
//! (or by asking the user to apply the stage's overlay). Its CPU and memory are not this
//! machine's to measure.

use std::time::Duration;

use dronelab_contract::QueryKnobs;
use dronelab_study::Stage;

use super::{reach_existing, Environment, Reach, ResourceSampling};
use crate::tune::{TuneArgs, TuneError};

/// How long the run waits for a user to apply a stage's overlay by hand.
const MANUAL_APPLY_WAIT: Duration = Duration::from_secs(60);

pub struct ExistingTarget {
    reach: Reach,
    stage_command: Option<String>,
    /// The query knobs the deployment runs with now (as deployed for the first stage).
    knobs: QueryKnobs,
}

impl ExistingTarget {
    pub async fn connect(
        args: &TuneArgs,
        gateway: url::Url,
        first: &Stage,
    ) -> Result<Self, TuneError> {
        let reach = reach_existing(gateway, args).await?;
        Ok(Self {
            reach,
            stage_command: args.stage_command.clone(),
            knobs: first.config.knobs(),
        })
    }
}

impl Environment for ExistingTarget {
    fn reach(&self) -> &Reach {
        &self.reach
    }

    /// Through `--stage-command` before every stage (applying is idempotent, and the
    /// command returns once the deployment is ready for load), or by asking.
    async fn apply_knobs(&mut self, stage: &Stage) -> Result<(), TuneError> {
        let wanted = stage.config.knobs();
        match &self.stage_command {
            Some(command) => run_stage_command(command, &stage.overlay()).await?,
            None if wanted != self.knobs || !stage.knobs.is_empty() => {
                eprintln!(
                    "  apply k8s/overlays/{} (parallelism {}, partition key {}) now; the run continues in {} s (--stage-command does this for you)",
                    stage.overlay(),
                    wanted.parallelism,
                    wanted.use_partition_key,
                    MANUAL_APPLY_WAIT.as_secs()
                );
                tokio::time::sleep(MANUAL_APPLY_WAIT).await;
            }
            None => {}
        }
        self.knobs = wanted;
        Ok(())
    }

    fn sample_resources(&self) -> ResourceSampling {
        ResourceSampling::Unavailable(
            "not measured: with --target the deployment is not this machine's (use --cluster for the metrics API)".into(),
        )
    }

    async fn close(self, _keep_up: bool) {}
}

/// Runs `--stage-command` for `stage` through `sh -c` and waits for it. The stage's name
/// (a plain name, checked when its file was read) goes in shell-quoted.
async fn run_stage_command(command: &str, stage: &str) -> Result<(), TuneError> {
    let line = command.replace("{stage}", &lifecycle::shell_quote(stage));
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
