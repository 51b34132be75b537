//! Work that is not the stack's: a stage's `busy_threads` run as CPU-bound threads of a
//! separate process (`loadtest burn-cpu`, hidden), so the stage's CPU measurement counts
//! them in the machine's load but not among the stack's processes. Each run stops by
//! itself after its time (at most [`MAX_SECONDS`]) and is killed with the stage.

use std::time::{Duration, Instant};

use dronelab_study::MAX_BUSY_THREADS;

/// The longest a burner runs, whatever it is asked.
pub const MAX_SECONDS: u64 = 3_600;

#[derive(clap::Args, Debug)]
pub struct BurnArgs {
    /// CPU-bound threads.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_BUSY_THREADS)))]
    pub threads: u16,
    /// How long they run (s).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_SECONDS))]
    pub seconds: u64,
}

/// `loadtest burn-cpu`: keeps `threads` threads busy for `seconds`.
pub fn burn(args: &BurnArgs) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let threads: Vec<_> = (0..args.threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut x = 0u64;
                while Instant::now() < deadline {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}

/// A running burner process; dropping it kills it (`kill_on_drop`).
pub struct OtherCpuLoad {
    _process: tokio::process::Child,
}

impl OtherCpuLoad {
    /// Starts `threads` busy threads for `duration` in a process of their own (`None`
    /// for none).
    pub fn start(threads: u16, duration: Duration) -> std::io::Result<Option<Self>> {
        if threads == 0 {
            return Ok(None);
        }
        let seconds = duration.as_secs().clamp(1, MAX_SECONDS);
        let child = tokio::process::Command::new(std::env::current_exe()?)
            .args([
                "burn-cpu",
                "--threads",
                &threads.to_string(),
                "--seconds",
                &seconds.to_string(),
            ])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        eprintln!("  another process keeps {threads} threads busy for {seconds} s (busy_threads)");
        Ok(Some(Self { _process: child }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burner_stops_by_itself() {
        let started = Instant::now();
        burn(&BurnArgs {
            threads: 2,
            seconds: 1,
        });
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(10),
            "{took:?}"
        );
    }
}
