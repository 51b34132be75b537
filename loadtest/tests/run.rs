//! `loadtest run` against a target where nothing listens: a clear error and a non-zero
//! exit before any load, not a run of failures.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_run_against_nothing_fails_at_once_and_says_why() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args([
            "run",
            "--profile",
            "constant",
            "--users",
            "4",
            "--duration",
            "30",
        ])
        .arg("--target")
        .arg(format!("http://{addr}/"))
        .output()
        .expect("loadtest runs");
    assert!(!output.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nothing answers"), "{stderr}");
    assert!(stderr.contains(&addr.to_string()), "{stderr}");
}
