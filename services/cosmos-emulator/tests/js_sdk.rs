//! Another official SDK against the emulator: Microsoft's JavaScript SDK
//! (`@azure/cosmos` from npm, pinned) runs `tests/js/conformance.cjs` with the SDK's
//! default options against an emulator on `127.0.0.1:0` with three physical
//! partitions per container. The script computes every expected answer from the
//! documents it writes; it covers cross-partition ORDER BY, aggregates (MIN and MAX
//! among them), DISTINCT, OFFSET/LIMIT and GROUP BY through the SDK's query pipeline,
//! the change feed (from the beginning, from now, of one partition key) and the
//! refusal of transactional batch.
//!
//! The SDK is installed once with npm under Cargo's target directory. The test needs
//! `node` and `npm` with access to the npm registry, so `cargo test` ignores it and
//! `.ci/run` runs it (`-- --ignored`); there, failing to install the SDK fails the test.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use common::tool::{check_conformance, run};

/// The SDK release the test pins: the newest that runs on Node 20 (4.10 needs Node 22).
const AZURE_COSMOS: &str = "@azure/cosmos@4.9.3";
const PARTITIONS: u16 = 3;
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The directory holding `node_modules/@azure/cosmos`, installing the SDK when needed.
async fn sdk_dir() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("js-sdk");
    let marker = dir.join("installed.txt");
    if std::fs::read_to_string(&marker).is_ok_and(|installed| installed == AZURE_COSMOS) {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    run(
        Command::new("npm").current_dir(&dir).args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--loglevel=error",
            AZURE_COSMOS,
        ]),
        INSTALL_TIMEOUT,
    )
    .await?;
    std::fs::write(&marker, AZURE_COSMOS).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs node and npm with the npm registry (run by .ci/run)"]
async fn the_javascript_sdk_works_with_its_defaults() {
    let sdk = sdk_dir()
        .await
        .unwrap_or_else(|why| panic!("the JavaScript SDK could not be installed: {why}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js/conformance.cjs");
    let mut command = Command::new("node");
    command.arg(&script).env("SDK_DIR", &sdk);
    check_conformance(command, PARTITIONS, "js-sdk").await;
}
