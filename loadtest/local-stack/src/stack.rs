//! The local stack: the trace viewer, the emulator, the three backends and the gateway,
//! each its own OS process (this binary re-executed as `loadtest component <name>`), so
//! each shows up as its own service in traces, exported over OTLP/gRPC to the viewer.
//! Children pick free loopback ports and print them; the stack waits for readiness,
//! notices a crashed child, and never leaves one behind: children are killed when the
//! stack is dropped and, on Linux, when this process dies (even by `SIGKILL`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use dronelab_contract::lab::{self, LabKnobs};
use dronelab_contract::{QueryKnobs, Service};
use dronelab_study::EmulatorModel;

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("cannot start {name}: {source}")]
    Spawn {
        name: &'static str,
        source: std::io::Error,
    },
    #[error("{name} exited before it was ready ({status}); see {log}")]
    Exited {
        name: &'static str,
        status: String,
        log: String,
    },
    #[error("{name} was not ready within {secs} s; see {log}")]
    NotReady {
        name: &'static str,
        secs: u64,
        log: String,
    },
    #[error("{name} {why}; see {log}")]
    NoAddress {
        name: &'static str,
        why: String,
        log: String,
    },
}

/// The file, in the logs directory, that lists the components for Prometheus.
pub const PROMETHEUS_TARGETS: &str = "prometheus-targets.json";

/// The sampler every component of the local stack runs with (`OTEL_TRACES_SAMPLER`):
/// all of them, so the tuning run's diagnosis reads every request's trace.
pub const SAMPLER: &str = "always_on";

/// One running component.
#[derive(Debug)]
pub struct Component {
    pub name: &'static str,
    pub url: url::Url,
    /// The line the component printed when it was listening.
    announced: String,
    child: Child,
    log: PathBuf,
}

#[derive(Debug)]
pub struct Stack {
    logs: PathBuf,
    /// Absent when `OTEL_EXPORTER_OTLP_ENDPOINT` points the services at a collector of
    /// the user's own.
    pub trace_viewer: Option<Component>,
    /// Where the services export spans (the viewer's OTLP/gRPC address).
    otlp_endpoint: Option<String>,
    pub emulator: Component,
    services: Vec<Component>,
}

