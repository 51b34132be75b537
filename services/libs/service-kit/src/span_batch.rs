//! The span batch processor: ended spans go through a bounded queue to a thread of
//! their own, which exports them in batches — what the SDK's batch processor does, with
//! one difference that matters here: what it loses is counted. A span that finds the
//! queue full is dropped and counted in `otel_spans_dropped_total`, so a drop shows in
//! `/metrics` and in the tuning run's report instead of silently shrinking the traces
//! the diagnosis reads. (The SDK keeps its count private and only logs it at shutdown.)
//!
//! Sizing (`OTEL_BSP_*`, the standard variables; dronelab's defaults where unset): a
//! batch leaves every 200 ms or at 256 spans, whichever comes first, from a queue of
//! 32,768. A gateway answering 11,000 invoices/s makes ~44,000 spans/s (its server span
//! and three client spans each): 200 ms of them is ~8,800, a quarter of the queue,
//! leaving room for an export that takes three times as long (a collector on a busy
//! core: with 16,384, one `bench/run` lost 6,105 of 1.2 million spans). The queue holds
//! pointers, so the room costs 512 KB, not the spans'. The SDK's defaults (5 s, 512,
//! 2,048) drop above ~400 spans/s.
//!
//! Batches of 256 rather than 2,048: measured on the gateway at full load
//! (`bench/run tracing`'s placement), 256 answered 17 % more invoices, on 7 % less CPU
//! per invoice; of the sizes tried, 128, 384 and 512 answered 13 %, 15 % and 10 % more.
//! A batch of 2,048 is ~2 MB of span memory (the measuring machine's L2 cache), ~660 KB
//! on the wire that HTTP/2 flow control lets out in a dozen round trips, each waking the
//! export thread on the busy core, and a burst of decoding for the collector, which on
//! the benchmark's load core delays the backends and leaves the gateway idle 8 % of the
//! time. Smaller batches cost more wake-ups and calls.
//!
//! Ending a span does not wake the export thread: it sleeps out the schedule's delay and
//! is woken early only when a batch's worth has queued, or to answer a flush or a
//! shutdown. A thread blocked on the queue woke for nearly every span instead: 149,000
//! context switches in 8 s at 5,700 invoices/s, each taking the core from the requests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use dronelab_contract::telemetry::metric;
use lifecycle::metrics::MetricsRegistry;
use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use prometheus_client::metrics::counter::Counter;

/// What became of the spans a service ended. The counters are shared: clones count into
/// the same totals (registered in `/metrics` by the service's instrumentation).
#[derive(Debug, Clone, Default)]
pub struct SpanCounts {
    pub ended: Counter<u64>,
    pub exported: Counter<u64>,
    pub dropped: Counter<u64>,
    pub export_failed: Counter<u64>,
}

impl SpanCounts {
    /// Registers the four counters (`otel_spans_*_total`) in `registry`.
    pub fn register(&self, registry: &MetricsRegistry) {
        for (name, help, counter) in [
            (
                metric::OTEL_SPANS_ENDED,
                "Spans this service ended",
                &self.ended,
            ),
            (
                metric::OTEL_SPANS_EXPORTED,
                "Spans exported to the collector",
                &self.exported,
            ),
            (
                metric::OTEL_SPANS_DROPPED,
                "Spans dropped because the export queue was full (OTEL_BSP_MAX_QUEUE_SIZE)",
                &self.dropped,
            ),
            (
                metric::OTEL_SPANS_EXPORT_FAILED,
                "Spans lost in exports that failed",
                &self.export_failed,
            ),
        ] {
            registry.register(metric::registered(name), help, counter.clone());
        }
    }
}

/// Queue, batch and delay of the processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    pub max_queue_size: usize,
    pub max_export_batch_size: usize,
    pub schedule_delay: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            max_queue_size: 32_768,
            max_export_batch_size: 256,
            schedule_delay: Duration::from_millis(200),
        }
    }
}

