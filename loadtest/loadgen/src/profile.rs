//! Load profiles: closed-loop users (stepped or constant) or an open-loop arrival rate.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How many simulated users (or requests per second) over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Profile {
    /// Closed loop: `start_users`, plus `step_users` every `step_secs`, up to `max_users`.
    Step {
        start_users: usize,
        step_users: usize,
        step_secs: f64,
        max_users: usize,
        duration_secs: f64,
    },
    /// Closed loop with a fixed number of users.
    Constant { users: usize, duration_secs: f64 },
    /// Open loop: requests start at a fixed rate whatever the latency.
    Arrival {
        rate_per_sec: f64,
        duration_secs: f64,
        max_in_flight: usize,
    },
}

impl Profile {
    /// The study's load: 4 users every 10 s up to 40, for `duration_secs`.
    pub fn study_step(duration_secs: f64) -> Self {
        Profile::Step {
            start_users: 4,
            step_users: 4,
            step_secs: 10.0,
            max_users: 40,
            duration_secs,
        }
    }

    /// The profile as `loadtest run` flags (what a load-generator pod is started with).
    pub fn to_args(&self) -> Vec<String> {
        let flags: Vec<(&str, String)> = match *self {
            Profile::Step {
                start_users,
                step_users,
                step_secs,
                max_users,
                duration_secs,
            } => vec![
                ("--profile", "step".into()),
                ("--start-users", start_users.to_string()),
                ("--step-users", step_users.to_string()),
                ("--step-secs", step_secs.to_string()),
                ("--users", max_users.to_string()),
                ("--duration", duration_secs.to_string()),
            ],
            Profile::Constant {
                users,
                duration_secs,
            } => vec![
                ("--profile", "constant".into()),
                ("--users", users.to_string()),
                ("--duration", duration_secs.to_string()),
            ],
            Profile::Arrival {
                rate_per_sec,
                duration_secs,
                max_in_flight,
            } => vec![
                ("--profile", "arrival".into()),
                ("--rate", rate_per_sec.to_string()),
                ("--duration", duration_secs.to_string()),
                ("--max-in-flight", max_in_flight.to_string()),
            ],
        };
        flags
            .into_iter()
            .flat_map(|(flag, value)| [flag.to_owned(), value])
            .collect()
    }

    pub fn duration(&self) -> Duration {
        let secs = match *self {
            Profile::Step { duration_secs, .. }
            | Profile::Constant { duration_secs, .. }
            | Profile::Arrival { duration_secs, .. } => duration_secs,
        };
        Duration::from_secs_f64(secs.max(0.0))
    }

    /// Users that should be active `elapsed` into the run (closed-loop profiles).
    pub fn users_at(&self, elapsed: Duration) -> usize {
        match *self {
            Profile::Step {
                start_users,
                step_users,
                step_secs,
                max_users,
                ..
            } => {
                let steps = if step_secs > 0.0 {
                    (elapsed.as_secs_f64() / step_secs).floor() as usize
                } else {
                    0
                };
                start_users
                    .saturating_add(steps.saturating_mul(step_users))
                    .min(max_users)
            }
            Profile::Constant { users, .. } => users,
            Profile::Arrival { .. } => 0,
        }
    }
}
