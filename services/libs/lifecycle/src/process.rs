//! CPU time and resident memory of a process, read from Linux `/proc`: what a process
//! reports as `process_cpu_seconds_total` / `process_resident_memory_bytes`
//! (the `metrics` module serves them), and what the tuning run samples for every
//! component.

use procfs::process::Process;

/// A process's cumulative CPU time and current resident set.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUsage {
    /// User plus system CPU time since the process started.
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
}

impl ProcessUsage {
    /// This process's usage (`None` where `/proc` cannot be read).
    pub fn current() -> Option<Self> {
        Self::read(&Process::myself().ok()?)
    }

    /// The usage of process `pid` (`None` once it has exited).
    pub fn of(pid: u32) -> Option<Self> {
        Self::read(&Process::new(i32::try_from(pid).ok()?).ok()?)
    }

    fn read(process: &Process) -> Option<Self> {
        let stat = process.stat().ok()?;
        Some(Self {
            cpu_seconds: ticks_to_seconds(stat.utime + stat.stime),
            resident_bytes: stat.rss.saturating_mul(procfs::page_size()),
        })
    }
}

/// `(thread id, cumulative CPU seconds)` of every thread of process `pid`, for telling a
/// single-threaded hot spot from a busy process.
pub fn thread_cpu_seconds(pid: u32) -> Vec<(i32, f64)> {
    let Some(process) = i32::try_from(pid).ok().and_then(|p| Process::new(p).ok()) else {
        return Vec::new();
    };
    let Ok(tasks) = process.tasks() else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = task.stat().ok()?;
            Some((task.tid, ticks_to_seconds(stat.utime + stat.stime)))
        })
        .collect()
}

/// The machine's CPU time: `(busy, total)` seconds summed over all CPUs since boot.
pub fn machine_cpu_seconds() -> Option<(f64, f64)> {
    use procfs::CurrentSI as _;
    let stats = procfs::KernelStats::current().ok()?;
    let t = stats.total;
    let idle = t.idle + t.iowait.unwrap_or(0);
    let total = t.user
        + t.nice
        + t.system
        + idle
        + t.irq.unwrap_or(0)
        + t.softirq.unwrap_or(0)
        + t.steal.unwrap_or(0);
    Some((ticks_to_seconds(total - idle), ticks_to_seconds(total)))
}

fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / procfs::ticks_per_second() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_and_memory_that_grow_with_work() {
        let before = ProcessUsage::current().expect("/proc is readable");
        assert!(before.resident_bytes > 1 << 20, "{before:?}");
        // Burn about 0.2 s of CPU so the tick-granular counter must move.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let after = ProcessUsage::current().expect("/proc is readable");
        assert!(
            after.cpu_seconds > before.cpu_seconds,
            "{before:?} {after:?}"
        );
        let pid = std::process::id();
        assert_eq!(
            ProcessUsage::of(pid).map(|u| u.resident_bytes > 0),
            Some(true)
        );
        let threads = thread_cpu_seconds(pid);
        assert!(
            threads.iter().any(|(tid, _)| *tid as u32 == pid),
            "{threads:?}"
        );
        let (busy, total) = machine_cpu_seconds().expect("/proc/stat is readable");
        assert!(busy > 0.0 && busy <= total, "{busy} {total}");
    }

    #[test]
    fn a_process_that_is_gone_has_no_usage() {
        assert_eq!(ProcessUsage::of(u32::MAX), None);
        assert!(thread_cpu_seconds(u32::MAX).is_empty());
    }
}
