//! The emulator's continuation tokens: a real token from a paged query, with any of its
//! fields changed (or none, or replaced by any text), sent with any of a few queries,
//! partition scopes and page sizes. The answer is a page or a 400, never a 5xx, and a
//! page is never larger than asked for.
#![no_main]

use arbitrary::Arbitrary;
use axum::body::Body;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

mod common;
use common::{runtime, signed, with_data_of};

const QUERIES: [&str; 5] = [
    "SELECT * FROM c",
    "SELECT VALUE c.n FROM c WHERE c.n > 1",
    "SELECT c.id FROM c ORDER BY c.n",
    "SELECT DISTINCT VALUE c.n FROM c",
    "SELECT TOP 7 c.id FROM c",
];
const KEYS: [Option<&str>; 3] = [None, Some(r#"["k1"]"#), Some(r#"["k2"]"#)];

#[derive(Debug, Arbitrary)]
enum Token {
    /// The token as issued.
    Issued,
    /// The issued token with its position fields replaced.
    Edited {
        partition: u64,
        position: u64,
        returned: u64,
    },
    /// Any text at all.
    Raw(String),
}

#[derive(Debug, Arbitrary)]
struct Input {
    /// The query, scope and page size that issue the token …
    issued_by: (u8, u8, u8),
    /// … and those it is sent back with.
    sent_with: (u8, u8, u8),
    token: Token,
}

/// A query request: `(query, key, page size)` picked from the lists above.
fn query(pick: (u8, u8, u8), continuation: Option<&str>) -> Option<axum::http::Request<Body>> {
    let text = QUERIES[usize::from(pick.0) % QUERIES.len()];
    let key = KEYS[usize::from(pick.1) % KEYS.len()];
    let page = (1 + pick.2 % 4).to_string();
    let mut headers = vec![
        ("x-ms-documentdb-isquery", "true"),
        ("content-type", "application/query+json"),
        ("x-ms-max-item-count", page.as_str()),
    ];
    if let Some(key) = key {
        headers.push(("x-ms-documentdb-partitionkey", key));
    }
    if let Some(token) = continuation {
        headers.push(("x-ms-continuation", token));
    }
    let body = serde_json::json!({"query": text, "parameters": []}).to_string();
    signed("POST", "/dbs/db/colls/c/docs", &headers, body.into_bytes())
}

fuzz_target!(|input: Input| {
    runtime().block_on(async {
        let app = with_data_of(24).await;
        let Some(first) = query(input.issued_by, None) else {
            return;
        };
        let answer = app.clone().oneshot(first).await.expect("infallible");
        let Some(issued) = answer
            .headers()
            .get("x-ms-continuation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
        else {
            return;
        };
        let token = match input.token {
            Token::Issued => issued,
            Token::Edited {
                partition,
                position,
                returned,
            } => {
                let mut fields: serde_json::Value =
                    serde_json::from_str(&issued).expect("the emulator issues JSON tokens");
                fields["p"] = partition.into();
                fields["s"] = position.into();
                fields["n"] = returned.into();
                fields.to_string()
            }
            Token::Raw(text) => text,
        };
        let Some(next) = query(input.sent_with, Some(&token)) else {
            return;
        };
        let answer = app.oneshot(next).await.expect("infallible");
        let status = answer.status().as_u16();
        assert!(status == 200 || status == 400, "{token} -> {status}");
        if status == 200 {
            let count: usize = answer
                .headers()
                .get("x-ms-item-count")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .expect("a page says how many items it holds");
            assert!(
                count <= usize::from(1 + input.sent_with.2 % 4),
                "{count} items"
            );
        }
    });
});
