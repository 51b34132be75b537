//! **Cross-partition query cost**: an operation queries several partition key ranges
//! (in parallel or not) where the partition key would let one answer.

use super::serial_fan_out::cross_partition;
use super::{pct, Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

pub struct CrossPartitionCost;

impl Rule for CrossPartitionCost {
    fn kind(&self) -> FindingKind {
        FindingKind::CrossPartitionCost
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let c = e.cosmos;
        cross_partition(c).then(|| Finding {
            kind: self.kind(),
            title: "Cross-partition query cost".into(),
            evidence: format!(
                "{} of operations fan out to {:.1} partition key ranges: {:.2} calls and {:.1} RU per operation",
                pct(c.cross_partition_share),
                c.partition_ranges_per_operation,
                c.calls_per_operation,
                c.ru_per_operation
            ),
            next_step: "query with the partition key (the ownerId-partitioned container): one partition answers, with one call and a fraction of the RU".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::study_stages;

    #[test]
    fn the_study_stages_in_order_of_what_to_fix_first() {
        use FindingKind::*;
        let [one, two, three, four] = study_stages();
        assert_eq!(one.kinds(), [Throttling, SerialFanOut, CrossPartitionCost]);
        assert_eq!(two.kinds(), [SerialFanOut, CrossPartitionCost]);
        assert_eq!(three.kinds(), [CrossPartitionCost]);
        assert_eq!(four.kinds(), [NoCosmosBottleneck]);
        let f = super::CrossPartitionCost
            .judge(&three.evidence())
            .expect("stage 3");
        assert!(
            f.evidence.contains("9.0 partition key ranges"),
            "{}",
            f.evidence
        );
    }
}
