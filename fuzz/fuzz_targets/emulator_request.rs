//! The emulator's request handling end to end, in process: a request signed with the
//! public emulator key (so it gets past authentication), with any method, path, headers
//! and body, against an emulator with a database and a container. Whatever comes in,
//! the answer is never a 5xx.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

mod common;
use common::{runtime, signed, with_data};

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
const HEADERS: [&str; 16] = [
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
    "if-none-match",
    "if-modified-since",
    "a-im",
    "x-ms-cosmos-is-batch-request",
    "x-ms-cosmos-supported-query-features",
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
        let app = with_data().await;
        let response = app.oneshot(request).await.expect("infallible");
        assert!(
            response.status().as_u16() < 500,
            "{method} {path} -> {}",
            response.status()
        );
    });
});
