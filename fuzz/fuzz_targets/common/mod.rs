//! What the emulator's fuzz targets share: a runtime, requests signed like the SDK's,
//! and an emulator with a little data.
#![allow(dead_code)]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::Request;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tower::ServiceExt as _;

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Signs like the SDK: HMAC-SHA256 of `verb\ntype\nlink\ndate\n\n`.
pub fn signed(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Option<Request<Body>> {
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let trimmed = path.trim_matches('/');
    let segments: Vec<&str> = trimmed.split('/').collect();
    let (resource_type, link) = if trimmed.is_empty() {
        (String::new(), String::new())
    } else if segments.len() % 2 == 1 {
        (
            segments[segments.len() - 1].to_owned(),
            segments[..segments.len() - 1].join("/"),
        )
    } else {
        (segments[segments.len() - 2].to_owned(), trimmed.to_owned())
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(dronelab_contract::PUBLIC_EMULATOR_KEY)
        .ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(
        format!(
            "{}\n{resource_type}\n{link}\n{}\n\n",
            method.to_lowercase(),
            date.to_lowercase()
        )
        .as_bytes(),
    );
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let authorization = percent_encoding::utf8_percent_encode(
        &format!("type=master&ver=1.0&sig={signature}"),
        percent_encoding::NON_ALPHANUMERIC,
    )
    .to_string();
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("x-ms-date", &date)
        .header("authorization", authorization);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body)).ok()
}

/// An emulator with database `db`, container `c` (partition key `/pk`, three physical
/// partitions) and `documents` documents spread over eight partition keys.
pub async fn with_data_of(documents: usize) -> axum::Router {
    let mut config = cosmos_emulator::Config::for_tests();
    config.partitions = 3;
    let app = cosmos_emulator::build_app(cosmos_emulator::AppState::new(&config).expect("state"));
    let mut setup = vec![
        signed("POST", "/dbs", &[], br#"{"id":"db"}"#.to_vec()),
        signed(
            "POST",
            "/dbs/db/colls",
            &[("x-ms-offer-throughput", "400")],
            br#"{"id":"c","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2}}"#.to_vec(),
        ),
        signed(
            "POST",
            "/dbs/db/colls/c/docs",
            &[("x-ms-documentdb-partitionkey", r#"["p"]"#)],
            br#"{"id":"x","pk":"p","n":[1,{"a":"b"}]}"#.to_vec(),
        ),
    ];
    for i in 0..documents {
        let key = format!("[\"k{}\"]", i % 8);
        let body = format!(r#"{{"id":"d{i}","pk":"k{}","n":{}}}"#, i % 8, i % 5);
        setup.push(signed(
            "POST",
            "/dbs/db/colls/c/docs",
            &[("x-ms-documentdb-partitionkey", key.as_str())],
            body.into_bytes(),
        ));
    }
    for request in setup.into_iter().flatten() {
        let response = app.clone().oneshot(request).await.expect("infallible");
        assert!(
            response.status().is_success(),
            "setup: {}",
            response.status()
        );
    }
    app
}

/// [`with_data_of`] with one document.
pub async fn with_data() -> axum::Router {
    with_data_of(0).await
}