impl BatchSettings {
    /// The defaults, overridden by `OTEL_BSP_MAX_QUEUE_SIZE`,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` and `OTEL_BSP_SCHEDULE_DELAY` (ms) where set to a
    /// positive number. A batch is never larger than the queue.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| {
            lookup(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|n| *n > 0)
        };
        let defaults = Self::default();
        let max_queue_size =
            number("OTEL_BSP_MAX_QUEUE_SIZE").map_or(defaults.max_queue_size, |n| n as usize);
        Self {
            max_queue_size,
            max_export_batch_size: number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
                .map_or(defaults.max_export_batch_size, |n| n as usize)
                .min(max_queue_size),
            schedule_delay: number("OTEL_BSP_SCHEDULE_DELAY")
                .map_or(defaults.schedule_delay, Duration::from_millis),
        }
    }
}

/// What the export thread hands its batches to: the spans as the queue holds them, boxed.
/// Every SDK exporter is one (its batch is unboxed for it); the OTLP/gRPC exporter reads
/// the spans where they lie, which saves moving each out of its box into the batch (~350
/// bytes a span, a tenth of the export thread's instructions).
pub trait BatchExporter: Send + 'static {
    fn export_boxed(
        &self,
        batch: Vec<Box<SpanData>>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send;
    fn shutdown(&mut self) -> OTelSdkResult;
    fn set_resource(&mut self, resource: &Resource);
}

impl<E: SpanExporter + 'static> BatchExporter for E {
    fn export_boxed(
        &self,
        batch: Vec<Box<SpanData>>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.export(batch.into_iter().map(|span| *span).collect())
    }

    fn shutdown(&mut self) -> OTelSdkResult {
        SpanExporter::shutdown(self)
    }

    fn set_resource(&mut self, resource: &Resource) {
        SpanExporter::set_resource(self, resource);
    }
}

/// What the export thread is asked besides spans.
enum Control {
    Resource(Resource),
    Flush(SyncSender<OTelSdkResult>),
    Shutdown(SyncSender<OTelSdkResult>),
}

