//! The contract between the manifests and the binaries they run: what a rendered overlay
//! must be for dronelab to work, checked without a cluster. Each check names the object
//! and the problem; an empty list means the overlay keeps the contract.
//!
//! - every environment variable a container sets is one its binary reads (its clap `env`
//!   names, plus the `OTEL_*` variables for traced services, plus `RUST_LOG`), and every
//!   value parses with the binary's own argument parser;
//! - the listen address, containerPorts, probe ports and Service ports agree; the URLs
//!   the gateway is given, the OTLP endpoint and the Cosmos endpoint name Services of
//!   this render that select the right workload on the right port;
//! - labels, image tag, security context, resources and the termination grace period
//!   follow the deployment's rules (k8s/README.md);
//! - every ConfigMap and Secret key referenced is in the render (except the Secret
//!   `cosmos-account` of an Azure account, which the user creates).

use std::collections::BTreeMap;

use clap::CommandFactory;
use dronelab_contract::knobs::{ENV_QUERY_PARALLELISM, ENV_USE_PARTITION_KEY};
use dronelab_contract::{routes, Service};
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::render::Manifests;
use crate::workload::{referenced_names, resolve_env, Workload};

/// Every dronelab crate shares this version: the image tag and the version label.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The Secret with the Azure Cosmos DB account's endpoint and key, created by the user.
pub const USER_SECRET: &str = "cosmos-account";
/// The namespace every object goes into (it enforces Pod Security "restricted").
pub const NAMESPACE: &str = "dronelab";
/// The label that carries [`VERSION`].
const VERSION_LABEL: &str = "app.kubernetes.io/version";
/// Labels every workload and pod template carries.
pub const REQUIRED_LABELS: [&str; 4] = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    VERSION_LABEL,
];

/// What the contract needs to know of a binary in the image.
pub struct Binary {
    pub name: &'static str,
    command: fn() -> clap::Command,
    /// Reads the `OTEL_*` environment (service-kit telemetry).
    pub traced: bool,
    /// Talks to Cosmos DB through the SDK, which reads a variable of its own.
    pub cosmos: bool,
    /// The variable holding the address of its HTTP API, probes and Service.
    pub listen_env: &'static str,
    /// Its other listeners (the trace viewer's OTLP receivers).
    pub other_listen_envs: &'static [&'static str],
    pub readiness_path: &'static str,
    pub liveness_path: &'static str,
    /// The longest a request may run; graceful shutdown drains no longer.
    pub request_timeout_secs: i64,
}

impl Binary {
    pub fn command(&self) -> clap::Command {
        (self.command)()
    }

    /// The environment variables the binary reads.
    pub fn environment(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .command()
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        if self.traced {
            names.extend(
                service_kit::telemetry::ENVIRONMENT
                    .iter()
                    .map(|s| s.to_string()),
            );
        }
        if self.cosmos {
            names.extend(cosmos_kit::SDK_ENVIRONMENT.iter().map(|s| s.to_string()));
        }
        names.push("RUST_LOG".to_owned());
        names
    }
}

fn trace_viewer_command() -> clap::Command {
    <trace_viewer::Config as clap::Args>::augment_args(clap::Command::new("trace-viewer"))
}

/// The binaries of the image that Kubernetes workloads run.
pub fn binaries() -> Vec<Binary> {
    let backend_timeout = service_kit::Limits::default().request_timeout.as_secs() as i64;
    let backend = |name, command| Binary {
        name,
        command,
        traced: true,
        cosmos: true,
        listen_env: "LISTEN_ADDR",
        other_listen_envs: &[],
        readiness_path: routes::READYZ,
        liveness_path: routes::HEALTHZ,
        request_timeout_secs: backend_timeout,
    };
    vec![
        Binary {
            request_timeout_secs: gateway::REQUEST_TIMEOUT.as_secs() as i64,
            cosmos: false,
            ..backend(gateway::SERVICE_NAME, gateway::Cli::command)
        },
        backend(
            delivery_service::SERVICE_NAME,
            delivery_service::Cli::command,
        ),
        backend(package_service::SERVICE_NAME, package_service::Cli::command),
        backend(
            utilization_service::SERVICE_NAME,
            utilization_service::Cli::command,
        ),
        Binary {
            name: Service::CosmosEmulator.name(),
            command: cosmos_emulator::Config::command,
            traced: false,
            cosmos: false,
            listen_env: "LISTEN_ADDR",
            other_listen_envs: &[],
            readiness_path: routes::HEALTHZ,
            liveness_path: routes::HEALTHZ,
            request_timeout_secs: 0,
        },
        Binary {
            name: Service::TraceViewer.name(),
            command: trace_viewer_command,
            traced: false,
            cosmos: false,
            listen_env: "TRACE_VIEWER_LISTEN",
            other_listen_envs: &[
                "TRACE_VIEWER_OTLP_GRPC_LISTEN",
                "TRACE_VIEWER_OTLP_HTTP_LISTEN",
            ],
            readiness_path: routes::HEALTHZ,
            liveness_path: routes::HEALTHZ,
            request_timeout_secs: 0,
        },
    ]
}

