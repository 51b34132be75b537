//! Distributed load, proven locally: three `loadtest run --shard i/3` processes drive one
//! profile against the local stack from a common start, and `loadtest merge` combines
//! their records. The merge must count every request of every shard and give the
//! percentiles of one histogram built from all their samples.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use loadgen::record::{latency_histogram, LoadRecord, LoadSummary, Percentiles};

const SHARDS: u32 = 3;

#[test]
fn shards_merge_into_one_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut up, gateway) = common::start_stack(&dir.path().join("logs"));
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        + 3_000;
    let shards: Vec<Child> = (0..SHARDS)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_loadtest"))
                .args(["run", "--target", &gateway, "--profile", "step"])
                .args([
                    "--start-users",
                    "3",
                    "--step-users",
                    "3",
                    "--step-secs",
                    "2",
                ])
                .args([
                    "--users",
                    "9",
                    "--duration",
                    "6",
                    "--owners",
                    "20",
                    "--months",
                    "2",
                ])
                .args(["--shard", &format!("{i}/{SHARDS}")])
                .args(["--start-at", &start_at.to_string()])
                .arg("--record")
                .arg(dir.path().join(format!("shard-{i}.json")))
                .arg("--record-samples")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("a shard starts")
        })
        .collect();
    for mut shard in shards {
        assert!(shard.wait().expect("shard ran").success(), "a shard failed");
    }
    let merged_path = dir.path().join("merged.json");
    let status = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .arg("merge")
        .args((0..SHARDS).map(|i| dir.path().join(format!("shard-{i}.json"))))
        .arg("--record")
        .arg(&merged_path)
        .stdout(Stdio::null())
        .status()
        .expect("merge runs");
    assert!(status.success());
    let _ = up.kill();
    let _ = up.wait();

    let read = |name: &str| -> LoadRecord {
        let text = std::fs::read_to_string(dir.path().join(name)).expect("record file");
        serde_json::from_str(&text).expect("a load record")
    };
    let shards: Vec<LoadSummary> = (0..SHARDS)
        .map(|i| read(&format!("shard-{i}.json")).summary())
        .collect();
    let merged = read("merged.json");
    let summary = merged.summary();
    let samples = merged
        .samples_us
        .clone()
        .expect("every shard kept its samples");

    let shard_requests: u64 = shards.iter().map(|s| s.requests).sum();
    assert!(
        shards.iter().all(|s| s.requests > 0),
        "every shard sent load"
    );
    assert_eq!(summary.requests, shard_requests, "counts add up");
    assert_eq!(
        summary.requests,
        samples.len() as u64,
        "one sample per request"
    );
    assert_eq!(
        summary.successful_requests,
        shards.iter().map(|s| s.successful_requests).sum::<u64>()
    );
    let mut all = latency_histogram();
    for us in samples {
        all.record(us).expect("in range");
    }
    assert_eq!(
        summary.latency_ms,
        Percentiles::of(&all),
        "the merged histogram is the histogram of all samples"
    );
    // The step profile split 1+1+1, 2+2+2, 3+3+3 users: the merged series has the
    // profile's users, second by second, on the common start.
    let users: Vec<usize> = summary.series.iter().map(|s| s.users).collect();
    assert_eq!(users.first(), Some(&3), "{users:?}");
    assert!(users.contains(&9), "{users:?}");
    assert!(users.iter().all(|u| u % 3 == 0), "{users:?}");
    assert!(
        summary.series.len() <= 7,
        "{} seconds",
        summary.series.len()
    );
}
