//! The proof that the manifests run: everything a cluster would do with the local
//! overlays that can be done here, in order, each step checked.
//!
//! 1. build the binaries as the `Dockerfile` does (profile `dist`) and the image (`image`);
//! 2. run `overlays/local/<first stage>` as containers (`podman`);
//! 3. readiness and liveness: the backends are alive but not ready while their Cosmos
//!    containers do not exist; the emulator, the viewer and the gateway are ready;
//! 4. `loadtest tune --profile quick --target …` against the containers, with
//!    `--stage-command` applying each stage's overlay (a rollout of
//!    utilization-service), the RU/s set through the emulator's Cosmos API, while the
//!    containers' CPU and memory are sampled;
//! 5. the four stage verdicts are those of the local run, and the trace links open in the
//!    in-cluster trace viewer with spans of every service carrying their pod's name;
//! 6. the emulator stopped: utilization-service turns unready but stays alive; started
//!    again: ready, with its documents still there (the StatefulSet's volume).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dronelab_contract::{Invoice, Service};
use dronelab_report::Report;
use serde_json::Value;
use trace_analysis::diagnosis::FindingKind;
use trace_analysis::jaeger::{Envelope, Trace};

use crate::image::Built;
use crate::podman::{Lab, PodmanError};
use crate::{contract, image, render};

#[derive(Debug, Clone, clap::Args)]
pub struct ProofArgs {
    /// Use the binaries in this directory instead of building them (profile `dist`).
    #[arg(long)]
    pub binaries: Option<PathBuf>,
    /// Owners in the seeded data set (`loadtest tune --owners`).
    #[arg(long, default_value_t = 1000)]
    pub owners: usize,
    /// Where the tuning run writes its report.
    #[arg(long, default_value = "reports/podman")]
    pub reports: PathBuf,
    /// Leave the containers running afterwards (`k8s-harness down` removes them).
    #[arg(long)]
    pub keep_up: bool,
    /// The lab's podman network and label (a letter or digit, then letters, digits, '-'
    /// or '_').
    #[arg(long, default_value = "dronelab-proof", value_parser = lab_name)]
    pub lab: String,
}

/// A lab's name: the stages' one name pattern (it goes into shell lines and labels).
pub fn lab_name(name: &str) -> Result<String, String> {
    dronelab_study::stages::check_name(name).map(|()| name.to_owned())
}

/// The verdicts of the local quick run, stage by stage (loadtest's end-to-end test).
pub const EXPECTED_VERDICTS: [FindingKind; 4] = [
    FindingKind::Throttling,
    FindingKind::SerialFanOut,
    FindingKind::CrossPartitionCost,
    FindingKind::NoCosmosBottleneck,
];

/// The profile the `Dockerfile` builds the image's binaries with (release with thin LTO).
pub const IMAGE_PROFILE: &str = "dist";

/// Where cargo puts the image profile's binaries: `$CARGO_TARGET_DIR/dist`, else the
/// workspace's `target/dist`.
pub fn image_binaries_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"))
        .join(IMAGE_PROFILE)
}

fn step(text: &str) {
    eprintln!("\n==> {text}");
}

fn podman(e: PodmanError) -> String {
    e.to_string()
}