/// A container of a workload with its binary and resolved environment.
pub struct Resolved<'a> {
    pub workload: &'a Workload,
    pub container: &'a Container,
    pub binary: Option<&'a Binary>,
    pub env: Vec<(String, String)>,
}

impl Resolved<'_> {
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The rules every rendered overlay keeps; returns the problems found.
pub fn check(manifests: &Manifests) -> Vec<String> {
    let binaries = binaries();
    let workloads = manifests.workloads();
    let mut problems = Vec::new();
    let mut resolved = Vec::new();
    // Secrets the user creates are not in the render: stand in placeholder values.
    let with_user_secret = with_placeholder_secret(manifests);
    for workload in &workloads {
        problems.extend(
            check_workload(workload)
                .into_iter()
                .map(|p| format!("{}: {p}", workload.name)),
        );
        for container in workload.containers() {
            let at = format!("{}/{}", workload.name, container.name);
            let binary = container
                .command
                .as_ref()
                .and_then(|c| c.first())
                .and_then(|c| binaries.iter().find(|b| b.name == c));
            if binary.is_none() {
                problems.push(format!(
                    "{at}: command {:?} is not a binary of the image",
                    container.command
                ));
            }
            let env = match resolve_env(
                &with_user_secret,
                workload,
                container,
                &workload.pod_name(0),
            ) {
                Ok(env) => env,
                Err(e) => {
                    problems.push(format!("{at}: {e}"));
                    continue;
                }
            };
            resolved.push(Resolved {
                workload,
                container,
                binary,
                env,
            });
        }
    }
    for r in &resolved {
        let at = format!("{}/{}", r.workload.name, r.container.name);
        problems.extend(check_container(r).into_iter().map(|p| format!("{at}: {p}")));
        problems.extend(
            check_endpoints(manifests, &workloads, &resolved, r)
                .into_iter()
                .map(|p| format!("{at}: {p}")),
        );
    }
    problems.extend(check_services(manifests, &workloads));
    problems.extend(check_disruption_budget(manifests, &workloads));
    problems.extend(check_namespaces(manifests));
    problems.extend(check_claim_templates(manifests));
    problems
}

/// A StatefulSet's volumeClaimTemplates are immutable: a label that changes with each
/// release there makes re-applying the StatefulSet after a version bump fail (422).
fn check_claim_templates(manifests: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    for set in &manifests.stateful_sets {
        let name = set.metadata.name.as_deref().unwrap_or_default();
        let templates = set
            .spec
            .iter()
            .flat_map(|s| s.volume_claim_templates.iter().flatten());
        for template in templates {
            let labels = template.metadata.labels.iter().flatten();
            for (label, _) in labels.filter(|(l, _)| l.as_str() == VERSION_LABEL) {
                problems.push(format!(
                    "StatefulSet/{name}: volumeClaimTemplate {} carries {label}, which changes with each release and cannot change there",
                    template.metadata.name.as_deref().unwrap_or_default()
                ));
            }
        }
    }
    problems
}

