//! Samples the emulator's counters for one container every second while a stage's load
//! runs: successful and throttled requests, and RU/s per partition.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::emulator::{EmulatorAdmin, EmulatorSnapshot};
use crate::report::CosmosSample;

/// A running sampler; [`Sampler::finish`] stops it and returns the series.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Vec<CosmosSample>>,
}

impl Sampler {
    pub fn start(emulator: EmulatorAdmin, container: &'static str) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut series = Vec::new();
            let mut last = EmulatorSnapshot::default();
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break series,
                }
                if let Some(now) = emulator.snapshot(container).await {
                    series.push(CosmosSample {
                        t: started.elapsed().as_secs(),
                        ok: now.ok.saturating_sub(last.ok),
                        throttled: now.throttled.saturating_sub(last.throttled),
                        ru_per_partition: now.ru_last_second.clone(),
                    });
                    last = now;
                }
            }
        });
        Self { stop, task }
    }

    pub async fn finish(self) -> Vec<CosmosSample> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}