/// Batches ended spans to an exporter on a thread of its own, counting drops.
#[derive(Debug)]
pub struct CountingBatchProcessor {
    /// Boxed: the channel sets aside a slot per span it can hold, and 16,384 slots of
    /// `SpanData` (352 bytes) were 5.8 MB that every span's copy in and out went through;
    /// 32,768 pointers are 512 KB.
    spans: SyncSender<Box<SpanData>>,
    control: Mutex<mpsc::Sender<Control>>,
    counts: SpanCounts,
    /// Spans queued since the export thread last looked; at a batch's worth it is woken.
    queued: Arc<AtomicUsize>,
    wake_at: usize,
    /// Wakes the export thread waiting inside its runtime ([`Executor::wait`]); a
    /// thread without one parks, and is unparked.
    wake: Arc<Notify>,
    export_thread: Option<Thread>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl CountingBatchProcessor {
    /// Starts the export thread. Must run where `exporter` can export from a plain
    /// thread (the OTLP/HTTP exporter's blocking client can, as can the in-memory one).
    pub fn new<E: BatchExporter>(exporter: E, settings: BatchSettings, counts: SpanCounts) -> Self {
        let exported = counts.clone();
        Self::start(settings, counts, move |queue| {
            export_loop(exporter, Executor::Plain, queue, settings, exported)
        })
    }

    /// Starts the export thread with a Tokio runtime of its own, in which it builds its
    /// exporter with `make_exporter`. An exporter whose client runs as tasks of the
    /// runtime it was built in (OTLP/gRPC's tonic channel and its HTTP/2 connection) then
    /// does its network work on this thread too, rather than on the service's workers,
    /// which under load would serve requests first and let the queue overflow.
    pub fn on_own_runtime<E, X, F>(
        make_exporter: F,
        settings: BatchSettings,
        counts: SpanCounts,
    ) -> Result<Self, X>
    where
        E: BatchExporter,
        X: From<std::io::Error> + Send + 'static,
        F: FnOnce() -> Result<E, X> + Send + 'static,
    {
        let (started, startup) = mpsc::sync_channel::<Result<(), X>>(1);
        let exported = counts.clone();
        let processor = Self::start(settings, counts, move |queue| {
            let built = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(X::from)
                .and_then(|runtime| {
                    let exporter = {
                        let _inside = runtime.enter();
                        make_exporter()?
                    };
                    Ok((runtime, exporter))
                });
            match built {
                Ok((runtime, exporter)) => {
                    let _ = started.send(Ok(()));
                    let executor = Executor::Runtime(runtime);
                    export_loop(exporter, executor, queue, settings, exported);
                }
                Err(e) => {
                    let _ = started.send(Err(e));
                }
            }
        });
        // Building a client takes microseconds, once at startup.
        match startup.recv() {
            Ok(Ok(())) => Ok(processor),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(X::from(std::io::Error::other(
                "the span export thread did not start",
            ))),
        }
    }

    /// The queue and control channels, and the export thread running `export` on their
    /// receiving ends. Should the thread not start, the channels are closed and every
    /// span counts as dropped.
    fn start(
        settings: BatchSettings,
        counts: SpanCounts,
        export: impl FnOnce(ExportQueue) + Send + 'static,
    ) -> Self {
        let (spans, receiver) = mpsc::sync_channel(settings.max_queue_size);
        let (control, inbox) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let wake = Arc::new(Notify::new());
        let queue = ExportQueue {
            spans: receiver,
            inbox,
            queued: queued.clone(),
            wake: wake.clone(),
        };
        // The thread logs where its maker does: a service's export failures go to its log.
        let dispatch = tracing::dispatcher::get_default(tracing::Dispatch::clone);
        let worker = std::thread::Builder::new()
            .name("span-export".into())
            .spawn(move || tracing::dispatcher::with_default(&dispatch, || export(queue)))
            .ok();
        Self {
            spans,
            control: Mutex::new(control),
            counts,
            queued,
            wake_at: settings.max_export_batch_size,
            wake,
            export_thread: worker.as_ref().map(|w| w.thread().clone()),
            worker: Mutex::new(worker),
        }
    }

    /// Queues an ended span for export ([`SpanProcessor::on_end`] of a span already
    /// boxed, as a leaf span is).
    pub(crate) fn queue(&self, span: Box<SpanData>) {
        self.counts.ended.inc();
        // Full, or the export thread is gone: either way the span is lost.
        if self.spans.try_send(span).is_err() {
            self.counts.dropped.inc();
        } else if self.queued.fetch_add(1, Ordering::Relaxed) + 1 == self.wake_at {
            self.wake_export_thread();
        }
    }

    fn wake_export_thread(&self) {
        self.wake.notify_one();
        if let Some(thread) = &self.export_thread {
            thread.unpark();
        }
    }

    /// Sends `message` to the export thread and waits at most `timeout` for its answer.
    fn ask(
        &self,
        message: impl FnOnce(SyncSender<OTelSdkResult>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (reply, answer) = mpsc::sync_channel(1);
        let sent = self
            .control
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("span export control poisoned".into()))?
            .send(message(reply));
        if sent.is_err() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.wake_export_thread();
        answer
            .recv_timeout(timeout)
            .map_err(|_| OTelSdkError::Timeout(timeout))?
    }
}

impl SpanProcessor for CountingBatchProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        self.queue(Box::new(span));
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let result = self.ask(Control::Shutdown, timeout);
        if let Some(worker) = self.worker.lock().ok().and_then(|mut w| w.take()) {
            if result.is_ok() {
                let _ = worker.join();
            }
        }
        result
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Ok(control) = self.control.lock() {
            let _ = control.send(Control::Resource(resource.clone()));
        }
        // Read before the next batch leaves, so none leaves without the resource.
        self.wake_export_thread();
    }
}

