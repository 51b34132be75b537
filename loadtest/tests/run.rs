//! The command line refuses what it cannot run, before any load and any stage command:
//! a target where nothing listens, a stage file whose name is not plain, a profile out of
//! range.

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

#[test]
fn tune_refuses_a_badly_named_stage_file_before_any_stage_command_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let stages = dir.path().join("stages");
    std::fs::create_dir(&stages).expect("stages dir");
    let valid = "description = \"d\"\nprovisioned_ru_per_second = 400\npartitions = 1\nquery_parallelism = 0\nuse_partition_key = false\n";
    std::fs::write(stages.join("1-fine.toml"), valid).expect("write");
    std::fs::write(stages.join("..toml"), valid).expect("write");
    let marker = dir.path().join("stage-command-ran");
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["tune", "--target", "http://127.0.0.1:9/", "--stages"])
        .arg(&stages)
        .arg("--stage-command")
        .arg(format!("touch {}", marker.display()))
        .arg("--reports")
        .arg(dir.path().join("reports"))
        .output()
        .expect("loadtest runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("stage file ."), "{stderr}");
    assert!(!marker.exists(), "no stage command ran");
}

#[test]
fn out_of_range_load_is_refused_naming_the_flag() {
    for (flags, expected) in [
        (
            &["--profile", "step", "--start-users", "100000000"][..],
            "--start-users",
        ),
        (&["--profile", "constant", "--users", "0"][..], "--users"),
        (&["--profile", "arrival", "--rate", "1e9"][..], "--rate"),
        (
            &["--profile", "constant", "--duration", "1e300"][..],
            "--duration",
        ),
        (
            &["--profile", "constant", "--timeout", "0"][..],
            "--timeout",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
            .arg("run")
            .args(flags)
            .args(["--target", "http://127.0.0.1:9/"])
            .output()
            .expect("loadtest runs");
        assert!(!output.status.success(), "{flags:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{flags:?}: {stderr}");
    }
}