/// Every namespaced object is in [`NAMESPACE`]: a component that forgets it would put
/// its objects wherever the user's context points.
fn check_namespaces(manifests: &Manifests) -> Vec<String> {
    let metadata = manifests
        .deployments
        .iter()
        .map(|o| ("Deployment", &o.metadata))
        .chain(
            manifests
                .stateful_sets
                .iter()
                .map(|o| ("StatefulSet", &o.metadata)),
        )
        .chain(manifests.services.iter().map(|o| ("Service", &o.metadata)))
        .chain(
            manifests
                .config_maps
                .iter()
                .map(|o| ("ConfigMap", &o.metadata)),
        )
        .chain(manifests.secrets.iter().map(|o| ("Secret", &o.metadata)))
        .chain(
            manifests
                .pod_disruption_budgets
                .iter()
                .map(|o| ("PodDisruptionBudget", &o.metadata)),
        )
        .chain(
            manifests
                .network_policies
                .iter()
                .map(|o| ("NetworkPolicy", &o.metadata)),
        );
    metadata
        .filter(|(_, m)| m.namespace.as_deref() != Some(NAMESPACE))
        .map(|(kind, m)| {
            format!(
                "{kind}/{} is not in the namespace {NAMESPACE}",
                m.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// The render plus the user's Secret (its keys with placeholder values) when it is absent.
fn with_placeholder_secret(manifests: &Manifests) -> Manifests {
    let mut out = manifests.clone();
    if out.secret(USER_SECRET).is_none() {
        out.secrets.push(k8s_openapi::api::core::v1::Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(USER_SECRET.to_owned()),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([
                (
                    "COSMOS_ENDPOINT".to_owned(),
                    "https://account.documents.azure.com:443/".to_owned(),
                ),
                ("COSMOS_KEY".to_owned(), "a2V5".to_owned()),
            ])),
            ..Default::default()
        });
    }
    out
}

fn check_workload(workload: &Workload) -> Vec<String> {
    let mut problems = Vec::new();
    let pod_labels = workload.pod_labels();
    for (what, labels) in [
        ("metadata", &workload.labels),
        ("pod template", &pod_labels),
    ] {
        for label in REQUIRED_LABELS {
            if !labels.contains_key(label) {
                problems.push(format!("{what} lacks label {label}"));
            }
        }
        if labels.get(VERSION_LABEL).is_some_and(|v| v != VERSION) {
            problems.push(format!("{what}: version label is not {VERSION}"));
        }
        if labels
            .get("app.kubernetes.io/part-of")
            .is_some_and(|v| v != "dronelab")
        {
            problems.push(format!("{what}: part-of label is not dronelab"));
        }
    }
    if workload.selector.contains_key(VERSION_LABEL) {
        problems.push("the selector holds the version: it would change on upgrade".into());
    }
    if !workload.selected_by(&workload.selector) {
        problems.push("the selector does not match the pod template's labels".into());
    }
    let Some(spec) = workload.pod_spec() else {
        problems.push("no pod spec".into());
        return problems;
    };
    if spec.automount_service_account_token != Some(false) {
        problems.push("the pod mounts a service-account token it does not use".into());
    }
    let security = spec.security_context.clone().unwrap_or_default();
    if security.run_as_non_root != Some(true) {
        problems.push("runAsNonRoot is not true".into());
    }
    if security.seccomp_profile.as_ref().map(|p| p.type_.as_str()) != Some("RuntimeDefault") {
        problems.push("seccompProfile is not RuntimeDefault".into());
    }
    problems
}

fn check_container(r: &Resolved) -> Vec<String> {
    let mut problems = Vec::new();
    let c = r.container;
    // `dronelab:<version>`, from a registry or not.
    let image = c.image.as_deref().unwrap_or_default();
    let tagged = format!("dronelab:{VERSION}");
    if image != tagged && !image.ends_with(&format!("/{tagged}")) {
        problems.push(format!("image {image:?} is not dronelab:{VERSION}"));
    }
    let security = c.security_context.clone().unwrap_or_default();
    if security.read_only_root_filesystem != Some(true) {
        problems.push("readOnlyRootFilesystem is not true".into());
    }
    if security.allow_privilege_escalation != Some(false) {
        problems.push("allowPrivilegeEscalation is not false".into());
    }
    let drops_all = security
        .capabilities
        .and_then(|caps| caps.drop)
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    if !drops_all {
        problems.push("capabilities do not drop ALL".into());
    }
    let resources = c.resources.clone().unwrap_or_default();
    let requests = resources.requests.unwrap_or_default();
    let limits = resources.limits.unwrap_or_default();
    for key in ["cpu", "memory"] {
        if !requests.contains_key(key) {
            problems.push(format!("no {key} request"));
        }
    }
    if !limits.contains_key("memory") {
        problems.push("no memory limit".into());
    }
    if limits.contains_key("cpu") {
        problems.push("a CPU limit: throttling would distort the stages".into());
    }
    let Some(binary) = r.binary else {
        return problems;
    };
    let grace = r
        .workload
        .pod_spec()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    if grace <= binary.request_timeout_secs {
        problems.push(format!(
            "terminationGracePeriodSeconds {grace} does not cover the {} s request timeout",
            binary.request_timeout_secs
        ));
    }
    let component = r
        .workload
        .pod_labels()
        .get("app.kubernetes.io/component")
        .cloned();
    if component.as_deref() != Some(binary.name) {
        problems.push(format!(
            "component label {component:?} is not the binary's name {}",
            binary.name
        ));
    }
    problems.extend(check_environment(r, binary));
    problems.extend(check_ports(r, binary));
    problems
}

fn check_environment(r: &Resolved, binary: &Binary) -> Vec<String> {
    let mut problems = Vec::new();
    let read = binary.environment();
    let composed = referenced_names(r.container);
    for (name, _) in &r.env {
        if !read.contains(name) && !composed.contains(name) {
            problems.push(format!("sets {name}, which {} does not read", binary.name));
        }
    }
    // The values go through the binary's own parser, as flags.
    let command = binary.command();
    let mut argv = vec![binary.name.to_owned()];
    for arg in command.get_arguments() {
        let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        if let Some(value) = r.env(&env.to_string_lossy()) {
            argv.push(format!("--{long}={value}"));
        }
    }
    if let Err(e) = command.try_get_matches_from(&argv) {
        problems.push(format!("its environment does not parse: {}", e.render()));
    }
    if binary.traced {
        let service_name = r
            .container
            .env
            .iter()
            .flatten()
            .find(|v| v.name == "OTEL_SERVICE_NAME");
        let from_component = service_name
            .and_then(|v| v.value_from.as_ref()?.field_ref.as_ref())
            .is_some_and(|f| f.field_path == "metadata.labels['app.kubernetes.io/component']");
        if !from_component {
            problems.push("OTEL_SERVICE_NAME does not come from the component label".into());
        }
        let attributes = r.env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
        let pod = r.workload.pod_name(0);
        let namespace = &r.workload.namespace;
        if !attributes.contains(&format!("k8s.pod.name={pod}"))
            || !attributes.contains(&format!("k8s.namespace.name={namespace}"))
        {
            problems.push(format!(
                "OTEL_RESOURCE_ATTRIBUTES {attributes:?} lacks the pod and namespace from the downward API"
            ));
        }
    }
    problems
}

/// The port of a listen address like `0.0.0.0:8080`.
fn port_of(address: &str) -> Option<i32> {
    address
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| i32::from(a.port()))
}

/// The container's port number for a probe or Service `targetPort`.
pub fn container_port(container: &Container, port: &IntOrString) -> Option<i32> {
    let ports = container.ports.iter().flatten();
    match port {
        IntOrString::Int(n) => ports
            .clone()
            .find(|p| p.container_port == *n)
            .map(|p| p.container_port),
        IntOrString::String(name) => ports
            .clone()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port),
    }
}

