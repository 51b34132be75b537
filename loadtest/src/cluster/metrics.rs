//! CPU and memory of the cluster's pods during a stage, from the resource metrics API
//! (`metrics.k8s.io`, served by metrics-server), summed per component
//! (`app.kubernetes.io/name`). Clusters without it get a clear "unavailable" instead.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Cluster;
use dronelab_report::resources::{summarise, ResourceFigures, ResourceSample};

/// metrics-server refreshes every 15 s by default; sampling faster only repeats values.
const PERIOD: Duration = Duration::from_secs(5);
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// When the load started, ms since the Unix epoch (0: when sampling started). Load
/// pods start together some seconds after their Job is created; readings before that
/// would count idle pods into the stage's means.
#[derive(Clone, Default)]
pub struct LoadStart(Arc<AtomicU64>);

impl LoadStart {
    pub fn set(&self, at: SystemTime) {
        self.0.store(loadgen::unix_ms(at), Ordering::Relaxed);
    }

    /// Unknown again (a new stage).
    pub fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A running sampler of the namespace's pod metrics.
pub struct PodMetricsSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Readings>,
    load_start: LoadStart,
}

/// What the sampler read: each reading with its time, and the failed ones counted (one
/// transient error must not lose the stage's series).
#[derive(Debug, Default)]
struct Readings {
    samples: Vec<(u64, ResourceSample)>,
    failed: u32,
    last_error: Option<String>,
}

impl Cluster {
    pub fn pod_metrics_sampler(&self, load_start: LoadStart) -> PodMetricsSampler {
        let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "pods");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client(), &self.namespace, &resource);
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut readings = Readings::default();
            let mut tick = tokio::time::interval(PERIOD);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break readings,
                }
                match api.list(&ListParams::default()).await {
                    Ok(pods) => readings
                        .samples
                        .push((loadgen::unix_ms(SystemTime::now()), sample(&pods.items))),
                    Err(e) => {
                        readings.failed += 1;
                        readings.last_error = Some(e.to_string());
                    }
                }
            }
        });
        PodMetricsSampler {
            stop,
            task,
            load_start,
        }
    }
}

impl PodMetricsSampler {
    pub async fn finish(self) -> Result<(ResourceFigures, Vec<ResourceSample>), String> {
        let _ = self.stop.send(());
        let readings = self
            .task
            .await
            .map_err(|e| format!("sampling pod metrics failed: {e}"))?;
        during_load(readings, self.load_start.get())
    }
}

/// The readings taken since the load started, timed from it and summed per component;
/// an error when none is left, saying why.
fn during_load(
    readings: Readings,
    load_start_ms: u64,
) -> Result<(ResourceFigures, Vec<ResourceSample>), String> {
    let taken = readings.samples.len() as u32 + readings.failed;
    // Unknown start: the load started with the sampler.
    let origin = match readings.samples.first() {
        Some((first, _)) if load_start_ms == 0 => *first,
        _ => load_start_ms,
    };
    let series: Vec<ResourceSample> = readings
        .samples
        .into_iter()
        .filter(|(at, _)| *at >= origin)
        .map(|(at, mut sample)| {
            sample.t = (at - origin) / 1000;
            sample
        })
        .collect();
    if series.is_empty() {
        return Err(match readings.last_error {
            Some(e) => format!(
                "the resource metrics API (metrics.k8s.io) failed {} of {taken} readings ({e}) — install metrics-server to see CPU and memory per component",
                readings.failed
            ),
            None => "no reading of the pods' metrics during the load".into(),
        });
    }
    let names: Vec<String> = series
        .iter()
        .flat_map(|s| s.cpu_cores.keys().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut source =
        "metrics.k8s.io (per pod, summed per component; memory is the working set)".to_owned();
    if readings.failed > 0 {
        source.push_str(&format!("; {} of {taken} readings failed", readings.failed));
    }
    Ok((
        summarise(&source, 0, &names, &series, &BTreeMap::new()),
        series,
    ))
}

/// One reading of every pod, summed per component.
fn sample(pods: &[DynamicObject]) -> ResourceSample {
    let mut sample = ResourceSample {
        t: 0,
        machine_cpu_share: 0.0,
        cpu_cores: BTreeMap::new(),
        rss_mb: BTreeMap::new(),
    };
    for pod in pods {
        let name = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NAME_LABEL))
            .or(pod.metadata.name.as_ref())
            .cloned()
            .unwrap_or_default();
        let containers = pod.data["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for container in containers {
            let usage = &container["usage"];
            let cpu = usage["cpu"].as_str().and_then(cpu_cores).unwrap_or(0.0);
            let memory = usage["memory"].as_str().and_then(bytes).unwrap_or(0.0);
            *sample.cpu_cores.entry(name.clone()).or_default() += cpu;
            *sample.rss_mb.entry(name.clone()).or_default() += memory / 1e6;
        }
    }
    sample
}

