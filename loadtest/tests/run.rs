//! The command line refuses what it cannot run, before any load and any stage command:
//! a target where nothing listens, a stage file whose name is not plain, a profile out of
//! range, a `--path` that is not a path. And `--path` decides what each request asks for.

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
fn a_profile_out_of_range_or_a_path_that_is_none_is_refused_naming_the_flag() {
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
        (
            &["--path", "http://elsewhere/api?ownerId=o00001"][..],
            "--path",
        ),
        (&["--path", "api?ownerId=o00001"][..], "--path"),
        (&["--path", "/api?owner id"][..], "--path"),
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

/// The URIs a short closed-loop run of `loadtest run --path PATH` asked a stub server for.
fn uris_asked_for(path: &str) -> std::collections::HashSet<String> {
    use std::sync::{Arc, Mutex};
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let asked = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let record = Arc::clone(&asked);
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        record.lock().expect("lock").insert(uri.to_string());
        std::future::ready("{}")
    });
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    runtime.spawn(async move { axum::serve(listener, app).await });
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["run", "--profile", "constant", "--users", "2"])
        .args(["--duration", "1", "--owners", "50", "--months", "2"])
        .arg("--target")
        .arg(format!("http://{addr}/"))
        .arg("--path")
        .arg(path)
        .output()
        .expect("loadtest runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let asked = asked.lock().expect("lock").clone();
    asked
}

#[test]
fn a_path_with_a_query_is_asked_for_as_given_and_one_without_gets_an_owner_month_each_time() {
    let fixed = "/api/deliveries/summary?ownerId=o00007&year=2026&month=3";
    let asked = uris_asked_for(fixed);
    assert!(
        asked.len() == 1 && asked.contains(fixed),
        "{} distinct URIs, e.g. {:?}",
        asked.len(),
        asked.iter().next()
    );

    let asked = uris_asked_for("/api/deliveries/summary");
    // 100 owner-months drawn uniformly over a second of requests: nearly all of them.
    assert!(asked.len() > 50, "{} distinct URIs", asked.len());
    for uri in &asked {
        assert!(
            uri.starts_with("/api/deliveries/summary?ownerId=o")
                && uri.contains("&year=2026&month="),
            "{uri}"
        );
    }
}
