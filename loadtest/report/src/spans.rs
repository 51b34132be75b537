//! Whether a stage's spans reached the trace store: each service's span counters
//! (`otel_spans_*_total`) over the stage. A span dropped at a full export queue, or lost
//! in a failed export, is missing from the traces the diagnosis reads; the report says
//! so rather than let a thinner sample pass for the whole.

use serde::{Deserialize, Serialize};

/// One service's spans over a stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceSpans {
    pub service: String,
    pub ended: u64,
    pub exported: u64,
    pub dropped: u64,
    pub export_failed: u64,
}

impl ServiceSpans {
    pub fn lost(&self) -> u64 {
        self.dropped + self.export_failed
    }
}

/// Every service's spans over a stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpanDelivery {
    pub services: Vec<ServiceSpans>,
}

impl SpanDelivery {
    pub fn ended(&self) -> u64 {
        self.services.iter().map(|s| s.ended).sum()
    }

    pub fn lost(&self) -> u64 {
        self.services.iter().map(ServiceSpans::lost).sum()
    }

    /// The warning to print beside the stage's verdict, when spans were lost.
    pub fn warning(&self) -> Option<String> {
        let lost = self.lost();
        if lost == 0 {
            return None;
        }
        let ended = self.ended().max(1);
        let by_service: Vec<String> = self
            .services
            .iter()
            .filter(|s| s.lost() > 0)
            .map(|s| format!("{} {} of {}", s.service, s.lost(), s.ended))
            .collect();
        Some(format!(
            "{lost} of {} spans ({:.1}%) never reached the trace store ({}): the diagnosis read a thinner sample than the stage made; raise OTEL_BSP_MAX_QUEUE_SIZE or lower the load",
            self.ended(),
            lost as f64 / ended as f64 * 100.0,
            by_service.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, ended: u64, dropped: u64) -> ServiceSpans {
        ServiceSpans {
            service: name.into(),
            ended,
            exported: ended - dropped,
            dropped,
            export_failed: 0,
        }
    }

    #[test]
    fn a_stage_that_lost_spans_says_how_many_and_where() {
        let whole = SpanDelivery {
            services: vec![
                service("gateway", 4000, 0),
                service("utilization-service", 1000, 0),
            ],
        };
        assert_eq!(whole.warning(), None);
        let thin = SpanDelivery {
            services: vec![
                service("gateway", 4000, 1000),
                service("utilization-service", 1000, 0),
            ],
        };
        let warning = thin.warning().expect("a warning");
        assert!(
            warning.starts_with("1000 of 5000 spans (20.0%)"),
            "{warning}"
        );
        assert!(warning.contains("gateway 1000 of 4000"), "{warning}");
        assert!(!warning.contains("utilization-service"), "{warning}");
    }
}
