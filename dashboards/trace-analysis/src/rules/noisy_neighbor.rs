//! **Noisy Neighbor**: another workload shares the container's throughput and spends a
//! partition key range's budget. Named only on the stage's counters (every client's
//! request units and 429s per range, as Azure Monitor's normalized RU consumption by
//! `PartitionKeyRangeId` shows them, or the emulator's per-partition counters) set
//! against the service's own request units: where the range's consumption is mostly
//! not the service's. From traces alone a neighbour and the service's own hot range look
//! the same (`hot_partition` then says so). Every 429 counts, cross-partition queries'
//! too: the counters see them all.

use super::{pct, Evidence, Rule};
use crate::evidence::{Finding, FindingKind, RangeConsumption};

/// The range's consumption that is not the service's own, from which it is a
/// neighbour's (the service's share is estimated from the sample of traces, so the line
/// is drawn at half, not at the first foreign request unit).
const FOREIGN_SHARE: f64 = super::hot_partition::FOREIGN_SHARE;
/// A neighbour matters once it takes the range near its budget or makes it throttle:
/// 80 % of the range's RU/s over the stage, or this many 429s on the range.
const BUDGET_SHARE: f64 = 0.8;
const MIN_THROTTLED: u64 = 10;

pub struct NoisyNeighbor;

impl NoisyNeighbor {
    fn pressed(range: &RangeConsumption) -> bool {
        range.budget_share >= BUDGET_SHARE || range.throttled >= MIN_THROTTLED
    }
}

impl Rule for NoisyNeighbor {
    fn kind(&self) -> FindingKind {
        FindingKind::NoisyNeighbor
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let counters = e.counters?;
        let c = e.cosmos;
        let range = counters
            .ranges(c)
            .into_iter()
            .filter(|r| r.foreign_share >= FOREIGN_SHARE && Self::pressed(r))
            .max_by(|a, b| a.foreign_ru().total_cmp(&b.foreign_ru()))?;
        Some(Finding {
            kind: self.kind(),
            title: "Noisy Neighbor".into(),
            evidence: format!(
                "partition key range {} spent {:.0} RU in the stage ({} of its budget, {} 429s), {} of it not {}'s own ({:.0} RU of its requests): another workload spends that partition's budget; {} of {}'s attempts were throttled",
                range.range,
                range.ru,
                pct(range.budget_share),
                range.throttled,
                pct(range.foreign_share),
                c.service,
                range.own_ru,
                pct(c.throttled_share),
                c.service
            ),
            next_step: "give the other workload a container with throughput of its own (or a partition key that spreads its writes); more RU/s for the shared container would pay for the neighbour".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::rules::testing::{hot_range, Fixture};

    #[test]
    fn a_range_mostly_spent_by_another_client() {
        // The lab's neighbour: 429s on range 8, 70 % of its consumption foreign.
        let neighbour = hot_range(0.3, 100, 0.95, 0.1).counted(9, 0.3);
        assert_eq!(neighbour.kinds(), [FindingKind::NoisyNeighbor]);
        let f = NoisyNeighbor
            .judge(&neighbour.evidence())
            .expect("neighbour");
        assert!(
            f.evidence.contains("range 8") && f.evidence.contains("70.0% of it not"),
            "{}",
            f.evidence
        );
        // The same 429s with the range's consumption the service's own (and the other
        // ranges with room): its own hot partition.
        let own = hot_range(0.3, 100, 0.95, 0.3).counted(9, 0.9);
        assert!(NoisyNeighbor.judge(&own.evidence()).is_none());
        assert_eq!(own.kinds(), [FindingKind::HotPartition]);
    }

    #[test]
    fn a_neighbour_is_named_without_a_single_throttled_request_of_ours() {
        // Three partitions, the neighbour's range at its budget, none of our calls
        // throttled.
        let quiet = Fixture::default().counted(3, 0.2);
        assert_eq!(quiet.kinds(), [FindingKind::NoisyNeighbor]);
    }

    #[test]
    fn a_sample_share_off_on_one_range_is_bounded_by_the_containers_rest() {
        // No neighbour: every range's request units the service's own, but its sample
        // puts 30 % less on range 2 than it really spent there.
        let mut f = Fixture::default().counted(3, 1.0);
        f.cosmos.ru_share_by_range =
            BTreeMap::from([("0".into(), 0.4), ("1".into(), 0.367), ("2".into(), 0.233)]);
        let counters = f.counters.as_mut().expect("counters");
        counters.ru_by_range = BTreeMap::from([
            ("0".into(), 3300.0),
            ("1".into(), 3350.0),
            ("2".into(), 3350.0),
        ]);
        counters.own_ru = 9900.0;
        let ranges = counters.clone().ranges(&f.cosmos);
        let worst = ranges.iter().map(|r| r.foreign_share).fold(0.0, f64::max);
        assert!(worst <= 100.0 / 3350.0 + 1e-9, "{ranges:?}");
        assert!(NoisyNeighbor.judge(&f.evidence()).is_none());
    }

    #[test]
    fn not_from_traces_alone_nor_without_the_services_own_figure() {
        let traces_only = hot_range(0.3, 100, 0.95, 0.1);
        assert!(NoisyNeighbor.judge(&traces_only.evidence()).is_none());
        let mut no_own = hot_range(0.3, 100, 0.95, 0.1).counted(9, 0.3);
        if let Some(k) = no_own.counters.as_mut() {
            k.own_ru = 0.0;
        }
        assert!(NoisyNeighbor.judge(&no_own.evidence()).is_none());
    }

    #[test]
    fn silent_where_every_range_is_the_services_own() {
        for stage in crate::rules::testing::study_stages() {
            assert!(NoisyNeighbor
                .judge(&stage.counted(9, 1.0).evidence())
                .is_none());
        }
    }
}
