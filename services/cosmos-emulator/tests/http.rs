//! The REST surface over raw HTTP/1.1 and HTTP/2 cleartext: errors, preconditions,
//! binary JSON, partition key range etags, metrics, and robustness on arbitrary input.

mod common;

use axum::body::Body;
use axum::http::Request;
use base64::Engine;
use common::{config, Emulator};
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use serde_json::{json, Value};
use sha2::Sha256;
use tower::ServiceExt;

const KEY: &str = dronelab_contract::PUBLIC_EMULATOR_KEY;

/// Signs like the SDK: `verb\ntype\nlink\ndate\n\n` with HMAC-SHA256 over the key.
fn authorization(verb: &str, resource_type: &str, link: &str, date: &str) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(KEY)
        .expect("key is base64");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("hmac key");
    mac.update(
        format!(
            "{}\n{}\n{}\n{}\n\n",
            verb.to_lowercase(),
            resource_type,
            link,
            date.to_lowercase()
        )
        .as_bytes(),
    );
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    percent_encoding::utf8_percent_encode(
        &format!("type=master&ver=1.0&sig={sig}"),
        percent_encoding::NON_ALPHANUMERIC,
    )
    .to_string()
}

struct Raw {
    http: reqwest::Client,
    base: String,
}

impl Raw {
    fn new(emulator: &Emulator, http2: bool) -> Self {
        let builder = reqwest::Client::builder();
        let builder = if http2 {
            builder.http2_prior_knowledge()
        } else {
            builder.http1_only()
        };
        Self {
            http: builder.build().expect("http client"),
            base: emulator.endpoint(),
        }
    }

    /// Sends a signed request; `resource_type`/`link` are what the signature covers.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        (resource_type, link): (&str, &str),
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> reqwest::Response {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let mut request = self
            .http
            .request(
                method.clone(),
                format!("{}{}", self.base, path.trim_start_matches('/')),
            )
            .header("x-ms-date", &date)
            .header("x-ms-version", "2020-07-15")
            .header(
                "authorization",
                authorization(method.as_str(), resource_type, link, &date),
            );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        request.send().await.expect("request is answered")
    }
}

async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A `400` whose message mentions `needle`.
fn assert_refused_naming(status: u16, body: &Value, needle: &str) {
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| m.contains(needle)),
        "{body}"
    );
}

