//! What the viewer's tests share: a viewer on loopback ports, and OTLP requests.

#![allow(dead_code)] // each test file uses its own part

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use trace_viewer::{Limits, Listeners, Store};

pub struct Viewer {
    pub ui: String,
    pub http: String,
    pub grpc: String,
    pub store: Arc<Store>,
    _task: tokio::task::JoinHandle<()>,
}

pub async fn start(limits: Limits) -> Viewer {
    let listeners = Listeners::loopback().await.expect("bind");
    let urls = listeners.urls().expect("urls");
    let store = Arc::new(Store::new(limits));
    let served = store.clone();
    let task = tokio::spawn(async move {
        let _ = trace_viewer::run(listeners, served, std::future::pending()).await;
    });
    Viewer {
        ui: urls.ui,
        http: urls.otlp_http,
        grpc: urls.otlp_grpc,
        store,
        _task: task,
    }
}

/// A string attribute.
pub fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// `spans` of one service, in one scope.
pub fn resource(service: &str, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![text("service.name", service)],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `traces` traces of 5 spans each, numbered from `first`, for `service`.
pub fn request(service: &str, first: u64, traces: u64) -> ExportTraceServiceRequest {
    let text = |key: &str, value: String| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    };
    let spans = (first..first + traces)
        .flat_map(|t| (0..5u64).map(move |s| (t, s)))
        .map(|(t, s)| Span {
            trace_id: (u128::from(t) + 1).to_be_bytes().to_vec(),
            span_id: (t * 10 + s + 1).to_be_bytes().to_vec(),
            parent_span_id: if s == 0 {
                vec![]
            } else {
                (t * 10 + 1).to_be_bytes().to_vec()
            },
            name: format!("op-{s}"),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + t * 1_000_000,
            end_time_unix_nano: 1_700_000_000_000_000_000 + t * 1_000_000 + 500_000,
            attributes: vec![text("payload", format!("trace {t} span {s}"))],
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![text("service.name", service.to_owned())],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

pub async fn post(url: &str, content_type: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("receiver answers")
}
