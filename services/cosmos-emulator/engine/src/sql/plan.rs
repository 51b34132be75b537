//! The query plan's `queryInfo`: what an SDK must do itself to answer a query that
//! spans physical partitions, and the rewritten query each partition runs so that what
//! it returns can be merged.
//!
//! - `ORDER BY`: each partition returns `{_rid, orderByItems: [{item}], payload}` in
//!   order; the SDK merges the sorted streams and keeps `payload`.
//! - `SELECT VALUE <aggregate>`: each partition returns `[{item}]` (for `AVG`,
//!   `{item: {sum, count}}`; for `MIN`/`MAX`, to a client that declares
//!   `CompositeAggregate`, also `item2: {min|max, count}`, so an empty partition's
//!   undefined is told from a value); the SDK combines the items.
//! - `GROUP BY`, and aggregates among other SELECT items: each partition returns one
//!   row per group, `{groupByItems: [{item}], payload: {alias: value | {item}}}`; the
//!   SDK merges the groups, combining each alias as `groupByAliasToAggregateType` says.
//! - `DISTINCT`, `OFFSET/LIMIT` and `TOP` are applied again by the SDK over the merged
//!   rows; each partition runs `OFFSET 0 LIMIT offset+limit`.

use serde_json::{json, Value};

use super::parser::{Aggregate, Expr, Projection, Query, SortOrder};
use super::print::write_object;
use super::SqlError;

/// The `ORDER BY` placeholder an SDK fills with its resume filter (`true` at first).
pub const ORDER_BY_FILTER: &str = "{documentdb-formattableorderbyquery-filter}";

/// The query-pipeline features `query` needs, by the names SDKs declare them with.
pub fn required_features(query: &Query) -> Vec<&'static str> {
    let mut features = Vec::new();
    if query.is_aggregate() {
        features.push(if query.is_value_aggregate() {
            "Aggregate"
        } else {
            "NonValueAggregate"
        });
    }
    if !query.group_by.is_empty() {
        features.push("GroupBy");
    }
    if query.distinct {
        features.push("Distinct");
    }
    match query.order_by.len() {
        0 => {}
        1 => features.push("OrderBy"),
        _ => features.push("MultipleOrderBy"),
    }
    if query.offset_limit.is_some() {
        features.push("OffsetAndLimit");
    }
    if query.top.is_some() {
        features.push("Top");
    }
    features
}

/// The plan's `queryInfo` for `query`, for a client that declared `client_features`
/// (a comma-separated list; absent means the client did not say, and is trusted).
pub fn query_info(query: &Query, client_features: Option<&str>) -> Result<Value, SqlError> {
    let required = required_features(query);
    if let Some(declared) = client_features {
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|feature| !declared.split(',').any(|d| d.trim() == *feature))
            .collect();
        if !missing.is_empty() {
            return Err(SqlError::new(format!(
                "Query contains 1 or more unsupported features. Upgrade your SDK to a version that does support the requested features: Query contained {}, which the calling client does not support.",
                missing.join(", ")
            )));
        }
    }
    let grouping = grouping(query)?;
    let composite = client_features.is_some_and(|declared| {
        declared
            .split(',')
            .any(|d| d.trim() == "CompositeAggregate")
    });
    let rewritten = rewritten_query(query, grouping.as_deref(), composite);
    // The rewritten query nests sort keys and payloads a level or two deeper than the
    // query did; one at the edge of the parser's depth limit cannot be run.
    if let Err(e) = super::parse(&rewritten.replace(ORDER_BY_FILTER, "true")) {
        return Err(SqlError::new(format!(
            "this query cannot be rewritten to run per partition ({e}); pass the partition key"
        )));
    }
    let distinct_type = match (query.distinct, query.order_by.is_empty()) {
        (false, _) => "None",
        (true, true) => "Unordered",
        (true, false) => "Ordered",
    };
    let aggregates: Vec<&str> = match &query.projection {
        Projection::Value(Expr::Aggregate(kind, _)) if grouping.is_none() => {
            vec![aggregate_type(*kind)]
        }
        _ => Vec::new(),
    };
    let (group_by_aliases, alias_types) = match &grouping {
        Some(columns) => (
            columns.iter().map(|c| c.alias.as_str()).collect(),
            columns
                .iter()
                .map(|c| (c.alias.clone(), json!(c.aggregate.map(aggregate_type))))
                .collect(),
        ),
        None => (Vec::new(), serde_json::Map::new()),
    };
    Ok(json!({
        "distinctType": distinct_type,
        "top": query.top,
        "offset": query.offset_limit.map(|ol| ol.offset),
        "limit": query.offset_limit.map(|ol| ol.limit),
        "orderBy": query.order_by.iter().map(|(_, order)| match order {
            SortOrder::Ascending => "Ascending",
            SortOrder::Descending => "Descending",
        }).collect::<Vec<_>>(),
        "orderByExpressions": query.order_by.iter()
            .map(|(expr, _)| expr.to_sql(&query.alias))
            .collect::<Vec<_>>(),
        "groupByExpressions": query.group_by.iter()
            .map(|expr| expr.to_sql(&query.alias))
            .collect::<Vec<_>>(),
        "groupByAliases": group_by_aliases,
        "aggregates": aggregates,
        "groupByAliasToAggregateType": alias_types,
        "rewrittenQuery": rewritten,
        "hasSelectValue": matches!(query.projection, Projection::Value(_)),
        "hasNonStreamingOrderBy": false,
    }))
}

