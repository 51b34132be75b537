//! **Hot partition**: the service's own demand piles on one partition key range (skewed
//! keys: a popular owner-month) and runs that range out of its share of the RU/s while
//! the others have room. More RU/s for the container would be spread over every range;
//! the fix is a key that spreads the hot values, or a cache in front of them.

use std::collections::BTreeMap;

use super::throttling::throttled;
use super::{pct, Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// Fewer 429s placed on a range than this say nothing about where they fall.
pub(crate) const MIN_PLACED: usize = 10;
/// The hottest range holds at least half of the 429s placed on a range…
const CONCENTRATION: f64 = 0.5;
/// …and this many times its share of the service's own request units. 429s of an even
/// demand fall where the request units go (≈ 1×; uniform traffic at 400 RU/s measured
/// 37 % of them on one of nine ranges at 3.2×, the rest spread); a range that runs out
/// alone holds nearly all of them (Zipf traffic: 100 % on a range with 18 % of the
/// request units, 5.5×). A 429 costs no request units, so a throttled range's share of
/// them stays low however hot its demand.
pub(crate) const SKEW: f64 = 3.0;
/// With the stage's counters, the range's consumption must be mostly the service's own;
/// otherwise it is a neighbour's (see `noisy_neighbor`).
pub(crate) const FOREIGN_SHARE: f64 = 0.5;
/// …and the other ranges must have room: their median consumption at most this share of
/// the hot range's (the stage's counters, else the sample's request units). Zipf traffic
/// at 900 RU/s: 0.38; uniform traffic at 600 RU/s, where every range runs near its budget
/// and the ranges holding more owners run out first: 0.84 (the seed's ranges hold up to
/// 1.4× the records of others). Added after the first held-out run named that uniform
/// case a hot partition.
const OTHERS_ROOM: f64 = 0.6;

/// The median of the other ranges' values over the hot range's (`None` with fewer than
/// two ranges, or nothing on the hot one).
fn others_over_hot(values: &BTreeMap<String, f64>, hot: &str) -> Option<f64> {
    let hot_value = values.get(hot).copied().filter(|v| *v > 0.0)?;
    let mut others: Vec<f64> = values
        .iter()
        .filter(|(range, _)| range.as_str() != hot)
        .map(|(_, v)| *v)
        .collect();
    if others.is_empty() {
        return None;
    }
    others.sort_by(f64::total_cmp);
    let mid = others.len() / 2;
    let median = if others.len().is_multiple_of(2) {
        (others[mid - 1] + others[mid]) / 2.0
    } else {
        others[mid]
    };
    Some(median / hot_value)
}

pub struct HotPartition;

impl Rule for HotPartition {
    fn kind(&self) -> FindingKind {
        FindingKind::HotPartition
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let c = e.cosmos;
        let piled = throttled(c)
            && c.throttles_placed >= MIN_PLACED
            && c.hottest_range_throttled_share >= CONCENTRATION
            && c.throttle_skew >= SKEW;
        if !piled {
            return None;
        }
        let consumption_by_range = e
            .counters
            .filter(|k| !k.ru_by_range.is_empty())
            .map_or(&c.ru_share_by_range, |k| &k.ru_by_range);
        let room = others_over_hot(consumption_by_range, &c.hottest_range)?;
        if room > OTHERS_ROOM {
            return None;
        }
        let consumption = match e.counters.and_then(|k| k.consumption(&c.hottest_range, c)) {
            Some(range) if range.foreign_share >= FOREIGN_SHARE => return None,
            Some(range) => format!(
                "; the stage's counters show {} of that range's request units were the service's own",
                pct(1.0 - range.foreign_share)
            ),
            None => "; the range's consumption by every client was not measured, so another workload on it cannot be ruled out".to_owned(),
        };
        Some(Finding {
            kind: self.kind(),
            title: "Hot partition".into(),
            evidence: format!(
                "{} of {}'s Cosmos attempts were throttled; {} of those placed on a range fell on range {}, which carries {} of its own request units ({:.1}× its share): its own demand runs that range out of budget while the others have room (the median range consumed {} of what it did){consumption}",
                pct(c.throttled_share),
                c.service,
                pct(c.hottest_range_throttled_share),
                c.hottest_range,
                pct(c.hottest_range_demand_share),
                c.throttle_skew,
                pct(room)
            ),
            next_step: "spread the hot keys: a partition key with more distinct values where the traffic is skewed (e.g. owner and month), or cache the popular answers; more RU/s would be divided over every range and buy the hot one little".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::hot_range;

    #[test]
    fn the_services_own_429s_piled_on_one_range() {
        // Zipf traffic at 900 RU/s: every 429 on range 8, which has 18 % of the RU.
        let zipf = hot_range(0.6, 200, 1.0, 0.18);
        assert_eq!(zipf.kinds(), [FindingKind::HotPartition]);
        let f = HotPartition.judge(&zipf.evidence()).expect("hot");
        assert!(f.evidence.contains("range 8") && f.evidence.contains("cannot be ruled out"));
        // At the thresholds, and below each of them.
        assert!(HotPartition
            .judge(&hot_range(0.05, 10, 0.9, 0.3).evidence())
            .is_some());
        assert!(HotPartition
            .judge(&hot_range(0.05, 9, 1.0, 0.1).evidence())
            .is_none());
        assert!(HotPartition
            .judge(&hot_range(0.05, 200, 0.49, 0.1).evidence())
            .is_none());
        assert!(HotPartition
            .judge(&hot_range(0.05, 200, 0.9, 0.31).evidence())
            .is_none());
        assert!(HotPartition
            .judge(&hot_range(0.005, 200, 1.0, 0.1).evidence())
            .is_none());
        // Uniform traffic at 400 RU/s (the SDK's retries look-alike): 37 % on one range.
        assert_eq!(
            hot_range(0.5, 300, 0.37, 0.115).kinds(),
            [FindingKind::Throttling]
        );
    }

    #[test]
    fn not_while_the_other_ranges_run_near_their_budget_too() {
        // Uniform traffic at 600 RU/s: 62 % of the 429s on range 8, which holds more
        // owners; the other ranges consumed 0.84 of what it did.
        let mut uneven = hot_range(0.65, 300, 0.62, 0.154);
        uneven.cosmos.ru_share_by_range = (0..9)
            .map(|r| (r.to_string(), if r == 8 { 0.154 } else { 0.154 * 0.84 }))
            .collect();
        assert_eq!(uneven.kinds(), [FindingKind::Throttling]);
        // The stage's counters decide where they were read: here the others had room.
        let counted = uneven.clone().counted(9, 1.0).with(|f| {
            if let Some(k) = f.counters.as_mut() {
                for (range, ru) in k.ru_by_range.iter_mut() {
                    if range != "8" {
                        *ru = 6000.0 * 0.4;
                    }
                }
            }
        });
        assert_eq!(counted.kinds(), [FindingKind::HotPartition]);
        assert_eq!(
            others_over_hot(&BTreeMap::from([("8".into(), 1.0)]), "8"),
            None
        );
    }

    #[test]
    fn with_counters_only_when_the_range_is_mostly_its_own() {
        let own = hot_range(0.6, 200, 1.0, 0.18).counted(9, 0.95);
        let f = HotPartition.judge(&own.evidence()).expect("own demand");
        assert!(
            f.evidence.contains("were the service's own"),
            "{}",
            f.evidence
        );
        let neighbour = hot_range(0.6, 200, 1.0, 0.18).counted(9, 0.3);
        assert!(HotPartition.judge(&neighbour.evidence()).is_none());
    }

    #[test]
    fn silent_on_the_study_stages() {
        for stage in crate::rules::testing::study_stages() {
            assert!(HotPartition.judge(&stage.evidence()).is_none());
        }
    }
}