/// The export thread's ends of the channels.
struct ExportQueue {
    spans: Receiver<Box<SpanData>>,
    inbox: Receiver<Control>,
    queued: Arc<AtomicUsize>,
    wake: Arc<Notify>,
}

/// How taking queued spans into a batch ended.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    BatchFull,
    QueueEmpty,
    /// Every sender is gone: the processor was dropped without a shutdown.
    Closed,
}

/// The export thread's state: its exporter, where the exports run, and the batch being
/// filled.
struct ExportThread<E> {
    exporter: E,
    executor: Executor,
    queue: ExportQueue,
    #[expect(
        clippy::vec_box,
        reason = "the spans stay in the boxes they were queued in"
    )]
    batch: Vec<Box<SpanData>>,
    settings: BatchSettings,
    counts: SpanCounts,
    /// Spans lost since exports began to fail, while they fail.
    failing: Option<u64>,
}

/// The export thread: batches leave at the batch size or the schedule's delay; control
/// messages are served each time it wakes.
fn export_loop<E: BatchExporter>(
    exporter: E,
    executor: Executor,
    queue: ExportQueue,
    settings: BatchSettings,
    counts: SpanCounts,
) {
    let mut thread = ExportThread {
        exporter,
        executor,
        queue,
        batch: Vec::with_capacity(settings.max_export_batch_size),
        settings,
        counts,
        failing: None,
    };
    let mut deadline = Instant::now() + settings.schedule_delay;
    loop {
        // Control first: the resource is set before the first export.
        while let Ok(message) = thread.queue.inbox.try_recv() {
            match message {
                Control::Resource(resource) => thread.exporter.set_resource(&resource),
                Control::Flush(reply) => {
                    let _ = reply.send(thread.drain());
                }
                Control::Shutdown(reply) => {
                    let flushed = thread.drain();
                    let _ = reply.send(flushed.and(thread.exporter.shutdown()));
                    return;
                }
            }
        }
        let (taken, _) = thread.take_all();
        if taken == Taken::Closed {
            let _ = thread.export();
            return;
        }
        if Instant::now() >= deadline {
            let _ = thread.export();
            deadline = Instant::now() + settings.schedule_delay;
        }
        let timeout = deadline.saturating_duration_since(Instant::now());
        thread.executor.wait(timeout, &thread.queue.wake);
    }
}

impl<E: BatchExporter> ExportThread<E> {
    /// Takes every queued span, exporting each full batch; the last, partial one stays
    /// in the batch. The result is that of the exports.
    fn take_all(&mut self) -> (Taken, OTelSdkResult) {
        // Before taking: a span counted after this was sent after it, and is taken now or
        // counted towards the next wake.
        self.queue.queued.store(0, Ordering::Relaxed);
        let mut result = Ok(());
        loop {
            let max = self.settings.max_export_batch_size;
            match take_queued(&self.queue.spans, &mut self.batch, max) {
                Taken::BatchFull => result = result.and(self.export()),
                ended => return (ended, result),
            }
        }
    }

    /// Exports everything queued so far, batch by batch.
    fn drain(&mut self) -> OTelSdkResult {
        let (_, result) = self.take_all();
        result.and(self.export())
    }

    fn export(&mut self) -> OTelSdkResult {
        if self.batch.is_empty() {
            return Ok(());
        }
        let fresh = Vec::with_capacity(self.batch.capacity());
        let spans = std::mem::replace(&mut self.batch, fresh);
        let size = spans.len() as u64;
        let result = self.executor.run(self.exporter.export_boxed(spans));
        match &result {
            Ok(()) => {
                self.counts.exported.inc_by(size);
                if let Some(lost) = self.failing.take() {
                    tracing::info!(lost_spans = lost, "span export works again");
                }
            }
            Err(e) => {
                self.counts.export_failed.inc_by(size);
                match &mut self.failing {
                    Some(lost) => *lost += size,
                    // Once per run of failures: an unreachable collector fails every batch.
                    None => {
                        tracing::warn!(
                            error = %e,
                            spans = size,
                            "span export failed; its spans are lost (otel_spans_export_failed_total)"
                        );
                        self.failing = Some(size);
                    }
                }
            }
        };
        result
    }
}