/// One column of a grouped result: its name in the payload, and how the SDK combines
/// it across partitions (`None`: a `GROUP BY` value, equal in every partition).
struct GroupColumn<'q> {
    alias: String,
    aggregate: Option<Aggregate>,
    expr: &'q Expr,
}

/// The columns of a query the SDK must group across partitions: one with `GROUP BY`, or
/// with aggregates that are not the whole `SELECT VALUE`. `None` for any other query.
fn grouping(query: &Query) -> Result<Option<Vec<GroupColumn<'_>>>, SqlError> {
    if query.group_by.is_empty() && (!query.is_aggregate() || query.is_value_aggregate()) {
        return Ok(None);
    }
    let columns: Vec<(String, &Expr)> = match &query.projection {
        Projection::Fields(fields) => fields.iter().map(|(n, e)| (n.clone(), e)).collect(),
        Projection::Value(expr) => vec![("$1".to_owned(), expr)],
        Projection::Star => Vec::new(),
    };
    let mut grouped = Vec::with_capacity(columns.len());
    for (alias, expr) in columns {
        let aggregate = match expr {
            Expr::Aggregate(kind, _) => Some(*kind),
            other if other.contains_aggregate() => {
                return Err(SqlError::new(format!(
                    "'{alias}' computes with an aggregate, which cannot be combined across partitions; make each aggregate a SELECT item of its own, or pass the partition key"
                )))
            }
            _ => None,
        };
        grouped.push(GroupColumn {
            alias,
            aggregate,
            expr,
        });
    }
    Ok(Some(grouped))
}

/// An aggregate as each partition reports it, for the SDK to combine: `{"item": …}`.
/// For `AVG` the item is the partition's sum and count. For `MIN` and `MAX`, when
/// `composite`, an `item2` beside the plain item carries the value with its count
/// (`{"min": …, "count": …}`): SDKs that combine composites read `item2`, the others
/// `item`.
fn partial_aggregate(kind: Aggregate, arg: &Expr, alias: &str, composite: bool) -> String {
    let arg = arg.to_sql(alias);
    let name = super::print::aggregate_name(kind);
    match kind {
        Aggregate::Avg => {
            format!("{{\"item\": {{\"sum\": SUM({arg}), \"count\": COUNT({arg})}}}}")
        }
        Aggregate::Min | Aggregate::Max if composite => {
            let field = name.to_ascii_lowercase();
            format!(
                "{{\"item\": {name}({arg}), \"item2\": {{\"{field}\": {name}({arg}), \"count\": COUNT({arg})}}}}"
            )
        }
        _ => format!("{{\"item\": {name}({arg})}}"),
    }
}

fn aggregate_type(kind: Aggregate) -> &'static str {
    match kind {
        Aggregate::Count => "Count",
        Aggregate::Sum => "Sum",
        Aggregate::Min => "Min",
        Aggregate::Max => "Max",
        Aggregate::Avg => "Average",
    }
}

