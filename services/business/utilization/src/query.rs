//! Runs the study's query in the configured shape and turns every page's attempts into spans.

use azure_data_cosmos::feed::FeedRange;
use azure_data_cosmos::{FeedScope, Query};
use cosmos_kit::{Operation, OperationCost};
use dronelab_contract::telemetry::{attribute, operation};
use dronelab_contract::OwnerMonth;
use futures::{StreamExt, TryStreamExt};
use opentelemetry::{Context, KeyValue};
use serde::Deserialize;

use crate::{AppState, QueryParallelism, Utilization, UtilizationError};

pub const STUDY_QUERY: &str =
    "SELECT * FROM c WHERE c.ownerId = @ownerId AND c.year = @year AND c.month = @month";

/// The fields summed; the rest of each document is ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    #[serde(default)]
    traveled_miles: f64,
    #[serde(default)]
    assigned_hours: f64,
}

fn study_query(request: &OwnerMonth) -> Result<Query, UtilizationError> {
    Ok(Query::from(STUDY_QUERY)
        .with_parameter("@ownerId", request.owner_id.as_str())?
        .with_parameter("@year", request.year.get())?
        .with_parameter("@month", request.month.get())?)
}

pub async fn run(
    state: &AppState,
    cx: &Context,
    request: &OwnerMonth,
) -> Result<Utilization, UtilizationError> {
    let query = study_query(request)?;
    let (scopes, limit) = if state.use_partition_key {
        (
            vec![(
                "partition key".to_owned(),
                FeedScope::partition(request.owner_id.to_string()),
            )],
            1,
        )
    } else {
        match state.parallelism {
            QueryParallelism::Serial => (
                vec![(
                    "all partitions, serial".to_owned(),
                    FeedScope::full_container(),
                )],
                1,
            ),
            parallel => {
                let ranges = state.container.get()?.read_feed_ranges(None).await?;
                let limit = match parallel {
                    QueryParallelism::AtMost(n) => n.get(),
                    _ => ranges.len().max(1),
                };
                (
                    ranges
                        .into_iter()
                        .map(|r: FeedRange| (format!("range {r}"), FeedScope::range(r)))
                        .collect(),
                    limit,
                )
            }
        }
    };
    let results: Vec<Result<(Utilization, OperationCost), UtilizationError>> =
        futures::stream::iter(scopes)
            .map(|(label, scope)| query_scope(state, cx, query.clone(), label, scope))
            .buffer_unordered(limit)
            .collect()
            .await;
    let mut total = Utilization::default();
    let mut cost = OperationCost::default();
    let mut first_error = None;
    for result in results {
        match result {
            Ok((sum, c)) => {
                total.traveled_miles += sum.traveled_miles;
                total.assigned_hours += sum.assigned_hours;
                cost.add(c);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    state.cosmos.record_operation(state.query(), cost);
    match first_error {
        Some(e) => Err(e),
        None => Ok(total.rounded()),
    }
}

/// Drains one query (one feed range, the whole container, or one logical partition)
/// under its own span, recording each page's attempts.
async fn query_scope(
    state: &AppState,
    parent: &Context,
    query: Query,
    label: String,
    scope: FeedScope,
) -> Result<(Utilization, OperationCost), UtilizationError> {
    let container = state.container.get()?;
    let attributes = vec![
        KeyValue::new(attribute::DB_QUERY_TEXT, STUDY_QUERY),
        KeyValue::new(attribute::COSMOS_QUERY_SCOPE, label),
    ];
    let name = format!("query {}", state.container_name);
    let mut span = state.cosmos.span(parent, name, state.query(), attributes);
    let mut sum = Utilization::default();
    let drained: Result<(), azure_data_cosmos::CosmosError> = async {
        let mut pages = container
            .query_items::<Record>(query, scope, None)
            .await?
            .into_pages();
        while let Some(page) = pages
            .try_next()
            .await
            .inspect_err(|e| span.record(e.diagnostics().as_ref()))?
        {
            span.record(Some(&page.diagnostics()));
            for record in page.items() {
                sum.traveled_miles += record.traveled_miles;
                sum.assigned_hours += record.assigned_hours;
            }
        }
        Ok(())
    }
    .await;
    let cost = span.end(drained.as_ref().err());
    drained?;
    Ok((sum, cost))
}

impl AppState {
    /// The operation every utilization query is, for its spans and metrics.
    fn query(&self) -> Operation {
        Operation {
            name: operation::QUERY_ITEMS,
            container: self.container_name,
        }
    }
}
