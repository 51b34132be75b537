//! The sample of traces beside the stage's counters: each figure both measure, and
//! whether they agree within the sample's own uncertainty; and the figures the sample
//! alone gave, where a counter was not read.
//!
//! The counters say how much (every request the load sent, every call the container
//! answered); the traces say why (which service, which call, which range). A figure that
//! disagrees is printed beside the stage: the sample missed something the counters saw,
//! or the counters include clients the traces do not (another workload on the
//! container).

use crate::evidence::{Consistency, CosmosEvidence, FailureEvidence, StageCounters};

/// Shares agree within at least a point, and means within at least 5 %, whatever the
/// sample's size: the two are not counted over exactly the same requests (the sample is
/// drawn after the stage's first tenth, the counters cover its edges).
const SHARE_FLOOR: f64 = 0.01;
const MEAN_FLOOR: f64 = 0.05;
/// Other clients' share of the container's request units from which the throttled
/// share's comparison says they are in the counters.
const OTHERS_NOTED: f64 = 0.05;
/// Agreement within three standard errors of the sample's figure.
const STANDARD_ERRORS: f64 = 3.0;

/// What the sample of traces measured: its Cosmos figures over `traces` answered entry
/// traces, and its failures.
pub struct Sample<'a> {
    pub traces: usize,
    pub cosmos: &'a CosmosEvidence,
    pub failures: &'a FailureEvidence,
}

/// Every figure the sample and `counters` both measure.
pub fn compare(sample: &Sample, counters: &StageCounters) -> Vec<Consistency> {
    let mut figures = Vec::new();
    let cosmos = sample.cosmos;
    if let Some(stage) = counters.throttled_share() {
        let attempts = (cosmos.calls_per_operation * sample.traces as f64).round();
        let mut throttled = share(
            "throttled share of Cosmos calls",
            cosmos.throttled_share,
            attempts,
            stage,
        );
        // A trace's attempts come together (its retries follow its 429s): the error of
        // the share over the traces can be wider than the binomial one.
        throttled.agree |= attempts > 0.0
            && (cosmos.throttled_share - stage).abs()
                <= STANDARD_ERRORS * cosmos.throttled_share_se;
        if let Some(others) = counters.others_ru_share().filter(|s| *s >= OTHERS_NOTED) {
            throttled.note = format!(
                "the container's counters include other clients ({:.0}% of its request units), whose calls and 429s the traces do not hold",
                others * 100.0
            );
        }
        figures.push(throttled);
    }
    if let Some(stage) = counters.failed_share() {
        figures.push(share(
            "failed share of requests",
            sample.failures.failed_share(),
            sample.failures.answered as f64,
            stage,
        ));
    }
    if let Some(stage) = ru_per_answered_request(counters) {
        let sample = cosmos.ru_per_operation;
        let margin = (STANDARD_ERRORS * cosmos.ru_per_operation_se).max(MEAN_FLOOR * stage);
        figures.push(Consistency {
            figure: format!("request units per request ({})", cosmos.service),
            sample: round(sample, 2),
            stage: round(stage, 2),
            agree: (sample - stage).abs() <= margin,
            note: String::new(),
        });
    }
    figures
}

/// A share measured on `n` of the sample's units against the stage's: binomial, the
/// units taken as independent, at the stage's share. No unit in the sample (it saw none
/// of what the counters counted) disagrees with any share above the floor.
fn share(figure: &str, sample: f64, n: f64, stage: f64) -> Consistency {
    let agree = if n > 0.0 {
        let error = (stage * (1.0 - stage) / n).sqrt();
        (sample - stage).abs() <= (STANDARD_ERRORS * error).max(SHARE_FLOOR)
    } else {
        stage < SHARE_FLOOR
    };
    Consistency {
        figure: figure.into(),
        sample: round(sample, 4),
        stage: round(stage, 4),
        agree,
        note: String::new(),
    }
}

