//! One of several load generators driving one profile together: `i/N`, 0-based like a
//! Kubernetes Indexed Job's completion index. The profile is split exactly: closed-loop
//! users are dealt out so the shards' users always add up to the profile's, and the
//! open-loop schedule's requests go round-robin, so the shards together send the
//! profile's requests at its times.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most generators one profile is split between.
pub const MAX_SHARDS: u32 = 1024;

/// Generator `index` of `count`; valid by construction (a deserialized one too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "UncheckedShard")]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

#[derive(Deserialize)]
struct UncheckedShard {
    index: u32,
    count: u32,
}

impl TryFrom<UncheckedShard> for Shard {
    type Error = String;

    fn try_from(s: UncheckedShard) -> Result<Self, String> {
        Shard::new(s.index, s.count)
    }
}

impl Shard {
    /// The whole load in one generator.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    pub fn new(index: u32, count: u32) -> Result<Self, String> {
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(format!(
                "shard {index}/{count}: the index counts from 0 and must be below the count, which is 1 to {MAX_SHARDS}"
            ));
        }
        Ok(Self { index, count })
    }

    /// This shard's part of `total` closed-loop users: `total / N`, and one more for the
    /// first `total % N` shards.
    pub fn users(self, total: usize) -> usize {
        let (count, index) = (self.count as usize, self.index as usize);
        total / count + usize::from(index < total % count)
    }

    /// The open-loop schedule's request that is this shard's `n`-th (from 0).
    pub fn nth_request(self, n: u64) -> u64 {
        n.saturating_mul(u64::from(self.count))
            .saturating_add(u64::from(self.index))
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parse = |part: &str| part.trim().parse::<u32>().ok();
        match s.split_once('/') {
            Some((i, n)) => match (parse(i), parse(n)) {
                (Some(i), Some(n)) => Self::new(i, n),
                _ => Err(format!("{s:?}: write the shard as i/N, e.g. 0/4")),
            },
            None => Err(format!("{s:?}: write the shard as i/N, e.g. 0/4")),
        }
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_dealt_out_exactly() {
        for count in 1..=7u32 {
            for total in 0..=50usize {
                let parts: Vec<usize> = (0..count)
                    .map(|i| Shard::new(i, count).expect("shard").users(total))
                    .collect();
                assert_eq!(parts.iter().sum::<usize>(), total, "{total} over {count}");
                let (min, max) = (parts.iter().min(), parts.iter().max());
                assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{parts:?}");
            }
        }
    }

    #[test]
    fn every_scheduled_request_has_exactly_one_sender() {
        let mut senders = vec![0; 1000];
        for i in 0..4 {
            let shard = Shard::new(i, 4).expect("shard");
            for n in 0..250 {
                senders[shard.nth_request(n) as usize] += 1;
            }
        }
        assert!(senders.iter().all(|s| *s == 1), "{senders:?}");
    }

    #[test]
    fn parses_and_rejects() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        assert_eq!(
            "0/1".parse::<Shard>().map(|s| s.to_string()).as_deref(),
            Ok("0/1")
        );
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
