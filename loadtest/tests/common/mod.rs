//! What several end-to-end tests share: `loadtest up` on a small data set.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// `loadtest up` on a small data set; its gateway's URL once it is up.
pub fn start_stack(logs: &std::path::Path) -> (Child, String) {
    let mut up = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args([
            "up",
            "--owners",
            "20",
            "--months",
            "2",
            "--partitions",
            "3",
            "--logs",
        ])
        .arg(logs)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("loadtest up starts");
    let stdout = up.stdout.take().expect("stdout");
    let mut gateway = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if line.trim_start().starts_with("gateway") {
            gateway = line.split_whitespace().nth(1).map(str::to_owned);
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    (up, gateway.expect("up printed the gateway's URL"))
}