pub async fn run(args: ProofArgs) -> Result<(), String> {
    let started = Instant::now();
    let lab = Lab::new(&args.lab);
    let overlays = crate::k8s_dir().join("overlays/local");
    let stages = dronelab_study::stages::builtin().map_err(|e| e.to_string())?;
    let (first, last) = match (stages.first(), stages.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => return Err("no stages".into()),
    };
    let (binaries, built) = build_image(&args, &lab).await?;

    step(&format!(
        "running overlays/local/{} as containers",
        first.name
    ));
    let urls = start(&lab, &overlays.join(&first.name)).await?;

    step("readiness before the data exists: alive, not ready");
    let probe = Probe::new(urls.utilization.clone());
    probe
        .wait_for(503, 200, Duration::from_secs(10))
        .await
        .map_err(|e| format!("utilization-service with no containers in Cosmos: {e}"))?;
    eprintln!("utilization-service: /readyz 503, /healthz 200");

    step("the quick tuning run against the containers");
    let reports_dir = args.reports.clone();
    let sampler = ResourceSampler::start(lab.clone());
    let table = tune(
        &binaries,
        &args,
        &reports_dir,
        &lab,
        &overlays,
        [
            &urls.gateway,
            &urls.emulator,
            &urls.viewer,
            &urls.utilization,
        ],
    )
    .await?;
    let usage = sampler.stop().await;

    step("the stage verdicts and the trace links");
    let report = Report::read(&reports_dir.join("latest"))?;
    check_verdicts(&report)?;
    let links = check_trace_links(&report, &urls.viewer).await?;
    eprintln!("four verdicts as in the local run; {links} trace links open in the viewer");

    step("Cosmos unreachable: utilization-service turns unready, stays alive");
    cosmos_outage(&lab, &probe, &overlays.join(&last.name), &urls.gateway).await?;

    println!(
        "\n## podman proof ({:.0} s)\n",
        started.elapsed().as_secs_f64()
    );
    println!(
        "images: {} {:.1} MB (runtime base {:.1} MB)\n",
        built.image,
        built.image_bytes as f64 / 1e6,
        built.base_bytes as f64 / 1e6
    );
    println!("{table}");
    println!("{}", usage.markdown());
    if args.keep_up {
        println!(
            "the containers stay up: `k8s-harness status --lab {}`",
            args.lab
        );
    } else {
        lab.down(false).await.map_err(podman)?;
    }
    Ok(())
}

/// The image's binaries (built unless `--binaries` names them) and the image from them.
async fn build_image(args: &ProofArgs, lab: &Lab) -> Result<(PathBuf, Built), String> {
    let binaries = match &args.binaries {
        Some(dir) => dir.clone(),
        None => {
            step("building the binaries (profile dist)");
            build_binaries().await?;
            image_binaries_dir()
        }
    };
    step("building the image from them");
    let built = image::build(lab, &binaries, contract::VERSION)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "{}: {:.1} MB; {}: {:.1} MB",
        built.base,
        built.base_bytes as f64 / 1e6,
        built.image,
        built.image_bytes as f64 / 1e6
    );
    Ok((binaries, built))
}

/// Where the proof reaches the workloads it drives.
struct Urls {
    gateway: url::Url,
    emulator: url::Url,
    viewer: url::Url,
    utilization: url::Url,
}

/// Replaces whatever ran in the lab with `overlay` and waits for the workloads the load
/// needs first.
async fn start(lab: &Lab, overlay: &Path) -> Result<Urls, String> {
    lab.down(false).await.map_err(podman)?;
    let manifests = render::render(overlay).map_err(|e| e.to_string())?;
    lab.apply(&manifests).await.map_err(podman)?;
    for workload in [
        Service::CosmosEmulator,
        Service::TraceViewer,
        Service::Gateway,
    ]
    .map(Service::name)
    {
        lab.wait_ready(&manifests, workload, Duration::from_secs(60))
            .await
            .map_err(podman)?;
    }
    let url = |service: Service| lab.url(service.name(), i32::from(service.default_port()));
    let urls = Urls {
        gateway: url(Service::Gateway).await.map_err(podman)?,
        emulator: url(Service::CosmosEmulator).await.map_err(podman)?,
        viewer: url(Service::TraceViewer).await.map_err(podman)?,
        utilization: url(Service::Utilization).await.map_err(podman)?,
    };
    for c in lab.containers().await.map_err(podman)? {
        eprintln!("  {:22} {}", c.workload, c.name);
    }
    Ok(urls)
}

