//! The utilization query's knobs: what the four stages of the study change.

use std::num::NonZeroUsize;

/// How many feed-range queries run at once when not using the partition key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueryParallelism {
    /// `0`: the SDK's own cross-partition query, partitions drained one after another.
    Serial,
    /// `-1`: one query per feed range, all at once.
    Unbounded,
    /// `N`: one query per feed range, at most N at once.
    AtMost(NonZeroUsize),
}

impl QueryParallelism {
    /// The number the Cosmos SDKs and the study use: 0, -1 or N.
    pub fn as_i64(self) -> i64 {
        match self {
            Self::Serial => 0,
            Self::Unbounded => -1,
            Self::AtMost(n) => i64::try_from(n.get()).unwrap_or(i64::MAX),
        }
    }
}

impl std::str::FromStr for QueryParallelism {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<i64>() {
            Ok(0) => Ok(Self::Serial),
            Ok(-1) => Ok(Self::Unbounded),
            Ok(n) if n > 0 => usize::try_from(n)
                .ok()
                .and_then(NonZeroUsize::new)
                .map(Self::AtMost)
                .ok_or_else(|| format!("{n} is too large")),
            _ => Err(format!(
                "{s:?}: use 0 (serial), -1 (one query per partition, all at once) or a positive limit"
            )),
        }
    }
}

impl std::fmt::Display for QueryParallelism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.as_i64())
    }
}

impl serde::Serialize for QueryParallelism {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.as_i64())
    }
}

impl<'de> serde::Deserialize<'de> for QueryParallelism {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(deserializer)?;
        n.to_string().parse().map_err(serde::de::Error::custom)
    }
}

/// The utilization service's query shape: a rollout restarts it with new knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryKnobs {
    pub parallelism: QueryParallelism,
    pub use_partition_key: bool,
}

/// Environment variable of `--query-parallelism`.
pub const ENV_QUERY_PARALLELISM: &str = "UTILIZATION_QUERY_PARALLELISM";
/// Environment variable of `--use-partition-key`.
pub const ENV_USE_PARTITION_KEY: &str = "UTILIZATION_USE_PARTITION_KEY";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallelism_round_trips_through_text_and_json() {
        for text in ["0", "-1", "3"] {
            let p: QueryParallelism = text.parse().expect(text);
            assert_eq!(p.to_string(), text);
            let json = serde_json::to_string(&p).expect("json");
            assert_eq!(json, text);
            assert_eq!(
                serde_json::from_str::<QueryParallelism>(&json).expect("back"),
                p
            );
        }
        for bad in ["-2", "x", ""] {
            assert!(bad.parse::<QueryParallelism>().is_err(), "{bad}");
            assert!(
                serde_json::from_str::<QueryParallelism>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
