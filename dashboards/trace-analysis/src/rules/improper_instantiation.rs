//! **Improper Instantiation**: a client meant to be built once and shared is built per
//! request. Judged on what that costs, not on who built what: the metadata reads
//! (account, database, container, partition key ranges) the Cosmos endpoint answered
//! per request over the stage. A shared client reads them once and caches them; a new
//! client reads them again before its first call.

use super::{Evidence, Rule};
use crate::evidence::{Finding, FindingKind};

/// Metadata reads per request. A client built at startup reads a handful in all (and
/// again only after a partition split); a client built every other request costs
/// several per request.
const METADATA_READS_PER_REQUEST: f64 = 0.5;

pub struct ImproperInstantiation;

impl Rule for ImproperInstantiation {
    fn kind(&self) -> FindingKind {
        FindingKind::ImproperInstantiation
    }

    fn judge(&self, e: &Evidence) -> Option<Finding> {
        let per_request = e.counters?.metadata_reads_per_request()?;
        let service = &e.cosmos.service;
        (per_request >= METADATA_READS_PER_REQUEST).then(|| Finding {
            kind: self.kind(),
            title: "Improper Instantiation".into(),
            evidence: format!(
                "the Cosmos endpoint answered {per_request:.2} metadata reads (account, container, partition key ranges) per request: clients are built inside requests, each reading again what a shared client caches, before its first call"
            ),
            next_step: format!(
                "build one Cosmos client when {service} starts and share it (it is thread-safe and keeps its connections and metadata caches)"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{study_stages, Fixture};

    fn reads(metadata_reads: u64, requests: u64) -> Fixture {
        let mut f = Fixture::default().counted(1, 1.0);
        if let Some(k) = f.counters.as_mut() {
            k.metadata_reads = Some(metadata_reads);
            k.requests = requests;
        }
        f
    }

    #[test]
    fn metadata_reads_per_request() {
        use FindingKind::*;
        assert_eq!(reads(3000, 1000).kinds(), [ImproperInstantiation]);
        assert_eq!(reads(500, 1000).kinds(), [ImproperInstantiation]);
        assert_eq!(reads(499, 1000).kinds(), [NoCosmosBottleneck]);
        // A client built at startup: its few reads vanish in the stage's requests.
        assert_eq!(reads(4, 1000).kinds(), [NoCosmosBottleneck]);
        // Not measured: nothing to say.
        assert!(super::ImproperInstantiation
            .judge(&Fixture::default().evidence())
            .is_none());
        assert!(super::ImproperInstantiation
            .judge(&reads(100, 0).evidence())
            .is_none());
    }

    #[test]
    fn the_blocked_polls_of_building_clients_are_its_own() {
        let both = reads(3000, 1000).with(|f| {
            f.backends = vec![crate::evidence::BackendShare {
                service: "utilization-service".into(),
                avg_ms: 80.0,
                share_of_latency: 0.5,
                blocked_ms: 12.0,
            }]
        });
        assert_eq!(both.kinds(), [FindingKind::ImproperInstantiation]);
        let f = &crate::rules::judge(&both.evidence())[0];
        assert!(
            f.evidence.contains("also blocks the handler"),
            "{}",
            f.evidence
        );
    }

    #[test]
    fn silent_on_the_study_stages() {
        for stage in study_stages() {
            let mut stage = stage.counted(9, 1.0);
            if let Some(k) = stage.counters.as_mut() {
                k.metadata_reads = Some(5);
            }
            assert!(super::ImproperInstantiation
                .judge(&stage.evidence())
                .is_none());
        }
    }
}