async fn setup(raw: &Raw) {
    let body = serde_json::to_vec(&json!({"id": "db"})).expect("json");
    let (status, _) = json_of(
        raw.send(reqwest::Method::POST, "/dbs", ("dbs", ""), &[], Some(body))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    let body = serde_json::to_vec(
        &json!({"id": "c", "partitionKey": {"paths": ["/pk"], "kind": "Hash", "version": 2}}),
    )
    .expect("json");
    let (status, _) = json_of(
        raw.send(
            reqwest::Method::POST,
            "/dbs/db/colls",
            ("colls", "dbs/db"),
            &[("x-ms-offer-throughput", "400")],
            Some(body),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn errors_use_the_cosmos_shape_and_status_codes() {
    let emulator = Emulator::start(config(2)).await;
    for http2 in [false, true] {
        let raw = Raw::new(&emulator, http2);
        let unsigned = raw
            .http
            .get(format!("{}dbs", raw.base))
            .send()
            .await
            .expect("answered");
        let (status, body) = json_of(unsigned).await;
        assert_eq!(status, 401);
        assert_eq!(body["code"], "Unauthorized");
        assert!(body["message"]
            .as_str()
            .unwrap_or("")
            .contains("authorization"));

        let (status, body) = json_of(
            raw.send(
                reqwest::Method::GET,
                "/dbs/nope",
                ("dbs", "dbs/nope"),
                &[],
                None,
            )
            .await,
        )
        .await;
        assert_eq!((status, body["code"].as_str()), (404, Some("NotFound")));

        // Signed for a different resource: the signature does not match.
        let (status, _) = json_of(
            raw.send(
                reqwest::Method::GET,
                "/dbs/nope",
                ("dbs", "dbs/other"),
                &[],
                None,
            )
            .await,
        )
        .await;
        assert_eq!(status, 401);
    }
    emulator.stop().await;
}

#[tokio::test]
async fn documents_preconditions_binary_json_and_bad_bodies() {
    let emulator = Emulator::start(config(2)).await;
    let raw = Raw::new(&emulator, false);
    setup(&raw).await;
    let docs = ("docs", "dbs/db/colls/c");

    // Binary JSON (what the SDK sends by default) is accepted.
    let doc = json!({"id": "a", "pk": "p1", "n": 1});
    let binary = azure_data_cosmos_driver::binary_json::encode(&doc);
    let (status, created) = json_of(
        raw.send(
            reqwest::Method::POST,
            "/dbs/db/colls/c/docs",
            docs,
            &[("x-ms-documentdb-partitionkey", r#"["p1"]"#)],
            Some(binary),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(created["n"], 1);
    let etag = created["_etag"].as_str().expect("etag").to_owned();

    // The partition key in the header must match the document's.
    let (status, body) = json_of(
        raw.send(
            reqwest::Method::POST,
            "/dbs/db/colls/c/docs",
            docs,
            &[("x-ms-documentdb-partitionkey", r#"["p2"]"#)],
            Some(serde_json::to_vec(&json!({"id": "b", "pk": "p1"})).expect("json")),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(body["message"]
        .as_str()
        .unwrap_or("")
        .contains("PartitionKey"));

    for bad in [
        &b"{not json"[..],
        b"[]",
        b"{\"pk\":\"p1\"}",
        b"{\"id\":5,\"pk\":\"p1\"}",
        b"{\"id\":\"a/b\",\"pk\":\"p1\"}",
    ] {
        let (status, body) = json_of(
            raw.send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                docs,
                &[],
                Some(bad.to_vec()),
            )
            .await,
        )
        .await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(bad));
        assert_eq!(body["code"], "BadRequest");
    }

    let doc_link = ("docs", "dbs/db/colls/c/docs/a");
    let replacement = serde_json::to_vec(&json!({"id": "a", "pk": "p1", "n": 2})).expect("json");
    let (status, _) = json_of(
        raw.send(
            reqwest::Method::PUT,
            "/dbs/db/colls/c/docs/a",
            doc_link,
            &[
                ("x-ms-documentdb-partitionkey", r#"["p1"]"#),
                ("if-match", "\"stale\""),
            ],
            Some(replacement.clone()),
        )
        .await,
    )
    .await;
    assert_eq!(status, 412, "a stale etag fails the precondition");
    let (status, replaced) = json_of(
        raw.send(
            reqwest::Method::PUT,
            "/dbs/db/colls/c/docs/a",
            doc_link,
            &[
                ("x-ms-documentdb-partitionkey", r#"["p1"]"#),
                ("if-match", etag.as_str()),
            ],
            Some(replacement),
        )
        .await,
    )
    .await;
    assert_eq!((status, replaced["n"].as_i64()), (200, Some(2)));

    // A point read without the partition key header is a client error, not a 500.
    let (status, _) = json_of(
        raw.send(
            reqwest::Method::GET,
            "/dbs/db/colls/c/docs/a",
            doc_link,
            &[],
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    emulator.stop().await;
}

#[tokio::test]
async fn partition_key_ranges_are_a_change_feed_with_etags() {
    let emulator = Emulator::start(config(3)).await;
    let raw = Raw::new(&emulator, true);
    setup(&raw).await;
    let link = ("pkranges", "dbs/db/colls/c");
    let first = raw
        .send(
            reqwest::Method::GET,
            "/dbs/db/colls/c/pkranges",
            link,
            &[("a-im", "Incremental feed")],
            None,
        )
        .await;
    let etag = first
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .expect("etag")
        .to_owned();
    let (status, body) = json_of(first).await;
    assert_eq!(status, 200);
    let ranges = body["PartitionKeyRanges"].as_array().expect("ranges");
    assert_eq!(ranges.len(), 3);
    assert_eq!(ranges[0]["minInclusive"], "");
    assert_eq!(ranges[2]["maxExclusive"], "FF");
    assert_eq!(ranges[0]["maxExclusive"], ranges[1]["minInclusive"]);
    let again = raw
        .send(
            reqwest::Method::GET,
            "/dbs/db/colls/c/pkranges",
            link,
            &[
                ("a-im", "Incremental feed"),
                ("if-none-match", etag.as_str()),
            ],
            None,
        )
        .await;
    assert_eq!(again.status().as_u16(), 304);
    emulator.stop().await;
}

#[tokio::test]
async fn metrics_and_stats_report_per_partition_counters() {
    let emulator = Emulator::start(config(2)).await;
    let raw = Raw::new(&emulator, false);
    setup(&raw).await;
    for i in 0..6 {
        let doc = serde_json::to_vec(&json!({"id": format!("d{i}"), "pk": format!("p{i}")}))
            .expect("json");
        let response = raw
            .send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                ("docs", "dbs/db/colls/c"),
                &[],
                Some(doc),
            )
            .await;
        assert_eq!(response.status().as_u16(), 201);
    }
    let stats = emulator.stats().await;
    let c = &stats.databases[0].containers[0];
    assert_eq!(c.documents, 6);
    assert_eq!(c.provisioned_ru_per_partition, Some(200.0));
    assert_eq!(
        c.partitions
            .iter()
            .map(|p| p
                .counters
                .requests_by_status
                .get("201")
                .copied()
                .unwrap_or(0))
            .sum::<u64>(),
        6
    );
    assert!(c.ru_total > 6.0 * 5.0);
    let metrics = reqwest::get(format!("{}metrics", emulator.endpoint()))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("cosmos_emulator_requests_total{database=\"db\",container=\"c\",partition=\"0\",status=\"201\"}"));
    assert!(metrics.contains("cosmos_emulator_provisioned_request_units_per_second{database=\"db\",container=\"c\",partition=\"1\"} 200"));
    emulator.reset_stats().await;
    assert_eq!(
        emulator.stats().await.databases[0].containers[0].requests,
        0
    );
    emulator.stop().await;
}

fn signed_request(
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> Request<Body> {
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
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("x-ms-date", &date)
        .header(
            "authorization",
            authorization(method, &resource_type, &link, &date),
        );
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    builder.body(Body::from(body)).expect("request")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// Arbitrary signed requests — paths, Cosmos headers, bodies — never panic and never
    /// produce a 5xx: the user's mistake is always a 4xx.
    #[test]
    fn arbitrary_requests_never_fail_the_server(
        method in prop::sample::select(vec!["GET", "POST", "PUT", "DELETE"]),
        path in prop::sample::select(vec![
            "/", "/dbs", "/dbs/db", "/dbs/db/colls", "/dbs/db/colls/c", "/dbs/db/colls/c/docs",
            "/dbs/db/colls/c/docs/x", "/dbs/db/colls/c/pkranges", "/offers", "/offers/x", "/dbs/db/colls/c/docs/x/y",
        ]),
        header_values in prop::collection::vec((
            prop::sample::select(vec![
                "x-ms-documentdb-partitionkey", "x-ms-documentdb-isquery", "x-ms-cosmos-is-query-plan-request",
                "x-ms-documentdb-partitionkeyrangeid", "x-ms-start-epk", "x-ms-end-epk", "x-ms-max-item-count",
                "x-ms-continuation", "x-ms-offer-throughput", "x-ms-documentdb-is-upsert", "if-match",
            ]),
            prop::sample::select(vec![
                "True", "[\"p\"]", "[1,2]", "[]", "-1", "0", "zz", "{\"p\":0,\"s\":1,\"n\":0}", "3FFF", "", "1000000000", "[{}]", "[null]",
            ]),
        ), 0..4),
        body in prop_oneof![
            Just(b"{\"id\":\"x\",\"pk\":\"p\"}".to_vec()),
            Just(b"{\"query\":\"SELECT * FROM c WHERE c.pk = @p\",\"parameters\":[{\"name\":\"@p\",\"value\":\"p\"}]}".to_vec()),
            Just(b"{\"query\":\"SELECT VALUE COUNT(1) FROM c\"}".to_vec()),
            Just(b"{\"id\":\"c\",\"partitionKey\":{\"paths\":[\"/pk\"]}}".to_vec()),
            prop::collection::vec(any::<u8>(), 0..64),
            "\\PC{0,80}".prop_map(String::into_bytes),
        ],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let state = cosmos_emulator::AppState::new(&config(3)).expect("state");
            let app = cosmos_emulator::build_app(state);
            let setup = [
                signed_request("POST", "/dbs", &[], br#"{"id":"db"}"#.to_vec()),
                signed_request(
                    "POST",
                    "/dbs/db/colls",
                    &[("x-ms-offer-throughput".into(), "400".into())],
                    br#"{"id":"c","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2}}"#.to_vec(),
                ),
            ];
            for request in setup {
                let response = app.clone().oneshot(request).await.expect("infallible");
                assert_eq!(response.status().as_u16(), 201);
            }
            let headers: Vec<(String, String)> =
                header_values.into_iter().map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
            let response = app
                .oneshot(signed_request(method, path, &headers, body))
                .await
                .expect("infallible");
            prop_assert!(response.status().as_u16() < 500, "{} {} -> {}", method, path, response.status());
            Ok(())
        })?;
    }
}

/// An unsigned request is refused from its headers: its body is never waited for (nor
/// buffered), however large it claims to be.
#[tokio::test]
async fn an_unsigned_request_is_refused_before_its_body_is_read() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let emulator = Emulator::start(config(2)).await;
    let mut stream = tokio::net::TcpStream::connect(emulator.addr)
        .await
        .expect("connect");
    stream
        .write_all(
            b"POST /dbs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 3900000\r\n\r\n{\"id\":",
        )
        .await
        .expect("headers and the start of a body");
    let mut answer = vec![0u8; 1024];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("answered without the rest of the body")
        .expect("read");
    let head = String::from_utf8_lossy(&answer[..read]);
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
}

/// The admin routes that change the emulator need the master key; reading them does not.
#[tokio::test]
async fn changing_the_emulator_needs_the_master_key() {
    let emulator = Emulator::start(config(2)).await;
    let http = reqwest::Client::new();
    let config_url = format!("{}_emulator/config", emulator.endpoint());
    let throttling = |http: reqwest::Client, url: String| async move {
        let config: Value = http
            .get(url)
            .send()
            .await
            .expect("config")
            .json()
            .await
            .expect("json");
        config["throttling"].clone()
    };
    let before = throttling(http.clone(), config_url.clone()).await;
    let off = json!({"throttling": false, "rtt_ms": 60000});
    for key in [None, Some("bm90IHRoZSBrZXk="), Some("not base64!")] {
        let mut request = http.post(&config_url).json(&off);
        if let Some(key) = key {
            request = request.header(cosmos_emulator::ADMIN_KEY_HEADER, key);
        }
        let (status, body) = json_of(request.send().await.expect("answered")).await;
        assert_eq!(status, 401, "{key:?}: {body}");
        assert!(body["message"]
            .as_str()
            .is_some_and(|m| m.contains("x-emulator-key")));
    }
    let reset = http
        .post(format!("{}_emulator/stats/reset", emulator.endpoint()))
        .send()
        .await
        .expect("answered");
    assert_eq!(reset.status().as_u16(), 401);
    assert_eq!(
        throttling(http.clone(), config_url.clone()).await,
        before,
        "unchanged"
    );

    let changed = http
        .post(&config_url)
        .header(cosmos_emulator::ADMIN_KEY_HEADER, KEY)
        .json(&json!({"throttling": false}))
        .send()
        .await
        .expect("answered");
    assert_eq!(changed.status().as_u16(), 200);
    assert_eq!(
        throttling(http.clone(), config_url.clone()).await,
        json!(false)
    );
}

/// The partitions' concurrency is part of the model a capacity run reads, but it is
/// fixed when the partitions are made: another value is refused, the same one is fine.
#[tokio::test]
async fn the_partition_concurrency_is_read_but_not_changed() {
    let mut with_three = config(2);
    with_three.partition_concurrency = 3;
    let emulator = Emulator::start(with_three).await;
    let http = reqwest::Client::new();
    let url = format!("{}_emulator/config", emulator.endpoint());
    let (status, read) = json_of(http.get(&url).send().await.expect("answered")).await;
    assert_eq!((status, &read["partition_concurrency"]), (200, &json!(3)));
    let post = |body: Value| {
        http.post(&url)
            .header(cosmos_emulator::ADMIN_KEY_HEADER, KEY)
            .json(&body)
            .send()
    };
    let (status, body) = json_of(
        post(json!({"partition_concurrency": 8}))
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--partition-concurrency 3")),
        "{body}"
    );
    let (status, body) = json_of(
        post(json!({"partition_concurrency": 3, "jitter": 0.1}))
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(
        (status, &body["partition_concurrency"], &body["jitter"]),
        (200, &json!(3), &json!(0.1))
    );
}

/// A signature dated beyond 15 minutes from now is refused, as Cosmos DB does, unless
/// the emulator allows clock skew.
#[tokio::test]
async fn a_stale_signature_is_refused_unless_clock_skew_is_allowed() {
    let stale = httpdate::fmt_http_date(
        std::time::SystemTime::now() - std::time::Duration::from_secs(20 * 60),
    );
    let mut allowing = config(2);
    allowing.allow_clock_skew = true;
    for (config, expected) in [(config(2), 401), (allowing, 200)] {
        let emulator = Emulator::start(config).await;
        let response = reqwest::Client::new()
            .get(format!("{}dbs", emulator.endpoint()))
            .header("x-ms-date", &stale)
            .header("x-ms-version", "2020-07-15")
            .header("authorization", authorization("get", "dbs", "", &stale))
            .send()
            .await
            .expect("answered");
        let (status, body) = json_of(response).await;
        assert_eq!(status, expected, "{body}");
        if expected == 401 {
            assert!(
                body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("--allow-clock-skew")),
                "{body}"
            );
        }
    }
}

/// What an SDK's query pipeline sees: a cross-partition sort is refused with sub-status
/// 1004, the plan says what to merge and rewrites the query, and each partition answers
/// the rewritten query with sort keys beside each row.
#[tokio::test]
async fn a_cross_partition_sort_is_planned_and_each_partition_answers_the_rewritten_query() {
    let emulator = Emulator::start(config(2)).await;
    let raw = Raw::new(&emulator, false);
    setup(&raw).await;
    let docs = ("docs", "dbs/db/colls/c");
    for (id, pk, n) in [
        ("a", "p1", 3),
        ("b", "p2", 1),
        ("c", "p3", 2),
        ("d", "p4", 5),
    ] {
        let body = serde_json::to_vec(&json!({"id": id, "pk": pk, "n": n})).expect("json");
        let header = format!("[\"{pk}\"]");
        let response = raw
            .send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                docs,
                &[("x-ms-documentdb-partitionkey", &header)],
                Some(body),
            )
            .await;
        assert_eq!(response.status().as_u16(), 201);
    }
    let query = serde_json::to_vec(&json!({
        "query": "SELECT VALUE c.id FROM c WHERE c.n > @min ORDER BY c.n DESC",
        "parameters": [{"name": "@min", "value": 1}],
    }))
    .expect("json");
    let is_query = [
        ("x-ms-documentdb-isquery", "True"),
        ("content-type", "application/query+json"),
    ];

    let response = raw
        .send(
            reqwest::Method::POST,
            "/dbs/db/colls/c/docs",
            docs,
            &is_query,
            Some(query.clone()),
        )
        .await;
    let substatus = response
        .headers()
        .get("x-ms-substatus")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (status, body) = json_of(response).await;
    assert_eq!(
        (status, substatus.as_deref()),
        (400, Some("1004")),
        "{body}"
    );
    // As Cosmos DB does: the message SDKs look for, and the plan in the error.
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Cross partition query only supports")),
        "{body}"
    );
    let embedded: Value = body["additionalErrorInfo"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .expect("the plan as JSON text in additionalErrorInfo");
    assert_eq!(embedded["queryInfo"]["orderBy"], json!(["Descending"]));

    let plan_headers = [
        ("x-ms-cosmos-is-query-plan-request", "True"),
        (
            "x-ms-cosmos-supported-query-features",
            "Aggregate,Distinct,OrderBy,Top",
        ),
        ("content-type", "application/query+json"),
    ];
    let (status, plan) = json_of(
        raw.send(
            reqwest::Method::POST,
            "/dbs/db/colls/c/docs",
            docs,
            &plan_headers,
            Some(query),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{plan}");
    let info = &plan["queryInfo"];
    assert_eq!(info["orderBy"], json!(["Descending"]));
    assert_eq!(info["orderByExpressions"], json!(["c.n"]));
    assert_eq!(info["hasSelectValue"], json!(true));
    assert_eq!(plan["queryRanges"][0]["max"], "FF");
    let rewritten = info["rewrittenQuery"]
        .as_str()
        .expect("a rewritten query")
        .replace("{documentdb-formattableorderbyquery-filter}", "true");

    let mut rows = Vec::new();
    for range in ["0", "1"] {
        let body = serde_json::to_vec(&json!({
            "query": rewritten,
            "parameters": [{"name": "@min", "value": 1}],
        }))
        .expect("json");
        let mut headers = is_query.to_vec();
        headers.push(("x-ms-documentdb-partitionkeyrangeid", range));
        let (status, page) = json_of(
            raw.send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                docs,
                &headers,
                Some(body),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        let documents = page["Documents"].as_array().cloned().unwrap_or_default();
        let keys: Vec<i64> = documents
            .iter()
            .filter_map(|row| row["orderByItems"][0]["item"].as_i64())
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] >= w[1]),
            "each partition sorts: {keys:?}"
        );
        rows.extend(documents);
    }
    rows.sort_by_key(|row| -row["orderByItems"][0]["item"].as_i64().unwrap_or_default());
    let payloads: Vec<&Value> = rows.iter().map(|row| &row["payload"]).collect();
    assert_eq!(payloads, [&json!("d"), &json!("a"), &json!("c")]);
    emulator.stop().await;
}

/// A signature covers one resource: the bare-id form (what RID-addressed requests sign)
/// is accepted only for a RID-addressed request, so a signature made for a container
/// `shared` in one database is refused for the container `shared` in another; a path
/// with an empty segment is refused before its signature is looked at.
#[tokio::test]
async fn a_signature_is_accepted_only_for_the_resource_it_names() {
    let emulator = Emulator::start(config(1)).await;
    let raw = Raw::new(&emulator, false);
    let get = reqwest::Method::GET;
    for db in ["d1", "d2"] {
        let body = serde_json::to_vec(&json!({"id": db})).expect("json");
        raw.send(reqwest::Method::POST, "/dbs", ("dbs", ""), &[], Some(body))
            .await;
        let body = serde_json::to_vec(
            &json!({"id": "shared", "partitionKey": {"paths": ["/pk"], "kind": "Hash", "version": 2}}),
        )
        .expect("json");
        let link = format!("dbs/{db}");
        let (status, _) = json_of(
            raw.send(
                reqwest::Method::POST,
                &format!("/{link}/colls"),
                ("colls", &link),
                &[],
                Some(body),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201);
    }
    // Signed for d1's container, sent to d2's.
    let path = "/dbs/d2/colls/shared";
    let (status, _) = json_of(
        raw.send(
            get.clone(),
            path,
            ("colls", "dbs/d1/colls/shared"),
            &[],
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status, 401);
    // The bare id, as a RID-addressed request signs: not for a name-addressed one.
    let (status, _) = json_of(
        raw.send(get.clone(), path, ("colls", "shared"), &[], None)
            .await,
    )
    .await;
    assert_eq!(status, 401, "a bare-id signature replayed on a name path");
    let (status, own) = json_of(
        raw.send(
            get.clone(),
            path,
            ("colls", "dbs/d2/colls/shared"),
            &[],
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    // Addressed by resource ids, the lower-cased id is what is signed.
    let (_, db) = json_of(
        raw.send(get.clone(), "/dbs/d2", ("dbs", "dbs/d2"), &[], None)
            .await,
    )
    .await;
    let (db_rid, coll_rid) = (
        db["_rid"].as_str().expect("db rid"),
        own["_rid"].as_str().expect("coll rid"),
    );
    let rid_path = format!("/dbs/{db_rid}/colls/{coll_rid}");
    let (status, _) = json_of(
        raw.send(
            get.clone(),
            &rid_path,
            ("colls", &coll_rid.to_lowercase()),
            &[],
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "RID addressing still works");
    // A list signature (link "") on a path with an empty segment.
    let (status, body) = json_of(raw.send(get, "/dbs//dbs", ("dbs", ""), &[], None).await).await;
    assert_eq!(status, 400, "{body}");
}

/// A continuation token resumes only the query that issued it: not another query, not
/// another container, not another partition key.
#[tokio::test]
async fn a_continuation_token_resumes_only_its_own_query() {
    let emulator = Emulator::start(config(1)).await;
    let raw = Raw::new(&emulator, false);
    setup(&raw).await;
    let docs = ("docs", "dbs/db/colls/c");
    for i in 0..6 {
        let body =
            serde_json::to_vec(&json!({"id": format!("d{i}"), "pk": "p", "n": i})).expect("json");
        raw.send(
            reqwest::Method::POST,
            "/dbs/db/colls/c/docs",
            docs,
            &[("x-ms-documentdb-partitionkey", "[\"p\"]")],
            Some(body),
        )
        .await;
    }
    let query = |text: &str, key: &'static str, continuation: Option<String>| {
        let body = serde_json::to_vec(&json!({"query": text, "parameters": []})).expect("json");
        let mut headers = vec![
            ("x-ms-documentdb-isquery", "True".to_owned()),
            ("content-type", "application/query+json".to_owned()),
            ("x-ms-max-item-count", "2".to_owned()),
            ("x-ms-documentdb-partitionkey", key.to_owned()),
        ];
        if let Some(token) = continuation {
            headers.push(("x-ms-continuation", token));
        }
        let raw = &raw;
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            raw.send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                docs,
                &headers,
                Some(body),
            )
            .await
        }
    };
    let first = query("SELECT * FROM c ORDER BY c.n", "[\"p\"]", None).await;
    let token = first
        .headers()
        .get("x-ms-continuation")
        .and_then(|v| v.to_str().ok())
        .expect("a continuation")
        .to_owned();
    let (status, page) = json_of(
        query(
            "SELECT * FROM c ORDER BY c.n",
            "[\"p\"]",
            Some(token.clone()),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        page["Documents"][0]["n"], 2,
        "the token resumes its own query"
    );
    for (text, key) in [
        ("SELECT DISTINCT VALUE c.n FROM c", "[\"p\"]"),
        ("SELECT * FROM c ORDER BY c.n", "[\"other\"]"),
    ] {
        let (status, body) = json_of(query(text, key, Some(token.clone())).await).await;
        assert_eq!(status, 400, "{text} {key}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("for this query")),
            "{body}"
        );
    }
}

/// One short query cannot take the emulator's memory: a value it builds, what it holds
/// to de-duplicate, and a page are each bounded, and the query past a bound is a 400
/// that says so. (The DISTINCT array query below took 2.4 GB with K = 100 and aborted
/// the process with K = 300 before the bounds.)
#[tokio::test]
async fn a_query_that_would_hold_too_much_is_refused_and_pages_are_bounded() {
    // 12 MB of writes: more than a 400 RU/s container takes without throttling.
    let mut unthrottled = config(1);
    unthrottled.throttling = false;
    let emulator = Emulator::start(unthrottled).await;
    let raw = Raw::new(&emulator, false);
    setup(&raw).await;
    let docs = ("docs", "dbs/db/colls/c");
    let big = "x".repeat(40_000);
    for i in 0..300 {
        let body = serde_json::to_vec(
            &json!({"id": format!("d{i}"), "pk": "p", "s": format!("{i}{big}")}),
        )
        .expect("json");
        let (status, _) = json_of(
            raw.send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                docs,
                &[("x-ms-documentdb-partitionkey", "[\"p\"]")],
                Some(body),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201);
    }
    let query = |text: String, max_items: &'static str, continuation: Option<String>| {
        let body = serde_json::to_vec(&json!({"query": text, "parameters": []})).expect("json");
        let raw = &raw;
        async move {
            let mut headers = vec![
                ("x-ms-documentdb-isquery", "True".to_owned()),
                ("content-type", "application/query+json".to_owned()),
                ("x-ms-max-item-count", max_items.to_owned()),
                ("x-ms-documentdb-partitionkey", "[\"p\"]".to_owned()),
            ];
            headers.extend(continuation.map(|t| ("x-ms-continuation", t)));
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            raw.send(
                reqwest::Method::POST,
                "/dbs/db/colls/c/docs",
                docs,
                &headers,
                Some(body),
            )
            .await
        }
    };
    let array = |k: usize| {
        format!(
            "SELECT DISTINCT VALUE [{}] FROM c",
            vec!["c.s"; k].join(", ")
        )
    };
    let (status, body) = json_of(query(array(300), "1000", None).await).await;
    assert_refused_naming(status, &body, "MiB");
    let (status, body) = json_of(query(array(100), "1000", None).await).await;
    assert_refused_naming(status, &body, "64 MiB");
    // 12 MB of documents come back in pages of at most about 4 MB.
    let (mut rows, mut pages, mut token) = (0, 0, None);
    loop {
        let response = query("SELECT * FROM c".to_owned(), "1000", token).await;
        token = response
            .headers()
            .get("x-ms-continuation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = response.bytes().await.expect("page");
        assert!(bytes.len() < 5 << 20, "a page of {} bytes", bytes.len());
        let page: Value = serde_json::from_slice(&bytes).expect("json page");
        rows += page["Documents"].as_array().map_or(0, Vec::len);
        pages += 1;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(rows, 300);
    assert!(pages >= 3, "{pages} pages");
    // And the emulator still answers.
    let (status, _) =
        json_of(query("SELECT VALUE COUNT(1) FROM c".to_owned(), "10", None).await).await;
    assert_eq!(status, 200);
}

/// The change feed in latest-version mode, as the SDKs read it: per partition key range,
/// each document once in its latest version, the etag as the next page's
/// `If-None-Match`, `304` when nothing is new; what it does not serve is refused.
#[tokio::test]
async fn the_change_feed_gives_each_change_once_and_304_when_nothing_is_new() {
    let emulator = Emulator::start(config(2)).await;
    let raw = Raw::new(&emulator, false);
    setup(&raw).await;
    let docs = ("docs", "dbs/db/colls/c");
    let write = |id: &'static str, pk: &'static str, n: i64| {
        let raw = &raw;
        async move {
            let body = serde_json::to_vec(&json!({"id": id, "pk": pk, "n": n})).expect("json");
            let header = format!("[\"{pk}\"]");
            let response = raw
                .send(
                    reqwest::Method::POST,
                    "/dbs/db/colls/c/docs",
                    docs,
                    &[
                        ("x-ms-documentdb-partitionkey", header.as_str()),
                        ("x-ms-documentdb-is-upsert", "True"),
                    ],
                    Some(body),
                )
                .await;
            assert!(response.status().is_success(), "{}", response.status());
        }
    };
    let read = |range: &'static str, start: Option<String>, mode: &'static str| {
        let raw = &raw;
        async move {
            let mut headers = vec![
                ("a-im", mode.to_owned()),
                ("x-ms-documentdb-partitionkeyrangeid", range.to_owned()),
                ("x-ms-max-item-count", "2".to_owned()),
            ];
            headers.extend(start.map(|etag| ("if-none-match", etag)));
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let response = raw
                .send(
                    reqwest::Method::GET,
                    "/dbs/db/colls/c/docs",
                    docs,
                    &headers,
                    None,
                )
                .await;
            let etag = response
                .headers()
                .get("etag")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, etag, body)
        }
    };
    // Every document of both ranges once, a page of two at a time, then 304.
    let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for (i, id) in ids.iter().enumerate() {
        write(id, ["p1", "p2", "p3", "p4"][i % 4], i as i64).await;
    }
    let mut continuations = Vec::new();
    let mut seen = Vec::new();
    for range in ["0", "1"] {
        let mut etag = None;
        loop {
            let (status, next, body) = read(range, etag.clone(), "Incremental Feed").await;
            etag = next;
            if status == 304 {
                break;
            }
            assert_eq!(status, 200, "{body}");
            let page = body["Documents"].as_array().cloned().unwrap_or_default();
            assert!((1..=2).contains(&page.len()), "{body}");
            seen.extend(
                page.iter()
                    .filter_map(|d| d["id"].as_str().map(str::to_owned)),
            );
        }
        continuations.push(etag.expect("a 304 carries the etag to go on from"));
    }
    seen.sort();
    assert_eq!(seen, ids, "each document once");

    // Changes after that: an update shows once, in its latest version.
    write("a", "p1", 100).await;
    write("a", "p1", 101).await;
    let mut changed = Vec::new();
    for (range, etag) in ["0", "1"].into_iter().zip(&continuations) {
        let (status, _, body) = read(range, Some(etag.clone()), "Incremental Feed").await;
        if status == 200 {
            changed.extend(body["Documents"].as_array().cloned().unwrap_or_default());
        } else {
            assert_eq!(status, 304, "{body}");
        }
    }
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(
        (&changed[0]["id"], &changed[0]["n"]),
        (&json!("a"), &json!(101))
    );

    // From now: nothing, whatever was written before.
    let (status, etag, _) = read("0", Some("*".into()), "Incremental Feed").await;
    assert_eq!(status, 304);
    assert!(etag.is_some());

    // What it does not serve is refused, never answered as a plain read.
    let (status, _, body) = read("0", None, "Full-Fidelity Feed").await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = read("0", Some("\"not-an-lsn\"".into()), "Incremental Feed").await;
    assert_refused_naming(status, &body, "if-none-match");
    let response = raw
        .send(
            reqwest::Method::GET,
            "/dbs/db/colls/c/docs",
            docs,
            &[("a-im", "Incremental Feed")],
            None,
        )
        .await;
    let (status, body) = json_of(response).await;
    assert_refused_naming(status, &body, "one partition key range");

    // A batch is refused and applies nothing.
    let batch = serde_json::to_vec(&json!([
        {"operationType": "Create", "resourceBody": {"id": "batch", "pk": "p1"}}
    ]))
    .expect("json");
    let response = raw
        .send(
            reqwest::Method::POST,
            "/dbs/db/colls/c/docs",
            docs,
            &[
                ("x-ms-cosmos-is-batch-request", "True"),
                ("x-ms-cosmos-batch-atomic", "True"),
                ("x-ms-documentdb-partitionkey", "[\"p1\"]"),
            ],
            Some(batch),
        )
        .await;
    let (status, body) = json_of(response).await;
    assert_refused_naming(status, &body, "batch");
    let response = raw
        .send(
            reqwest::Method::GET,
            "/dbs/db/colls/c/docs/batch",
            ("docs", "dbs/db/colls/c/docs/batch"),
            &[("x-ms-documentdb-partitionkey", "[\"p1\"]")],
            None,
        )
        .await;
    assert_eq!(response.status().as_u16(), 404);
}
