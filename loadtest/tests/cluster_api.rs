//! Cluster mode's requests, as the API server would receive them. No Kubernetes API
//! server can run here, so this is a stand-in: a small HTTP server answering the few
//! paths the run uses with the shapes the Kubernetes API documents, recording every
//! request. The real kube client sends to it; the test checks what was sent (paths,
//! namespaces, field manager, propagation policy, selectors, container, start time)
//! and how the answers are read. What a real API server adds (authorization,
//! admission, controllers) is not modelled; `k8s/README.md` lists what to watch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use k8s_manifests::{overlay, LoadgenJob};
use loadgen::{LoadRecord, Profile, Shard};
use loadtest::cluster::{Cluster, ClusterError};

const NAMESPACE: &str = "lab-2";
const JOB_UID: &str = "3c1f-uid";

#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: BTreeMap<String, String>,
    body: Value,
}

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The API server's clock, as its `Date` header says it.
    date: SystemTime,
    /// The Job's pods fail (one OOMKilled) instead of succeeding.
    pods_fail: bool,
    job_created: Arc<Mutex<bool>>,
}

impl Fake {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body),
    )
        .into_response()
}

fn resource(name: &str, kind: &str, namespaced: bool) -> Value {
    json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
        "verbs": ["create", "patch", "get", "list", "delete"]})
}

fn list(items: Vec<Value>) -> Response {
    axum::Json(json!({"metadata": {}, "items": items})).into_response()
}

fn record_line(shard: &str, start_ms: u64) -> String {
    let shard: Shard = shard.parse().expect("shard");
    let profile = Profile::Constant {
        users: 2,
        duration_secs: 1.0,
    };
    let record = LoadRecord::new(shard, profile, start_ms);
    serde_json::to_string(&record).expect("record")
}

fn load_pod(name: &str, index: u32, failed: bool) -> Value {
    let state = if failed {
        json!({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    } else {
        json!({"terminated": {"exitCode": 0, "reason": "Completed"}})
    };
    json!({
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/controller-uid": JOB_UID},
            "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string()}},
        "status": {"phase": if failed { "Failed" } else { "Succeeded" }, "containerStatuses": [{
            "name": "loadgen", "image": "dronelab:0.1.0", "imageID": "", "ready": false,
            "restartCount": 0, "state": state}]}
    })
}

async fn answer(State(fake): State<Fake>, method: Method, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().to_owned();
    let query: BTreeMap<String, String> =
        url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let selector = query.get("labelSelector").cloned().unwrap_or_default();
    if let Ok(mut seen) = fake.seen.lock() {
        seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            query,
            body: body.clone(),
        });
    }
    let jobs = format!("/apis/batch/v1/namespaces/{NAMESPACE}/jobs");
    let pods = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    let created = fake.job_created.lock().map(|c| *c).unwrap_or(false);
    match (method, path.as_str()) {
        (Method::GET, "/version") => (
            [(header::DATE, httpdate::fmt_http_date(fake.date))],
            axum::Json(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0",
                "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "",
                "compiler": "", "platform": "linux/amd64"})),
        )
            .into_response(),
        (Method::GET, "/api/v1") => axum::Json(json!({"kind": "APIResourceList",
            "groupVersion": "v1", "resources": [
                resource("configmaps", "ConfigMap", true),
                resource("services", "Service", true)]}))
        .into_response(),
        (Method::GET, "/apis/rbac.authorization.k8s.io/v1") => {
            axum::Json(json!({"kind": "APIResourceList",
                "groupVersion": "rbac.authorization.k8s.io/v1", "resources": [
                    resource("clusterroles", "ClusterRole", false)]}))
            .into_response()
        }
        (Method::GET, "/apis/example.dronelab.dev/v1") => {
            (StatusCode::NOT_FOUND, "404 page not found").into_response()
        }
        (Method::PATCH, _) => axum::Json(body).into_response(),
        (Method::DELETE, p) if p == format!("{jobs}/loadgen") => {
            if created {
                axum::Json(json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success"}))
                .into_response()
            } else {
                status(404, "NotFound", "jobs.batch \"loadgen\" not found")
            }
        }
        (Method::POST, p) if p == jobs => {
            if let Ok(mut c) = fake.job_created.lock() {
                *c = true;
            }
            let mut job = body;
            job["metadata"]["uid"] = JOB_UID.into();
            (StatusCode::CREATED, axum::Json(job)).into_response()
        }
        (Method::GET, p) if p == format!("{jobs}/loadgen") => {
            let status = if fake.pods_fail {
                json!({"failed": 1})
            } else {
                json!({"succeeded": 2})
            };
            axum::Json(json!({"metadata": {"name": "loadgen", "uid": JOB_UID}, "status": status}))
                .into_response()
        }
        (Method::GET, p) if p == pods && selector.starts_with("app.kubernetes.io/name=") => {
            list(vec![json!({
                "metadata": {"name": "trace-viewer-0", "creationTimestamp": "2026-12-01T10:00:00Z"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            })])
        }
        (Method::GET, p) if p == pods => list(vec![
            load_pod("loadgen-0-a", 0, false),
            load_pod("loadgen-1-b", 1, fake.pods_fail),
        ]),
        (Method::GET, p) if p.starts_with(&pods) && p.ends_with("/log") => {
            let start = loadgen::unix_ms(fake.date);
            let log = if p.contains("loadgen-0") {
                format!("starting\n{}\n", record_line("0/2", start))
            } else {
                format!("starting 0.4 s late\n{}\n", record_line("1/2", start + 400))
            };
            log.into_response()
        }
        (Method::GET, p) if p == format!("/api/v1/namespaces/{NAMESPACE}/events") => list(vec![]),
        (Method::GET, p) if p.ends_with("/portforward") => status(
            403,
            "Forbidden",
            "pods \"trace-viewer-0\" is forbidden: User \"me\" cannot get resource \"pods/portforward\"",
        ),
        _ => status(404, "NotFound", "not served by the stand-in"),
    }
}

