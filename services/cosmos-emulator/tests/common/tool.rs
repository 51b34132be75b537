//! Running the external tools some tests need (an SDK in another language).

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

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
