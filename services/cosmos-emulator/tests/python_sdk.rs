//! Another official SDK against the emulator: Microsoft's Python SDK (`azure-cosmos`
//! from PyPI, pinned) runs `tests/python/conformance.py` against an emulator on
//! `127.0.0.1:0` with three physical partitions per container. The script computes
//! every expected answer from the documents it writes; cross-partition aggregates,
//! ORDER BY, DISTINCT, TOP and OFFSET/LIMIT go through the SDK's query pipeline
//! (query plan, rewritten query per partition, merge in the SDK).
//!
//! The SDK is installed once into a venv under Cargo's target directory. The test needs
//! `python3` with `venv` and access to PyPI, so `cargo test` ignores it and `.ci/run`
//! runs it (`-- --ignored`); there, failing to install the SDK fails the test.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use common::tool::{check_conformance, run};

/// The SDK release the test pins (the one whose pipeline the emulator was checked with).
const AZURE_COSMOS: &str = "azure-cosmos==4.17.1";
const PARTITIONS: u16 = 3;
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

fn venv_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-sdk-venv")
}

/// The venv's interpreter with the pinned SDK installed, installing it when needed.
async fn python_with_sdk() -> Result<PathBuf, String> {
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    let marker = venv.join("installed.txt");
    if std::fs::read_to_string(&marker).is_ok_and(|installed| installed == AZURE_COSMOS) {
        return Ok(python);
    }
    if !python.exists() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            INSTALL_TIMEOUT,
        )
        .await?;
    }
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            AZURE_COSMOS,
        ]),
        INSTALL_TIMEOUT,
    )
    .await?;
    std::fs::write(&marker, AZURE_COSMOS).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(python)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python3 with venv and PyPI (run by .ci/run)"]
async fn the_python_sdk_queries_through_its_own_pipeline() {
    let python = python_with_sdk()
        .await
        .unwrap_or_else(|why| panic!("the Python SDK could not be installed: {why}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/conformance.py");
    let mut command = Command::new(&python);
    // The SDK's own logging would print every request.
    command.arg(&script).env("PYTHONWARNINGS", "ignore");
    check_conformance(command, PARTITIONS, "python-sdk").await;
}