/// Stops the emulator's container: utilization-service must turn unready and stay
/// alive; started again, it must be ready with the data intact.
async fn cosmos_outage(
    lab: &Lab,
    probe: &Probe,
    last_overlay: &Path,
    gateway: &url::Url,
) -> Result<(), String> {
    let emulator_pod = lab
        .containers()
        .await
        .map_err(podman)?
        .into_iter()
        .find(|c| c.workload == Service::CosmosEmulator.name())
        .map(|c| c.name)
        .ok_or("no emulator container")?;
    lab.podman(["stop", "-t", "10", &emulator_pod])
        .await
        .map_err(podman)?;
    probe
        .wait_for(503, 200, Duration::from_secs(20))
        .await
        .map_err(|e| format!("with the emulator stopped: {e}"))?;
    eprintln!("utilization-service: /readyz 503, /healthz 200");
    lab.podman(["start", &emulator_pod]).await.map_err(podman)?;
    let last_manifests = render::render(last_overlay).map_err(|e| e.to_string())?;
    lab.wait_ready(
        &last_manifests,
        Service::Utilization.name(),
        Duration::from_secs(60),
    )
    .await
    .map_err(podman)?;
    let answer = invoice(gateway).await?;
    eprintln!("emulator back: ready again, and its documents survived the restart ({answer})");
    Ok(())
}

async fn build_binaries() -> Result<(), String> {
    let mut command =
        tokio::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .current_dir(crate::repo_root())
        .args(["build", "--profile", IMAGE_PROFILE, "--locked"]);
    for binary in image::BINARIES {
        command.args(["--bin", binary]);
    }
    let status = command.status().await.map_err(|e| format!("cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build failed ({status})"))
    }
}

/// `loadtest tune --profile quick --target …`, each stage applied by this harness.
async fn tune(
    binaries: &Path,
    args: &ProofArgs,
    reports: &Path,
    lab: &Lab,
    overlays: &Path,
    [gateway, emulator, viewer, utilization]: [&url::Url; 4],
) -> Result<String, String> {
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let quote = |path: &Path| lifecycle::shell_quote(&path.display().to_string());
    let stage_command = format!(
        "{} apply --wait --lab {} {}/{{stage}}",
        quote(&harness),
        lifecycle::shell_quote(&lab.name),
        quote(overlays)
    );
    let output = tokio::process::Command::new(binaries.join("loadtest"))
        .args(["tune", "--profile", "quick", "--owners"])
        .arg(args.owners.to_string())
        .arg("--target")
        .arg(gateway.as_str())
        .arg("--cosmos-endpoint")
        .arg(emulator.as_str())
        .arg("--traces-api")
        .arg(viewer.as_str())
        .arg("--utilization-url")
        .arg(utilization.as_str())
        .arg("--stage-command")
        .arg(&stage_command)
        .arg("--reports")
        .arg(reports)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("loadtest: {e}"))?
        .wait_with_output()
        .await
        .map_err(|e| format!("loadtest: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "loadtest tune failed ({}):\n{stdout}",
            output.status
        ));
    }
    Ok(stdout)
}

fn check_verdicts(report: &Report) -> Result<(), String> {
    let verdicts: Vec<Option<FindingKind>> = report
        .stages
        .iter()
        .map(|s| {
            s.diagnosis
                .as_ref()
                .and_then(|d| d.verdict())
                .map(|f| f.kind)
        })
        .collect();
    if verdicts == EXPECTED_VERDICTS.map(Some) {
        Ok(())
    } else {
        Err(format!(
            "the stage verdicts are {verdicts:?}, the local run's are {EXPECTED_VERDICTS:?}"
        ))
    }
}

/// Every trace link of the report opens in the viewer, and its trace has spans of the
/// four services, each from a process that names its pod. Returns how many links.
async fn check_trace_links(report: &Report, viewer: &url::Url) -> Result<usize, String> {
    let http = reqwest::Client::new();
    let mut checked = 0;
    for stage in &report.stages {
        let name = &stage.name;
        let links = stage.link_list();
        for (kind, link) in &links {
            if !link.starts_with(viewer.as_str()) {
                return Err(format!(
                    "{name}: the {kind} link {link} is not the viewer's"
                ));
            }
            let page = http
                .get(*link)
                .send()
                .await
                .map_err(|e| format!("{link}: {e}"))?;
            if !page.status().is_success() {
                return Err(format!("{link}: {}", page.status()));
            }
            if *kind == "critical path" {
                check_stage_page(&http, link)
                    .await
                    .map_err(|e| format!("{name}: {e}"))?;
                checked += 1;
                continue;
            }
            let id = link.rsplit('/').next().unwrap_or_default();
            let api = viewer
                .join(&format!("api/traces/{id}"))
                .map_err(|e| e.to_string())?;
            let trace: Envelope<Vec<Trace>> = get_json(&http, api.as_str()).await?;
            check_trace(&trace).map_err(|e| format!("{name} {kind} trace {id}: {e}"))?;
            checked += 1;
        }
        if !links.iter().any(|(kind, _)| *kind == "typical trace") {
            return Err(format!("{name}: no typical trace link"));
        }
    }
    Ok(checked)
}

