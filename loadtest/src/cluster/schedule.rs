//! When the load pods start together. The common start is taken once the Job can be
//! created (the old one gone), from the API server's clock, which the nodes follow
//! more closely than the machine running `loadtest`; the lead covers scheduling, image
//! pulls and node scale-up. A pod that still starts late runs anyway (`loadtest run`
//! allows it) and the merge places its intervals where they ran; the run says so.

use std::time::{Duration, SystemTime};

/// The common start: `lead` after the API server's time, or after this machine's when
/// the server sent none.
pub fn common_start(
    server_now: Option<SystemTime>,
    local_now: SystemTime,
    lead: Duration,
) -> SystemTime {
    server_now.unwrap_or(local_now) + lead
}

/// How far apart the pods really started, from their records' start times (ms since
/// the Unix epoch): worth a word above a couple of seconds.
pub fn start_spread(starts_ms: &[u64]) -> Duration {
    let earliest = starts_ms.iter().min().copied().unwrap_or(0);
    let latest = starts_ms.iter().max().copied().unwrap_or(0);
    Duration::from_millis(latest - earliest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_follows_the_server_clock_when_it_has_one() {
        let local = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let server = SystemTime::UNIX_EPOCH + Duration::from_secs(1_090);
        let lead = Duration::from_secs(30);
        assert_eq!(
            common_start(Some(server), local, lead),
            server + lead,
            "this machine's clock is 90 s behind"
        );
        assert_eq!(common_start(None, local, lead), local + lead);
    }

    #[test]
    fn the_spread_is_between_the_first_and_the_last_pod() {
        assert_eq!(
            start_spread(&[5_000, 9_500, 5_200]),
            Duration::from_millis(4_500)
        );
        assert_eq!(start_spread(&[7]), Duration::ZERO);
        assert_eq!(start_spread(&[]), Duration::ZERO);
    }
}
