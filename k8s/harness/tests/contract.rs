//! The manifests against the binaries, without a cluster: every overlay rendered by the
//! real `kubectl kustomize` and checked; manifests broken on purpose are caught; and the
//! probe paths are served by the real routers of the binaries.
//!
//! The render tests need kubectl, so `cargo test` ignores them and `.ci/run` runs them
//! (`-- --ignored`), where a missing kubectl fails them.

use std::collections::BTreeSet;
use std::path::Path;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use clap::Parser;
use k8s_harness::render::{self, Manifests};
use k8s_harness::{contract, k8s_dir};
use k8s_manifests::access;
use k8s_openapi::api::core::v1::{Container, EnvVar};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use service_kit::Telemetry;
use tower::ServiceExt;

fn require_kubectl() {
    assert!(
        render::kubectl().is_some(),
        "kubectl not found (install it, or set KUBECTL)"
    );
}

fn rendered(overlay: &str) -> Manifests {
    render::render(&k8s_dir().join("overlays").join(overlay)).expect("overlay renders")
}

#[test]
#[ignore = "needs kubectl (run by .ci/run)"]
fn every_overlay_keeps_the_contract() {
    require_kubectl();
    let mut rendered = Vec::new();
    let problems = k8s_harness::check_overlays(&k8s_dir().join("overlays"), |name, m| {
        let mut workloads: Vec<String> = m.workloads().into_iter().map(|w| w.name).collect();
        workloads.sort();
        rendered.push((name.to_owned(), workloads));
    })
    .expect("overlays render");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(
        rendered.len(),
        9,
        "four stages, four local stages, production"
    );
    let lab_stages = k8s_dir().join("../loadtest/stages/antipatterns");
    let (problems, checked) =
        k8s_harness::check_lab_overlays(&k8s_dir().join("overlays"), &lab_stages)
            .expect("lab overlays render");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 2,
        "an antipattern pair at least, {checked} checked"
    );
    let local = &rendered
        .iter()
        .find(|(name, _)| name == "local/1-baseline")
        .expect("local/1-baseline")
        .1;
    assert_eq!(
        local,
        &[
            "cosmos-emulator",
            "delivery-service",
            "gateway",
            "package-service",
            "trace-viewer",
            "utilization-service"
        ]
    );
}

fn container_mut<'a>(m: &'a mut Manifests, workload: &str) -> &'a mut Container {
    m.deployments
        .iter_mut()
        .find(|d| d.metadata.name.as_deref() == Some(workload))
        .and_then(|d| d.spec.as_mut())
        .and_then(|s| s.template.spec.as_mut())
        .and_then(|s| s.containers.first_mut())
        .expect("workload with a container")
}

fn set_env(container: &mut Container, name: &str, value: &str) {
    let env = container.env.get_or_insert_with(Vec::new);
    env.retain(|v| v.name != name);
    env.push(EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    });
}

fn problems_after(change: impl FnOnce(&mut Manifests)) -> Vec<String> {
    let mut manifests = rendered("local/3-parallel");
    assert!(
        contract::check(&manifests).is_empty(),
        "the unchanged overlay keeps the contract"
    );
    change(&mut manifests);
    contract::check(&manifests)
}

fn assert_caught(problems: &[String], expected: &str) {
    assert!(
        problems.iter().any(|p| p.contains(expected)),
        "expected a problem containing {expected:?}, got {problems:#?}"
    );
}

#[test]
#[ignore = "needs kubectl (run by .ci/run)"]
fn broken_manifests_are_caught() {
    require_kubectl();
    // A misspelt knob is a variable the binary never reads.
    assert_caught(
        &problems_after(|m| {
            set_env(
                container_mut(m, "utilization-service"),
                "UTILIZATION_QUERY_PARALELISM",
                "-1",
            )
        }),
        "sets UTILIZATION_QUERY_PARALELISM, which utilization-service does not read",
    );
    // A value the binary's own parser refuses.
    assert_caught(
        &problems_after(|m| {
            set_env(
                container_mut(m, "utilization-service"),
                "UTILIZATION_QUERY_PARALLELISM",
                "fast",
            )
        }),
        "its environment does not parse",
    );
    // The gateway sent to a port no Service serves.
    assert_caught(
        &problems_after(|m| {
            set_env(
                container_mut(m, "gateway"),
                "DELIVERY_URL",
                "http://delivery-service:9999",
            )
        }),
        "DELIVERY_URL=http://delivery-service:9999: Service delivery-service port 9999",
    );
    // A URL naming the wrong backend.
    assert_caught(
        &problems_after(|m| {
            set_env(
                container_mut(m, "gateway"),
                "PACKAGE_URL",
                "http://delivery-service:8091",
            )
        }),
        "PACKAGE_URL: Service delivery-service selects delivery-service, not package-service",
    );
    // A listener the pod does not declare.
    assert_caught(
        &problems_after(|m| set_env(container_mut(m, "gateway"), "LISTEN_ADDR", "0.0.0.0:9090")),
        "listens on 9090, which is not a containerPort",
    );
    // A CPU limit on a measured service.
    assert_caught(
        &problems_after(|m| {
            let resources = container_mut(m, "utilization-service")
                .resources
                .get_or_insert_with(Default::default);
            resources
                .limits
                .get_or_insert_with(Default::default)
                .insert("cpu".into(), Quantity("1".into()));
        }),
        "a CPU limit",
    );
    // A writable root filesystem.
    assert_caught(
        &problems_after(|m| {
            if let Some(s) = container_mut(m, "gateway").security_context.as_mut() {
                s.read_only_root_filesystem = Some(false);
            }
        }),
        "readOnlyRootFilesystem is not true",
    );
    // An object outside the lab's namespace.
    assert_caught(
        &problems_after(|m| {
            if let Some(service) = m.services.first_mut() {
                service.metadata.namespace = None;
            }
        }),
        "is not in the namespace dronelab",
    );
    // The release's version in an immutable claim template.
    let mut with_emulator = rendered("local/3-parallel");
    let claim = with_emulator
        .stateful_sets
        .iter_mut()
        .flat_map(|s| s.spec.iter_mut())
        .flat_map(|s| s.volume_claim_templates.iter_mut().flatten())
        .next()
        .expect("the emulator's claim template");
    claim
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("app.kubernetes.io/version".into(), "0.1.0".into());
    assert_caught(
        &contract::check(&with_emulator),
        "volumeClaimTemplate data carries app.kubernetes.io/version",
    );
    // A readiness probe on a path of the wrong kind.
    assert_caught(
        &problems_after(|m| {
            let probe = container_mut(m, "delivery-service")
                .readiness_probe
                .as_mut()
                .and_then(|p| p.http_get.as_mut())
                .expect("readiness probe");
            probe.path = Some("/healthz".into());
        }),
        "readiness probe path",
    );
}

