//! Documents and queries: the requests that run inside physical partitions, pass through
//! their RU budgets, occupy their execution slots and show up in their counters.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::headers;
use super::protocol::{CosmosRequest, CosmosResponse};
use crate::state::{AppState, ModelSettings};
use cosmos_engine::epk::{parse_epk, LogicalKey};
use cosmos_engine::sql::{plan, PreparedQuery, QuerySpec};
use cosmos_engine::store::{Container, Partition, Scope};
use cosmos_engine::throughput::charge;

/// Page size when the client leaves it to the server, and the most it may ask for.
const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 10_000;

pub async fn handle(
    state: &AppState,
    request: &CosmosRequest,
    container: Arc<Container>,
    doc_id: Option<&str>,
) -> ApiResult<CosmosResponse> {
    match (&request.method, doc_id) {
        (&Method::POST, None) if request.flag(headers::IS_QUERY_PLAN) => {
            query_plan(request, &container)
        }
        (&Method::POST, None) if request.flag(headers::IS_QUERY) => {
            let query = request.query_spec()?;
            run_query(state, request, &container, query).await
        }
        (&Method::POST, None) if request.header(headers::IS_BATCH_REQUEST).is_some() => {
            Err(ApiError::BadRequest(
                "transactional batch and bulk requests are not supported by this emulator; send the operations one by one".into(),
            ))
        }
        (&Method::POST, None) => write(state, request, &container, None).await,
        (&Method::GET, None) if request.header(headers::A_IM).is_some() => {
            change_feed(state, request, &container).await
        }
        (&Method::GET, None) => {
            let spec = QuerySpec {
                query: "SELECT * FROM c".into(),
                parameters: Vec::new(),
            };
            let query =
                PreparedQuery::prepare(&spec).map_err(|e| ApiError::Internal(e.to_string()))?;
            run_query(state, request, &container, query).await
        }
        (&Method::GET, Some(id)) => read(state, request, &container, id).await,
        (&Method::PUT, Some(id)) => write(state, request, &container, Some(id)).await,
        (&Method::DELETE, Some(id)) => delete(state, request, &container, id).await,
        (method, _) => Err(ApiError::BadRequest(format!(
            "{method} on documents is not supported by this emulator"
        ))),
    }
}

/// Runs `op` in `partitions` under the throughput and latency models.
///
/// `op` returns the response and, per partition, the RU it charged (`None` for a
/// partition it did not touch). Throttled requests do not run at all. With throttling
/// off, requests neither wait for the RU budget nor draw on it (their charges are still
/// counted): a budget drawn while off would throttle for minutes once it is back on.
async fn execute(
    state: &AppState,
    partitions: &[&Partition],
    op: impl FnOnce() -> ApiResult<(CosmosResponse, Vec<Option<f64>>)>,
) -> ApiResult<CosmosResponse> {
    let ModelSettings {
        throttling,
        latency,
        ..
    } = state.model();
    if throttling {
        for p in partitions {
            if let Err(retry_after) = p.admit() {
                p.stats.record(429, 0.0);
                pause(latency.round_trip()).await;
                return Err(ApiError::TooManyRequests { retry_after });
            }
        }
    }
    let mut permits = Vec::new();
    if latency.enabled {
        for p in partitions {
            match p.slots.acquire().await {
                Ok(permit) => permits.push(permit),
                Err(_) => return Err(ApiError::Internal("partition is shutting down".into())),
            }
        }
    }
    let outcome = op();
    let result = match outcome {
        Ok((mut response, charges)) => {
            let mut service = std::time::Duration::ZERO;
            let mut total = 0.0;
            for (p, ru) in partitions.iter().zip(&charges) {
                if let Some(ru) = ru {
                    if throttling {
                        p.consume(*ru);
                    }
                    p.stats.record(response.status.as_u16(), *ru);
                    service = service.max(latency.service_time(*ru));
                    total += ru;
                }
            }
            response.charge = total;
            pause(service).await;
            Ok(response)
        }
        Err(e) => {
            if let Some(p) = partitions.first() {
                p.stats.record(e.status().as_u16(), 0.0);
            }
            Err(e)
        }
    };
    drop(permits);
    pause(latency.round_trip()).await;
    result
}

/// Sleeps, skipping the timer entirely when the latency model is off.
async fn pause(duration: std::time::Duration) {
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}