/// The query each partition runs so that the SDK can merge the results; `grouped` is
/// [`grouping`]'s answer for `query`; `composite`: MIN and MAX with their counts.
fn rewritten_query(query: &Query, grouped: Option<&[GroupColumn<'_>]>, composite: bool) -> String {
    let alias = query.alias.as_str();
    let mut sql = String::from("SELECT ");
    // A group must be whole in each partition's answer: TOP, DISTINCT and OFFSET apply
    // to the merged groups only.
    if let Some(columns) = grouped {
        let payload = columns.iter().map(|column| {
            let value = match (column.aggregate, column.expr) {
                (Some(kind), Expr::Aggregate(_, arg)) => {
                    partial_aggregate(kind, arg, alias, composite)
                }
                _ => column.expr.to_sql(alias),
            };
            format!(
                "{}: {value}",
                serde_json::Value::from(column.alias.as_str())
            )
        });
        sql.push_str(&format!(
            "{} AS groupByItems, {{{}}} AS payload",
            items(query.group_by.iter(), alias),
            comma_separated(payload)
        ));
    } else {
        if query.distinct {
            sql.push_str("DISTINCT ");
        }
        if let Some(top) = query.top {
            sql.push_str(&format!("TOP {top} "));
        }
        if !query.order_by.is_empty() {
            // `_rid` would make every row distinct.
            if !query.distinct {
                sql.push_str(&format!("{alias}._rid, "));
            }
            sql.push_str(&items(query.order_by.iter().map(|(expr, _)| expr), alias));
            sql.push_str(" AS orderByItems, ");
            write_payload(&query.projection, alias, &mut sql);
            sql.push_str(" AS payload");
        } else if let Projection::Value(Expr::Aggregate(kind, arg)) = &query.projection {
            sql.push_str(&format!(
                "VALUE [{}]",
                partial_aggregate(*kind, arg, alias, composite)
            ));
        } else {
            match &query.projection {
                Projection::Star => sql.push('*'),
                projection => {
                    sql.push_str("VALUE ");
                    write_payload(projection, alias, &mut sql);
                }
            }
        }
    }
    sql.push_str(&format!(" FROM {alias}"));
    match (&query.filter, query.order_by.is_empty()) {
        (Some(filter), true) => sql.push_str(&format!(" WHERE {}", filter.to_sql(alias))),
        (None, true) => {}
        (Some(filter), false) => sql.push_str(&format!(
            " WHERE ({ORDER_BY_FILTER}) AND {}",
            filter.to_sql_in_and(alias)
        )),
        (None, false) => sql.push_str(&format!(" WHERE ({ORDER_BY_FILTER})")),
    }
    if !query.group_by.is_empty() {
        let keys = query.group_by.iter().map(|expr| expr.to_sql(alias));
        sql.push_str(&format!(" GROUP BY {}", comma_separated(keys)));
    }
    if !query.order_by.is_empty() {
        let keys = query.order_by.iter().map(|(expr, order)| {
            let direction = match order {
                SortOrder::Ascending => "ASC",
                SortOrder::Descending => "DESC",
            };
            format!("{} {direction}", expr.to_sql(alias))
        });
        sql.push_str(&format!(" ORDER BY {}", comma_separated(keys)));
    }
    if let (Some(ol), None) = (query.offset_limit, grouped) {
        // The parser reads counts up to u32::MAX.
        let limit = ol.offset.saturating_add(ol.limit).min(u64::from(u32::MAX));
        sql.push_str(&format!(" OFFSET 0 LIMIT {limit}"));
    }
    sql
}

/// `[{"item": a}, {"item": b}, …]`: the sort or group keys beside each row.
fn items<'e>(exprs: impl Iterator<Item = &'e Expr>, alias: &str) -> String {
    let items = exprs.map(|expr| format!("{{\"item\": {}}}", expr.to_sql(alias)));
    format!("[{}]", comma_separated(items))
}

fn comma_separated(parts: impl Iterator<Item = String>) -> String {
    parts.collect::<Vec<_>>().join(", ")
}

/// The projection as one value: `SELECT *` is the document, `SELECT a, b` the object
/// `{"a": …, "b": …}`.
fn write_payload(projection: &Projection, alias: &str, sql: &mut String) {
    match projection {
        Projection::Star => sql.push_str(alias),
        Projection::Value(expr) => sql.push_str(&expr.to_sql(alias)),
        Projection::Fields(fields) => write_object(
            fields.iter().map(|(name, expr)| (name.as_str(), expr)),
            alias,
            sql,
        ),
    }
}
