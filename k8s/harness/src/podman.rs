//! A rendered overlay run as podman containers: the closest this project can get to a
//! cluster on machines where no Kubernetes API server runs.
//!
//! Each replica of a Deployment or StatefulSet becomes one container named after its pod,
//! on one user-created network, with the network aliases of the Services that select it
//! (so `http://utilization-service:8093` resolves as in a cluster), its environment
//! resolved from the rendered ConfigMaps and Secrets and the downward API, its security
//! context (user, read-only root, no capabilities, no privilege escalation), its memory
//! limit, and a named volume per StatefulSet claim. Every container port is published on
//! a loopback port, through which the harness runs the readiness probes — the gate of a
//! rollout. Applying another overlay replaces the containers whose pod template changed,
//! like a Deployment rollout (see k8s/README.md for what differs from a cluster).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tokio::process::Command;

use crate::render::Manifests;
use crate::workload::{resolve_env, Workload};

#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    #[error("podman not found: install podman (Debian: podman runc netavark aardvark-dns)")]
    NotInstalled,
    #[error("podman {args}: {reason}")]
    Failed { args: String, reason: String },
    #[error("{workload}: {reason}")]
    Workload { workload: String, reason: String },
    #[error("{workload} was not ready within {secs} s: {detail}")]
    NotReady {
        workload: String,
        secs: u64,
        detail: String,
    },
}

/// Container labels that tie containers to a lab and a workload.
const LAB_LABEL: &str = "dronelab.lab";
const WORKLOAD_LABEL: &str = "dronelab.workload";
const HASH_LABEL: &str = "dronelab.template-hash";
const REPLICA_LABEL: &str = "dronelab.replica";

/// One lab: a podman network and the containers and volumes labelled with its name.
#[derive(Debug, Clone)]
pub struct Lab {
    pub name: String,
    conf: PathBuf,
}

/// A running container of the lab.
#[derive(Debug, Clone)]
pub struct RunningContainer {
    pub name: String,
    pub workload: String,
    pub template_hash: String,
    pub replica: i32,
    /// containerPort → loopback address on the host.
    pub ports: BTreeMap<i32, String>,
}