fn session_token(partition: &Partition) -> String {
    format!("{}:-1#{}", partition.id, partition.lsn())
}

fn header_key(request: &CosmosRequest, container: &Container) -> ApiResult<Option<LogicalKey>> {
    request
        .header(headers::PARTITION_KEY)
        .map(|h| LogicalKey::from_header(h, &container.partition_key))
        .transpose()
        .map_err(|e| ApiError::BadRequest(e.0))
}

fn required_key(request: &CosmosRequest, container: &Container) -> ApiResult<LogicalKey> {
    header_key(request, container)?.ok_or_else(|| {
        ApiError::BadRequest(format!(
            "the {} header is required for a point operation",
            headers::PARTITION_KEY
        ))
    })
}

fn check_if_match(request: &CosmosRequest, current_etag: Option<&str>) -> ApiResult<()> {
    if let Some(expected) = request.header(headers::IF_MATCH) {
        if expected != "*" && Some(expected) != current_etag {
            return Err(ApiError::PreconditionFailed(
                "Operation cannot be performed because one of the specified precondition is not met (etag mismatch)."
                    .into(),
            ));
        }
    }
    Ok(())
}

fn document_response(
    status: StatusCode,
    body: Value,
    etag: String,
    partition: &Partition,
) -> CosmosResponse {
    CosmosResponse::ok(body, 0.0)
        .with_status(status)
        .header(headers::ETAG, etag)
        .header(headers::SESSION_TOKEN, session_token(partition))
        .header(headers::LSN, partition.lsn().to_string())
}

/// Create (`POST …/docs`, upsert with `x-ms-documentdb-is-upsert`) or replace (`PUT …/docs/{id}`).
async fn write(
    state: &AppState,
    request: &CosmosRequest,
    container: &Container,
    replace_id: Option<&str>,
) -> ApiResult<CosmosResponse> {
    let body = request.json()?;
    let key = LogicalKey::from_document(&body, &container.partition_key)
        .map_err(|e| ApiError::BadRequest(e.0))?;
    if let Some(header) = header_key(request, container)? {
        if header.json != key.json {
            return Err(ApiError::BadRequest(format!(
                "PartitionKey extracted from document doesn't match the one specified in the header ({} vs {})",
                key.json, header.json
            )));
        }
    }
    if let Some(id) = replace_id {
        if body.get("id").and_then(Value::as_str) != Some(id) {
            return Err(ApiError::BadRequest(format!(
                "the document's \"id\" must equal the id in the path ('{id}')"
            )));
        }
    }
    let upsert = replace_id.is_none() && request.flag(headers::IS_UPSERT);
    let partition = container.partition_for(&key);
    let store = &state.store;
    execute(state, &[partition], || {
        let mut data = partition.write();
        let id = body
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let existing = data.get(&key.json, &id).cloned();
        match (&existing, replace_id, upsert) {
            (Some(_), None, false) => {
                return Err(ApiError::Conflict(format!(
                    "Entity with the specified id '{id}' already exists in the system."
                )))
            }
            (None, Some(_), _) => {
                return Err(ApiError::NotFound(format!(
                    "Entity with the specified id '{id}' does not exist in the system."
                )))
            }
            _ => {}
        }
        check_if_match(request, existing.as_deref().map(|d| d.etag()))?;
        let doc = store.prepare_document(container, body, existing.as_deref())?;
        let ru = match existing {
            Some(_) => charge::replace(doc.size, doc.indexed_properties()),
            None => charge::write(doc.size, doc.indexed_properties()),
        };
        let status = if existing.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        let etag = doc.etag().to_owned();
        let response_body = store.put_document(container, partition, &mut data, doc)?;
        Ok((
            document_response(status, response_body, etag, partition),
            vec![Some(ru)],
        ))
    })
    .await
}

async fn read(
    state: &AppState,
    request: &CosmosRequest,
    container: &Container,
    id: &str,
) -> ApiResult<CosmosResponse> {
    let key = required_key(request, container)?;
    let partition = container.partition_for(&key);
    execute(state, &[partition], || {
        let data = partition.read();
        let doc = data.get(&key.json, id).cloned().ok_or_else(|| {
            ApiError::NotFound(format!(
                "Entity with the specified id '{id}' does not exist in the system."
            ))
        })?;
        let ru = charge::point_read(doc.size);
        if request.header(headers::IF_NONE_MATCH) == Some(doc.etag()) {
            let response = CosmosResponse {
                status: StatusCode::NOT_MODIFIED,
                body: None,
                charge: 0.0,
                headers: vec![(headers::ETAG, doc.etag().to_owned())],
            };
            return Ok((response, vec![Some(ru)]));
        }
        Ok((
            document_response(
                StatusCode::OK,
                doc.body.clone(),
                doc.etag().to_owned(),
                partition,
            ),
            vec![Some(ru)],
        ))
    })
    .await
}

