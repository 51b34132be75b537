//! The emulator model and load profiles of the tuning run, chosen so that a run on a
//! 2-core machine reproduces the *shape* of the study (see the loadtest README,
//! "Calibration", for the reasoning and the measured result).
//!
//! The levers: a physical partition serves `partition_concurrency` queries at once, each
//! for `service_ms + ms_per_ru × charge`; every response adds `rtt_ms`. With the study's
//! ~2.95 RU per partition query that is ~92 ms per partition query and a capacity of
//! ~76 queries/s per partition. Then, with 40 users and no think time:
//! - serial fan-out (stages 1–2): 9 × ~105 ms ≈ 1 s per request → ~40 req/s, which needs
//!   ~118 RU/s per partition: over stage 1's 100 (429s), under stage 2's 278 (none);
//! - parallel fan-out (stage 3): partitions saturate near 76 queries/s → ~70 req/s (2×+)
//!   at ~210 RU/s per partition, safely under 278 (no 429s even in bursts);
//! - partition key (stage 4): one ~3.4 RU query per request, ~115 ms: limited by CPU.

use serde::{Deserialize, Serialize};

use loadgen::Profile;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EmulatorModel {
    pub rtt_ms: f64,
    pub service_ms: f64,
    pub ms_per_ru: f64,
    pub jitter: f64,
    pub partition_concurrency: u16,
}

impl Default for EmulatorModel {
    fn default() -> Self {
        Self {
            rtt_ms: 13.0,
            service_ms: 4.0,
            ms_per_ru: 30.0,
            jitter: 0.2,
            partition_concurrency: 7,
        }
    }
}

/// How long each stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunProfile {
    /// As published: 4 users every 10 s up to 40, 8 minutes per stage.
    Study,
    /// The same steps, 2 minutes per stage (40 users from 90 s on).
    Default,
    /// For CI: 4 users then +12 every 5 s up to 40, 30 s per stage.
    Quick,
}

impl RunProfile {
    pub fn load(self) -> Profile {
        match self {
            RunProfile::Study => Profile::study_step(480.0),
            RunProfile::Default => Profile::study_step(120.0),
            RunProfile::Quick => Profile::Step {
                start_users: 4,
                step_users: 12,
                step_secs: 5.0,
                max_users: 40,
                duration_secs: 30.0,
            },
        }
    }
}
