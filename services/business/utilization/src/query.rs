//! Runs the study's query in the configured shape and turns every page's attempts into spans.

use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::feed::FeedRange;
use azure_data_cosmos::{FeedScope, Query};
use cosmos_kit::{Operation, OperationCost};
use dronelab_contract::telemetry::{attribute, operation, span};
use dronelab_contract::OwnerMonth;
use futures::{StreamExt, TryStreamExt};
use opentelemetry::{Context, KeyValue};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::{AppState, QueryParallelism, Utilization, UtilizationError};

pub const STUDY_QUERY: &str =
    "SELECT * FROM c WHERE c.ownerId = @ownerId AND c.year = @year AND c.month = @month";

/// The fields summed; the rest of each document is ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    #[serde(default)]
    traveled_miles: f64,
    #[serde(default)]
    assigned_hours: f64,
}

impl Record {
    pub(crate) fn add_to(&self, sum: &mut Utilization) {
        sum.traveled_miles += self.traveled_miles;
        sum.assigned_hours += self.assigned_hours;
    }
}

/// `text` with the owner-month's three parameters.
pub(crate) fn owner_month_query(
    text: &'static str,
    request: &OwnerMonth,
) -> Result<Query, UtilizationError> {
    Ok(Query::from(text)
        .with_parameter("@ownerId", request.owner_id.as_str())?
        .with_parameter("@year", request.year.get())?
        .with_parameter("@month", request.month.get())?)
}

/// The study's query, in the configured shape.
pub async fn run(
    state: &AppState,
    cx: &Context,
    container: &ContainerClient,
    request: &OwnerMonth,
) -> Result<Utilization, UtilizationError> {
    let query = owner_month_query(STUDY_QUERY, request)?;
    let (scopes, limit) = if state.use_partition_key {
        (vec![partition_scope(request)], 1)
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
                let ranges = container.read_feed_ranges(None).await?;
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
            .map(|scope| {
                query_scope(
                    state,
                    cx,
                    container,
                    (STUDY_QUERY, query.clone()),
                    scope,
                    |sum: &mut Utilization, record: Record| record.add_to(sum),
                )
            })
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

/// The owner's logical partition, labelled for the span.
pub(crate) fn partition_scope(request: &OwnerMonth) -> (String, FeedScope) {
    (
        "partition key".to_owned(),
        FeedScope::partition(request.owner_id.to_string()),
    )
}

/// Drains one query (one feed range, the whole container, or one logical partition)
/// under its own span, recording each page's attempts and folding every item into the
/// answer with `fold`.
pub(crate) async fn query_scope<T, A>(
    state: &AppState,
    parent: &Context,
    container: &ContainerClient,
    (text, query): (&'static str, Query),
    (label, scope): (String, FeedScope),
    fold: fn(&mut A, T),
) -> Result<(A, OperationCost), UtilizationError>
where
    T: DeserializeOwned + Send + Sync + 'static,
    A: Default,
{
    let attributes = vec![
        KeyValue::new(attribute::DB_QUERY_TEXT, text),
        KeyValue::new(attribute::COSMOS_QUERY_SCOPE, label),
    ];
    let name = span::query(state.container_name);
    let mut span = state.cosmos.span(parent, name, state.query(), attributes);
    let mut answer = A::default();
    let drained: Result<(), azure_data_cosmos::CosmosError> = async {
        let mut pages = container
            .query_items::<T>(query, scope, None)
            .await?
            .into_pages();
        while let Some(page) = pages
            .try_next()
            .await
            .inspect_err(|e| span.record(e.diagnostics().as_ref()))?
        {
            span.record(Some(&page.diagnostics()));
            for item in page.into_items() {
                fold(&mut answer, item);
            }
        }
        Ok(())
    }
    .await;
    let cost = span.end(drained.as_ref().err());
    drained?;
    Ok((answer, cost))
}

impl AppState {
    /// The operation every utilization query is, for its spans and metrics.
    pub(crate) fn query(&self) -> Operation {
        Operation {
            name: operation::QUERY_ITEMS,
            container: self.container_name,
        }
    }
}