impl Stack {
    /// Starts the trace viewer and the emulator (the backends need seeded containers to
    /// start).
    pub async fn start(
        logs: &Path,
        partitions: u16,
        model: &EmulatorModel,
    ) -> Result<Self, StackError> {
        std::fs::create_dir_all(logs).map_err(|source| StackError::Spawn {
            name: Service::CosmosEmulator.name(),
            source,
        })?;
        let trace_viewer = if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
            None
        } else {
            let args = [
                "--otlp-grpc-listen",
                "127.0.0.1:0",
                "--otlp-http-listen",
                "127.0.0.1:0",
            ]
            .map(str::to_owned)
            .to_vec();
            Some(
                spawn(
                    logs,
                    Service::TraceViewer.name(),
                    args,
                    "healthz",
                    None,
                    &LabKnobs::default(),
                )
                .await?,
            )
        };
        let otlp_endpoint = trace_viewer.as_ref().and_then(|v| v.announced("otlp-grpc"));
        let args = vec![
            "--partitions".to_owned(),
            partitions.to_string(),
            "--rtt-ms".to_owned(),
            model.rtt_ms.to_string(),
            "--service-ms".to_owned(),
            model.service_ms.to_string(),
            "--ms-per-ru".to_owned(),
            model.ms_per_ru.to_string(),
            "--jitter".to_owned(),
            model.jitter.to_string(),
            "--partition-concurrency".to_owned(),
            model.partition_concurrency.to_string(),
        ];
        let emulator = spawn(
            logs,
            Service::CosmosEmulator.name(),
            args,
            "healthz",
            None,
            &LabKnobs::default(),
        )
        .await?;
        Ok(Self {
            logs: logs.to_owned(),
            trace_viewer,
            otlp_endpoint,
            emulator,
            services: Vec::new(),
        })
    }

    /// Starts the backends and the gateway against the emulator, with the antipattern
    /// lab's knobs `lab` (each component gets its own; the rest are off).
    pub async fn start_services(
        &mut self,
        knobs: QueryKnobs,
        lab: &LabKnobs,
    ) -> Result<(), StackError> {
        let otlp = self.otlp_endpoint.clone();
        // The backends first: the gateway's arguments are their addresses.
        for service in SERVICES {
            let args = self.service_args(service, knobs);
            let component = spawn(
                &self.logs,
                service.name(),
                args,
                "readyz",
                otlp.as_deref(),
                lab,
            )
            .await?;
            self.services.push(component);
        }
        self.write_prometheus_targets();
        Ok(())
    }

    /// A service's arguments: the emulator, and the utilization query's knobs or the
    /// gateway's backends.
    fn service_args(&self, service: Service, knobs: QueryKnobs) -> Vec<String> {
        let cosmos = vec![
            "--cosmos-endpoint".to_owned(),
            self.emulator.url.to_string(),
        ];
        let url_of = |service: Service| {
            self.services
                .iter()
                .find(|c| c.name == service.name())
                .map(|c| c.url.to_string())
                .unwrap_or_default()
        };
        match service {
            Service::Utilization => utilization_args(&cosmos, knobs),
            Service::Gateway => vec![
                "--delivery-url".to_owned(),
                url_of(Service::Delivery),
                "--package-url".to_owned(),
                url_of(Service::Package),
                "--utilization-url".to_owned(),
                url_of(Service::Utilization),
            ],
            _ => cosmos,
        }
    }

    /// Where the stack lists its components for Prometheus' file discovery
    /// (`dashboards/prometheus/local.yml` reads it).
    pub fn prometheus_targets(&self) -> PathBuf {
        self.logs.join(PROMETHEUS_TARGETS)
    }

    /// Writes every component's address, `job` = its name, replacing the file whole so
    /// Prometheus never reads half of it. Best effort: the stack runs without it.
    fn write_prometheus_targets(&self) {
        let groups: Vec<serde_json::Value> = self
            .components()
            .filter_map(|c| {
                let address = format!("{}:{}", c.url.host_str()?, c.url.port()?);
                Some(serde_json::json!({"targets": [address], "labels": {"job": c.name}}))
            })
            .collect();
        let path = self.prometheus_targets();
        let partial = path.with_extension("json.tmp");
        let written = serde_json::to_vec_pretty(&groups)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&partial, bytes))
            .and_then(|()| std::fs::rename(&partial, &path));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the Prometheus targets");
        }
    }

    /// Restarts `service` with the stage's query and lab knobs, keeping its address (the
    /// gateway's pool and the load reconnect), as a Kubernetes rollout would.
    pub async fn restart(
        &mut self,
        service: Service,
        knobs: QueryKnobs,
        lab: &LabKnobs,
    ) -> Result<(), StackError> {
        let Some(index) = self.services.iter().position(|c| c.name == service.name()) else {
            return Ok(());
        };
        let old = self.services.remove(index);
        let listen = old
            .url
            .socket_addrs(|| None)
            .ok()
            .and_then(|a| a.first().copied());
        stop(old).await;
        let mut args = self.service_args(service, knobs);
        if let Some(addr) = listen {
            args.push("--listen".to_owned());
            args.push(addr.to_string());
        }
        let component = spawn(
            &self.logs,
            service.name(),
            args,
            "readyz",
            self.otlp_endpoint.as_deref(),
            lab,
        )
        .await?;
        self.services.insert(index, component);
        Ok(())
    }

    pub fn url(&self, name: &str) -> Option<&url::Url> {
        if name == self.emulator.name {
            return Some(&self.emulator.url);
        }
        self.services
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.url)
    }

    pub fn components(&self) -> impl Iterator<Item = &Component> {
        self.trace_viewer
            .iter()
            .chain(std::iter::once(&self.emulator))
            .chain(self.services.iter())
    }

    /// Resolves when any component exits; returns its name and exit status.
    pub async fn crashed(&mut self) -> (&'static str, String) {
        loop {
            for c in self
                .trace_viewer
                .iter_mut()
                .chain(std::iter::once(&mut self.emulator))
                .chain(self.services.iter_mut())
            {
                if let Ok(Some(status)) = c.child.try_wait() {
                    return (c.name, status.to_string());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops everything: SIGTERM, then SIGKILL after a grace period.
    pub async fn shutdown(self) {
        for component in self.services.into_iter().rev() {
            stop(component).await;
        }
        stop(self.emulator).await;
        if let Some(viewer) = self.trace_viewer {
            stop(viewer).await;
        }
    }
}

/// The services, in the order they start.
pub const SERVICES: [Service; 4] = [
    Service::Delivery,
    Service::Package,
    Service::Utilization,
    Service::Gateway,
];

fn utilization_args(cosmos: &[String], knobs: QueryKnobs) -> Vec<String> {
    let mut args = cosmos.to_vec();
    args.extend([
        "--query-parallelism".to_owned(),
        knobs.parallelism.to_string(),
        "--use-partition-key".to_owned(),
        knobs.use_partition_key.to_string(),
    ]);
    args
}

async fn stop(mut component: Component) {
    if let Some(pid) = component.child.id() {
        // SAFETY: plain kill(2) on the pid of a child we own and have not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    let graceful = tokio::time::timeout(Duration::from_secs(5), component.child.wait()).await;
    if graceful.is_err() {
        let _ = component.child.kill().await;
    }
}

/// Starts `loadtest component <name> --listen 127.0.0.1:0 <args>` and waits until its
/// readiness route answers 200. With `otlp`, the component exports spans there.
async fn spawn(
    logs: &Path,
    name: &'static str,
    mut args: Vec<String>,
    ready_route: &str,
    otlp: Option<&str>,
    lab: &LabKnobs,
) -> Result<Component, StackError> {
    let exe = std::env::current_exe().map_err(|source| StackError::Spawn { name, source })?;
    let log = logs.join(format!("{name}.log"));
    let log_file =
        std::fs::File::create(&log).map_err(|source| StackError::Spawn { name, source })?;
    if !args.iter().any(|a| a == "--listen") {
        args.extend(["--listen".to_owned(), "127.0.0.1:0".to_owned()]);
    }
    let mut child = component_command(&exe, name, &args, log_file, otlp, lab)
        .spawn()
        .map_err(|source| StackError::Spawn { name, source })?;
    let log_text = log.display().to_string();
    let exited = |status: String| StackError::Exited {
        name,
        status,
        log: log_text.clone(),
    };
    let Some(stdout) = child.stdout.take() else {
        return Err(exited("no stdout".into()));
    };
    let mut lines = BufReader::new(stdout).lines();
    let (announced, url) = match read_address(&mut child, &mut lines, ADDRESS_TIMEOUT).await {
        Ok(found) => found,
        Err(AddressProblem::Exited(status)) => return Err(exited(status)),
        Err(AddressProblem::Missing(why)) => {
            let _ = child.kill().await;
            return Err(StackError::NoAddress {
                name,
                why,
                log: log_text,
            });
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let ready = url.join(ready_route).unwrap_or_else(|_| url.clone());
    match wait_ready(&mut child, &ready).await {
        Ok(()) => {}
        Err(Some(status)) => return Err(exited(status)),
        Err(None) => {
            let _ = child.kill().await;
            return Err(StackError::NotReady {
                name,
                secs: READY_TIMEOUT.as_secs(),
                log: log_text,
            });
        }
    }
    tracing::info!(component = name, %url, "ready");
    Ok(Component {
        name,
        url,
        announced,
        child,
        log,
    })
}

/// The command that runs one component, its stderr into `log`, killed with us.
fn component_command(
    exe: &Path,
    name: &str,
    args: &[String],
    log: std::fs::File,
    otlp: Option<&str>,
    lab: &LabKnobs,
) -> Command {
    let mut command = Command::new(exe);
    command
        .arg("component")
        .arg(name)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    // Every lab knob of this component is set, to the stage's value or off: one in the
    // user's environment must not switch an antipattern on unasked.
    for knob in lab::KNOBS.iter().filter(|k| k.service.name() == name) {
        let value = lab.get(knob.env).unwrap_or(knob.default_value());
        command.env(knob.env, value);
    }
    // Every request traced, whatever sampler the user's environment names: the
    // diagnosis counts what it reads (the report says so).
    command
        .env("OTEL_TRACES_SAMPLER", SAMPLER)
        .env_remove("OTEL_TRACES_SAMPLER_ARG");
    match otlp {
        Some(endpoint) => {
            command
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
                .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
                // Spans reach the viewer within a second, so a stage's traces are
                // complete shortly after its load stops.
                .env("OTEL_BSP_SCHEDULE_DELAY", "1000");
        }
        // The user's own collector (`OTEL_*` is inherited), or nothing to send to:
        // exporting would only log connection errors.
        None if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() => {
            command.env("OTEL_SDK_DISABLED", "true");
        }
        None => {}
    }
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) is async-signal-safe; it only asks the kernel to SIGTERM this
    // child if we die, so a killed `loadtest` leaves no orphans.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    command
}

/// How long a component may take from its start to printing its address line.
const ADDRESS_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a component may take from its address line to answering its readiness route.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a component's address line did not come.
#[derive(Debug, PartialEq)]
enum AddressProblem {
    /// The component exited (with this status) before printing it.
    Exited(String),
    /// It is running but printed no address: why, naming the time limit if that was it.
    Missing(String),
}

/// The component's first line and the URL it ends with (`lifecycle::announce`).
async fn read_address(
    child: &mut Child,
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    limit: Duration,
) -> Result<(String, url::Url), AddressProblem> {
    let line = match tokio::time::timeout(limit, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(_) => {
            // Output closed: the component is exiting; give it a moment to be reaped.
            let status = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            return match status {
                Ok(Ok(status)) => Err(AddressProblem::Exited(status.to_string())),
                _ => Err(AddressProblem::Missing(
                    "closed its output without printing its address".to_owned(),
                )),
            };
        }
        Err(_) => {
            return Err(AddressProblem::Missing(format!(
                "printed no address within {} s of starting",
                limit.as_secs_f64()
            )))
        }
    };
    match line
        .rsplit(' ')
        .next()
        .and_then(|u| url::Url::parse(u).ok())
    {
        Some(url) => Ok((line, url)),
        None => Err(AddressProblem::Missing(format!(
            "printed {line:?} where its address line was expected"
        ))),
    }
}

/// Polls `ready` until it answers 2xx. `Err(Some(status))`: the child exited;
/// `Err(None)`: it did not get ready in time.
async fn wait_ready(child: &mut Child, ready: &url::Url) -> Result<(), Option<String>> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Some(status.to_string()));
        }
        if let Ok(response) = http
            .get(ready.clone())
            .timeout(Duration::from_secs(2))
            .send()
            .await
        {
            if response.status().is_success() {
                return Ok(());
            }
        }
        if started.elapsed() > READY_TIMEOUT {
            return Err(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Component {
    /// A `key=value` address from the line the component printed at start.
    pub fn announced(&self, key: &str) -> Option<String> {
        self.announced
            .split(' ')
            .find_map(|token| token.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The component's process id (`None` once it has been reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_address` on a real `sh` child running `script`.
    async fn address_of(script: &str, limit: Duration) -> Result<String, AddressProblem> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sh starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        read_address(&mut child, &mut lines, limit)
            .await
            .map(|(_, url)| url.to_string())
    }

    #[tokio::test]
    async fn a_missing_address_line_is_reported_by_what_happened() {
        let limit = Duration::from_millis(300);
        assert_eq!(
            address_of("echo 'gateway listening on http://127.0.0.1:9/'", limit).await,
            Ok("http://127.0.0.1:9/".to_owned())
        );
        // Still running, silent: the address timeout fired, and the message says so
        // (it used to say the component had exited).
        assert_eq!(
            address_of("sleep 5", limit).await,
            Err(AddressProblem::Missing(
                "printed no address within 0.3 s of starting".to_owned()
            ))
        );
        assert_eq!(
            address_of("echo starting up; sleep 5", limit).await,
            Err(AddressProblem::Missing(
                "printed \"starting up\" where its address line was expected".to_owned()
            ))
        );
        assert_eq!(
            address_of("exit 3", limit).await,
            Err(AddressProblem::Exited("exit status: 3".to_owned()))
        );
    }
}