async fn delete(
    state: &AppState,
    request: &CosmosRequest,
    container: &Container,
    id: &str,
) -> ApiResult<CosmosResponse> {
    let key = required_key(request, container)?;
    let partition = container.partition_for(&key);
    let store = &state.store;
    execute(state, &[partition], || {
        let mut data = partition.write();
        let doc = data.get(&key.json, id).cloned().ok_or_else(|| {
            ApiError::NotFound(format!(
                "Entity with the specified id '{id}' does not exist in the system."
            ))
        })?;
        check_if_match(request, Some(doc.etag()))?;
        store.delete_document(container, &mut data, &key.json, id)?;
        partition.next_lsn();
        let response = CosmosResponse {
            status: StatusCode::NO_CONTENT,
            body: None,
            charge: 0.0,
            headers: vec![(headers::SESSION_TOKEN, session_token(partition))],
        };
        Ok((
            response,
            vec![Some(charge::write(doc.size, doc.indexed_properties()))],
        ))
    })
    .await
}

/// The change feed of one partition key range (latest-version mode), as the SDKs read
/// it: `A-IM: Incremental Feed` on a document feed, the range by key or range id (and
/// EPK bounds), where to start in `If-None-Match` (the previous page's etag, `*` for
/// "from now", none for "from the beginning") or `If-Modified-Since`. The answer's etag
/// is the next page's `If-None-Match`; 304 says nothing is new.
async fn change_feed(
    state: &AppState,
    request: &CosmosRequest,
    container: &Container,
) -> ApiResult<CosmosResponse> {
    let mode = request.header(headers::A_IM).unwrap_or_default();
    if !mode.eq_ignore_ascii_case("Incremental Feed") {
        return Err(ApiError::BadRequest(format!(
            "{}: {mode:?} is not supported by this emulator; only the latest-version change feed (\"Incremental Feed\") is",
            headers::A_IM
        )));
    }
    let (partitions, scope) = query_target(request, container)?;
    let [partition] = partitions[..] else {
        return Err(ApiError::BadRequest(format!(
            "the change feed is read one partition key range at a time: send {} (this request covers {} ranges)",
            headers::PARTITION_KEY_RANGE_ID,
            partitions.len()
        )));
    };
    let modified_since = match request.header(headers::IF_MODIFIED_SINCE) {
        None => None,
        Some(date) => Some(
            httpdate::parse_http_date(date)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "{}: {date:?} is not an HTTP date",
                        headers::IF_MODIFIED_SINCE
                    ))
                })?,
        ),
    };
    let start = request.header(headers::IF_NONE_MATCH);
    let max_items = page_size(request)?;
    execute(state, &[partition], || {
        let data = partition.read();
        let after = match start {
            None => 0,
            Some("*") => partition.lsn(),
            Some(etag) => etag.trim_matches('"').parse::<u64>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "{}: {etag:?} is not a change feed etag from this emulator",
                    headers::IF_NONE_MATCH
                ))
            })?,
        };
        let page = data.changes(after, modified_since, &scope, max_items);
        let next = match (page.more, page.last_lsn) {
            (true, Some(last)) => last,
            _ => after.max(partition.lsn()),
        };
        let ru = page.charge();
        let etag = format!("\"{next}\"");
        let response = if page.documents.is_empty() {
            CosmosResponse {
                status: StatusCode::NOT_MODIFIED,
                body: None,
                charge: 0.0,
                headers: vec![(headers::ETAG, etag)],
            }
        } else {
            let count = page.documents.len();
            CosmosResponse::ok(
                json!({"_rid": container.rid, "Documents": page.documents, "_count": count}),
                0.0,
            )
            .header(headers::ITEM_COUNT, count.to_string())
            .header(headers::ETAG, etag)
        };
        Ok((
            response
                .header(headers::SESSION_TOKEN, session_token(partition))
                .header(headers::LSN, partition.lsn().to_string()),
            vec![Some(ru)],
        ))
    })
    .await
}