/// A CPU quantity (`250m`, `1`, `123456n`) in cores.
fn cpu_cores(quantity: &str) -> Option<f64> {
    let (number, scale) = match quantity.char_indices().last()? {
        (i, 'n') => (&quantity[..i], 1e-9),
        (i, 'u') => (&quantity[..i], 1e-6),
        (i, 'm') => (&quantity[..i], 1e-3),
        _ => (quantity, 1.0),
    };
    Some(number.parse::<f64>().ok()? * scale)
}

/// A memory quantity (`1024Ki`, `12Mi`, `1G`, `5000`) in bytes.
fn bytes(quantity: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (number, scale) = SUFFIXES
        .iter()
        .find_map(|(suffix, scale)| Some((quantity.strip_suffix(suffix)?, *scale)))
        .unwrap_or((quantity, 1.0));
    Some(number.parse::<f64>().ok()? * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_metrics_server_writes_them() {
        assert_eq!(cpu_cores("250m"), Some(0.25));
        assert_eq!(cpu_cores("2"), Some(2.0));
        assert!((cpu_cores("123456789n").unwrap_or(0.0) - 0.123456789).abs() < 1e-12);
        assert_eq!(cpu_cores("x"), None);
        assert_eq!(bytes("2048Ki"), Some(2097152.0));
        assert_eq!(bytes("3Mi"), Some(3145728.0));
        assert_eq!(bytes("5000"), Some(5000.0));
        assert_eq!(bytes("1G"), Some(1e9));
        assert_eq!(bytes("Mi"), None);
    }

    #[test]
    fn pods_are_summed_per_component() {
        let pod = |name: &str, component: &str, cpu: &str, memory: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "metrics.k8s.io/v1beta1",
                "kind": "PodMetrics",
                "metadata": {"name": name, "labels": {NAME_LABEL: component}},
                "containers": [{"name": "app", "usage": {"cpu": cpu, "memory": memory}}]
            }))
            .expect("pod metrics")
        };
        let s = sample(&[
            pod("gateway-a", "gateway", "500m", "10Mi"),
            pod("gateway-b", "gateway", "250m", "10Mi"),
            pod("package-a", "package-service", "100m", "1M"),
        ]);
        assert_eq!(s.cpu_cores["gateway"], 0.75);
        assert!((s.rss_mb["gateway"] - 20.97152).abs() < 1e-9);
        assert_eq!(s.cpu_cores["package-service"], 0.1);
    }

    fn reading(cpu: f64) -> ResourceSample {
        ResourceSample {
            t: 0,
            machine_cpu_share: 0.0,
            cpu_cores: BTreeMap::from([("gateway".to_owned(), cpu)]),
            rss_mb: BTreeMap::from([("gateway".to_owned(), 10.0)]),
        }
    }

    #[test]
    fn readings_before_the_load_and_failed_ones_do_not_count() {
        let readings = Readings {
            samples: vec![
                (1_000_000, reading(0.0)),
                (1_025_000, reading(0.0)),
                (1_035_000, reading(1.0)),
                (1_045_000, reading(3.0)),
            ],
            failed: 1,
            last_error: Some("503 Service Unavailable".into()),
        };
        let (figures, series) = during_load(readings, 1_030_000).expect("figures");
        assert_eq!(series.iter().map(|s| s.t).collect::<Vec<_>>(), [5, 15]);
        let gateway = figures
            .components
            .iter()
            .find(|c| c.name == "gateway")
            .expect("gateway");
        assert!(
            (gateway.cpu_mean_cores - 2.0).abs() < 1e-9,
            "idle readings left out"
        );
        assert!(
            figures.source.contains("1 of 5 readings failed"),
            "{}",
            figures.source
        );
    }

    #[test]
    fn no_reading_during_the_load_says_why() {
        let failed = Readings {
            samples: vec![(1_000, reading(1.0))],
            failed: 3,
            last_error: Some("404 page not found".into()),
        };
        let why = during_load(failed, 2_000).expect_err("nothing during the load");
        assert!(
            why.contains("failed 3 of 4 readings (404 page not found)"),
            "{why}"
        );
        assert!(during_load(Readings::default(), 0).is_err());
    }
}
