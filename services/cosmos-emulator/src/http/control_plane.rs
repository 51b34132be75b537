//! The control plane: the account, databases, containers, partition key ranges and
//! offers (provisioned throughput).

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::headers;
use super::protocol::{parse_throughput, CosmosRequest, CosmosResponse};
use crate::state::AppState;
use cosmos_engine::store::{Container, Database};
use cosmos_engine::throughput::charge;

/// The region the emulator's account claims to be in (the study ran in South Central US).
pub const EMULATOR_REGION: &str = "South Central US";

/// The account, advertising the address the client used as its only region.
pub fn account(request: &CosmosRequest) -> CosmosResponse {
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

pub fn list(
    kind: &str,
    rid: &str,
    items: impl Iterator<Item = Value>,
) -> ApiResult<CosmosResponse> {
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
pub fn query_resources(
    request: &CosmosRequest,
    kind: &str,
    rid: &str,
    items: impl Iterator<Item = Value>,
) -> ApiResult<CosmosResponse> {
    let query = request.query_spec()?;
    let bad_request = |e: cosmos_engine::sql::SqlError| ApiError::BadRequest(e.to_string());
    let items: Vec<Value> = items.collect();
    let mut matching = Vec::new();
    for item in &items {
        if query.matches(item).map_err(bad_request)? {
            matching.push(item);
        }
    }
    let rows = query.run_all(matching).map_err(bad_request)?;
    list(kind, rid, rows.into_iter())
}

pub fn create_container(
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
pub fn pkranges(request: &CosmosRequest, container: &Container) -> ApiResult<CosmosResponse> {
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

pub fn replace_offer(
    state: &AppState,
    request: &CosmosRequest,
    id: &str,
) -> ApiResult<CosmosResponse> {
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
