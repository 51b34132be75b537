//! Running the external tools some tests need (an SDK in another language).

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::{config, Emulator};

/// How long a conformance script may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs an SDK's conformance script (`script`, with its environment already set on it)
/// against a fresh emulator with `partitions` physical partitions per container: the
/// script gets `COSMOS_ENDPOINT`, `COSMOS_KEY` and `EXPECTED_PARTITIONS`, must print
/// "N checks passed" and must have written database `database` to this emulator.
pub async fn check_conformance(mut script: Command, partitions: u16, database: &str) {
    let emulator = Emulator::start(config(partitions)).await;
    let outcome = run(
        script
            .env("COSMOS_ENDPOINT", emulator.endpoint())
            .env("COSMOS_KEY", dronelab_contract::PUBLIC_EMULATOR_KEY)
            .env("EXPECTED_PARTITIONS", partitions.to_string()),
        SCRIPT_TIMEOUT,
    )
    .await;
    let stats = emulator.stats().await;
    emulator.stop().await;
    let printed = outcome.unwrap_or_else(|failure| panic!("{failure}"));
    println!("{printed}");
    assert!(
        printed.contains(" checks passed"),
        "the script ran to its end:\n{printed}"
    );
    assert!(
        stats.databases.iter().any(|d| d.id == database),
        "the script wrote to this emulator"
    );
}

/// Runs `command` to the end within `limit`, returning whether it succeeded and what
/// it printed.
pub async fn run(command: &mut Command, limit: Duration) -> Result<String, String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| format!("{command:?} did not finish within {limit:?}"))?
        .map_err(|e| format!("{command:?}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(format!("{command:?} failed ({}):\n{text}", output.status))
    }
}