/// Where a query resumes: partition index (within the request's partitions), the
/// position there (see [`cosmos_engine::store::PartitionData::query`]), how many rows
/// were returned so far (for `TOP`), and what it resumes: a digest of the container, the
/// partitions and scope, the query and its parameters. A token only resumes the query
/// that issued it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Continuation {
    #[serde(rename = "p")]
    partition: usize,
    #[serde(rename = "s")]
    position: u64,
    #[serde(rename = "n")]
    returned: u64,
    #[serde(rename = "q")]
    query: String,
}

impl Continuation {
    /// The request's continuation, or a fresh start: `binding` is the query's.
    fn parse(token: Option<&str>, binding: &str, partitions: usize) -> ApiResult<Self> {
        let token = match token {
            None | Some("") => {
                return Ok(Self {
                    query: binding.to_owned(),
                    ..Self::default()
                })
            }
            Some(token) => token,
        };
        let foreign = || {
            ApiError::BadRequest(format!(
                "the continuation token {:?} was not issued by this emulator for this query",
                token.chars().take(64).collect::<String>()
            ))
        };
        let resume: Self = serde_json::from_str(token).map_err(|_| foreign())?;
        if resume.query != binding || resume.partition >= partitions.max(1) {
            return Err(foreign());
        }
        Ok(resume)
    }

    fn resume_at(&self, partition: usize, position: u64) -> Self {
        Self {
            partition,
            position,
            returned: 0,
            query: self.query.clone(),
        }
    }
}

/// A digest of what a query's pages depend on: the container, the partitions and the
/// scope the request covers, the query and its parameters (in name order).
fn query_binding(
    container: &Container,
    partitions: &[&Partition],
    scope: &Scope,
    query: &PreparedQuery,
) -> String {
    use sha2::Digest as _;
    let mut params: Vec<_> = query.params.iter().collect();
    params.sort_by(|a, b| a.0.cmp(b.0));
    let ids: Vec<&str> = partitions.iter().map(|p| p.id.as_str()).collect();
    let text = format!(
        "{}|{ids:?}|{scope:?}|{:?}|{params:?}",
        container.rid, query.query
    );
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The partitions a query request covers and the documents it may see in them.
fn query_target<'c>(
    request: &CosmosRequest,
    container: &'c Container,
) -> ApiResult<(Vec<&'c Partition>, Scope)> {
    if let Some(key) = header_key(request, container)? {
        return Ok((
            vec![container.partition_for(&key)],
            Scope::LogicalPartition(key.json),
        ));
    }
    let epk_range = match (
        request.header(headers::START_EPK),
        request.header(headers::END_EPK),
    ) {
        (Some(min), Some(max)) => Some((
            parse_epk(min).map_err(|e| ApiError::BadRequest(e.0))?,
            parse_epk(max).map_err(|e| ApiError::BadRequest(e.0))?,
        )),
        (None, None) => None,
        _ => {
            return Err(ApiError::BadRequest(
                "x-ms-start-epk and x-ms-end-epk must be sent together".into(),
            ))
        }
    };
    if let Some(range_id) = request.header(headers::PARTITION_KEY_RANGE_ID) {
        let partition = container.partition_by_id(range_id)?;
        let scope = match epk_range {
            Some((min, max)) => Scope::EpkRange { min, max },
            None => Scope::All,
        };
        return Ok((vec![partition], scope));
    }
    match epk_range {
        Some((min, max)) => {
            let partitions: Vec<&Partition> = container
                .partitions
                .iter()
                .filter(|p| p.range.overlaps(&min, &max) || (min == max && p.range.contains(&min)))
                .collect();
            Ok((partitions, Scope::EpkRange { min, max }))
        }
        None => Ok((container.partitions.iter().collect(), Scope::All)),
    }
}

fn page_size(request: &CosmosRequest) -> ApiResult<usize> {
    match request.header(headers::MAX_ITEM_COUNT).map(str::trim) {
        None | Some("-1") | Some("0") => Ok(DEFAULT_PAGE_SIZE),
        Some(v) => v
            .parse::<usize>()
            .map(|n| n.min(MAX_PAGE_SIZE))
            .map_err(|_| {
                ApiError::BadRequest(format!(
                    "x-ms-max-item-count must be a positive integer or -1, got {v:?}"
                ))
            }),
    }
}