fn check_ports(r: &Resolved, binary: &Binary) -> Vec<String> {
    let mut problems = Vec::new();
    let declared: Vec<i32> = r
        .container
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    let listen = r.env(binary.listen_env).and_then(port_of);
    let Some(listen) = listen else {
        problems.push(format!("{} is not set to an address", binary.listen_env));
        return problems;
    };
    let mut listening = vec![listen];
    for name in binary.other_listen_envs {
        match r.env(name).and_then(port_of) {
            Some(port) => listening.push(port),
            None => problems.push(format!("{name} is not set to an address")),
        }
    }
    for port in &listening {
        if !declared.contains(port) {
            problems.push(format!("listens on {port}, which is not a containerPort"));
        }
    }
    for port in &declared {
        if !listening.contains(port) {
            problems.push(format!("containerPort {port} is not a port it listens on"));
        }
    }
    let probe = |name: &str, probe: Option<&Probe>, path: &str| -> Option<String> {
        let Some(get) = probe.and_then(|p| p.http_get.as_ref()) else {
            return Some(format!("no {name} httpGet probe"));
        };
        if get.path.as_deref() != Some(path) {
            return Some(format!("{name} probe path {:?} is not {path}", get.path));
        }
        if container_port(r.container, &get.port) != Some(listen) {
            return Some(format!(
                "{name} probe port {:?} is not the HTTP port {listen}",
                get.port
            ));
        }
        None
    };
    problems.extend(probe(
        "readiness",
        r.container.readiness_probe.as_ref(),
        binary.readiness_path,
    ));
    problems.extend(probe(
        "liveness",
        r.container.liveness_probe.as_ref(),
        binary.liveness_path,
    ));
    problems
}

