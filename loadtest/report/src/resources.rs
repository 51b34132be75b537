//! CPU and memory of a stage's components: what the report holds, and how a stage's
//! per-second samples sum up. The local stack samples them from `/proc`, the cluster
//! mode from the metrics API; both report these figures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use trace_analysis::diagnosis::CpuEvidence;

/// The load tool's own name in the figures.
pub const LOAD_GENERATOR: &str = "loadtest";

/// Samples averaged for the "sustained" figures: a limit holds for seconds, a one-second
/// spike is not one.
const SUSTAINED_SAMPLES: usize = 5;

/// One component's figures over a stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentUsage {
    pub name: String,
    /// Mean CPU over the stage, in cores.
    pub cpu_mean_cores: f64,
    /// Highest one-second CPU, in cores.
    pub cpu_max_cores: f64,
    /// Its busiest thread's CPU, highest 5-second mean, in cores (absent where only
    /// per-container figures exist, as from the Kubernetes metrics API).
    pub hottest_thread_cores: Option<f64>,
    /// Highest resident memory, in MB.
    pub rss_max_mb: f64,
}

/// The stage's CPU and memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceFigures {
    /// Where the figures come from (`/proc` locally, `metrics.k8s.io` on a cluster).
    pub source: String,
    /// CPUs of the machine (locally; 0 on a cluster).
    pub cpus: usize,
    /// Mean share of all CPUs busy (locally; 0 on a cluster).
    pub machine_cpu_mean_share: f64,
    /// Highest 5-second mean share of all CPUs busy.
    pub machine_cpu_sustained_share: f64,
    /// Busiest (by mean CPU) first.
    pub components: Vec<ComponentUsage>,
}

impl ResourceFigures {
    /// What the diagnosis needs to tell a CPU limit from spare CPU (`None` without the
    /// machine's figures, as from the Kubernetes metrics API: a pod's CPU alone says
    /// nothing about its limit).
    pub fn cpu_evidence(&self) -> Option<CpuEvidence> {
        if self.cpus == 0 {
            return None;
        }
        let busiest = self.components.first()?;
        let hottest = self
            .components
            .iter()
            .filter_map(|c| Some((c, c.hottest_thread_cores?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        Some(CpuEvidence {
            cpus: self.cpus,
            machine_share: self.machine_cpu_sustained_share,
            machine_mean_share: self.machine_cpu_mean_share,
            own_share: round3(
                self.components
                    .iter()
                    .map(|c| c.cpu_mean_cores)
                    .sum::<f64>()
                    / self.cpus as f64,
            ),
            busiest: busiest.name.clone(),
            busiest_cores: busiest.cpu_mean_cores,
            hottest_thread: hottest.map(|(c, cores)| (c.name.clone(), cores)),
            load_generator: LOAD_GENERATOR.into(),
        })
    }
}

/// One second of the stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceSample {
    pub t: u64,
    pub machine_cpu_share: f64,
    pub cpu_cores: BTreeMap<String, f64>,
    pub rss_mb: BTreeMap<String, f64>,
}

/// The highest mean of [`SUSTAINED_SAMPLES`] consecutive values (of all, if fewer).
pub fn sustained_max(values: &[f64]) -> f64 {
    let window = SUSTAINED_SAMPLES.min(values.len()).max(1);
    values
        .windows(window)
        .map(|w| w.iter().sum::<f64>() / w.len() as f64)
        .fold(0.0, f64::max)
}

pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Per-component mean, max and memory; the machine's mean and sustained share.
pub fn summarise(
    source: &str,
    cpus: usize,
    names: &[String],
    series: &[ResourceSample],
    hottest: &BTreeMap<String, f64>,
) -> ResourceFigures {
    let mut components: Vec<ComponentUsage> = names
        .iter()
        .map(|name| {
            let cores: Vec<f64> = series
                .iter()
                .filter_map(|s| s.cpu_cores.get(name).copied())
                .collect();
            ComponentUsage {
                name: name.clone(),
                cpu_mean_cores: round3(mean(&cores)),
                cpu_max_cores: cores.iter().copied().fold(0.0, f64::max),
                hottest_thread_cores: hottest.get(name).copied(),
                rss_max_mb: series
                    .iter()
                    .filter_map(|s| s.rss_mb.get(name).copied())
                    .fold(0.0, f64::max),
            }
        })
        .collect();
    components.sort_by(|a, b| b.cpu_mean_cores.total_cmp(&a.cpu_mean_cores));
    let machine: Vec<f64> = series.iter().map(|s| s.machine_cpu_share).collect();
    ResourceFigures {
        source: source.into(),
        cpus,
        machine_cpu_mean_share: round3(mean(&machine)),
        machine_cpu_sustained_share: round3(sustained_max(&machine)),
        components,
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sustained_is_the_best_window_not_the_best_second() {
        assert!((sustained_max(&[0.1, 1.0, 0.1, 0.1, 0.1, 0.1]) - 0.28).abs() < 1e-9);
        assert_eq!(sustained_max(&[0.9, 0.9]), 0.9);
        assert_eq!(sustained_max(&[]), 0.0);
    }
}