async fn run_query(
    state: &AppState,
    request: &CosmosRequest,
    container: &Container,
    query: PreparedQuery,
) -> ApiResult<CosmosResponse> {
    let (partitions, scope) = query_target(request, container)?;
    if partitions.len() > 1 && !query.query.is_streaming() {
        return Err(ApiError::QueryNeedsPlan {
            message: format!(
                "Cross partition query only supports this query through the SDK's query pipeline: it spans {} partitions and needs {}; ask for the query plan and run its rewritten query per partition, or pass the partition key",
                partitions.len(),
                plan::required_features(&query.query).join(", ")
            ),
            plan: plan_document(request, container, &query).ok().map(|p| p.to_string()),
        });
    }
    let page_size = page_size(request)?;
    let binding = query_binding(container, &partitions, &scope, &query);
    let resume = Continuation::parse(
        request.header(headers::CONTINUATION),
        &binding,
        partitions.len(),
    )?;
    let top = query.query.top;
    execute(state, &partitions, || {
        let mut rows = Vec::new();
        let mut charges = vec![None; partitions.len()];
        let mut next = None;
        let budget = match top {
            Some(top) => (top.saturating_sub(resume.returned) as usize).min(page_size),
            None => page_size,
        };
        for (i, p) in partitions.iter().enumerate().skip(resume.partition) {
            let position = if i == resume.partition {
                resume.position
            } else {
                0
            };
            let remaining = budget.saturating_sub(rows.len());
            if remaining == 0 {
                next = Some(resume.resume_at(i, 0));
                break;
            }
            let page = p
                .read()
                .query(&query, &scope, position, remaining)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            charges[i] = Some(page.charge());
            rows.extend(page.rows);
            if let Some(position) = page.resume_at {
                next = Some(resume.resume_at(i, position));
                break;
            }
        }
        let returned = resume.returned + rows.len() as u64;
        if top.is_some_and(|t| returned >= t) {
            next = None;
        }
        let count = rows.len();
        let mut response = CosmosResponse::ok(
            json!({"_rid": container.rid, "Documents": rows, "_count": count}),
            0.0,
        )
        .header(headers::ITEM_COUNT, count.to_string());
        if let Some(p) = partitions.first() {
            response = response.header(headers::SESSION_TOKEN, session_token(p));
        }
        if let Some(mut next) = next {
            next.returned = returned;
            response = response.header(
                headers::CONTINUATION,
                serde_json::to_string(&next).unwrap_or_default(),
            );
        }
        Ok((response, charges))
    })
    .await
}

/// The gateway's query plan: what the SDK must do client-side ([`plan::query_info`])
/// and which EPK ranges the query touches (one point range when `WHERE` pins the
/// partition key).
fn query_plan(request: &CosmosRequest, container: &Container) -> ApiResult<CosmosResponse> {
    let query = request.query_spec()?;
    Ok(CosmosResponse::ok(
        plan_document(request, container, &query)?,
        0.0,
    ))
}

/// The plan of `query` for the client that sent `request` (its declared features).
fn plan_document(
    request: &CosmosRequest,
    container: &Container,
    query: &PreparedQuery,
) -> ApiResult<Value> {
    let query_info = plan::query_info(
        &query.query,
        request.header(headers::SUPPORTED_QUERY_FEATURES),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let range = match pinned_key(query, container) {
        Some(key) => {
            let epk = key.epk.to_hex();
            json!({"min": epk, "max": epk, "isMinInclusive": true, "isMaxInclusive": true})
        }
        None => json!({"min": "", "max": "FF", "isMinInclusive": true, "isMaxInclusive": false}),
    };
    Ok(json!({
        "partitionedQueryExecutionInfoVersion": 2,
        "queryInfo": query_info,
        "queryRanges": [range]
    }))
}

/// The logical key when the query's `WHERE` fixes every partition key path by equality.
fn pinned_key(query: &PreparedQuery, container: &Container) -> Option<LogicalKey> {
    let constraints = query.equality_constraints();
    let components: Option<Vec<Value>> = container
        .partition_key
        .paths()
        .iter()
        .map(|path| {
            let field = path.strip_prefix('/')?;
            constraints
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, v)| (*v).clone())
        })
        .collect();
    LogicalKey::from_components(&components?, &container.partition_key).ok()
}