#[test]
#[ignore = "needs kubectl (run by .ci/run)"]
fn a_stage_overlay_that_drifts_from_its_stage_file_is_caught() {
    require_kubectl();
    let stages = dronelab_study::stages::builtin().expect("stages");
    let model = dronelab_study::EmulatorModel::default();
    let manifests = rendered("local/2-more-ru");
    assert!(contract::check_stage(&manifests, &stages[1], &model).is_empty());
    // The stage-3 file against the stage-2 overlay: parallelism differs.
    let problems = contract::check_stage(&manifests, &stages[2], &model);
    assert_caught(
        &problems,
        "UTILIZATION_QUERY_PARALLELISM is Some(\"0\"), stage 3-parallel says -1",
    );
    let mut other = model;
    other.partition_concurrency += 1;
    assert_caught(
        &contract::check_stage(&manifests, &stages[1], &other),
        "COSMOS_EMULATOR_PARTITION_CONCURRENCY",
    );
    // A lab overlay against the other stage of its pair: the knob differs; a study
    // overlay against a lab stage: the knob is off there.
    let pair = dronelab_study::stages::from_dir(
        &k8s_dir().join("../loadtest/stages/antipatterns/synchronous-io"),
    )
    .expect("the pair");
    let fixed = rendered("antipatterns/synchronous-io/2-async-audit-write");
    assert!(contract::check_stage(&fixed, &pair[1], &model).is_empty());
    assert_caught(
        &contract::check_stage(&fixed, &pair[0], &model),
        "UTILIZATION_AUDIT_WRITE is Some(\"async\"), stage 1-blocking-audit-write says blocking",
    );
    assert_caught(
        &contract::check_stage(&rendered("local/4-partition-key"), &pair[0], &model),
        "UTILIZATION_AUDIT_WRITE is Some(\"off\")",
    );
}

/// GET `path` on `app` in process.
async fn status(app: axum::Router, path: &str) -> StatusCode {
    let request = Request::get(path).body(Body::empty()).expect("request");
    app.oneshot(request).await.expect("answer").status()
}

/// The router each binary serves, built as its `main` builds it (Cosmos unreachable).
async fn router(binary: &str) -> axum::Router {
    const NO_COSMOS: &str = "http://127.0.0.1:9";
    let telemetry = Telemetry::disabled();
    match binary {
        "gateway" => {
            let cli = gateway::Cli::parse_from(["gateway"]);
            gateway::build_app(gateway::AppState::new(&cli.args, telemetry).expect("gateway"))
        }
        "delivery-service" => {
            let cli = delivery_service::Cli::parse_from(["x", "--cosmos-endpoint", NO_COSMOS]);
            delivery_service::build_app(delivery_service::AppState::start(&cli.summary, telemetry))
        }
        "package-service" => {
            let cli = package_service::Cli::parse_from(["x", "--cosmos-endpoint", NO_COSMOS]);
            package_service::build_app(package_service::AppState::start(&cli.summary, telemetry))
        }
        "utilization-service" => {
            let cli = utilization_service::Cli::parse_from(["x", "--cosmos-endpoint", NO_COSMOS]);
            utilization_service::build_app(utilization_service::AppState::start(
                &cli.args, telemetry,
            ))
        }
        "cosmos-emulator" => {
            let config = cosmos_emulator::Config::parse_from(["cosmos-emulator"]);
            cosmos_emulator::build_app(cosmos_emulator::AppState::new(&config).expect("emulator"))
        }
        "trace-viewer" => trace_viewer::api::router(std::sync::Arc::new(trace_viewer::Store::new(
            trace_viewer::Limits {
                max_spans: 10,
                max_bytes: 1 << 20,
            },
        ))),
        other => panic!("no router for {other}"),
    }
}

