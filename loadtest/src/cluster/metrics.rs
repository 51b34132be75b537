//! CPU and memory of the cluster's pods during a stage, from the resource metrics API
//! (`metrics.k8s.io`, served by metrics-server), summed per component
//! (`app.kubernetes.io/name`). Clusters without it get a clear "unavailable" instead.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Cluster;
use dronelab_report::resources::{summarise, ResourceFigures, ResourceSample};

/// metrics-server refreshes every 15 s by default; sampling faster only repeats values.
const PERIOD: Duration = Duration::from_secs(5);
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// A running sampler of the namespace's pod metrics.
pub struct PodMetricsSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<Vec<ResourceSample>, String>>,
}

impl Cluster {
    pub fn pod_metrics_sampler(&self) -> PodMetricsSampler {
        let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "pods");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client(), &self.namespace, &resource);
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut series = Vec::new();
            let mut tick = tokio::time::interval(PERIOD);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break Ok(series),
                }
                let pods = api.list(&ListParams::default()).await.map_err(|e| {
                    format!("the resource metrics API (metrics.k8s.io) is unavailable: {e} — install metrics-server to see CPU and memory per component")
                })?;
                series.push(sample(started.elapsed().as_secs(), &pods.items));
            }
        });
        PodMetricsSampler { stop, task }
    }
}

impl PodMetricsSampler {
    pub async fn finish(self) -> Result<(ResourceFigures, Vec<ResourceSample>), String> {
        let _ = self.stop.send(());
        let series = self
            .task
            .await
            .map_err(|e| format!("sampling pod metrics failed: {e}"))??;
        let names: Vec<String> = series
            .iter()
            .flat_map(|s| s.cpu_cores.keys().cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let source = "metrics.k8s.io (per pod, summed per component; memory is the working set)";
        Ok((
            summarise(source, 0, &names, &series, &BTreeMap::new()),
            series,
        ))
    }
}

/// One reading of every pod, summed per component.
fn sample(t: u64, pods: &[DynamicObject]) -> ResourceSample {
    let mut sample = ResourceSample {
        t,
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
        let s = sample(
            5,
            &[
                pod("gateway-a", "gateway", "500m", "10Mi"),
                pod("gateway-b", "gateway", "250m", "10Mi"),
                pod("package-a", "package-service", "100m", "1M"),
            ],
        );
        assert_eq!(s.cpu_cores["gateway"], 0.75);
        assert!((s.rss_mb["gateway"] - 20.97152).abs() < 1e-9);
        assert_eq!(s.cpu_cores["package-service"], 0.1);
    }
}