/// The diagnosed service's own request units per request the gateway answered (the
/// sample reads only answered traces: requests shed or timed out are left out, answers
/// with a part missing kept).
fn ru_per_answered_request(counters: &StageCounters) -> Option<f64> {
    let unanswered: u64 = counters
        .failed_by_outcome
        .iter()
        .filter(|(outcome, _)| outcome.as_str() != "partial")
        .map(|(_, n)| n)
        .sum();
    let answered = counters.requests.saturating_sub(unanswered);
    (counters.own_ru > 0.0 && answered > 0).then(|| counters.own_ru / answered as f64)
}

/// The figures the sample alone gave the rules: those whose counter was not read. (CPU
/// is never judged from traces: without the stage's measurement its rules stay silent.)
pub fn sample_only(counters: Option<&StageCounters>) -> Vec<String> {
    let cosmos = counters.is_some_and(StageCounters::cosmos_counted);
    let mut figures = Vec::new();
    if !cosmos {
        figures.push("throttled share of Cosmos calls");
        figures.push("request units and 429s per partition key range");
    }
    if counters.is_none_or(|k| k.own_ru <= 0.0) {
        figures.push("request units per request");
    }
    if counters.is_none_or(|k| k.failed_share().is_none()) {
        figures.push("failed share of requests");
    }
    figures.into_iter().map(str::to_owned).collect()
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosmos(calls: f64, throttled_share: f64, ru: f64, ru_se: f64) -> CosmosEvidence {
        CosmosEvidence {
            service: "utilization-service".into(),
            calls_per_operation: calls,
            throttled_share,
            ru_per_operation: ru,
            ru_per_operation_se: ru_se,
            ..CosmosEvidence::default()
        }
    }

    fn failures(answered: usize, failed: usize) -> FailureEvidence {
        FailureEvidence {
            answered,
            failed,
            failing_call: None,
        }
    }

    /// `traces` of a sample with these Cosmos figures and failures beside `counters`.
    fn compared(
        traces: usize,
        cosmos: &CosmosEvidence,
        failures: &FailureEvidence,
        counters: &StageCounters,
    ) -> Vec<Consistency> {
        compare(
            &Sample {
                traces,
                cosmos,
                failures,
            },
            counters,
        )
    }

    fn figure<'a>(figures: &'a [Consistency], name: &str) -> &'a Consistency {
        figures
            .iter()
            .find(|c| c.figure.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {figures:?}"))
    }

    #[test]
    fn a_throttled_share_the_sample_missed_disagrees() {
        let counters = StageCounters {
            throttled_by_range: [("0".into(), 6799)].into(),
            cosmos_calls: 11_641,
            ..StageCounters::default()
        };
        let c = cosmos(1.0, 0.0, 3.0, 0.1);
        let f = failures(273, 0);
        let missed = compared(273, &c, &f, &counters);
        let throttled = figure(&missed, "throttled share");
        assert_eq!((throttled.sample, throttled.stage), (0.0, 0.5841));
        assert!(!throttled.agree);
        // 57 % in 273 attempts: within three standard errors (3 %).
        let c = cosmos(1.0, 0.57, 3.0, 0.1);
        let close = compared(273, &c, &f, &counters);
        assert!(figure(&close, "throttled share").agree);
        // A sample without one Cosmos attempt cannot agree with a throttled container.
        let c = cosmos(0.0, 0.0, 0.0, 0.0);
        let blind = compared(273, &c, &f, &counters);
        assert!(!figure(&blind, "throttled share").agree);
    }

    #[test]
    fn a_traces_retries_widen_the_error_of_its_throttled_share() {
        // A held-out stage's first run: 75 % of 2,271 attempts in 572 traces, 70 %
        // counted. Taken as independent attempts (binomial: 1 point) they disagree; with
        // an error of 2 points over traces, whose retries follow their 429s, they agree.
        let counters = StageCounters {
            steady_cosmos_calls: 100_000,
            steady_throttled: 70_050,
            ..StageCounters::default()
        };
        let f = failures(572, 0);
        let mut c = cosmos(3.97, 0.7499, 9.0, 0.1);
        let binomial = compared(572, &c, &f, &counters);
        assert!(!figure(&binomial, "throttled share").agree);
        c.throttled_share_se = 0.02;
        let clustered = compared(572, &c, &f, &counters);
        assert!(figure(&clustered, "throttled share").agree);
    }

    #[test]
    fn a_neighbours_429s_in_the_counters_are_noted() {
        // The lab's shared container: 61 % of every client's calls throttled, 47 % of
        // the service's; 17 % of the container's request units were another workload's.
        let counters = StageCounters {
            throttled_by_range: [("5".into(), 8170)].into(),
            cosmos_calls: 13_418,
            ru_by_range: [("5".into(), 19_239.0)].into(),
            own_ru: 16_000.0,
            ..StageCounters::default()
        };
        let c = cosmos(1.9, 0.4748, 3.4, 0.01);
        let f = failures(575, 1);
        let shared = compared(575, &c, &f, &counters);
        let throttled = figure(&shared, "throttled share");
        assert!(!throttled.agree);
        assert!(
            throttled.note.contains("other clients (17% of"),
            "{}",
            throttled.note
        );
        // The service alone on its container: nothing to note.
        let alone = StageCounters {
            ru_by_range: [("5".into(), 16_100.0)].into(),
            ..counters
        };
        let own = compared(575, &c, &f, &alone);
        assert!(figure(&own, "throttled share").note.is_empty());
    }

    #[test]
    fn failures_the_sample_missed_disagree() {
        let counters = StageCounters {
            steady_requests: 5000,
            steady_failed: 400,
            ..StageCounters::default()
        };
        let c = cosmos(1.0, 0.0, 3.0, 0.1);
        let none = failures(600, 0);
        let missed = compared(600, &c, &none, &counters);
        let failed = figure(&missed, "failed share");
        assert_eq!(
            (failed.sample, failed.stage, failed.agree),
            (0.0, 0.08, false)
        );
        let some = failures(600, 45);
        let seen = compared(600, &c, &some, &counters);
        assert!(figure(&seen, "failed share").agree);
    }

    #[test]
    fn request_units_agree_within_the_samples_error() {
        let counters = StageCounters {
            requests: 1000,
            own_ru: 30_000.0,
            failed_by_outcome: [("timeout".to_owned(), 100), ("partial".to_owned(), 40)].into(),
            ..StageCounters::default()
        };
        // 30,000 RU over the 900 answered requests (timeouts out, partial answers in).
        let c = cosmos(1.0, 0.0, 32.5, 0.5);
        let f = failures(600, 0);
        let near = compared(600, &c, &f, &counters);
        let ru = figure(&near, "request units per request");
        assert_eq!(ru.stage, 33.33);
        assert!(ru.agree, "{ru:?}");
        let c = cosmos(1.0, 0.0, 20.0, 0.5);
        let far = compared(600, &c, &f, &counters);
        assert!(!figure(&far, "request units per request").agree);
    }

    #[test]
    fn only_figures_with_a_counter_are_compared_and_the_rest_are_named() {
        let c = cosmos(1.0, 0.0, 3.0, 0.1);
        let f = failures(600, 0);
        let nothing = StageCounters::default();
        assert!(compare(
            &Sample {
                traces: 600,
                cosmos: &c,
                failures: &f
            },
            &nothing
        )
        .is_empty());
        assert_eq!(
            sample_only(Some(&nothing)),
            [
                "throttled share of Cosmos calls",
                "request units and 429s per partition key range",
                "request units per request",
                "failed share of requests"
            ]
        );
        let load_only = StageCounters {
            steady_requests: 10,
            ..StageCounters::default()
        };
        assert_eq!(sample_only(Some(&load_only)).len(), 3);
    }
}
