//! The antipattern lab's Chatty I/O: the month's records read one by one. A small query
//! lists the owner's drones for the month, then each drone's record is fetched with its
//! own point read, awaited one after another — the "N+1" shape of many small round
//! trips where the study's single query returns the same records in one.

use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::FeedScope;
use cosmos_kit::Operation;
use dronelab_contract::cosmos::utilization_id;
use dronelab_contract::telemetry::{attribute, operation};
use dronelab_contract::OwnerMonth;
use opentelemetry::{Context, KeyValue};

use crate::query::{owner_month_query, partition_scope, query_scope, Record};
use crate::{AppState, Utilization, UtilizationError};

/// The owner's drones that have a record in the month.
pub const DRONE_IDS_QUERY: &str =
    "SELECT VALUE c.droneId FROM c WHERE c.ownerId = @ownerId AND c.year = @year AND c.month = @month";

pub async fn run(
    state: &AppState,
    cx: &Context,
    container: &ContainerClient,
    request: &OwnerMonth,
) -> Result<Utilization, UtilizationError> {
    let scope = if state.use_partition_key {
        partition_scope(request)
    } else {
        ("all partitions".to_owned(), FeedScope::full_container())
    };
    let (drones, cost) = query_scope(
        state,
        cx,
        container,
        (
            DRONE_IDS_QUERY,
            owner_month_query(DRONE_IDS_QUERY, request)?,
        ),
        scope,
        |ids: &mut Vec<String>, id: String| ids.push(id),
    )
    .await?;
    state.cosmos.record_operation(state.query(), cost);
    let read = Operation {
        name: operation::READ_ITEM,
        container: state.container_name,
    };
    let mut total = Utilization::default();
    for drone in drones {
        let id = utilization_id(&drone, request.year.get(), request.month.get());
        // The container's partition key: the owner in the by-owner container, else the drone.
        let key = if state.use_partition_key {
            request.owner_id.to_string()
        } else {
            drone
        };
        let owner = KeyValue::new(attribute::OWNER_ID, request.owner_id.to_string());
        let response = state
            .cosmos
            .point(cx, read, vec![owner], container.read_item(key, &id, None))
            .await?;
        let record: Record = response
            .into_model()
            .map_err(|e| UtilizationError::Cosmos(format!("unexpected utilization record: {e}")))?;
        record.add_to(&mut total);
    }
    Ok(total.rounded())
}