async fn cluster(fake: Fake) -> Cluster {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let app = axum::Router::new().fallback(answer).with_state(fake);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let uri = format!("http://{address}").parse().expect("uri");
    Cluster::from_config(kube::Config::new(uri), NAMESPACE, "stand-in")
        .await
        .expect("the stand-in answers /version")
}

fn fake(pods_fail: bool) -> Fake {
    Fake {
        seen: Arc::default(),
        // 90 s ahead of this machine: the run must follow the server, not itself.
        date: SystemTime::now() + Duration::from_secs(90),
        pods_fail,
        job_created: Arc::default(),
    }
}

#[tokio::test]
async fn objects_are_applied_in_the_run_namespace_by_their_scope() {
    let fake = fake(false);
    let cluster = cluster(fake.clone()).await;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: utilization-query-abc\n  namespace: dronelab\ndata: {A: b}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: gateway\n  namespace: dronelab\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: reader\n  namespace: dronelab\n";
    let applied = cluster
        .apply(overlay::objects(yaml).expect("objects"))
        .await
        .expect("applied");
    assert_eq!(
        applied.into_iter().collect::<Vec<_>>(),
        ["utilization-query-abc"]
    );
    let patches: Vec<Seen> = fake
        .seen()
        .into_iter()
        .filter(|s| s.method == Method::PATCH)
        .collect();
    let paths: Vec<&str> = patches.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/lab-2/configmaps/utilization-query-abc",
            "/api/v1/namespaces/lab-2/services/gateway",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/reader",
        ]
    );
    assert_eq!(patches[0].body["metadata"]["namespace"], "lab-2");
    assert!(patches[2].body["metadata"].get("namespace").is_none());
    for patch in &patches {
        assert_eq!(
            patch.query.get("fieldManager").map(String::as_str),
            Some("dronelab-tune")
        );
        assert_eq!(patch.query.get("force").map(String::as_str), Some("true"));
    }
    let discoveries = fake.seen().iter().filter(|s| s.path == "/api/v1").count();
    assert_eq!(
        discoveries, 1,
        "discovery once per group version, not per object"
    );
}

