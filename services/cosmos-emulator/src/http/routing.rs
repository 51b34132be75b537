//! The Cosmos DB REST surface: authenticates every request and routes it by its path to
//! the control plane (account, databases, containers, offers) or the data plane
//! (documents and queries).

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::control_plane::{self, list, query_resources};
use super::data_plane;
use super::error::{ApiError, ApiResult};
use super::headers;
use super::protocol::{CosmosRequest, CosmosResponse};
use crate::state::AppState;
use cosmos_engine::store::OfferTarget;
use cosmos_engine::throughput::charge;

/// Serves every Cosmos REST request; echoes the client's activity id.
pub async fn dispatch(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let activity_id = parts.headers.get(headers::ACTIVITY_ID).cloned();
    let logged_method = tracing::enabled!(tracing::Level::DEBUG).then(|| parts.method.clone());
    let path = parts.uri.path().to_owned();
    let mut response = match handle(&state, parts, body).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    if let Some(method) = logged_method {
        tracing::debug!(%method, path, status = response.status().as_u16(), "served");
    }
    if let Some(id) = activity_id {
        response.headers_mut().insert(headers::ACTIVITY_ID, id);
    }
    response
}

/// Authenticates the request from its headers alone, and only then reads its body
/// (within the server's body budget): an unsigned caller gets its 401 before a byte of
/// its body is buffered.
async fn handle(
    state: &AppState,
    parts: axum::http::request::Parts,
    body: axum::body::Body,
) -> ApiResult<CosmosResponse> {
    let path = parts.uri.path();
    let trimmed = path.trim_matches('/');
    if !trimmed.is_empty() && trimmed.split('/').any(str::is_empty) {
        return Err(ApiError::BadRequest(format!(
            "the path {:?} has an empty segment",
            path.chars().take(128).collect::<String>()
        )));
    }
    super::auth::verify(
        &state.key,
        state.max_clock_skew,
        &parts.method,
        path,
        rid_addressed(&state.store, path),
        &parts.headers,
    )?;
    let body = state
        .bodies
        .read(&parts.headers, body)
        .await
        .map_err(ApiError::Body)?;
    let request = CosmosRequest::new(parts.method, &parts.uri, parts.headers, body.bytes);
    let segments: Vec<&str> = request.segments.iter().map(String::as_str).collect();
    match segments.as_slice() {
        [] if request.method == Method::GET => Ok(control_plane::account(&request)),
        ["dbs", rest @ ..] => databases(state, &request, rest).await,
        ["offers", rest @ ..] => offers(state, &request, rest),
        _ => Err(not_served(&request)),
    }
}

/// Whether `path` addresses its database (and container, if any) by resource id: the
/// form whose signature covers the lower-cased id alone.
fn rid_addressed(store: &cosmos_engine::store::Store, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let Some(database) = (match segments.as_slice() {
        ["dbs", db, ..] => store.database(db).ok().filter(|d| d.rid == *db),
        _ => None,
    }) else {
        return false;
    };
    match segments.get(2..4) {
        Some(["colls", coll]) => database.container(coll).is_ok_and(|c| c.rid == *coll),
        _ => true,
    }
}

/// `/dbs/...`: databases, their containers, partition key ranges and documents.
async fn databases(
    state: &AppState,
    request: &CosmosRequest,
    path: &[&str],
) -> ApiResult<CosmosResponse> {
    let store = &state.store;
    let is_query = request.flag(headers::IS_QUERY);
    match (&request.method, path) {
        (&Method::GET, []) => list(
            "Databases",
            "",
            store.databases().iter().map(|d| d.resource().clone()),
        ),
        (&Method::POST, []) if is_query => query_resources(
            request,
            "Databases",
            "",
            store.databases().iter().map(|d| d.resource().clone()),
        ),
        (&Method::POST, []) => {
            let resource = store.create_database(&request.json()?, request.offer_throughput()?)?;
            Ok(CosmosResponse::ok(resource, charge::METADATA).with_status(StatusCode::CREATED))
        }
        (&Method::GET, [db]) => Ok(CosmosResponse::ok(
            store.database(db)?.resource().clone(),
            charge::METADATA,
        )),
        (&Method::DELETE, [db]) => {
            store.delete_database(db)?;
            Ok(CosmosResponse::no_content())
        }
        (&Method::GET, [db, "colls"]) => {
            let db = store.database(db)?;
            let containers = db.containers();
            list(
                "DocumentCollections",
                &db.rid,
                containers.iter().map(|c| c.resource.clone()),
            )
        }
        (&Method::POST, [db, "colls"]) if is_query => {
            let db = store.database(db)?;
            let containers = db.containers();
            query_resources(
                request,
                "DocumentCollections",
                &db.rid,
                containers.iter().map(|c| c.resource.clone()),
            )
        }
        (&Method::POST, [db, "colls"]) => control_plane::create_container(state, request, db),
        (&Method::GET, [db, "colls", coll]) => {
            let container = store.container(db, coll)?;
            container.count_metadata_read();
            Ok(CosmosResponse::ok(
                container.resource.clone(),
                charge::METADATA,
            ))
        }
        (&Method::DELETE, [db, "colls", coll]) => {
            let db = store.database(db)?;
            store.delete_container(&db, coll)?;
            Ok(CosmosResponse::no_content())
        }
        (&Method::GET, [db, "colls", coll, "pkranges"]) => {
            let container = store.container(db, coll).map_err(ApiError::of_owner)?;
            container.count_metadata_read();
            control_plane::pkranges(request, &container)
        }
        (_, [db, "colls", coll, "docs", rest @ ..]) => {
            let container = store.container(db, coll).map_err(ApiError::of_owner)?;
            data_plane::handle(state, request, container, rest.first().copied()).await
        }
        _ => Err(not_served(request)),
    }
}

/// `/offers/...`: provisioned throughput.
fn offers(state: &AppState, request: &CosmosRequest, path: &[&str]) -> ApiResult<CosmosResponse> {
    let offers = || {
        state
            .store
            .offers()
            .into_iter()
            .filter_map(|offer| OfferTarget::resource(&offer))
    };
    match (&request.method, path) {
        (&Method::GET, []) => list("Offers", "", offers()),
        (&Method::POST, []) => query_resources(request, "Offers", "", offers()),
        (&Method::GET, [id]) => {
            let offer = state.store.offer(id)?;
            Ok(CosmosResponse::ok(
                offer.resource().unwrap_or(Value::Null),
                charge::METADATA,
            ))
        }
        (&Method::PUT, [id]) => control_plane::replace_offer(state, request, id),
        _ => Err(not_served(request)),
    }
}

fn not_served(request: &CosmosRequest) -> ApiError {
    ApiError::NotFound(format!(
        "{} /{} is not a resource this emulator serves",
        request.method,
        request.segments.join("/")
    ))
}
