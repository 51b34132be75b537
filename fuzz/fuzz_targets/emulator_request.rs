//! The emulator's request handling end to end, in process: a request signed with the
//! public emulator key (so it gets past authentication), with any method, path, headers
//! and body, against an emulator with a database and a container. Whatever comes in,
//! the answer is never a 5xx.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use axum::body::Body;
use axum::http::Request;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;
use tower::ServiceExt as _;

const METHODS: [&str; 4] = ["GET", "POST", "PUT", "DELETE"];
const PATHS: [&str; 11] = [
    "/",
    "/dbs",
    "/dbs/db",
    "/dbs/db/colls",
    "/dbs/db/colls/c",
    "/dbs/db/colls/c/docs",
    "/dbs/db/colls/c/docs/x",
    "/dbs/db/colls/c/pkranges",
    "/offers",
    "/offers/x",
    "/dbs/gone/colls/c/docs",
];
const HEADERS: [&str; 11] = [
    "x-ms-documentdb-partitionkey",
    "x-ms-documentdb-isquery",
    "x-ms-cosmos-is-query-plan-request",
    "x-ms-documentdb-partitionkeyrangeid",
    "x-ms-start-epk",
    "x-ms-end-epk",
    "x-ms-max-item-count",
    "x-ms-continuation",
    "x-ms-offer-throughput",
    "x-ms-documentdb-is-upsert",
    "if-match",
];

#[derive(Debug, Arbitrary)]
struct Input {
    method: u8,
    path: u8,
    /// A path of the fuzzer's own, used when `path` is past the known ones.
    raw_path: String,
    headers: Vec<(u8, String)>,
    body: Vec<u8>,
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Signs like the SDK: HMAC-SHA256 of `verb\ntype\nlink\ndate\n\n`.
fn signed(method: &str, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Option<Request<Body>> {
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let trimmed = path.trim_matches('/');
    let segments: Vec<&str> = trimmed.split('/').collect();
    let (resource_type, link) = if trimmed.is_empty() {
        (String::new(), String::new())
    } else if segments.len() % 2 == 1 {
        (segments[segments.len() - 1].to_owned(), segments[..segments.len() - 1].join("/"))
    } else {
        (segments[segments.len() - 2].to_owned(), trimmed.to_owned())
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(dronelab_contract::PUBLIC_EMULATOR_KEY)
        .ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(
        format!("{}\n{resource_type}\n{link}\n{}\n\n", method.to_lowercase(), date.to_lowercase())
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

fuzz_target!(|input: Input| {
    let method = METHODS[usize::from(input.method) % METHODS.len()];
    let path = PATHS
        .get(usize::from(input.path))
        .copied()
        .unwrap_or(input.raw_path.as_str());
    let headers: Vec<(&str, &str)> = input
        .headers
        .iter()
        .take(6)
        .map(|(name, value)| (HEADERS[usize::from(*name) % HEADERS.len()], value.as_str()))
        .collect();
    // Not a valid request line or header value: nothing for the server to see.
    let Some(request) = signed(method, path, &headers, input.body) else {
        return;
    };
    runtime().block_on(async {
        let mut config = cosmos_emulator::Config::for_tests();
        config.partitions = 3;
        let app = cosmos_emulator::build_app(cosmos_emulator::AppState::new(&config).expect("state"));
        let setup = [
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
        for request in setup.into_iter().flatten() {
            let response = app.clone().oneshot(request).await.expect("infallible");
            assert!(response.status().is_success(), "setup: {}", response.status());
        }
        let response = app.oneshot(request).await.expect("infallible");
        assert!(
            response.status().as_u16() < 500,
            "{method} {path} -> {}",
            response.status()
        );
    });
});
