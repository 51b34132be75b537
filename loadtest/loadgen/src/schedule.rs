//! The open loop's schedule: request `k` of a run is meant to leave `k / rate` seconds
//! after the start; a shard's requests are its share of them, in order.

use std::time::{Duration, Instant};

use crate::shard::Shard;

#[derive(Debug)]
pub struct Schedule {
    started: Instant,
    deadline: Instant,
    rate_per_sec: f64,
    shard: Shard,
    /// How many of this shard's requests came before.
    taken: u64,
}

impl Schedule {
    /// `rate_per_sec` is the whole profile's rate; this shard sends its share of it.
    pub fn new(started: Instant, deadline: Instant, rate_per_sec: f64, shard: Shard) -> Self {
        Self {
            started,
            deadline,
            rate_per_sec,
            shard,
            taken: 0,
        }
    }
}

/// This shard's requests' times, until the run's end.
impl Iterator for Schedule {
    type Item = Instant;

    fn next(&mut self) -> Option<Instant> {
        let k = self.shard.nth_request(self.taken);
        self.taken += 1;
        let offset = Duration::try_from_secs_f64(k as f64 / self.rate_per_sec).ok()?;
        self.started
            .checked_add(offset)
            .filter(|intended| *intended < self.deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(schedule: &mut Schedule, started: Instant) -> Vec<u128> {
        schedule.map(|t| (t - started).as_millis()).collect()
    }

    #[test]
    fn requests_are_taken_in_order_until_the_run_ends() {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(500);
        let mut whole = Schedule::new(started, deadline, 10.0, Shard::WHOLE);
        assert_eq!(times(&mut whole, started), [0, 100, 200, 300, 400]);
        // Once over, it stays over.
        assert_eq!(whole.next(), None);
    }

    #[test]
    fn shards_take_their_own_requests_of_the_common_schedule() {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(1);
        let shard = |i| Schedule::new(started, deadline, 10.0, Shard::new(i, 3).expect("shard"));
        assert_eq!(times(&mut shard(0), started), [0, 300, 600, 900]);
        assert_eq!(times(&mut shard(1), started), [100, 400, 700]);
        assert_eq!(times(&mut shard(2), started), [200, 500, 800]);
    }
}