/// `http://host:port` → (host, port).
fn host_port(url: &str) -> Option<(String, i32)> {
    let url = url::Url::parse(url).ok()?;
    Some((
        url.host_str()?.to_owned(),
        i32::from(url.port_or_known_default()?),
    ))
}

/// The URL-valued variables that must name a Service of the render, and which binary on
/// which of its listen addresses must answer there. A URL whose host is no Service of the
/// render points outside it (an Azure account, a collector) and is not checked.
const ENDPOINTS: [(&str, &str, &str); 5] = [
    ("DELIVERY_URL", Service::Delivery.name(), "LISTEN_ADDR"),
    ("PACKAGE_URL", Service::Package.name(), "LISTEN_ADDR"),
    (
        "UTILIZATION_URL",
        Service::Utilization.name(),
        "LISTEN_ADDR",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "trace-viewer",
        "TRACE_VIEWER_OTLP_GRPC_LISTEN",
    ),
    ("COSMOS_ENDPOINT", "cosmos-emulator", "LISTEN_ADDR"),
];

fn check_endpoints(
    manifests: &Manifests,
    workloads: &[Workload],
    resolved: &[Resolved],
    r: &Resolved,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (variable, target, listen_env) in ENDPOINTS {
        let Some(url) = r.env(variable) else { continue };
        let Some((host, port)) = host_port(url) else {
            problems.push(format!("{variable}={url} is not a URL"));
            continue;
        };
        let Some(service) = manifests.service(&host) else {
            if variable.ends_with("_URL") {
                problems.push(format!("{variable}={url}: no Service {host} in the render"));
            }
            continue;
        };
        let Some(spec) = &service.spec else { continue };
        let selector = spec.selector.clone().unwrap_or_default();
        let Some(workload) = workloads.iter().find(|w| w.selected_by(&selector)) else {
            problems.push(format!("{variable}: Service {host} selects no workload"));
            continue;
        };
        let Some(callee) = resolved.iter().find(|c| std::ptr::eq(c.workload, workload)) else {
            continue;
        };
        if callee.binary.map(|b| b.name) != Some(target) {
            problems.push(format!(
                "{variable}: Service {host} selects {}, not {target}",
                workload.name
            ));
            continue;
        }
        let service_port = spec.ports.iter().flatten().find(|p| p.port == port);
        let target_port = service_port
            .and_then(|p| p.target_port.as_ref())
            .and_then(|t| container_port(callee.container, t));
        let listening = callee.env(listen_env).and_then(port_of);
        if target_port.is_none() || target_port != listening {
            problems.push(format!(
                "{variable}={url}: Service {host} port {port} does not reach {target}'s {listen_env}"
            ));
        }
    }
    problems
}

