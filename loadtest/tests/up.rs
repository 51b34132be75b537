//! `loadtest up` starts every component as its own process, wires their traces into the
//! trace viewer, joins their logs to those traces, and leaves no process behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Pids of processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Field 4 (after the parenthesised command name) is the parent pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    pids
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn killing_up_leaves_no_process_behind() {
    let logs = tempfile::tempdir().expect("temp dir");
    let mut up = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["up", "--owners", "20", "--months", "2", "--logs"])
        .arg(logs.path())
        // The components inherit these: JSON log lines, and the per-request debug line.
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "info,service_kit=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("loadtest up starts");
    let stdout = up.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut gateway = None;
    let mut viewer = None;
    for line in lines.by_ref() {
        let line = line.expect("line");
        let url = || line.split_whitespace().nth(1).map(str::to_owned);
        if line.trim_start().starts_with("gateway") {
            gateway = url();
        }
        if line.trim_start().starts_with("trace-viewer") {
            viewer = url();
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    let gateway = gateway.expect("up printed the gateway's URL");
    let viewer = viewer.expect("up printed the trace viewer's URL");
    let children = children_of(up.id());
    assert_eq!(
        children.len(),
        6,
        "trace viewer, emulator, three backends and the gateway: {children:?}"
    );

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let response = runtime
        .block_on(reqwest::get(format!(
            "{gateway}api/invoices?ownerId=o00001&year=2026&month=12"
        )))
        .expect("the gateway answers");
    assert_eq!(response.status().as_u16(), 200);
    let trace_id = response
        .headers()
        .get("x-trace-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-trace-id")
        .to_owned();
    // Every process exports over OTLP/gRPC within about a second.
    let (services, trace) = runtime.block_on(async {
        let url = format!("{viewer}api/traces/{trace_id}");
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let Ok(r) = reqwest::get(&url).await else {
                continue;
            };
            let Ok(body) = r.json::<serde_json::Value>().await else {
                continue;
            };
            let services: std::collections::BTreeSet<String> = body["data"][0]["processes"]
                .as_object()
                .map(|p| {
                    p.values()
                        .filter_map(|v| v["serviceName"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if services.len() == 4 {
                return (services, body);
            }
        }
        Default::default()
    });
    assert_eq!(
        services.into_iter().collect::<Vec<_>>(),
        [
            "delivery-service",
            "gateway",
            "package-service",
            "utilization-service"
        ],
        "the request's trace reached the viewer from all four services"
    );

    // The gateway's log line for the request carries the trace id the viewer shows it
    // under, and the same event is in the trace (service-kit's span events layer).
    let log = std::fs::read_to_string(logs.path().join("gateway.log")).expect("gateway log");
    let answered: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "answered")
        .collect();
    assert!(
        answered
            .iter()
            .any(|l| l["span"]["trace_id"] == trace_id.as_str()
                && l["span"]["span_id"].as_str().is_some_and(|s| s.len() == 16)
                && l["fields"]["status"] == 200),
        "no JSON log line of the request with trace id {trace_id}:\n{log}"
    );
    let trace_id_shown = trace["data"][0]["traceID"].as_str().unwrap_or_default();
    assert_eq!(trace_id_shown, trace_id);
    let events: Vec<&serde_json::Value> = trace["data"][0]["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["logs"].as_array().into_iter().flatten())
        .collect();
    assert!(
        events.iter().any(|e| e.to_string().contains("answered")),
        "the log event joined the trace: {events:?}"
    );

    // SIGKILL: `up` gets no chance to clean up; its children must still go.
    up.kill().expect("kill -9");
    up.wait().expect("reaped");
    let deadline = Instant::now() + Duration::from_secs(10);
    while children.iter().any(|pid| alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let survivors: Vec<&u32> = children.iter().filter(|pid| alive(**pid)).collect();
    assert!(survivors.is_empty(), "orphans left behind: {survivors:?}");
}