#[tokio::test]
async fn probe_paths_are_served_by_the_binaries() {
    for binary in contract::binaries() {
        let readiness = status(router(binary.name).await, binary.readiness_path).await;
        let liveness = status(router(binary.name).await, binary.liveness_path).await;
        assert_ne!(
            readiness,
            StatusCode::NOT_FOUND,
            "{} {}",
            binary.name,
            binary.readiness_path
        );
        assert_eq!(
            liveness,
            StatusCode::OK,
            "{} {} is alive",
            binary.name,
            binary.liveness_path
        );
    }
    // A backend with no Cosmos DB: alive, not ready.
    let app = router("utilization-service").await;
    assert_eq!(
        status(app, "/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(Path::new(&k8s_dir())
        .join("base/kustomization.yaml")
        .is_file());
}

/// The component's Job is the one `loadtest tune --load-pods` creates, so a change to
/// either shows up here (`k8s-harness loadgen` rewrites the file).
#[test]
fn the_loadgen_component_is_the_job_tune_creates() {
    let path = k8s_dir().join("components/loadgen/job.yaml");
    let text = std::fs::read_to_string(&path).expect("job.yaml");
    let committed: k8s_openapi::api::batch::v1::Job = serde_saphyr::from_str(&text).expect("a Job");
    let built = k8s_manifests::LoadgenJob::default().job();
    assert_eq!(
        committed,
        built,
        "run `k8s-harness loadgen > {}`",
        path.display()
    );
    assert_eq!(
        k8s_harness::loadgen_yaml().expect("yaml"),
        text,
        "the file is exactly what `k8s-harness loadgen` prints"
    );
}

fn tune_role() -> k8s_openapi::api::rbac::v1::Role {
    let path = k8s_dir().join("rbac/tune.yaml");
    let yaml = std::fs::read_to_string(&path).expect("k8s/rbac/tune.yaml");
    serde_saphyr::from_str(&yaml).expect("a Role")
}

/// One line per permission, for a readable difference.
fn lines(permissions: &BTreeSet<access::Permission>) -> Vec<String> {
    permissions
        .iter()
        .map(|(group, resource, verb)| match group.as_str() {
            "" => format!("{verb} {resource}"),
            _ => format!("{verb} {group}/{resource}"),
        })
        .collect()
}

#[test]
fn the_tune_role_grants_every_fixed_call_and_only_apply_beyond_them() {
    let granted = access::granted(&tune_role());
    let fixed = access::needed([]);
    let missing: Vec<String> = lines(&fixed.difference(&granted).cloned().collect());
    assert!(missing.is_empty(), "k8s/rbac/tune.yaml lacks {missing:?}");
    let beyond: Vec<String> = lines(
        &granted
            .difference(&fixed)
            .filter(|(_, _, verb)| !access::APPLY_VERBS.contains(&verb.as_str()))
            .cloned()
            .collect(),
    );
    assert!(
        beyond.is_empty(),
        "k8s/rbac/tune.yaml grants what no call needs: {beyond:?}"
    );
}

/// Every overlay directory under `dir` (the stage overlays and the local ones).
fn overlay_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.join("kustomization.yaml").is_file() {
            found.push(path.clone());
        }
        if path.is_dir() {
            found.extend(overlay_dirs(&path));
        }
    }
    found
}

#[test]
#[ignore = "needs kubectl (run by .ci/run)"]
fn the_tune_role_grants_exactly_what_a_cluster_run_calls() {
    require_kubectl();
    let mut applied: BTreeSet<(String, String)> = BTreeSet::new();
    let overlays = overlay_dirs(&k8s_dir().join("overlays"));
    assert!(
        overlays.len() >= 9,
        "the stage, local and production overlays"
    );
    for overlay in overlays {
        let yaml = k8s_manifests::overlay::render(&overlay).expect("overlay renders");
        for object in k8s_manifests::overlay::objects(&yaml).expect("objects") {
            let types = object.types.expect("rendered objects carry their types");
            let gvk = kube_core::GroupVersionKind::try_from(&types).expect("apiVersion");
            let resource = kube_core::ApiResource::from_gvk(&gvk);
            applied.insert((resource.group, resource.plural));
        }
    }
    let needed = access::needed(applied.iter().map(|(g, p)| (g.as_str(), p.as_str())));
    let granted = access::granted(&tune_role());
    let lacking = lines(&needed.difference(&granted).cloned().collect());
    let extra = lines(&granted.difference(&needed).cloned().collect());
    assert!(
        lacking.is_empty() && extra.is_empty(),
        "k8s/rbac/tune.yaml lacks {lacking:?} and grants beyond the calls {extra:?}"
    );
    // Without the Secret the emulator component generates, the README's local run
    // would be refused at its first apply.
    assert!(granted.contains(&("".into(), "secrets".into(), "create".into())));
}