/// Moves queued spans into `batch` until it holds `max` or the queue is empty.
#[expect(
    clippy::vec_box,
    reason = "the spans stay in the boxes they were queued in"
)]
fn take_queued(
    queue: &Receiver<Box<SpanData>>,
    batch: &mut Vec<Box<SpanData>>,
    max: usize,
) -> Taken {
    while batch.len() < max {
        match queue.try_recv() {
            Ok(span) => batch.push(span),
            Err(TryRecvError::Empty) => return Taken::QueueEmpty,
            Err(TryRecvError::Disconnected) => return Taken::Closed,
        }
    }
    Taken::BatchFull
}

/// Where an export's future runs: the export thread's own runtime, or simply blocked on.
enum Executor {
    Runtime(tokio::runtime::Runtime),
    Plain,
}

impl Executor {
    fn run<F: std::future::Future>(&self, work: F) -> F::Output {
        match self {
            Self::Runtime(runtime) => runtime.block_on(work),
            Self::Plain => futures::executor::block_on(work),
        }
    }

    /// Sleeps until `wake` or `timeout`. A runtime waits inside itself, so the
    /// exporter's connection keeps being driven between exports: it answers the
    /// collector's pings of an idle connection (the trace viewer pings after 30 s and
    /// closes what has not answered 10 s later), and a connection the collector closed
    /// is seen to, so the next export connects anew instead of writing into it and failing.
    fn wait(&self, timeout: Duration, wake: &Notify) {
        match self {
            Self::Runtime(runtime) => {
                // The timer is made inside: it needs the runtime's clock.
                let waited = async { tokio::time::timeout(timeout, wake.notified()).await };
                let _ = runtime.block_on(waited);
            }
            Self::Plain => std::thread::park_timeout(timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Condvar};

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    use super::*;

    /// The in-memory exporter behind a gate: exports wait until it opens, as they would
    /// behind a collector that fell behind.
    #[derive(Debug, Clone)]
    struct Gated {
        inner: InMemorySpanExporter,
        open: Arc<(Mutex<bool>, Condvar)>,
    }

    impl Gated {
        fn new() -> Self {
            Self {
                inner: InMemorySpanExporter::default(),
                open: Arc::new((Mutex::new(false), Condvar::new())),
            }
        }

        fn wait_open(&self) {
            let (open, changed) = &*self.open;
            let mut is_open = open.lock().unwrap_or_else(|e| e.into_inner());
            while !*is_open {
                is_open = changed.wait(is_open).unwrap_or_else(|e| e.into_inner());
            }
        }

        fn open(&self) {
            let (open, changed) = &*self.open;
            *open.lock().unwrap_or_else(|e| e.into_inner()) = true;
            changed.notify_all();
        }
    }

    impl SpanExporter for Gated {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.wait_open();
            self.inner.export(batch).await
        }
    }

    fn provider(
        exporter: Gated,
        settings: BatchSettings,
        counts: &SpanCounts,
    ) -> SdkTracerProvider {
        let processor = CountingBatchProcessor::new(exporter, settings, counts.clone());
        SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build()
    }

    /// A provider batching into a gated exporter with `settings`, and its counts.
    fn gated(
        queue: usize,
        batch: usize,
        delay: Duration,
    ) -> (Gated, SpanCounts, SdkTracerProvider) {
        let exporter = Gated::new();
        let counts = SpanCounts::default();
        let settings = BatchSettings {
            max_queue_size: queue,
            max_export_batch_size: batch,
            schedule_delay: delay,
        };
        let provider = provider(exporter.clone(), settings, &counts);
        (exporter, counts, provider)
    }

    fn make_spans(provider: &SdkTracerProvider, n: usize) {
        let tracer = provider.tracer("test");
        for i in 0..n {
            tracer.in_span(format!("span {i}"), |_| {});
        }
    }

    #[test]
    fn the_standard_variables_size_the_batches() {
        let env: HashMap<&str, &str> = [
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ]
        .into();
        let settings = BatchSettings::from_lookup(|name| env.get(name).map(|v| (*v).to_owned()));
        assert_eq!(settings.max_queue_size, 100);
        assert_eq!(settings.max_export_batch_size, 100, "never above the queue");
        assert_eq!(settings.schedule_delay, Duration::from_millis(50));
        let junk = BatchSettings::from_lookup(|_| Some("-3".to_owned()));
        assert_eq!(junk, BatchSettings::default());
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_every_span_is_accounted_for() {
        let (exporter, counts, provider) = gated(8, 4, Duration::from_millis(10));
        make_spans(&provider, 200);
        exporter.open();
        provider.force_flush().expect("flushed");
        let (ended, exported, dropped) = (
            counts.ended.get(),
            counts.exported.get(),
            counts.dropped.get(),
        );
        assert_eq!(ended, 200);
        // The thread holds one batch, the queue eight: the rest was dropped, counted.
        assert!(dropped >= 200 - 8 - 4 - 4, "{dropped} dropped");
        assert_eq!(exported + dropped, ended);
        let arrived = exporter.inner.get_finished_spans().expect("spans").len();
        assert_eq!(arrived as u64, exported);
        assert_eq!(counts.export_failed.get(), 0);
    }

    #[test]
    fn with_room_in_the_queue_every_span_arrives() {
        let exporter = Gated::new();
        exporter.open();
        let counts = SpanCounts::default();
        let provider = provider(exporter.clone(), BatchSettings::default(), &counts);
        make_spans(&provider, 10_000);
        provider.force_flush().expect("flushed");
        assert_eq!(counts.dropped.get(), 0);
        assert_eq!(counts.exported.get(), 10_000);
        let arrived = exporter.inner.get_finished_spans().expect("spans").len();
        assert_eq!(arrived, 10_000);
    }

    /// Voluntary context switches of this process's export threads so far (Linux).
    fn export_thread_switches() -> u64 {
        let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
        tasks
            .filter_map(Result::ok)
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|name| name.trim() == "span-export")
            })
            .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
            .filter_map(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .sum()
    }