#[tokio::test]
async fn a_kind_the_cluster_does_not_serve_is_named() {
    let cluster = cluster(fake(false)).await;
    let yaml = "apiVersion: example.dronelab.dev/v1\nkind: Widget\nmetadata:\n  name: w\n";
    let error = cluster
        .apply(overlay::objects(yaml).expect("objects"))
        .await
        .expect_err("not served");
    assert!(matches!(error, ClusterError::NotServed { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("does not serve example.dronelab.dev/v1 Widget"),
        "{text}"
    );
}

fn job_spec() -> LoadgenJob {
    LoadgenJob {
        namespace: NAMESPACE.into(),
        pods: 2,
        ..LoadgenJob::default()
    }
}

#[tokio::test]
async fn the_load_job_starts_on_the_server_clock_and_is_deleted_after() {
    let fake = fake(false);
    let cluster = cluster(fake.clone()).await;
    let lead = Duration::from_secs(30);
    let (records, start) = cluster
        .run_loadgen(job_spec(), lead, Duration::from_secs(20))
        .await
        .expect("the load ran");
    assert_eq!(records.len(), 2);
    // The Date header has whole seconds.
    let server_secs = loadgen::unix_ms(fake.date) / 1000 * 1000;
    assert_eq!(loadgen::unix_ms(start), server_secs + 30_000);
    let seen = fake.seen();
    let created = seen
        .iter()
        .find(|s| s.method == Method::POST)
        .expect("the Job was created");
    let args: Vec<String> = serde_json::from_value(
        created.body["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .expect("args");
    let at = args
        .iter()
        .position(|a| a == "--start-at")
        .and_then(|i| args.get(i + 1))
        .expect("--start-at");
    assert_eq!(at, &(server_secs + 30_000).to_string());
    let pod_lists: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.path == "/api/v1/namespaces/lab-2/pods")
        .collect();
    assert!(!pod_lists.is_empty());
    for list in pod_lists {
        assert_eq!(
            list.query.get("labelSelector").map(String::as_str),
            Some("batch.kubernetes.io/controller-uid=3c1f-uid"),
            "pods by the Job's uid, never by its name"
        );
    }
    let logs: Vec<&Seen> = seen.iter().filter(|s| s.path.ends_with("/log")).collect();
    assert_eq!(logs.len(), 2);
    assert!(logs
        .iter()
        .all(|l| l.query.get("container").map(String::as_str) == Some("loadgen")));
    let deletes: Vec<&Seen> = seen.iter().filter(|s| s.method == Method::DELETE).collect();
    assert_eq!(deletes.len(), 2, "the old Job before, this one after");
    for delete in deletes {
        assert_eq!(delete.body["propagationPolicy"], "Foreground");
    }
}

#[tokio::test]
async fn a_failed_load_pod_is_reported_and_the_job_deleted() {
    let fake = fake(true);
    let cluster = cluster(fake.clone()).await;
    let error = cluster
        .run_loadgen(job_spec(), Duration::from_secs(30), Duration::from_secs(20))
        .await
        .expect_err("a pod failed");
    let text = error.to_string();
    assert!(
        text.contains("pod loadgen-1-b: loadgen: terminated, OOMKilled, exit code 137"),
        "{text}"
    );
    assert!(
        text.contains("its log ends: starting 0.4 s late / {"),
        "{text}"
    );
    assert!(
        !text.contains("loadgen-0-a"),
        "the pod that succeeded is not a problem: {text}"
    );
    let last = fake.seen().into_iter().last().expect("requests");
    assert_eq!(
        last.method,
        Method::DELETE,
        "the Job is deleted on failure too"
    );
}

#[tokio::test]
async fn a_refused_port_forward_stops_the_run_naming_the_rule() {
    let fake = fake(false);
    let cluster = cluster(fake.clone()).await;
    let refused = cluster
        .port_forward("trace-viewer", 16686)
        .await
        .err()
        .expect("the forward is refused at once, not on the first connection");
    assert!(
        matches!(refused, ClusterError::Forbidden { .. }),
        "{refused}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("forbidden: get+create pods/portforward (trace-viewer-0) in namespace lab-2"),
        "{text}"
    );
    assert!(text.contains("k8s/rbac/tune.yaml"), "{text}");
    let asked = fake
        .seen()
        .into_iter()
        .find(|s| s.path.ends_with("/portforward"))
        .expect("a port-forward request");
    assert_eq!(
        asked.path,
        "/api/v1/namespaces/lab-2/pods/trace-viewer-0/portforward"
    );
    assert_eq!(asked.method, Method::GET, "a websocket upgrade is a GET");
}
