//! The Cosmos DB REST surface: request parsing, routing by path, and the control plane
//! (account, databases, containers, partition key ranges, offers).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use serde_json::{json, Value};

use crate::dataplane;
use crate::error::{ApiError, ApiResult};
use crate::headers;
use crate::server::AppState;
use crate::sql::{PreparedQuery, QuerySpec};
use crate::store::{Database, OfferTarget};
use crate::throughput::charge;

/// A request as the handlers see it: decoded path segments, headers and a JSON body.
pub struct CosmosRequest {
    pub method: Method,
    /// The address the client used (HTTP/2 `:authority` or HTTP/1.1 `Host`).
    pub authority: Option<String>,
    pub segments: Vec<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl CosmosRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn flag(&self, name: &str) -> bool {
        self.header(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// The body as JSON; Cosmos binary JSON (first byte 0x80) is accepted too.
    pub fn json(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Err(ApiError::BadRequest("the request has no body".into()));
        }
        if azure_data_cosmos_driver::binary_json::is_binary(&self.body) {
            return azure_data_cosmos_driver::binary_json::decode(&self.body).map_err(|e| {
                ApiError::BadRequest(format!("the binary JSON body could not be decoded: {e}"))
            });
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))
    }

    pub fn query_spec(&self) -> ApiResult<PreparedQuery> {
        let spec: QuerySpec = serde_json::from_value(self.json()?).map_err(|e| {
            ApiError::BadRequest(format!(
                "a query body must be {{\"query\": \"...\", \"parameters\": [...]}}: {e}"
            ))
        })?;
        PreparedQuery::prepare(&spec)
            .map_err(|e| ApiError::BadRequest(format!("Syntax error: {e}")))
    }

    /// Provisioned throughput requested with a create (`x-ms-offer-throughput`).
    pub fn offer_throughput(&self) -> ApiResult<Option<f64>> {
        if self.header(headers::AUTOPILOT_SETTINGS).is_some() {
            return Err(ApiError::BadRequest(
                "autoscale throughput is not supported by this emulator; use manual throughput (x-ms-offer-throughput)".into(),
            ));
        }
        self.header(headers::OFFER_THROUGHPUT)
            .map(|v| parse_throughput(&Value::String(v.to_owned())))
            .transpose()
    }
}

/// Accepted throughput: 1–1,000,000 RU/s (below Azure's 400 minimum on purpose, so a
/// lab can provoke throttling with little load).
fn parse_throughput(value: &Value) -> ApiResult<f64> {
    let ru = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match ru {
        Some(ru) if (1.0..=1_000_000.0).contains(&ru) && ru.fract() == 0.0 => Ok(ru),
        _ => Err(ApiError::BadRequest(format!(
            "throughput must be a whole number of RU/s between 1 and 1000000, got {value}"
        ))),
    }
}

