//! `loadtest run`: drives one load profile against a gateway and prints the summary.

use std::time::Duration;

use dronelab_contract::Service;

use crate::load::{self, Profile, Target};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ProfileKind {
    Step,
    Constant,
    Arrival,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Gateway base URL.
    #[arg(long, default_value_t = Service::Gateway.default_url())]
    pub target: url::Url,
    /// Path to request, with `?ownerId&year&month` added (a backend's route works too).
    #[arg(long, default_value = dronelab_contract::routes::INVOICES)]
    pub path: String,
    #[arg(long, value_enum, default_value = "step")]
    pub profile: ProfileKind,
    /// Run length in seconds.
    #[arg(long, default_value_t = 480.0)]
    pub duration: f64,
    /// Step: users at the start.
    #[arg(long, default_value_t = 4)]
    pub start_users: usize,
    /// Step: users added per step.
    #[arg(long, default_value_t = 4)]
    pub step_users: usize,
    /// Step: seconds per step.
    #[arg(long, default_value_t = 10.0)]
    pub step_secs: f64,
    /// Step: most users; constant: the users.
    #[arg(long, default_value_t = 40)]
    pub users: usize,
    /// Arrival: requests per second (open loop).
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Arrival: most requests in flight before new ones are dropped.
    #[arg(long, default_value_t = 1000)]
    pub max_in_flight: usize,
    /// Request timeout in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// The seeded data set the requests pick from.
    #[arg(long, default_value_t = 1000)]
    pub owners: usize,
    #[arg(long, default_value_t = 12)]
    pub months: usize,
    /// Write the summary (JSON) here.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

impl RunArgs {
    fn profile(&self) -> Result<Profile, String> {
        if !(self.duration > 0.0 && self.duration <= 24.0 * 3600.0) {
            return Err("--duration must be between 0 and 86400 seconds".into());
        }
        Ok(match self.profile {
            ProfileKind::Step => Profile::Step {
                start_users: self.start_users,
                step_users: self.step_users,
                step_secs: self.step_secs,
                max_users: self.users,
                duration_secs: self.duration,
            },
            ProfileKind::Constant => Profile::Constant {
                users: self.users,
                duration_secs: self.duration,
            },
            ProfileKind::Arrival => {
                if !(self.rate > 0.0 && self.rate <= 100_000.0) {
                    return Err("--rate must be between 0 and 100000 requests/s".into());
                }
                Profile::Arrival {
                    rate_per_sec: self.rate,
                    duration_secs: self.duration,
                    max_in_flight: self.max_in_flight.max(1),
                }
            }
        })
    }
}

pub async fn run(args: RunArgs) -> Result<(), String> {
    let profile = args.profile()?;
    let target = Target {
        gateway: args.target.clone(),
        path: args.path.clone(),
        data: crate::data::DataSet {
            seed: 0,
            owners: args.owners,
            months: args.months,
            drones_per_owner: 1,
        },
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    let summary = load::run(target, profile, true, "run").await;
    println!(
        "{} requests, {} ok, {} failed, {:.1} req/s; latency ms avg {:.1} p50 {:.1} p90 {:.1} p95 {:.1} p99 {:.1} max {:.1}",
        summary.requests, summary.successful_requests, summary.failed_requests, summary.throughput_rps,
        summary.latency_ms.avg, summary.latency_ms.p50, summary.latency_ms.p90, summary.latency_ms.p95,
        summary.latency_ms.p99, summary.latency_ms.max
    );
    if let Some(path) = args.out {
        serde_json::to_vec_pretty(&summary)
            .map_err(std::io::Error::other)
            .and_then(|json| std::fs::write(&path, json))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}