    #[test]
    fn spans_ended_one_by_one_wake_the_export_thread_once_a_batch() {
        // Only full batches leave before the flush.
        let settings = BatchSettings {
            max_queue_size: 4_096,
            max_export_batch_size: 500,
            schedule_delay: Duration::from_secs(600),
        };
        let exporter = Gated::new();
        exporter.open();
        let counts = SpanCounts::default();
        let plain = provider(exporter, settings, &counts);
        wake_once_a_batch(&plain, &counts);
        // An export thread with a runtime waits inside it: that must not wake it more.
        let counts = SpanCounts::default();
        let memory = InMemorySpanExporter::default();
        let processor = CountingBatchProcessor::on_own_runtime(
            move || Ok::<_, std::io::Error>(NeedsTokio(memory)),
            settings,
            counts.clone(),
        )
        .expect("started");
        let on_runtime = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        wake_once_a_batch(&on_runtime, &counts);
    }

    /// Ends 2,100 spans one by one through `provider` (batches of 500, no schedule) and
    /// checks that the export thread woke about once a batch.
    fn wake_once_a_batch(provider: &SdkTracerProvider, counts: &SpanCounts) {
        let before = export_thread_switches();
        let tracer = provider.tracer("test");
        for i in 0..2_100 {
            tracer.in_span(format!("span {i}"), |_| {});
            // The export thread has time to go back to sleep between spans.
            std::thread::sleep(Duration::from_micros(100));
        }
        let waited = Instant::now();
        while counts.exported.get() < 2_000 && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let switches = export_thread_switches() - before;
        assert_eq!(counts.exported.get(), 2_000, "four full batches, at once");
        // A thread blocked on the queue switches in for nearly every span (~2,000).
        assert!(
            switches < 200,
            "{switches} context switches for 2,100 spans"
        );
        provider.force_flush().expect("flushed");
        assert_eq!(counts.exported.get(), 2_100, "the rest at the flush");
    }

