//! `loadtest compare` on real runs: two quick tuning runs of the same two stages (each
//! run twice, compared run by run) are not significantly different on any figure, while
//! stage 2 (serial fan-out) and stage 3 (parallel) of one run differ significantly in
//! throughput and latency; halving the gateway's concurrency is significant on
//! throughput and p99 and fails a regression gate. The tests take turns: one local
//! stack at a time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One local stack at a time: two at once on a small machine move each other's
/// figures between runs, which is the noise a repeat must not see.
static ONE_STACK: Mutex<()> = Mutex::new(());

fn loadtest(args: &[&str], extra: &[&Path]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(args)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("loadtest runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The run directories under `reports`, oldest first.
fn runs(reports: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(reports)
        .expect("reports")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "latest"))
        .collect();
    runs.sort();
    runs
}

/// The verdict of each figure line of `compare`'s output: (figure, significant).
fn verdicts(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .filter(|l| l.ends_with("significant") || l.ends_with("too few samples"))
        .map(|l| {
            let figure = l.trim_start().split("  ").next().unwrap_or_default();
            (
                figure.to_owned(),
                !l.ends_with("not significant") && l.ends_with("significant"),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs minutes: two quick tuning runs of two stages, each twice (run by .ci/run)"]
fn a_repeat_is_not_significant_and_parallel_queries_are() {
    let _one_stack = ONE_STACK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("dir");
    let reports = dir.path().join("reports");
    let tune = [
        "tune",
        "--profile",
        "quick",
        "--owners",
        "300",
        "--only",
        "2-more-ru,3-parallel",
        "--repeat",
        "2",
        "--reports",
    ];
    loadtest(&tune, &[&reports]);
    // Run ids have one-second resolution.
    std::thread::sleep(std::time::Duration::from_secs(1));
    loadtest(&tune, &[&reports]);
    let [a, b] = runs(&reports).try_into().expect("two runs");

    // Two runs a side: the runs are the units, and a repeat differs nowhere.
    let repeat = loadtest(&["compare"], &[&a, &b]);
    assert!(
        repeat.contains("several runs a side (2 stage pairs)"),
        "{repeat}"
    );
    let figures = verdicts(&repeat);
    assert_eq!(figures.len(), 16, "eight figures of two stages:\n{repeat}");
    assert!(
        figures.iter().all(|(_, significant)| !significant),
        "a repeat differs nowhere:\n{repeat}"
    );
    assert!(b
        .join(format!(
            "compare-{}.html",
            a.file_name().unwrap_or_default().to_string_lossy()
        ))
        .exists());

    // Stages 2 and 3 differ in their query parallelism: refused unless asked for.
    let refused = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["compare", "--stages", "2-more-ru~2:3-parallel~2"])
        .args([&a, &a])
        .output()
        .expect("loadtest runs");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("stage settings: A "), "{said}");
    // One run a side (repeats named alone): the block bootstrap of their seconds.
    let stages = loadtest(
        &[
            "compare",
            "--allow-different",
            "--stages",
            "2-more-ru~2:3-parallel~2",
        ],
        &[&a, &a],
    );
    assert!(stages.contains("block bootstrap"), "{stages}");
    let significant: Vec<&str> = verdicts(&stages)
        .iter()
        .filter(|(_, s)| *s)
        .map(|(f, _)| match f.as_str() {
            "throughput (req/s)" => "throughput",
            "p50 (ms)" => "p50",
            "p99 (ms)" => "p99",
            _ => "other",
        })
        .filter(|f| *f != "other")
        .collect();
    assert_eq!(significant, ["throughput", "p50", "p99"], "{stages}");
}

/// `compare`'s exit code and both outputs. The runs go first: `--fail-on-regression`
/// takes every value after it.
fn compare(args: &[&str], runs: &[&Path]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .arg("compare")
        .args(runs)
        .args(args)
        .output()
        .expect("loadtest runs");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), said)
}

/// Stage 4 twice over (`--repeat 2`) with the gateway's `--max-concurrency` (through
/// its environment variable) at `limit`: 40 users then meet 40 or 20 places.
fn tune_with_limit(reports: &Path, limit: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["tune", "--profile", "quick", "--owners", "300"])
        .args(["--only", "4-partition-key", "--repeat", "2", "--reports"])
        .arg(reports)
        .env("RUST_LOG", "warn")
        .env("GATEWAY_MAX_CONCURRENCY", limit)
        .output()
        .expect("loadtest runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[ignore = "needs minutes: four quick runs of stage 4 (run by .ci/run)"]
fn halving_the_gateways_concurrency_is_significant_and_gated_as_a_regression() {
    let _one_stack = ONE_STACK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("dir");
    let reports = dir.path().join("reports");
    tune_with_limit(&reports, "40");
    std::thread::sleep(std::time::Duration::from_secs(1));
    tune_with_limit(&reports, "20");
    let [a, b] = runs(&reports).try_into().expect("two runs");
    let (a, b) = (a.as_path(), b.as_path());

    // One run a side (a repeat named alone): the block bootstrap of its seconds.
    let second = ["--stages", "4-partition-key~2:4-partition-key~2"];
    let (code, said) = compare(&second, &[a, b]);
    eprintln!("{said}");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("block bootstrap"), "{said}");
    let significant: Vec<String> = verdicts(&said)
        .into_iter()
        .filter(|(_, s)| *s)
        .map(|(f, _)| f)
        .collect();
    for figure in ["throughput (req/s)", "p99 (ms)"] {
        assert!(significant.iter().any(|f| f == figure), "{figure}:\n{said}");
    }

    // The gate: throughput fell by far more than 5 %, so it fails, named, in JUnit too.
    let junit = dir.path().join("gates.xml");
    let junit_arg = junit.to_string_lossy().into_owned();
    let mut gated = second.to_vec();
    gated.extend(["--fail-on-regression", "rps:-5%", "--junit", &junit_arg]);
    let (code, said) = compare(&gated, &[a, b]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("1 of 1 regression gates failed: 4-partition-key~2 rps:-5%"),
        "{said}"
    );
    let xml = std::fs::read_to_string(&junit).expect("junit");
    let doc = roxmltree::Document::parse(&xml).expect("JUnit parses");
    let failures = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .count();
    assert_eq!(failures, 1, "{xml}");

    // One run a side, widened by the spread of A's two runs (pointed to, not assumed).
    let a_arg = a.to_string_lossy().into_owned();
    let mut widened = second.to_vec();
    widened.extend(["--noise-from", &a_arg]);
    let (code, said) = compare(&widened, &[a, b]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("widened by the between-run noise of 2 recorded runs"),
        "{said}"
    );

    // Both runs of each side: the runs are the units.
    let (code, said) = compare(&[], &[a, b]);
    eprintln!("{said}");
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("runs as units") && said.contains("several runs a side (1 stage pairs)"),
        "{said}"
    );

    // A run against itself passes its gates, by either method.
    for stages in [&second[..], &[]] {
        let mut args = stages.to_vec();
        args.extend(["--fail-on-regression", "rps:-5%", "p99:+10%"]);
        let (code, said) = compare(&args, &[a, a]);
        assert_eq!(code, Some(0), "{stages:?}: {said}");
        assert!(said.contains("pass  4-partition-key"), "{said}");
    }
}
