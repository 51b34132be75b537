//! The tuning stages, one TOML file each in `loadtest/stages/` (embedded in the binary so
//! the run works from any directory; `--stages DIR` reads others).

use std::path::Path;

use dronelab_contract::lab::LabKnobs;
use dronelab_contract::{QueryKnobs, QueryParallelism};
use serde::{Deserialize, Serialize};

/// A stage's configuration (mirrored by `k8s/overlays/<stage>`; a contract test checks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageConfig {
    pub provisioned_ru_per_second: u64,
    pub partitions: u16,
    pub query_parallelism: QueryParallelism,
    pub use_partition_key: bool,
}

impl StageConfig {
    /// The utilization service's knobs in this stage.
    pub fn knobs(&self) -> QueryKnobs {
        QueryKnobs {
            parallelism: self.query_parallelism,
            use_partition_key: self.use_partition_key,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    pub description: String,
    #[serde(flatten)]
    pub config: StageConfig,
    /// The antipattern lab's knobs the stage switches on, by environment variable
    /// (`[knobs]` in the stage file; none in the study's stages).
    #[serde(default, skip_serializing_if = "LabKnobs::is_empty")]
    pub knobs: LabKnobs,
    /// The main problem the diagnosis should name (`expect` in the stage file: a finding
    /// kind such as `throttling` or `synchronous_io`); `loadtest lab` compares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// How often each owner-month is asked for (`popularity = "zipf"` in the stage
    /// file; uniform, the study's load, by default).
    #[serde(default)]
    pub popularity: crate::Popularity,
    /// CPU-bound threads of another process kept running beside the stack while the
    /// stage's load runs (`busy_threads` in the stage file; local runs only): a machine
    /// busy with work that is not the stack's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub busy_threads: u16,
    /// The antipattern this stage belongs to (its directory under
    /// `stages/antipatterns/`), when `loadtest lab` runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub antipattern: Option<String>,
}

impl Stage {
    /// Where the stage's Kubernetes overlay lives under `k8s/overlays`: its name, or
    /// `antipatterns/<kind>/<name>` for a lab pair's stage.
    pub fn overlay(&self) -> String {
        match &self.antipattern {
            Some(kind) => format!("antipatterns/{kind}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Most `busy_threads` a stage may ask for.
pub const MAX_BUSY_THREADS: u16 = 64;

fn is_zero(n: &u16) -> bool {
    *n == 0
}

const EMBEDDED: [(&str, &str); 4] = [
    ("1-baseline", include_str!("../../stages/1-baseline.toml")),
    ("2-more-ru", include_str!("../../stages/2-more-ru.toml")),
    ("3-parallel", include_str!("../../stages/3-parallel.toml")),
    (
        "4-partition-key",
        include_str!("../../stages/4-partition-key.toml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("stage file {file}: {reason}")]
    Invalid { file: String, reason: String },
    #[error("cannot read stages from {dir}: {source}")]
    Io { dir: String, source: std::io::Error },
}

/// The one pattern a stage's name (and a lab's) must match: a letter or digit, then up to
/// 62 letters, digits, `-` or `_`. A name becomes a directory (`k8s/overlays/<stage>`),
/// part of a shell line (`--stage-command`) and a label value, so `..`, `-rf` or a
/// quote never reach any of them.
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(format!(
            "the name {name:?} must be a letter or digit, then at most 62 letters, digits, '-' or '_'"
        ))
    }
}

fn parse(name: &str, text: &str) -> Result<Stage, StageError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        description: String,
        #[serde(flatten)]
        config: StageConfig,
        #[serde(default)]
        knobs: LabKnobs,
        expect: Option<String>,
        #[serde(default)]
        popularity: crate::Popularity,
        #[serde(default)]
        busy_threads: u16,
    }
    let file: File = toml::from_str(text).map_err(|e| StageError::Invalid {
        file: name.to_owned(),
        reason: e.to_string(),
    })?;
    let invalid = |reason: &str| StageError::Invalid {
        file: name.to_owned(),
        reason: reason.to_owned(),
    };
    check_name(name).map_err(|reason| invalid(&reason))?;
    if file.config.provisioned_ru_per_second == 0 {
        return Err(invalid("provisioned_ru_per_second must be positive"));
    }
    if !(1..=256).contains(&file.config.partitions) {
        return Err(invalid("partitions must be 1..=256"));
    }
    if file.busy_threads > MAX_BUSY_THREADS {
        return Err(invalid(&format!(
            "busy_threads must be 0..={MAX_BUSY_THREADS}"
        )));
    }
    Ok(Stage {
        name: name.to_owned(),
        description: file.description,
        config: file.config,
        knobs: file.knobs,
        expect: file.expect,
        popularity: file.popularity,
        busy_threads: file.busy_threads,
        antipattern: None,
    })
}

/// The built-in stages, in order.
pub fn builtin() -> Result<Vec<Stage>, StageError> {
    EMBEDDED
        .iter()
        .map(|(name, text)| parse(name, text))
        .collect()
}

/// Every `*.toml` in `dir`, ordered by file name.
pub fn from_dir(dir: &Path) -> Result<Vec<Stage>, StageError> {
    let io = |source| StageError::Io {
        dir: dir.display().to_string(),
        source,
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(path).map_err(io)?;
            parse(&name, &text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_with_one_badly_named_file_is_refused_whole() {
        let dir = tempfile::tempdir().expect("dir");
        let valid = "description = \"d\"\nprovisioned_ru_per_second = 1\npartitions = 9\nquery_parallelism = 0\nuse_partition_key = false";
        std::fs::write(dir.path().join("1-fine.toml"), valid).expect("write");
        std::fs::write(dir.path().join("-rf.toml"), valid).expect("write");
        let error = from_dir(dir.path()).expect_err("refused").to_string();
        assert!(error.contains("stage file -rf"), "{error}");
    }

    #[test]
    fn lab_knobs_are_read_and_checked() {
        let base = "description = \"d\"\nprovisioned_ru_per_second = 2500\npartitions = 9\nquery_parallelism = -1\nuse_partition_key = true\n";
        let stage = parse(
            "1-blocking",
            &format!("{base}[knobs]\nUTILIZATION_AUDIT_WRITE = \"blocking\"\n"),
        )
        .expect("a knob of the lab");
        assert_eq!(stage.knobs.get("UTILIZATION_AUDIT_WRITE"), Some("blocking"));
        let unknown = parse("x", &format!("{base}[knobs]\nAUDIT = \"on\"\n"))
            .expect_err("unknown knob")
            .to_string();
        assert!(
            unknown.contains("stage file x") && unknown.contains("knob AUDIT is not one of"),
            "{unknown}"
        );
        assert!(builtin()
            .expect("stages")
            .iter()
            .all(|s| s.knobs.is_empty()));
    }

    #[test]
    fn builtin_stages_match_the_study() {
        let stages = builtin().expect("stages parse");
        let summary: Vec<(u64, u16, i64, bool)> = stages
            .iter()
            .map(|s| {
                let c = &s.config;
                (
                    c.provisioned_ru_per_second,
                    c.partitions,
                    c.query_parallelism.as_i64(),
                    c.use_partition_key,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (900, 9, 0, false),
                (2500, 9, 0, false),
                (2500, 9, -1, false),
                (2500, 9, -1, true)
            ]
        );
        assert!(parse("x", "description = \"d\"\nprovisioned_ru_per_second = 0\npartitions = 9\nquery_parallelism = 0\nuse_partition_key = false").is_err());
        assert!(parse("x", "nonsense").is_err());
        assert!(parse("x", "description = \"d\"\nprovisioned_ru_per_second = 1\npartitions = 9\nquery_parallelism = -2\nuse_partition_key = false").is_err());
        let valid = "description = \"d\"\nprovisioned_ru_per_second = 1\npartitions = 9\nquery_parallelism = 0\nuse_partition_key = false";
        assert!(parse("5-mine", valid).is_ok());
        for hostile in [
            "x;rm -rf",
            "..",
            ".",
            "-rf",
            "a/b",
            "a b",
            "",
            "it's",
            &"x".repeat(64),
        ] {
            assert!(
                parse(hostile, valid).is_err(),
                "{hostile:?} is not a plain name"
            );
        }
    }
}
