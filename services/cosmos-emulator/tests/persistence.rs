//! `--data-dir`: everything acknowledged survives `kill -9` of the emulator process.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use azure_data_cosmos::models::{ContainerProperties, ThroughputProperties};
use azure_data_cosmos::options::CreateContainerOptions;
use common::client_for;
use dronelab_contract::PUBLIC_EMULATOR_KEY;
use serde_json::{json, Value};

struct Process {
    child: Child,
    endpoint: String,
}

/// Starts the real binary on an ephemeral port and reads the address it prints.
fn start(data_dir: &std::path::Path) -> Process {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cosmos-emulator"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--partitions",
            "3",
            "--latency",
            "false",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("emulator binary starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("emulator prints its address");
    let endpoint = line
        .trim()
        .rsplit(' ')
        .next()
        .expect("address on the line")
        .to_owned();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{line}");
    Process { child, endpoint }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn data_survives_kill_9_and_a_torn_last_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let mut process = start(dir.path());
        let client = client_for(&process.endpoint, PUBLIC_EMULATOR_KEY, None).await;
        client
            .create_database("dronedelivery", None)
            .await
            .expect("db");
        let db = client.database_client("dronedelivery");
        db.create_container(
            ContainerProperties::new("packages", "/ownerId".into()),
            Some(
                CreateContainerOptions::default()
                    .with_throughput(ThroughputProperties::manual(900)),
            ),
        )
        .await
        .expect("container");
        let container = db.container_client("packages", None).await.expect("client");
        container
            .begin_replace_throughput(ThroughputProperties::manual(2500), None)
            .await
            .expect("replace starts")
            .await
            .expect("replace completes");
        for i in 0..50 {
            let doc = json!({"id": format!("p{i}"), "ownerId": format!("o{}", i % 7), "count": i});
            container
                .upsert_item(format!("o{}", i % 7), &format!("p{i}"), &doc, None)
                .await
                .expect("upsert");
        }
        container
            .delete_item("o3", "p3", None)
            .await
            .expect("delete");
        let updated = json!({"id": "p4", "ownerId": "o4", "count": 400});
        container
            .replace_item("o4", "p4", &updated, None)
            .await
            .expect("replace");
        // SIGKILL: no chance to flush anything that was not already written.
        process.child.kill().expect("kill -9");
        process.child.wait().expect("reaped");
    }
    // A crash in the middle of a write leaves a partial last line.
    let log = std::fs::read_dir(dir.path())
        .expect("data dir")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .expect("a log file")
        .path();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open log")
        .write_all(br#"{"op":"put_document","database":"dronedelivery","contai"#)
        .expect("torn write");

    let process = start(dir.path());
    let client = client_for(&process.endpoint, PUBLIC_EMULATOR_KEY, None).await;
    let container = client
        .database_client("dronedelivery")
        .container_client("packages", None)
        .await
        .expect("container is still there");
    assert_eq!(
        container
            .read_feed_ranges(None)
            .await
            .expect("ranges")
            .len(),
        3
    );
    let throughput = container
        .read_throughput(None)
        .await
        .expect("offer")
        .expect("offer exists");
    assert_eq!(throughput.throughput(), Some(2500));
    let p4: Value = container
        .read_item("o4", "p4", None)
        .await
        .expect("replaced document")
        .into_model()
        .expect("json");
    assert_eq!(p4["count"], 400);
    let p3 = container.read_item("o3", "p3", None).await;
    assert!(p3.is_err(), "a deleted document stays deleted");
    for i in (0..50).filter(|i| *i != 3) {
        container
            .read_item(format!("o{}", i % 7), &format!("p{i}"), None)
            .await
            .unwrap_or_else(|e| panic!("document p{i} survived: {e}"));
    }
    // New writes after recovery get fresh resource ids and persist as well.
    let fresh = json!({"id": "p100", "ownerId": "o1", "count": 1});
    let created: Value = container
        .create_item("o1", "p100", &fresh, None)
        .await
        .expect("create after restart")
        .into_model()
        .expect("json");
    let rid = created["_rid"].as_str().unwrap_or_default().to_owned();
    let other: Value = container
        .read_item("o0", "p0", None)
        .await
        .expect("read")
        .into_model()
        .expect("json");
    assert_ne!(other["_rid"].as_str(), Some(rid.as_str()));
}

/// `{"id", "ownerId", "n": [[…]]}` nested `depth` levels in all (the object is one).
fn nested_document(id: &str, depth: usize) -> Value {
    let mut n = json!(id);
    for _ in 0..depth.saturating_sub(1) {
        n = json!([n]);
    }
    json!({"id": id, "ownerId": "o1", "n": n})
}

fn nesting_of(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting_of).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(nesting_of).max().unwrap_or(0),
        _ => 0,
    }
}

#[tokio::test]
async fn the_most_deeply_nested_document_accepted_reads_back_after_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The SDK sends binary JSON, whose decoder would take 256 levels; the emulator keeps
    // to what its text reader (serde_json) reads back.
    let deepest = cosmos_emulator::MAX_JSON_NESTING;
    let (first, last) = (
        nested_document("deep-1", deepest),
        nested_document("deep-2", deepest),
    );
    assert_eq!(nesting_of(&first), deepest);
    {
        let mut process = start(dir.path());
        let client = client_for(&process.endpoint, PUBLIC_EMULATOR_KEY, None).await;
        client.create_database("db", None).await.expect("db");
        let db = client.database_client("db");
        db.create_container(ContainerProperties::new("items", "/ownerId".into()), None)
            .await
            .expect("container");
        let container = db.container_client("items", None).await.expect("client");
        let too_deep = nested_document("too-deep", deepest + 1);
        let refused = container
            .upsert_item("o1", "too-deep", &too_deep, None)
            .await
            .expect_err("one level more is refused");
        assert_eq!(u16::from(refused.status().status_code()), 400, "{refused}");
        // One in the middle of the log and one as its last line.
        for (id, doc) in [
            ("deep-1", &first),
            ("plain", &json!({"id": "plain", "ownerId": "o1"})),
            ("deep-2", &last),
        ] {
            container
                .upsert_item("o1", id, doc, None)
                .await
                .unwrap_or_else(|e| panic!("{id} is accepted: {e}"));
        }
        process.child.kill().expect("kill -9");
        process.child.wait().expect("reaped");
    }
    let process = start(dir.path());
    let client = client_for(&process.endpoint, PUBLIC_EMULATOR_KEY, None).await;
    let container = client
        .database_client("db")
        .container_client("items", None)
        .await
        .expect("container is still there");
    for (id, written) in [("deep-1", &first), ("deep-2", &last)] {
        let read: Value = container
            .read_item("o1", id, None)
            .await
            .unwrap_or_else(|e| panic!("{id} survived the restart: {e}"))
            .into_model()
            .expect("json");
        assert_eq!(read["n"], written["n"], "{id}");
    }
}
