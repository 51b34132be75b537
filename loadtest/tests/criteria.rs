//! `--threshold` and `--junit` through the real binary: against the local stack a passing
//! criterion exits 0 and a failing one exits 1 naming it, both after the run's summary,
//! and the JUnit file parses as XML with a test case per verdict. Bad criteria and
//! criteria for stages that do not run are refused before any load.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn run(gateway: &str, criteria: &[&str], junit: &Path) -> Output {
    run_for(gateway, 2, criteria, &[], junit)
}

fn run_for(gateway: &str, secs: u32, criteria: &[&str], extra: &[&str], junit: &Path) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loadtest"));
    command.args([
        "run",
        "--target",
        gateway,
        "--profile",
        "constant",
        "--users",
        "2",
        "--duration",
        &secs.to_string(),
        "--owners",
        "20",
        "--months",
        "2",
    ]);
    for criterion in criteria {
        command.args(["--threshold", criterion]);
    }
    command
        .args(extra)
        .arg("--junit")
        .arg(junit)
        .output()
        .expect("loadtest runs")
}

/// A test case: its name and its failure's message, if it failed.
type Case = (String, Option<String>);

/// The JUnit file's test suite: (tests, failures) as it declares them, and its cases.
fn read_junit(path: &Path) -> ((String, String), Vec<Case>) {
    let text = std::fs::read_to_string(path).expect("junit written");
    let doc = roxmltree::Document::parse(&text).expect("JUnit XML parses");
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("a testsuite");
    let counts = (
        suite.attribute("tests").unwrap_or_default().to_owned(),
        suite.attribute("failures").unwrap_or_default().to_owned(),
    );
    let cases = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|case| {
            let failure = case
                .children()
                .find(|n| n.has_tag_name("failure"))
                .and_then(|f| f.attribute("message").map(str::to_owned));
            (
                case.attribute("name").unwrap_or_default().to_owned(),
                failure,
            )
        })
        .collect();
    (counts, cases)
}

#[test]
fn a_failing_criterion_exits_1_naming_it_and_passing_ones_exit_0() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut up, gateway) = common::start_stack(&dir.path().join("logs"));

    let pass = dir.path().join("pass.xml");
    let passing = run(&gateway, &["p99<60s", "errors<=100%", "rps>0"], &pass);
    let stdout = String::from_utf8_lossy(&passing.stdout);
    assert!(
        passing.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&passing.stderr)
    );
    assert!(stdout.contains("pass  run  p99<60s  (p99 = "), "{stdout}");
    let ((tests, failures), cases) = read_junit(&pass);
    assert_eq!((tests.as_str(), failures.as_str()), ("3", "0"));
    assert_eq!(cases[0], ("p99<60s".to_owned(), None));

    let fail = dir.path().join("fail.xml");
    let failing = run(&gateway, &["p99<60s", "rps>1000000"], &fail);
    let stderr = String::from_utf8_lossy(&failing.stderr);
    assert_eq!(failing.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("1 of 2 criteria failed: run rps>1000000 (rps = "),
        "{stderr}"
    );
    // The run's own summary came first: the report is there either way.
    assert!(
        String::from_utf8_lossy(&failing.stdout).contains("requests,"),
        "{}",
        String::from_utf8_lossy(&failing.stdout)
    );
    let ((tests, failures), cases) = read_junit(&fail);
    assert_eq!((tests.as_str(), failures.as_str()), ("2", "1"));
    assert_eq!(cases[0].1, None);
    assert!(
        cases[1].0 == "rps>1000000" && cases[1].1.as_deref().is_some_and(|m| m.contains("rps = ")),
        "{cases:?}"
    );

    // --abort-on-fail: a threshold that fails stops a 60 s run soon after the delay
    // (judged every second), and the record says when; one that holds runs it out.
    let record = dir.path().join("record.json");
    let record_arg = record.to_string_lossy().into_owned();
    let aborted = run_for(
        &gateway,
        60,
        &["p99<1ms"],
        &[
            "--abort-on-fail",
            "--abort-delay",
            "2",
            "--record",
            &record_arg,
        ],
        &fail,
    );
    let stderr = String::from_utf8_lossy(&aborted.stderr);
    assert_eq!(aborted.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("p99<1ms failed (p99 = ") && stderr.contains("--abort-on-fail"),
        "{stderr}"
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).expect("record")).expect("json");
    let stopped = written["stopped_after_secs"]
        .as_f64()
        .expect("stopped_after_secs");
    // Not before the delay; well before the profile's end (a busy machine may add a
    // few seconds to the 1 s judging interval).
    assert!((2.0..20.0).contains(&stopped), "{stopped}");
    let ((tests, failures), _) = read_junit(&fail);
    assert_eq!((tests.as_str(), failures.as_str()), ("1", "1"));

    let held = run_for(
        &gateway,
        3,
        &["p99<60s"],
        &[
            "--abort-on-fail",
            "--abort-delay",
            "0",
            "--record",
            &record_arg,
        ],
        &pass,
    );
    let stderr = String::from_utf8_lossy(&held.stderr);
    assert!(held.status.success(), "{stderr}");
    assert!(!stderr.contains("stopped after"), "{stderr}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).expect("record")).expect("json");
    assert!(written.get("stopped_after_secs").is_none(), "{written}");
    let _ = up.kill();
    let _ = up.wait();
}

#[test]
fn bad_criteria_are_refused_before_any_load() {
    for (args, says) in [
        (
            &["run", "--threshold", "p42<1ms"][..],
            "\"p42\" is not a figure",
        ),
        (&["run", "--threshold", "errors<1"][..], "as a percentage"),
        (
            &["run", "--threshold", "throttled<1%"][..],
            "measured by `tune`, `lab` or `capacity`",
        ),
        (
            &["run", "--threshold", "4-partition-key:p99<1s"][..],
            "`run` has no stages",
        ),
        (
            &["tune", "--threshold", "9-nope:p99<1s"][..],
            "no stage \"9-nope\" in this run (1-baseline, 2-more-ru, 3-parallel, 4-partition-key)",
        ),
        (&["run", "--abort-on-fail"][..], "--threshold"),
        (
            &["tune", "--threshold", "knee>=5"][..],
            "the knee is measured by `loadtest capacity`",
        ),
        // The old name, read the other way by Azure Load Testing: refused, not guessed.
        (
            &["run", "--fail-on", "p99<1000ms"][..],
            "renamed --threshold, which states what must hold",
        ),
        (
            &["tune", "--fail-on", "p99<1000ms"][..],
            "renamed --threshold, which states what must hold",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
            .args(args)
            .arg("--target")
            .arg("http://127.0.0.1:9/")
            .output()
            .expect("loadtest runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