fn check_services(manifests: &Manifests, workloads: &[Workload]) -> Vec<String> {
    let mut problems = Vec::new();
    for service in &manifests.services {
        let name = service.metadata.name.clone().unwrap_or_default();
        let Some(spec) = &service.spec else { continue };
        let selector = spec.selector.clone().unwrap_or_default();
        let selected: Vec<&Workload> = workloads
            .iter()
            .filter(|w| w.selected_by(&selector))
            .collect();
        let [workload] = selected.as_slice() else {
            problems.push(format!(
                "Service {name} selects {} workloads, not one",
                selected.len()
            ));
            continue;
        };
        if workload.name != name {
            problems.push(format!(
                "Service {name} selects workload {}: names differ",
                workload.name
            ));
        }
        for port in spec.ports.iter().flatten() {
            let target = port
                .target_port
                .clone()
                .unwrap_or(IntOrString::Int(port.port));
            let reached = workload
                .containers()
                .iter()
                .find_map(|c| container_port(c, &target));
            match reached {
                None => problems.push(format!(
                    "Service {name} port {} reaches no containerPort",
                    port.port
                )),
                // Each service serves on its default port (and the podman harness maps
                // ports one to one).
                Some(p) if p != port.port => problems.push(format!(
                    "Service {name} port {} forwards to containerPort {p}",
                    port.port
                )),
                Some(_) => {}
            }
        }
    }
    problems
}

fn check_disruption_budget(manifests: &Manifests, workloads: &[Workload]) -> Vec<String> {
    let Some(gateway) = workloads.iter().find(|w| w.name == gateway::SERVICE_NAME) else {
        return vec!["no gateway workload".into()];
    };
    let covered = manifests.pod_disruption_budgets.iter().any(|pdb| {
        pdb.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.match_labels.as_ref())
            .is_some_and(|labels| gateway.selected_by(labels))
    });
    if covered {
        Vec::new()
    } else {
        vec!["no PodDisruptionBudget selects the gateway".into()]
    }
}

/// The query knobs and, with the emulator, its partitions and model: what a stage
/// overlay must set. Returns the problems.
pub fn check_stage(
    manifests: &Manifests,
    stage: &dronelab_study::Stage,
    model: &dronelab_study::EmulatorModel,
) -> Vec<String> {
    let mut problems = Vec::new();
    let workloads = manifests.workloads();
    let with_user_secret = with_placeholder_secret(manifests);
    // Each workload's first container's environment, resolved once.
    let environments: BTreeMap<&str, Vec<(String, String)>> = workloads
        .iter()
        .filter_map(|w| {
            let c = w.containers().first()?;
            let env = resolve_env(&with_user_secret, w, c, &w.pod_name(0)).ok()?;
            Some((w.name.as_str(), env))
        })
        .collect();
    let value = |workload: &str, name: &str| -> Option<String> {
        environments
            .get(workload)?
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let config = &stage.config;
    let want = [
        (
            Service::Utilization.name(),
            ENV_QUERY_PARALLELISM,
            config.query_parallelism.to_string(),
        ),
        (
            Service::Utilization.name(),
            ENV_USE_PARTITION_KEY,
            config.use_partition_key.to_string(),
        ),
    ];
    let mut compare = |workload: &str, name: &str, expected: String| {
        let actual = value(workload, name);
        if actual.as_deref() != Some(expected.as_str()) {
            problems.push(format!(
                "{workload}: {name} is {actual:?}, stage {} says {expected}",
                stage.name
            ));
        }
    };
    for (workload, name, expected) in want {
        compare(workload, name, expected);
    }
    // Every lab knob: the stage's value, or off.
    for knob in &dronelab_contract::lab::KNOBS {
        let expected = stage.knobs.get(knob.env).unwrap_or(knob.default_value());
        compare(knob.service.name(), knob.env, expected.to_owned());
    }
    if workloads.iter().any(|w| w.name == "cosmos-emulator") {
        let emulator = [
            ("COSMOS_EMULATOR_PARTITIONS", config.partitions.to_string()),
            ("COSMOS_EMULATOR_RTT_MS", model.rtt_ms.to_string()),
            ("COSMOS_EMULATOR_SERVICE_MS", model.service_ms.to_string()),
            ("COSMOS_EMULATOR_MS_PER_RU", model.ms_per_ru.to_string()),
            ("COSMOS_EMULATOR_JITTER", model.jitter.to_string()),
            (
                "COSMOS_EMULATOR_PARTITION_CONCURRENCY",
                model.partition_concurrency.to_string(),
            ),
        ];
        for (name, expected) in emulator {
            compare("cosmos-emulator", name, expected);
        }
    }
    problems
}