impl Lab {
    /// The lab `name`, using `k8s/podman/containers.conf` unless `CONTAINERS_CONF` is set.
    pub fn new(name: &str) -> Self {
        let conf = std::env::var_os("CONTAINERS_CONF")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::k8s_dir().join("podman/containers.conf"));
        Self {
            name: name.to_owned(),
            conf,
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new("podman");
        command
            .env("CONTAINERS_CONF", &self.conf)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs podman with `args`; returns its stdout.
    pub async fn podman<I, S>(&self, args: I) -> Result<String, PodmanError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = args
            .iter()
            .take(3)
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let output = self.command().args(&args).output().await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                PodmanError::NotInstalled
            } else {
                PodmanError::Failed {
                    args: shown.clone(),
                    reason: e.to_string(),
                }
            }
        })?;
        if !output.status.success() {
            return Err(PodmanError::Failed {
                args: shown,
                reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The lab's containers, running or not.
    pub async fn containers(&self) -> Result<Vec<RunningContainer>, PodmanError> {
        let filter = format!("label={LAB_LABEL}={}", self.name);
        let out = self
            .podman(["ps", "-a", "--filter", &filter, "--format", "json"])
            .await?;
        let listed: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap_or_default();
        let mut containers = Vec::new();
        for c in listed {
            let label = |key: &str| c["Labels"][key].as_str().unwrap_or_default().to_owned();
            let name = c["Names"][0].as_str().unwrap_or_default().to_owned();
            let mut ports = BTreeMap::new();
            for p in c["Ports"].as_array().into_iter().flatten() {
                let (Some(container_port), Some(host_port)) =
                    (p["container_port"].as_i64(), p["host_port"].as_i64())
                else {
                    continue;
                };
                let host_ip = p["host_ip"]
                    .as_str()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or("127.0.0.1");
                ports.insert(container_port as i32, format!("{host_ip}:{host_port}"));
            }
            containers.push(RunningContainer {
                name,
                workload: label(WORKLOAD_LABEL),
                template_hash: label(HASH_LABEL),
                replica: label(REPLICA_LABEL).parse().unwrap_or(0),
                ports,
            });
        }
        containers.sort_by(|a, b| (&a.workload, a.replica).cmp(&(&b.workload, b.replica)));
        Ok(containers)
    }

    /// The loopback URL of `workload`'s first replica on `container_port`.
    pub async fn url(&self, workload: &str, container_port: i32) -> Result<url::Url, PodmanError> {
        let containers = self.containers().await?;
        let address = containers
            .iter()
            .find(|c| c.workload == workload)
            .and_then(|c| c.ports.get(&container_port))
            .ok_or_else(|| PodmanError::Workload {
                workload: workload.to_owned(),
                reason: format!("no container publishes port {container_port}"),
            })?;
        url::Url::parse(&format!("http://{address}/")).map_err(|e| PodmanError::Workload {
            workload: workload.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Creates what `manifests` describe and replaces the containers whose pod template
    /// changed (a rollout: the old replicas stop within their grace period, the new ones
    /// keep their loopback ports). Returns the workloads that changed.
    pub async fn apply(&self, manifests: &Manifests) -> Result<Vec<String>, PodmanError> {
        self.ensure_network().await?;
        let existing = self.containers().await?;
        let mut changed = Vec::new();
        for workload in manifests.workloads() {
            let hash = workload.template_hash();
            let current: Vec<&RunningContainer> = existing
                .iter()
                .filter(|c| c.workload == workload.name)
                .collect();
            let up_to_date = current.len() == usize::try_from(workload.replicas).unwrap_or(0)
                && current.iter().all(|c| c.template_hash == hash);
            if up_to_date {
                continue;
            }
            let grace = workload
                .pod_spec()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            for old in &current {
                self.podman(["rm", "-f", "-t", &grace.to_string(), &old.name])
                    .await?;
            }
            for replica in 0..workload.replicas {
                let ports = current
                    .iter()
                    .find(|c| c.replica == replica)
                    .map(|c| c.ports.clone())
                    .unwrap_or_default();
                self.run_replica(manifests, &workload, replica, &ports)
                    .await?;
            }
            changed.push(workload.name.clone());
        }
        Ok(changed)
    }

    async fn ensure_network(&self) -> Result<(), PodmanError> {
        if self
            .podman(["network", "exists", &self.name])
            .await
            .is_err()
        {
            self.podman([
                "network",
                "create",
                "--label",
                &format!("{LAB_LABEL}={}", self.name),
                &self.name,
            ])
            .await?;
        }
        Ok(())
    }

    async fn run_replica(
        &self,
        manifests: &Manifests,
        workload: &Workload,
        replica: i32,
        host_ports: &BTreeMap<i32, String>,
    ) -> Result<(), PodmanError> {
        let invalid = |reason: String| PodmanError::Workload {
            workload: workload.name.clone(),
            reason,
        };
        let [container] = workload.containers() else {
            return Err(invalid(
                "the harness runs pods of exactly one container".into(),
            ));
        };
        let pod_name = workload.pod_name(replica);
        let env = resolve_env(manifests, workload, container, &pod_name).map_err(invalid)?;
        // Secrets go through a private file, never the command line.
        let env_dir = tempfile::tempdir().map_err(|e| invalid(e.to_string()))?;
        let env_file = env_dir.path().join("env");
        let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&env_file, text).map_err(|e| invalid(e.to_string()))?;

        let mut args: Vec<String> = vec![
            "run".into(),
            "--detach".into(),
            "--pull=never".into(),
            // Prefixed with the lab, so two labs on one machine never collide.
            format!("--name={}-{pod_name}", self.name),
            format!("--hostname={pod_name}"),
            format!("--network={}", self.name),
            format!("--label={LAB_LABEL}={}", self.name),
            format!("--label={WORKLOAD_LABEL}={}", workload.name),
            format!("--label={HASH_LABEL}={}", workload.template_hash()),
            format!("--label={REPLICA_LABEL}={replica}"),
            format!("--env-file={}", env_file.display()),
        ];
        for service in &manifests.services {
            let selector = service
                .spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .unwrap_or_default();
            if let (true, Some(name)) = (workload.selected_by(&selector), &service.metadata.name) {
                args.push(format!("--network-alias={name}"));
            }
        }
        args.extend(security_args(workload, container));
        if let Some(limit) = memory_limit(container) {
            args.push(format!("--memory={limit}"));
        }
        for port in container.ports.iter().flatten() {
            let host = host_ports
                .get(&port.container_port)
                .cloned()
                .unwrap_or_else(|| "127.0.0.1:".to_owned());
            args.push(format!("--publish={host}:{}", port.container_port));
        }
        for mount in self.volume_args(workload, container, &pod_name).await? {
            args.push(mount);
        }
        let image = container
            .image
            .clone()
            .ok_or_else(|| invalid("no image".into()))?;
        args.push(image);
        let command = container.command.iter().flatten();
        let rest = container.args.iter().flatten();
        args.extend(command.chain(rest).cloned());
        self.podman(&args).await?;
        Ok(())
    }

    async fn volume_args(
        &self,
        workload: &Workload,
        container: &Container,
        pod_name: &str,
    ) -> Result<Vec<String>, PodmanError> {
        let mut args = Vec::new();
        let spec = workload.pod_spec();
        let owned_by_group = spec
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.fs_group)
            .is_some();
        for mount in container.volume_mounts.iter().flatten() {
            let path = &mount.mount_path;
            if workload.volume_claims.contains(&mount.name) {
                // A StatefulSet's claim: one named volume per pod, kept across restarts.
                let volume = format!("{}-{}-{pod_name}", self.name, mount.name);
                if self.podman(["volume", "exists", &volume]).await.is_err() {
                    self.podman([
                        "volume",
                        "create",
                        "--label",
                        &format!("{LAB_LABEL}={}", self.name),
                        &volume,
                    ])
                    .await?;
                }
                // fsGroup: the pod's user may write the volume.
                let owner = if owned_by_group { ":U" } else { "" };
                args.push(format!("--volume={volume}:{path}{owner}"));
                continue;
            }
            let empty_dir = spec
                .and_then(|s| s.volumes.as_ref())
                .and_then(|v| v.iter().find(|v| v.name == mount.name))
                .and_then(|v| v.empty_dir.as_ref());
            match empty_dir {
                Some(_) => args.push(format!("--tmpfs={path}")),
                None => {
                    return Err(PodmanError::Workload {
                        workload: workload.name.clone(),
                        reason: format!("volume {} is neither a claim nor an emptyDir", mount.name),
                    })
                }
            }
        }
        Ok(args)
    }

    /// Waits until every replica of `workload` passes its readiness probe (or, without
    /// one, runs), at most `timeout`.
    pub async fn wait_ready(
        &self,
        manifests: &Manifests,
        workload: &str,
        timeout: Duration,
    ) -> Result<(), PodmanError> {
        let Some(w) = manifests
            .workloads()
            .into_iter()
            .find(|w| w.name == workload)
        else {
            return Ok(());
        };
        let started = Instant::now();
        let probe = w
            .containers()
            .first()
            .and_then(|c| Some((c.clone(), c.readiness_probe.clone()?.http_get?)));
        let http = reqwest::Client::new();
        loop {
            let containers: Vec<RunningContainer> = self
                .containers()
                .await?
                .into_iter()
                .filter(|c| c.workload == workload)
                .collect();
            let mut ready = 0;
            for c in &containers {
                let ok = match &probe {
                    Some((container, get)) => {
                        let port = crate::contract::container_port(container, &get.port);
                        match port.and_then(|p| c.ports.get(&p)) {
                            Some(address) => {
                                let path = get.path.clone().unwrap_or_else(|| "/".into());
                                http.get(format!("http://{address}{path}"))
                                    .timeout(Duration::from_secs(2))
                                    .send()
                                    .await
                                    .is_ok_and(|r| r.status().is_success())
                            }
                            None => false,
                        }
                    }
                    None => self.is_running(&c.name).await,
                };
                ready += usize::from(ok);
            }
            if ready == usize::try_from(w.replicas).unwrap_or(0) && ready == containers.len() {
                return Ok(());
            }
            if started.elapsed() > timeout {
                let mut detail = String::new();
                for c in &containers {
                    let state = self
                        .podman([
                            "inspect",
                            "--format",
                            "{{.State.Status}} (exit {{.State.ExitCode}})",
                            &c.name,
                        ])
                        .await
                        .unwrap_or_default();
                    let logs = self.logs(&c.name, 8).await;
                    detail.push_str(&format!("\n  {}: {}\n{logs}", c.name, state.trim()));
                }
                return Err(PodmanError::NotReady {
                    workload: workload.to_owned(),
                    secs: timeout.as_secs(),
                    detail,
                });
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn is_running(&self, name: &str) -> bool {
        self.podman(["inspect", "--format", "{{.State.Running}}", name])
            .await
            .is_ok_and(|s| s.trim() == "true")
    }

    /// The last `lines` lines of a container's log, indented.
    pub async fn logs(&self, name: &str, lines: usize) -> String {
        let output = self
            .command()
            .args(["logs", "--tail", &lines.to_string(), name])
            .output()
            .await;
        match output {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr);
                text.lines().map(|l| format!("    {l}\n")).collect()
            }
            Err(e) => format!("    (no logs: {e})\n"),
        }
    }

    /// Removes the lab's containers, network and (unless `keep_volumes`) volumes.
    pub async fn down(&self, keep_volumes: bool) -> Result<(), PodmanError> {
        for c in self.containers().await? {
            self.podman(["rm", "-f", "-t", "5", &c.name]).await?;
        }
        if self.podman(["network", "exists", &self.name]).await.is_ok() {
            self.podman(["network", "rm", &self.name]).await?;
        }
        if !keep_volumes {
            let filter = format!("label={LAB_LABEL}={}", self.name);
            let volumes = self
                .podman(["volume", "ls", "-q", "--filter", &filter])
                .await?;
            for volume in volumes.lines().filter(|v| !v.is_empty()) {
                self.podman(["volume", "rm", "-f", volume]).await?;
            }
        }
        Ok(())
    }
}

/// The pod's and the container's security context as podman flags.
fn security_args(workload: &Workload, container: &Container) -> Vec<String> {
    let mut args = Vec::new();
    let pod = workload
        .pod_spec()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let own = container.security_context.clone().unwrap_or_default();
    let user = own.run_as_user.or(pod.run_as_user);
    let group = own.run_as_group.or(pod.run_as_group);
    if let Some(user) = user {
        args.push(match group {
            Some(group) => format!("--user={user}:{group}"),
            None => format!("--user={user}"),
        });
    }
    if let Some(group) = pod.fs_group {
        args.push(format!("--group-add={group}"));
    }
    if own.read_only_root_filesystem == Some(true) {
        // As in Kubernetes: nothing writable but the volumes (podman would add tmpfs
        // mounts on /tmp and /run otherwise).
        args.push("--read-only".into());
        args.push("--read-only-tmpfs=false".into());
    }
    let drops_all = own
        .capabilities
        .and_then(|c| c.drop)
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    if drops_all {
        args.push("--cap-drop=all".into());
    }
    if own.allow_privilege_escalation == Some(false) {
        args.push("--security-opt=no-new-privileges".into());
    }
    args
}

/// The memory limit in podman's units (`256Mi` → `256m`).
fn memory_limit(container: &Container) -> Option<String> {
    let Quantity(q) = container
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")?;
    let units = [("Ki", "k"), ("Mi", "m"), ("Gi", "g")];
    Some(
        units
            .iter()
            .find_map(|(k8s, podman)| q.strip_suffix(k8s).map(|n| format!("{n}{podman}")))
            .unwrap_or_else(|| q.clone()),
    )
}