async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, String> {
    let fail = |e: reqwest::Error| format!("{url}: {e}");
    http.get(url)
        .send()
        .await
        .map_err(fail)?
        .json()
        .await
        .map_err(fail)
}

/// The stage page's link asks the viewer's stage analysis the same question: it must
/// find the stage's requests.
async fn check_stage_page(http: &reqwest::Client, link: &str) -> Result<(), String> {
    let api = link.replacen("/stage?", "/api/analysis/critical-path?", 1);
    let answer: serde_json::Value = get_json(http, &api).await?;
    let requests = answer["data"]["window"]["requests"].as_u64().unwrap_or(0);
    if requests == 0 {
        return Err(format!(
            "{api}: the stage analysis found no requests: {answer}"
        ));
    }
    Ok(())
}

fn check_trace(trace: &Envelope<Vec<Trace>>) -> Result<(), String> {
    let trace = trace.data.first().ok_or("the viewer has no such trace")?;
    let mut services: BTreeMap<String, bool> = BTreeMap::new();
    for process in trace.processes.values() {
        let service = process.service_name.clone();
        let pod = process.tags.iter().any(|t| {
            t.key == "k8s.pod.name" && t.value.as_str().is_some_and(|v| v.starts_with(&service))
        });
        services.insert(service, pod);
    }
    for service in [
        Service::Gateway,
        Service::Delivery,
        Service::Package,
        Service::Utilization,
    ]
    .map(Service::name)
    {
        match services.get(service) {
            None => return Err(format!("no spans of {service}")),
            Some(false) => {
                return Err(format!(
                    "{service}'s spans do not name its pod (k8s.pod.name)"
                ))
            }
            Some(true) => {}
        }
    }
    Ok(())
}

