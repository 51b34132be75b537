//! CPU and memory of every process of the local stack — and of the load tool itself, so
//! a user sees when the generator rather than the app saturates — sampled once a second
//! from `/proc` while a stage's load runs.
//!
//! Per component: CPU in cores (CPU seconds used per second of wall time), its busiest
//! thread's CPU (a single-threaded hot spot saturates at one core however many the
//! machine has), and resident memory. For the machine: the share of all CPUs busy.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dronelab_report::resources::{
    round3, summarise, sustained_max, ResourceFigures, ResourceSample, LOAD_GENERATOR,
};
use lifecycle::process::{machine_cpu_seconds, thread_cpu_seconds, ProcessUsage};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running sampler; [`ResourceSampler::finish`] stops it and sums the stage up.
pub struct ResourceSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<(Vec<ResourceSample>, BTreeMap<String, f64>)>,
    names: Vec<String>,
}

/// The previous reading of one process, to turn cumulative CPU time into a rate.
#[derive(Default)]
struct Previous {
    cpu_seconds: f64,
    threads: BTreeMap<i32, f64>,
    /// The busiest thread's cores in each of the last samples.
    hottest: Vec<f64>,
}

impl ResourceSampler {
    /// Samples `processes` (name, pid) and this process every second.
    pub fn start(mut processes: Vec<(String, u32)>) -> Self {
        processes.push((LOAD_GENERATOR.into(), std::process::id()));
        let names = processes.iter().map(|(n, _)| n.clone()).collect();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut series = Vec::new();
            let mut state: Option<(Vec<Previous>, (f64, f64), Instant)> = None;
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break,
                }
                let pids: Vec<u32> = processes.iter().map(|(_, pid)| *pid).collect();
                // Reading /proc is file I/O: off the async workers.
                let Ok(reading) = tokio::task::spawn_blocking(move || read(&pids)).await else {
                    continue;
                };
                let now = Instant::now();
                if let Some((mut previous, machine_before, at)) = state.take() {
                    let wall = now.duration_since(at).as_secs_f64();
                    let mut sample = ResourceSample {
                        t: started.elapsed().as_secs(),
                        machine_cpu_share: share(machine_before, reading.machine),
                        cpu_cores: BTreeMap::new(),
                        rss_mb: BTreeMap::new(),
                    };
                    for (((name, _), prev), now) in
                        processes.iter().zip(&mut previous).zip(&reading.processes)
                    {
                        let Some((usage, threads)) = now else {
                            continue;
                        };
                        let cores = round3((usage.cpu_seconds - prev.cpu_seconds).max(0.0) / wall);
                        let hottest = threads
                            .iter()
                            .filter_map(|(tid, s)| Some(s - prev.threads.get(tid)?))
                            .fold(0.0_f64, f64::max)
                            / wall;
                        prev.hottest.push(hottest);
                        sample.cpu_cores.insert(name.clone(), cores);
                        sample
                            .rss_mb
                            .insert(name.clone(), round3(usage.resident_bytes as f64 / 1e6));
                    }
                    series.push(sample);
                    state = Some((update(previous, &reading), reading.machine, now));
                } else {
                    let fresh = processes.iter().map(|_| Previous::default()).collect();
                    state = Some((update(fresh, &reading), reading.machine, now));
                }
            }
            let hottest = state
                .map(|(previous, _, _)| {
                    processes
                        .iter()
                        .zip(&previous)
                        .map(|((name, _), p)| (name.clone(), round3(sustained_max(&p.hottest))))
                        .collect()
                })
                .unwrap_or_default();
            (series, hottest)
        });
        Self { stop, task, names }
    }

    pub async fn finish(self) -> (ResourceFigures, Vec<ResourceSample>) {
        let _ = self.stop.send(());
        let (series, hottest) = self.task.await.unwrap_or_default();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let figures = summarise("/proc, every second", cpus, &self.names, &series, &hottest);
        (figures, series)
    }
}

/// A process's usage and its threads' cumulative CPU seconds.
type ProcessReading = (ProcessUsage, Vec<(i32, f64)>);

/// One reading of every process (`None` once exited) and of the machine.
struct Reading {
    processes: Vec<Option<ProcessReading>>,
    machine: (f64, f64),
}

fn read(pids: &[u32]) -> Reading {
    Reading {
        processes: pids
            .iter()
            .map(|&pid| Some((ProcessUsage::of(pid)?, thread_cpu_seconds(pid))))
            .collect(),
        machine: machine_cpu_seconds().unwrap_or_default(),
    }
}

fn update(mut previous: Vec<Previous>, reading: &Reading) -> Vec<Previous> {
    for (prev, now) in previous.iter_mut().zip(&reading.processes) {
        if let Some((usage, threads)) = now {
            prev.cpu_seconds = usage.cpu_seconds;
            prev.threads = threads.iter().copied().collect();
        }
    }
    previous
}

/// The share of CPU time busy between two `(busy, total)` readings.
fn share(before: (f64, f64), after: (f64, f64)) -> f64 {
    let total = after.1 - before.1;
    if total > 0.0 {
        round3(((after.0 - before.0) / total).clamp(0.0, 1.0))
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_busy_child_shows_as_about_one_core_on_one_thread_and_an_idle_one_as_none() {
        // A real busy process (a shell loop) beside a sleeping one.
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh");
        let mut idle = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let sampler =
            ResourceSampler::start(vec![("busy".into(), busy.id()), ("idle".into(), idle.id())]);
        tokio::time::sleep(Duration::from_millis(4500)).await;
        let (figures, series) = sampler.finish().await;
        let _ = busy.kill();
        let _ = idle.kill();
        let _ = (busy.wait(), idle.wait());
        assert!(series.len() >= 3, "{series:?}");
        let of = |name: &str| {
            figures
                .components
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{name} in {figures:?}"))
                .clone()
        };
        let (busy, idle) = (of("busy"), of("idle"));
        // Wide margins: the machine is shared, but a spinning shell gets most of a core.
        assert!(busy.cpu_mean_cores > 0.3, "{busy:?}");
        assert!(busy.hottest_thread_cores.unwrap_or(0.0) > 0.3, "{busy:?}");
        assert!(idle.cpu_mean_cores < 0.05, "{idle:?}");
        assert!(busy.cpu_mean_cores > 5.0 * idle.cpu_mean_cores);
        assert!(idle.rss_max_mb > 0.0);
        assert_eq!(figures.components[0].name, "busy", "busiest first");
        assert!(figures.components.iter().any(|c| c.name == LOAD_GENERATOR));
        assert!(figures.machine_cpu_mean_share > 0.0 && figures.machine_cpu_mean_share <= 1.0);
        let evidence = figures.cpu_evidence().expect("evidence");
        assert_eq!(evidence.busiest, "busy");
    }
}