/// A successful answer with the headers every Cosmos response carries.
pub struct CosmosResponse {
    pub status: StatusCode,
    pub body: Option<Value>,
    pub charge: f64,
    pub headers: Vec<(&'static str, String)>,
}

impl CosmosResponse {
    pub fn ok(body: Value, charge: f64) -> Self {
        Self {
            status: StatusCode::OK,
            body: Some(body),
            charge,
            headers: Vec::new(),
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

impl IntoResponse for CosmosResponse {
    fn into_response(self) -> Response {
        let mut response = match self.body {
            Some(body) => (self.status, axum::Json(body)).into_response(),
            None => self.status.into_response(),
        };
        let h = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&charge::round(self.charge).to_string()) {
            h.insert(headers::REQUEST_CHARGE, v);
        }
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                h.insert(HeaderName::from_static(name), v);
            }
        }
        response
    }
}

/// Routes every Cosmos REST request by its path.
pub async fn dispatch(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let activity_id = headers.get(headers::ACTIVITY_ID).cloned();
    let logged_method = tracing::enabled!(tracing::Level::DEBUG).then(|| method.clone());
    let mut response = match handle(&state, method, &uri, headers, body).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    if let Some(method) = logged_method {
        tracing::debug!(%method, path = uri.path(), status = response.status().as_u16(), "served");
    }
    if let Some(id) = activity_id {
        response.headers_mut().insert(headers::ACTIVITY_ID, id);
    }
    response
}

async fn handle(
    state: &AppState,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<CosmosResponse> {
    let path = uri.path();
    crate::auth::verify(&state.key, &method, path, &headers)?;
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let authority = uri.authority().map(|a| a.to_string()).or_else(|| {
        headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
    });
    let request = CosmosRequest {
        method,
        authority,
        segments,
        headers,
        body,
    };
    let s: Vec<&str> = request.segments.iter().map(String::as_str).collect();
    let m = request.method.clone();
    match (&m, s.as_slice()) {
        (&Method::GET, []) => Ok(account(&request)),
        (&Method::GET, ["dbs"]) => list(
            "Databases",
            "",
            state.store.databases().iter().map(|d| d.resource().clone()),
        ),
        (&Method::POST, ["dbs"]) if request.flag(headers::IS_QUERY) => query_resources(
            &request,
            "Databases",
            "",
            state.store.databases().iter().map(|d| d.resource().clone()),
        ),
        (&Method::POST, ["dbs"]) => {
            let resource = state
                .store
                .create_database(&request.json()?, request.offer_throughput()?)?;
            Ok(CosmosResponse::ok(resource, charge::METADATA).with_status(StatusCode::CREATED))
        }
        (&Method::GET, ["dbs", db]) => Ok(CosmosResponse::ok(
            state.store.database(db)?.resource().clone(),
            charge::METADATA,
        )),
        (&Method::DELETE, ["dbs", db]) => {
            state.store.delete_database(db)?;
            Ok(no_content())
        }
        (&Method::GET, ["dbs", db, "colls"]) => {
            let db = state.store.database(db)?;
            list(
                "DocumentCollections",
                &db.rid,
                db.containers().iter().map(|c| c.resource.clone()),
            )
        }
        (&Method::POST, ["dbs", db, "colls"]) if request.flag(headers::IS_QUERY) => {
            let db = state.store.database(db)?;
            query_resources(
                &request,
                "DocumentCollections",
                &db.rid,
                db.containers().iter().map(|c| c.resource.clone()),
            )
        }
        (&Method::POST, ["dbs", db, "colls"]) => create_container(state, &request, db),
        (&Method::GET, ["dbs", db, "colls", coll]) => Ok(CosmosResponse::ok(
            state.store.container(db, coll)?.resource.clone(),
            charge::METADATA,
        )),
        (&Method::DELETE, ["dbs", db, "colls", coll]) => {
            let db = state.store.database(db)?;
            state.store.delete_container(&db, coll)?;
            Ok(no_content())
        }
        (&Method::GET, ["dbs", db, "colls", coll, "pkranges"]) => {
            let container = state.store.container(db, coll)?;
            pkranges(&request, &container)
        }
        (_, ["dbs", db, "colls", coll, "docs", rest @ ..]) => {
            let container = state.store.container(db, coll)?;
            dataplane::handle(state, &request, container, rest.first().copied()).await
        }
        (&Method::GET, ["offers"]) => list(
            "Offers",
            "",
            state
                .store
                .offers()
                .iter()
                .filter_map(OfferTarget::resource),
        ),
        (&Method::POST, ["offers"]) => query_resources(
            &request,
            "Offers",
            "",
            state
                .store
                .offers()
                .iter()
                .filter_map(OfferTarget::resource),
        ),
        (&Method::GET, ["offers", id]) => {
            let offer = state.store.offer(id)?;
            Ok(CosmosResponse::ok(
                offer.resource().unwrap_or(Value::Null),
                charge::METADATA,
            ))
        }
        (&Method::PUT, ["offers", id]) => replace_offer(state, &request, id),
        _ => Err(ApiError::NotFound(format!(
            "{} /{} is not a resource this emulator serves",
            request.method,
            request.segments.join("/")
        ))),
    }
}

fn no_content() -> CosmosResponse {
    CosmosResponse {
        status: StatusCode::NO_CONTENT,
        body: None,
        charge: charge::METADATA,
        headers: Vec::new(),
    }
}

/// The region the emulator's account claims to be in (the study ran in South Central US).
pub const EMULATOR_REGION: &str = "South Central US";

/// The account, advertising the address the client used as its only region.
fn account(request: &CosmosRequest) -> CosmosResponse {
    let host = request.authority.as_deref().unwrap_or("127.0.0.1:8081");
    let endpoint = format!("http://{host}/");
    // A real region name, so SDK proximity routing recognises it.
    let region = json!([{ "name": EMULATOR_REGION, "databaseAccountEndpoint": endpoint }]);
    CosmosResponse::ok(
        json!({
            "_self": "",
            "id": "dronelab-emulator",
            "_rid": host,
            "media": "//media/",
            "addresses": "//addresses/",
            "_dbs": "//dbs/",
            "writableLocations": region,
            "readableLocations": region,
            "enableMultipleWriteLocations": false,
            "userReplicationPolicy": {"asyncReplication": false, "minReplicaSetSize": 1, "maxReplicasetSize": 4},
            "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
            "systemReplicationPolicy": {"minReplicaSetSize": 1, "maxReplicasetSize": 4},
            "readPolicy": {"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
            "queryEngineConfiguration": "{\"maxSqlQueryInputLength\":262144,\"maxJoinsPerSqlQuery\":5,\"maxLogicalAndPerSqlQuery\":500,\"maxLogicalOrPerSqlQuery\":500,\"maxUdfRefPerSqlQuery\":10,\"maxInExpressionItemsCount\":16000,\"queryMaxInMemorySortDocumentCount\":500,\"maxQueryRequestTimeoutFraction\":0.9,\"sqlAllowNonFiniteNumbers\":false,\"sqlAllowAggregateFunctions\":true,\"sqlAllowSubQuery\":false,\"sqlAllowScalarSubQuery\":false,\"allowNewKeywordsAsIdentifiers\":true,\"enableSpatialIndexing\":true,\"maxSpatialQueryCells\":12,\"spatialMaxGeometryPointCount\":256,\"sqlDisableOptimizationFlags\":0,\"sqlAllowTop\":true}"
        }),
        0.0,
    )
}

fn list(kind: &str, rid: &str, items: impl Iterator<Item = Value>) -> ApiResult<CosmosResponse> {
    let items: Vec<Value> = items.collect();
    let count = items.len();
    let mut body = serde_json::Map::new();
    body.insert("_rid".into(), json!(rid));
    body.insert(kind.into(), Value::Array(items));
    body.insert("_count".into(), json!(count));
    Ok(CosmosResponse::ok(Value::Object(body), charge::METADATA)
        .header(headers::ITEM_COUNT, count.to_string()))
}

/// SQL over metadata resources (databases, containers, offers): one page, no paging.
fn query_resources(
    request: &CosmosRequest,
    kind: &str,
    rid: &str,
    items: impl Iterator<Item = Value>,
) -> ApiResult<CosmosResponse> {
    let query = request.query_spec()?;
    if query.query.is_aggregate() {
        let items: Vec<Value> = items.collect();
        let matching: Vec<&Value> = items
            .iter()
            .filter(|v| query.matches(v).unwrap_or(false))
            .collect();
        let row = query
            .aggregate(matching.into_iter())
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        return list(kind, rid, row.into_iter());
    }
    let mut rows = Vec::new();
    for item in items {
        if query
            .matches(&item)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?
        {
            if let Some(row) = query
                .project(&item)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?
            {
                rows.push(row);
            }
        }
    }
    list(kind, rid, rows.into_iter())
}

fn create_container(
    state: &AppState,
    request: &CosmosRequest,
    db: &str,
) -> ApiResult<CosmosResponse> {
    let db: Arc<Database> = state.store.database(db)?;
    let resource =
        state
            .store
            .create_container(&db, &request.json()?, request.offer_throughput()?)?;
    Ok(CosmosResponse::ok(resource, charge::METADATA).with_status(StatusCode::CREATED))
}

/// Partition key ranges, as a change feed: the SDK reads until it gets `304`.
fn pkranges(
    request: &CosmosRequest,
    container: &crate::store::Container,
) -> ApiResult<CosmosResponse> {
    let etag = container.pkranges_etag();
    if request.header(headers::IF_NONE_MATCH) == Some(etag.as_str()) {
        return Ok(CosmosResponse {
            status: StatusCode::NOT_MODIFIED,
            body: None,
            charge: 0.0,
            headers: vec![(headers::ETAG, etag)],
        });
    }
    let count = container.partitions.len();
    Ok(
        CosmosResponse::ok(container.pkranges_body(), charge::METADATA)
            .header(headers::ETAG, etag)
            .header(headers::ITEM_COUNT, count.to_string()),
    )
}

fn replace_offer(state: &AppState, request: &CosmosRequest, id: &str) -> ApiResult<CosmosResponse> {
    let target = state.store.offer(id)?;
    let body = request.json()?;
    let content = body
        .get("content")
        .ok_or_else(|| ApiError::BadRequest("the offer has no \"content\"".into()))?;
    if content.get("offerAutopilotSettings").is_some() {
        return Err(ApiError::BadRequest(
            "autoscale throughput is not supported by this emulator".into(),
        ));
    }
    let ru = parse_throughput(content.get("offerThroughput").unwrap_or(&Value::Null))?;
    state.store.set_throughput(&target, ru)?;
    tracing::info!(offer = id, ru_per_second = ru, "throughput replaced");
    Ok(CosmosResponse::ok(
        target.resource().unwrap_or(Value::Null),
        charge::METADATA,
    ))
}