/// One invoice through the gateway, which must be complete.
async fn invoice(gateway: &url::Url) -> Result<String, String> {
    let owner = dronelab_study::DataSet::owner_id(0);
    let url = gateway
        .join(&format!("api/invoices?ownerId={owner}&year=2026&month=12"))
        .map_err(|e| e.to_string())?;
    let invoice: Invoice = reqwest::get(url.clone())
        .await
        .map_err(|e| format!("{url}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    match (&invoice.utilization, invoice.partial) {
        (Some(utilization), false) => Ok(format!("{owner}: {} miles", utilization.traveled_miles)),
        _ => Err(format!(
            "the invoice after the restart is partial: {invoice:?}"
        )),
    }
}

/// A backend's `/readyz` and `/healthz` through its published port.
struct Probe {
    base: url::Url,
    http: reqwest::Client,
}

impl Probe {
    fn new(base: url::Url) -> Self {
        Self {
            base,
            http: reqwest::Client::new(),
        }
    }

    async fn status(&self, path: &str) -> Option<u16> {
        let url = self.base.join(path).ok()?;
        let response = self
            .http
            .get(url)
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .ok()?;
        Some(response.status().as_u16())
    }

    /// Waits until `/readyz` answers `ready` and `/healthz` answers `healthy`.
    async fn wait_for(&self, ready: u16, healthy: u16, within: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let seen = (self.status("readyz").await, self.status("healthz").await);
            if seen == (Some(ready), Some(healthy)) {
                return Ok(());
            }
            if started.elapsed() > within {
                return Err(format!(
                    "/readyz and /healthz answered {seen:?}, not ({ready}, {healthy})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// CPU and memory of every container, from `podman stats` every two seconds.
struct ResourceSampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Usage>,
}

/// Per workload: CPU (cores) samples and the most memory seen (bytes).
#[derive(Debug, Default)]
pub struct Usage {
    pub cpu: BTreeMap<String, Vec<f64>>,
    pub max_memory: BTreeMap<String, f64>,
}

impl ResourceSampler {
    fn start(lab: Lab) -> Self {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut usage = Usage::default();
            // podman's cpu_percent averages over the container's life: the rate comes
            // from the CPU time between two samples instead.
            let mut last: BTreeMap<String, (Duration, Instant)> = BTreeMap::new();
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break usage,
                }
                let Ok(containers) = lab.containers().await else {
                    continue;
                };
                let names: BTreeMap<String, String> = containers
                    .into_iter()
                    .map(|c| (c.name, c.workload))
                    .collect();
                let Ok(out) = lab
                    .podman(["stats", "--no-stream", "--format", "json"])
                    .await
                else {
                    continue;
                };
                let now = Instant::now();
                let rows: Vec<Value> = serde_json::from_str(&out).unwrap_or_default();
                for row in rows {
                    let Some(name) = row["name"].as_str() else {
                        continue;
                    };
                    let Some(workload) = names.get(name) else {
                        continue;
                    };
                    if let Some(cpu_time) = row["cpu_time"].as_str().and_then(go_duration) {
                        if let Some((before, at)) = last.insert(name.to_owned(), (cpu_time, now)) {
                            let wall = now.duration_since(at).as_secs_f64();
                            let used = cpu_time.saturating_sub(before).as_secs_f64();
                            if wall > 0.0 {
                                usage
                                    .cpu
                                    .entry(workload.clone())
                                    .or_default()
                                    .push(used / wall);
                            }
                        }
                    }
                    if let Some(bytes) = memory_bytes(&row["mem_usage"]) {
                        let max = usage.max_memory.entry(workload.clone()).or_default();
                        *max = max.max(bytes);
                    }
                }
            }
        });
        Self { stop, task }
    }

    async fn stop(self) -> Usage {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// A Go duration as podman prints it: `1m2.5s`, `33.7ms`, `812µs`.
fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0.0;
    let mut rest = text.trim();
    while !rest.is_empty() {
        let split = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(split);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, after) = tail.split_at(unit_len);
        let seconds = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "µs" | "us" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number.parse::<f64>().ok()? * seconds;
        rest = after;
    }
    Some(Duration::from_secs_f64(total))
}

/// `"20.5MB / 268.4MB"` → 20.5e6.
fn memory_bytes(value: &Value) -> Option<f64> {
    let used = value.as_str()?.split('/').next()?.trim();
    let split = used.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = used.split_at(split);
    let factor = match unit.to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(number.trim().parse::<f64>().ok()? * factor)
}

impl Usage {
    /// Mean and peak CPU (cores) and peak memory per workload.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| workload | CPU mean (cores) | CPU max (cores) | memory max (MB) |\n|---|---|---|---|\n",
        );
        for (workload, samples) in &self.cpu {
            let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
            let max = samples.iter().copied().fold(0.0, f64::max);
            let memory = self.max_memory.get(workload).copied().unwrap_or(0.0) / 1e6;
            out.push_str(&format!(
                "| {workload} | {mean:.2} | {max:.2} | {memory:.0} |\n"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podman_figures_parse() {
        assert_eq!(go_duration("33.5ms"), Some(Duration::from_micros(33_500)));
        assert_eq!(go_duration("1m2.5s"), Some(Duration::from_millis(62_500)));
        assert_eq!(go_duration("812µs"), Some(Duration::from_micros(812)));
        assert_eq!(go_duration("soon"), None);
        assert_eq!(memory_bytes(&Value::from("20.5MB / 268.4MB")), Some(20.5e6));
        assert_eq!(memory_bytes(&Value::from("2KiB / 1GiB")), Some(2048.0));
    }
}
