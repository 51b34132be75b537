//! When a shard starts, given the common start (`--start-at`) that lines the shards up:
//! ahead, on time, or late — a late shard (a slow pod start, clock skew) still runs,
//! and the merge places its intervals where they ran.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest a shard waits for `--start-at`.
pub const MAX_START_WAIT: Duration = Duration::from_secs(3600);
/// How late a shard may start and still count as on time.
pub const START_TOLERANCE: Duration = Duration::from_secs(2);
/// How late a shard may start at all. Later than on time, it starts at once and the
/// merge places its intervals where they ran (the run's first seconds then had fewer
/// users); later than this, half the merge's start spread
/// ([`crate::record::MAX_START_SPREAD`]), it would not merge.
pub const MAX_LATE_START: Duration =
    Duration::from_secs(crate::record::MAX_START_SPREAD.as_secs() / 2);

/// When a shard starts, given `--start-at` and the time now.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// At the given time (now, if that has just passed).
    OnTime(SystemTime),
    /// Now, this long after the others (an image pull, a slow node, clock skew).
    Late { now: SystemTime, by: Duration },
}

impl Start {
    pub fn at(&self) -> SystemTime {
        match self {
            Start::OnTime(at) => *at,
            Start::Late { now, .. } => *now,
        }
    }
}

/// `--start-at` as a start: ahead (at most [`MAX_START_WAIT`]), on time, or late by at
/// most [`MAX_LATE_START`].
pub fn start_time(start_at_ms: u64, now: SystemTime) -> Result<Start, String> {
    let at = UNIX_EPOCH + Duration::from_millis(start_at_ms);
    match at.duration_since(now) {
        Ok(ahead) if ahead > MAX_START_WAIT => Err(format!(
            "--start-at is {:.0} s ahead; at most {} s",
            ahead.as_secs_f64(),
            MAX_START_WAIT.as_secs()
        )),
        Ok(_) => Ok(Start::OnTime(at)),
        Err(late) if late.duration() <= START_TOLERANCE => Ok(Start::OnTime(now)),
        Err(late) if late.duration() <= MAX_LATE_START => Ok(Start::Late {
            now,
            by: late.duration(),
        }),
        Err(late) => Err(format!(
            "--start-at was {:.1} s ago, more than {} s: the other shards may have finished; give a time ahead",
            late.duration().as_secs_f64(),
            MAX_LATE_START.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_shard_starts_at_once_within_the_merge_spread() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ms = crate::unix_ms;
        let ahead = now + Duration::from_secs(30);
        assert_eq!(start_time(ms(ahead), now), Ok(Start::OnTime(ahead)));
        let just_passed = now - Duration::from_secs(1);
        assert_eq!(start_time(ms(just_passed), now), Ok(Start::OnTime(now)));
        let late = now - Duration::from_secs(45);
        assert_eq!(
            start_time(ms(late), now),
            Ok(Start::Late {
                now,
                by: Duration::from_secs(45)
            })
        );
        let too_late = now - MAX_LATE_START - Duration::from_secs(1);
        let why = start_time(ms(too_late), now).expect_err("too late");
        assert!(why.contains("301.0 s ago"), "{why}");
        let too_far = now + MAX_START_WAIT + Duration::from_secs(10);
        assert!(start_time(ms(too_far), now).is_err());
    }
}
