//! **No Caching**: answers that can no longer change (closed months) computed again for
//! every request that asks for them again.

use super::{Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// The share of requests that repeat a closed month already asked for in the sample and
/// were computed again. Uniform load over the study's 12,000 owner-months repeats ~1 % of
/// 300 traces; real traffic's skew (Zipf, exponent 1) repeats over half.
const RECOMPUTED_REPEATS: f64 = 0.2;

pub struct NoCaching;

impl Rule for NoCaching {
    fn kind(&self) -> FindingKind {
        FindingKind::NoCaching
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let r = e.repeats;
        (r.recomputed_repeat_share >= RECOMPUTED_REPEATS).then(|| Finding {
            kind: self.kind(),
            title: "No Caching".into(),
            evidence: format!(
                "{:.0}% of the requests ask again for a closed month already answered, and {:.0}% are computed again from the backends although the answer can no longer change",
                r.repeated_share * 100.0,
                r.recomputed_repeat_share * 100.0
            ),
            next_step: "cache the answers that can no longer change (closed months) where they are assembled, and serve repeats from it".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::RepeatEvidence;
    use crate::rules::testing::Fixture;

    fn repeats(repeated: f64, recomputed: f64) -> Fixture {
        Fixture {
            repeats: RepeatEvidence {
                closed_month_share: 1.0,
                repeated_share: repeated,
                recomputed_repeat_share: recomputed,
            },
            ..Fixture::default()
        }
    }

    #[test]
    fn a_fifth_of_the_requests_recomputing_a_repeat() {
        assert_eq!(repeats(0.2, 0.2).kinds(), [FindingKind::NoCaching]);
        assert_eq!(
            repeats(0.6, 0.19).kinds(),
            [FindingKind::NoCosmosBottleneck]
        );
        // Served from a cache: repeated, not recomputed (Zipf traffic with the cache on).
        assert_eq!(repeats(0.6, 0.0).kinds(), [FindingKind::NoCosmosBottleneck]);
    }
}
