//! The stages of `loadtest lab`: the study's four, then every antipattern pair found
//! under the pairs' directory (one directory per antipattern, its stage files inside:
//! the antipattern first, its fix last), narrowed by `--only`.

use std::path::{Path, PathBuf};

use dronelab_study::stages::{self, StageError};
use dronelab_study::Stage;
use trace_analysis::diagnosis::FindingKind;

use super::{TuneArgs, TuneError};

/// Where the pairs are, from the repository's root.
pub const DEFAULT_PAIRS: &str = "loadtest/stages/antipatterns";

/// `--only` names the study's four stages together by this.
pub const STUDY: &str = "study";

pub fn stages(args: &TuneArgs) -> Result<Vec<Stage>, TuneError> {
    let dir = args
        .stages
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PAIRS));
    let mut all = match args.no_study {
        true => Vec::new(),
        false => stages::builtin()?,
    };
    for (kind, kind_dir) in pair_dirs(&dir)? {
        for mut stage in stages::from_dir(&kind_dir)? {
            stage.antipattern = Some(kind.clone());
            all.push(stage);
        }
    }
    if !args.only.is_empty() {
        all.retain(|s| {
            let group = s.antipattern.as_deref().unwrap_or(STUDY);
            args.only.iter().any(|o| *o == s.name || o == group)
        });
    }
    check(&all)?;
    Ok(all)
}

/// Each antipattern's name and directory, in name order.
fn pair_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, TuneError> {
    let io = |source| StageError::Io {
        dir: dir.display().to_string(),
        source,
    };
    let mut pairs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if !path.is_dir() {
            continue;
        }
        let kind = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        stages::check_name(&kind).map_err(|reason| StageError::Invalid {
            file: path.display().to_string(),
            reason,
        })?;
        pairs.push((kind, path));
    }
    pairs.sort();
    Ok(pairs)
}

/// Names unique in the run (they name the report's sections) and every expectation a
/// finding kind the diagnosis can name.
fn check(stages: &[Stage]) -> Result<(), TuneError> {
    for (i, stage) in stages.iter().enumerate() {
        let invalid = |reason: String| StageError::Invalid {
            file: stage.overlay(),
            reason,
        };
        if stages[..i].iter().any(|s| s.name == stage.name) {
            return Err(
                invalid(format!("another stage of the lab is named {}", stage.name)).into(),
            );
        }
        match stage.expect.as_deref() {
            None => return Err(invalid(
                "a lab stage says what it expects (expect = \"<finding kind>[, <finding kind>…]\")"
                    .into(),
            )
            .into()),
            Some(kinds) if FindingKind::parse_list(kinds).is_none() => {
                return Err(invalid(format!(
                    "expect = {kinds:?} is not a list of finding kinds separated by commas"
                ))
                .into())
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        tune: TuneArgs,
    }

    fn args(extra: &[&str]) -> TuneArgs {
        let pairs = concat!(env!("CARGO_MANIFEST_DIR"), "/stages/antipatterns");
        let mut line = vec!["lab", "--stages", pairs];
        line.extend_from_slice(extra);
        Args::parse_from(line).tune
    }

    #[test]
    fn the_lab_is_the_study_then_every_pair_each_expecting_a_kind() {
        let all = stages(&args(&[])).expect("the repository's pairs");
        let study: Vec<&str> = all
            .iter()
            .take_while(|s| s.antipattern.is_none())
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            study,
            ["1-baseline", "2-more-ru", "3-parallel", "4-partition-key"]
        );
        let pairs: std::collections::BTreeSet<&str> = all
            .iter()
            .filter_map(|s| s.antipattern.as_deref())
            .collect();
        assert!(
            pairs.contains("synchronous-io") && pairs.contains("chatty-io"),
            "{pairs:?}"
        );
        for kind in &pairs {
            let pair: Vec<&Stage> = all
                .iter()
                .filter(|s| s.antipattern.as_deref() == Some(*kind))
                .collect();
            let first = pair.first().and_then(|s| s.expect.as_deref());
            assert_eq!(
                first,
                Some(kind.replace('-', "_").as_str()),
                "{kind}: the antipattern first"
            );
            // The fix last, expecting no antipattern (a fix may leave requests failing:
            // the retry budget answers without the overloaded backend's section).
            let fix = pair.last().and_then(|s| s.expect.as_deref()).unwrap_or("");
            let expected = FindingKind::parse_list(fix).unwrap_or_default();
            assert!(
                !expected.is_empty() && expected.iter().all(|k| k.about().is_none()),
                "{kind}: its fix last, expecting no antipattern: {fix:?}"
            );
        }
    }

    #[test]
    fn only_narrows_by_antipattern_study_or_stage() {
        let names = |only: &str| -> Vec<String> {
            stages(&args(&["--only", only]))
                .expect("stages")
                .into_iter()
                .map(|s| s.overlay())
                .collect()
        };
        assert_eq!(
            names("chatty-io"),
            [
                "antipatterns/chatty-io/1-point-read-per-drone",
                "antipatterns/chatty-io/2-one-query"
            ]
        );
        assert_eq!(names("study,2-one-query").len(), 5);
    }

    #[test]
    fn the_held_out_sets_load_alone_and_expect_kinds_or_named_look_alikes() {
        let mut held_out = Vec::new();
        for set in [
            "heldout",
            "heldout-three-partitions",
            "heldout-second",
            "heldout-third",
        ] {
            let mut a = args(&["--no-study"]);
            a.stages = Some(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("stages")
                    .join(set),
            );
            let cases = stages(&a).expect("a held-out set");
            assert!(
                cases.iter().all(|s| s.antipattern.is_some()),
                "{set}: no study stage"
            );
            let partitions = cases[0].config.partitions;
            assert!(
                cases.iter().all(|s| s.config.partitions == partitions),
                "{set}: one partition count, as a local run needs"
            );
            held_out.extend(cases);
        }
        assert!(held_out.len() >= 12, "{} held-out cases", held_out.len());
        for stage in &held_out {
            let expect = stage.expect.as_deref().unwrap_or_default();
            assert!(
                FindingKind::parse_list(expect).is_some(),
                "{}: {expect}",
                stage.name
            );
        }
    }

    #[test]
    fn a_pair_expecting_an_unknown_kind_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let kind = dir.path().join("made-up");
        std::fs::create_dir(&kind).expect("dir");
        std::fs::write(
            kind.join("1-x.toml"),
            "description = \"d\"\nprovisioned_ru_per_second = 1\npartitions = 9\nquery_parallelism = 0\nuse_partition_key = false\nexpect = \"slowness\"\n",
        )
        .expect("write");
        let mut a = args(&[]);
        a.stages = Some(dir.path().to_owned());
        let error = stages(&a).expect_err("refused").to_string();
        assert!(
            error.contains("\"slowness\" is not a list of finding kinds"),
            "{error}"
        );
    }
}