    /// An exporter whose first `failures` exports fail, as behind a collector that is down.
    #[derive(Debug)]
    struct FailingFirst {
        failures: AtomicUsize,
    }

    impl SpanExporter for FailingFirst {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let failing = self
                .failures
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                return Err(OTelSdkError::InternalFailure("collector down".into()));
            }
            Ok(())
        }
    }

    #[test]
    fn failed_exports_are_logged_once_a_run_and_their_end_with_the_spans_lost() {
        use tracing_subscriber::layer::SubscriberExt as _;

        let lines = crate::log_lines::Lines::default();
        let writer = lines.clone();
        let logs = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(logs));
        let counts = SpanCounts::default();
        let settings = BatchSettings {
            max_queue_size: 100,
            max_export_batch_size: 10,
            schedule_delay: Duration::from_secs(600),
        };
        let exporter = FailingFirst {
            failures: AtomicUsize::new(3),
        };
        // Made where a service makes it, under the service's dispatch.
        let processor = tracing::dispatcher::with_default(&dispatch, || {
            CountingBatchProcessor::new(exporter, settings, counts.clone())
        });
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        for _ in 0..4 {
            make_spans(&provider, 10);
            let _ = provider.force_flush();
        }
        assert_eq!(counts.export_failed.get(), 30);
        assert_eq!(counts.exported.get(), 10);
        let text = lines.text();
        let logged: Vec<&str> = text.lines().collect();
        assert_eq!(logged.len(), 2, "{text}");
        assert!(logged[0].contains("WARN"), "{}", logged[0]);
        assert!(logged[0].contains("span export failed"), "{}", logged[0]);
        assert!(logged[0].contains("collector down"), "{}", logged[0]);
        assert!(logged[0].contains("spans=10"), "{}", logged[0]);
        assert!(
            logged[1].contains("span export works again"),
            "{}",
            logged[1]
        );
        assert!(logged[1].contains("lost_spans=30"), "{}", logged[1]);
    }

    /// An exporter that needs a Tokio runtime to export (as tonic's does): it waits on a
    /// Tokio timer, which panics outside one.
    #[derive(Debug)]
    struct NeedsTokio(InMemorySpanExporter);

    impl SpanExporter for NeedsTokio {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.0.export(batch).await
        }
    }

    #[test]
    fn an_exporter_built_on_the_threads_own_runtime_exports_there() {
        let memory = InMemorySpanExporter::default();
        let into = memory.clone();
        let counts = SpanCounts::default();
        let processor = CountingBatchProcessor::on_own_runtime(
            move || {
                // Built inside the runtime: a Tokio handle is there to be had.
                tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
                Ok::<_, std::io::Error>(NeedsTokio(into))
            },
            BatchSettings::default(),
            counts.clone(),
        )
        .expect("started");
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        make_spans(&provider, 100);
        provider.force_flush().expect("flushed");
        assert_eq!(counts.exported.get(), 100);
        assert_eq!(memory.get_finished_spans().expect("spans").len(), 100);
    }

    #[test]
    fn an_exporter_that_cannot_be_built_fails_the_start() {
        let started = CountingBatchProcessor::on_own_runtime(
            || Err::<InMemorySpanExporter, _>(std::io::Error::other("no collector")),
            BatchSettings::default(),
            SpanCounts::default(),
        );
        let error = started.expect_err("the build failed");
        assert_eq!(error.to_string(), "no collector");
    }
}
