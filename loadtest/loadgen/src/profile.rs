//! Load profiles: closed-loop users (stepped or constant) or an open-loop arrival rate,
//! each within limits that keep one generator's memory and tasks bounded.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest run: a day. A record keeps at most a fixed number of intervals whatever
/// the length (the `record` module), so memory does not grow with it.
pub const MAX_DURATION_SECS: f64 = 86_400.0;
/// Most closed-loop users (each is a task and a connection) and most open-loop requests
/// in flight at once.
pub const MAX_USERS: usize = 100_000;
/// The fastest open-loop rate, in requests per second, of a whole profile: its shards
/// split it. One generator's own limit depends on its machine and the target (about
/// 140k/s against an instant endpoint on one core of a 2-core Xeon); asked for more, it
/// drops what it cannot send and reports how late it sent the rest.
pub const MAX_RATE_PER_SEC: f64 = 1_000_000.0;

/// How many simulated users (or requests per second) over time. A deserialized profile
/// has been checked ([`Profile::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "UncheckedProfile")]
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

/// A profile as written, before [`Profile::validate`].
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum UncheckedProfile {
    Step {
        start_users: usize,
        step_users: usize,
        step_secs: f64,
        max_users: usize,
        duration_secs: f64,
    },
    Constant {
        users: usize,
        duration_secs: f64,
    },
    Arrival {
        rate_per_sec: f64,
        duration_secs: f64,
        max_in_flight: usize,
    },
}

impl TryFrom<UncheckedProfile> for Profile {
    type Error = String;

    fn try_from(p: UncheckedProfile) -> Result<Self, String> {
        let profile = match p {
            UncheckedProfile::Step {
                start_users,
                step_users,
                step_secs,
                max_users,
                duration_secs,
            } => Profile::Step {
                start_users,
                step_users,
                step_secs,
                max_users,
                duration_secs,
            },
            UncheckedProfile::Constant {
                users,
                duration_secs,
            } => Profile::Constant {
                users,
                duration_secs,
            },
            UncheckedProfile::Arrival {
                rate_per_sec,
                duration_secs,
                max_in_flight,
            } => Profile::Arrival {
                rate_per_sec,
                duration_secs,
                max_in_flight,
            },
        };
        profile.validate().map(|()| profile)
    }
}

/// `value` (field `name`, flag `flag`) within `1..=MAX_USERS` (`0..` where `zero_ok`).
fn users(name: &str, flag: &str, value: usize, zero_ok: bool) -> Result<(), String> {
    let least = usize::from(!zero_ok);
    if (least..=MAX_USERS).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{name} ({flag}) is {value}: it must be between {least} and {MAX_USERS}"
        ))
    }
}

/// `value` for an error message: scientific notation beyond a billion, so a hostile
/// 1e300 is one short word, not three hundred digits.
fn shown(value: f64) -> String {
    if value.abs() < 1e9 {
        value.to_string()
    } else {
        format!("{value:e}")
    }
}

/// `value` (field `name`, flag `flag`) a finite number of seconds in `(0, max]` (or
/// `[0, max]` where `zero_ok`).
fn seconds(name: &str, flag: &str, value: f64, zero_ok: bool, max: f64) -> Result<(), String> {
    let positive = value > 0.0 || (zero_ok && value == 0.0);
    if value.is_finite() && positive && value <= max {
        Ok(())
    } else {
        Err(format!(
            "{name} ({flag}) is {}: it must be a number of seconds {} and at most {max}",
            shown(value),
            if zero_ok { "from 0" } else { "above 0" }
        ))
    }
}

impl Profile {
    /// Checks every field, naming the first out of range: durations of at most a day,
    /// at most [`MAX_USERS`] users or requests in flight, at most [`MAX_RATE_PER_SEC`].
    pub fn validate(&self) -> Result<(), String> {
        let duration = |d| seconds("duration_secs", "--duration", d, false, MAX_DURATION_SECS);
        match *self {
            Profile::Step {
                start_users,
                step_users,
                step_secs,
                max_users,
                duration_secs,
            } => {
                users("start_users", "--start-users", start_users, true)?;
                users("step_users", "--step-users", step_users, true)?;
                users("max_users", "--users", max_users, false)?;
                seconds(
                    "step_secs",
                    "--step-secs",
                    step_secs,
                    true,
                    MAX_DURATION_SECS,
                )?;
                duration(duration_secs)
            }
            Profile::Constant {
                users: n,
                duration_secs,
            } => {
                users("users", "--users", n, false)?;
                duration(duration_secs)
            }
            Profile::Arrival {
                rate_per_sec,
                duration_secs,
                max_in_flight,
            } => {
                if !(rate_per_sec.is_finite()
                    && rate_per_sec > 0.0
                    && rate_per_sec <= MAX_RATE_PER_SEC)
                {
                    return Err(format!(
                        "rate_per_sec (--rate) is {}: it must be above 0 and at most {MAX_RATE_PER_SEC} requests/s",
                        shown(rate_per_sec)
                    ));
                }
                users("max_in_flight", "--max-in-flight", max_in_flight, false)?;
                duration(duration_secs)
            }
        }
    }

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

    /// How long the profile runs (a value out of range counts as the nearest in range).
    pub fn duration(&self) -> Duration {
        let secs = match *self {
            Profile::Step { duration_secs, .. }
            | Profile::Constant { duration_secs, .. }
            | Profile::Arrival { duration_secs, .. } => duration_secs,
        };
        let secs = if secs.is_finite() { secs } else { 0.0 };
        Duration::from_secs_f64(secs.clamp(0.0, MAX_DURATION_SECS))
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
