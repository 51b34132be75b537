//! The SQL subset the emulator understands, and its execution over documents.
//!
//! Supported: `SELECT [DISTINCT] [TOP n] * | VALUE expr | expr [AS name], … FROM alias
//! [WHERE expr] [GROUP BY expr, …] [ORDER BY expr [ASC|DESC], …] [OFFSET n LIMIT m]` with
//! parameters, comparisons, `AND`/`OR`/`NOT`, `IN`, `BETWEEN`, arithmetic, array and
//! object constructors, a few scalar functions and `COUNT/SUM/MIN/MAX/AVG`. A query runs
//! whole inside one physical partition, as it does in Cosmos DB; across partitions the
//! SDK merges what each partition returns, following the query plan ([`plan`]).
//! Anything else is rejected with a message naming the construct.
//!
//! A query's memory is bounded, as Cosmos DB bounds a query's work: a value the query
//! builds (an array, an object, a concatenation) holds at most [`MAX_VALUE_BYTES`]; a
//! query that sorts, groups or de-duplicates holds at most [`MAX_QUERY_BYTES`] of rows
//! and keys in one partition; a page holds at most [`MAX_PAGE_BYTES`] (the rest comes
//! with a continuation). Beyond a bound the query is refused with a 400 that says which.

mod eval;
mod lexer;
pub mod memory;
mod parser;
pub mod plan;
mod print;

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;

pub use eval::{matches, Params};
pub use memory::{json_bytes, MAX_PAGE_BYTES, MAX_QUERY_BYTES, MAX_VALUE_BYTES};

use memory::QueryMemory;
pub use parser::{parse, Expr, OffsetLimit, Projection, Query, SortOrder};

use eval::{sort_order, Accumulator};
use parser::{BinaryOp, PathStep};

/// A query the emulator cannot parse or run; becomes a `400 BadRequest`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SqlError(String);

impl SqlError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// The body of a query request: `{"query": "...", "parameters": [{"name","value"}]}`.
#[derive(Debug, Deserialize)]
pub struct QuerySpec {
    pub query: String,
    #[serde(default)]
    pub parameters: Vec<QueryParameter>,
}

#[derive(Debug, Deserialize)]
pub struct QueryParameter {
    pub name: String,
    #[serde(default)]
    pub value: Value,
}

/// A parsed query with its parameters bound and checked.
#[derive(Debug)]
pub struct PreparedQuery {
    pub query: Query,
    pub params: Params,
}

impl PreparedQuery {
    pub fn prepare(spec: &QuerySpec) -> Result<Self, SqlError> {
        let query = parse(&spec.query)?;
        let mut params = HashMap::with_capacity(spec.parameters.len());
        for p in &spec.parameters {
            if !p.name.starts_with('@') {
                return Err(SqlError::new(format!(
                    "parameter name '{}' must start with '@'",
                    p.name
                )));
            }
            params.insert(p.name.clone(), p.value.clone());
        }
        let mut missing = None;
        visit_params(&query, &mut |name| {
            if !params.contains_key(name) && missing.is_none() {
                missing = Some(name.to_owned());
            }
        });
        if let Some(name) = missing {
            return Err(SqlError::new(format!(
                "parameter {name} is used in the query but was not supplied"
            )));
        }
        check_clauses(&query)?;
        Ok(Self { query, params })
    }

    pub fn matches(&self, doc: &Value) -> Result<bool, SqlError> {
        match &self.query.filter {
            Some(filter) => matches(filter, doc, &self.params),
            None => Ok(true),
        }
    }

    /// Applies the projection to one matching document (streaming queries).
    /// Returns `None` when the projected value is undefined (Cosmos drops such rows).
    pub fn project(&self, doc: &Value) -> Result<Option<Value>, SqlError> {
        project(&self.query.projection, doc, &self.params)
    }

    /// The whole result over `docs` (the documents that matched the filter), for a
    /// query that is not streaming: grouped and aggregated, or sorted; then
    /// de-duplicated, offset and limited, and cut to `TOP`. What it holds is bounded by
    /// [`MAX_QUERY_BYTES`].
    pub fn run_all<'a>(
        &self,
        docs: impl IntoIterator<Item = &'a Value>,
    ) -> Result<Vec<Value>, SqlError> {
        let query = &self.query;
        let mut memory = QueryMemory::default();
        let mut rows = if query.is_aggregate() || !query.group_by.is_empty() {
            self.grouped(docs, &mut memory)?
        } else if !query.order_by.is_empty() {
            self.sorted(docs, &mut memory)?
        } else {
            let mut rows = Vec::new();
            for doc in docs {
                if let Some(row) = self.project(doc)? {
                    memory.take(json_bytes(&row))?;
                    rows.push(row);
                }
            }
            rows
        };
        if query.distinct {
            let mut seen = HashSet::new();
            let mut kept = Vec::with_capacity(rows.len());
            for row in rows {
                let key = canonical(&row);
                memory.take(key.len())?;
                if seen.insert(key) {
                    kept.push(row);
                }
            }
            rows = kept;
        }
        if let Some(OffsetLimit { offset, limit }) = query.offset_limit {
            let skip = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(rows.len());
            rows.drain(..skip);
            rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        if let Some(top) = query.top {
            rows.truncate(usize::try_from(top).unwrap_or(usize::MAX));
        }
        Ok(rows)
    }

    /// One row per group (one in all without `GROUP BY`): the projection evaluated on
    /// the group's first document, with each aggregate replaced by its result.
    fn grouped<'a>(
        &self,
        docs: impl IntoIterator<Item = &'a Value>,
        memory: &mut QueryMemory,
    ) -> Result<Vec<Value>, SqlError> {
        struct Group<'a> {
            first: &'a Value,
            accumulators: Vec<Accumulator>,
        }
        let mut aggregates = Vec::new();
        for expr in self.query.projection_exprs() {
            collect_aggregates(expr, &mut aggregates);
        }
        let fresh = || {
            aggregates
                .iter()
                .map(|(kind, _)| Accumulator::new(*kind))
                .collect::<Vec<_>>()
        };
        let mut groups: Vec<Group<'a>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        for doc in docs {
            let mut key = String::new();
            for expr in &self.query.group_by {
                match eval::eval(expr, doc, &self.params)? {
                    Some(value) => key.push_str(&canonical(&value)),
                    None => key.push('~'),
                }
                key.push('|');
            }
            let index = match by_key.get(&key) {
                Some(index) => *index,
                None => {
                    memory.take(key.len())?;
                    groups.push(Group {
                        first: doc,
                        accumulators: fresh(),
                    });
                    by_key.insert(key, groups.len() - 1);
                    groups.len() - 1
                }
            };
            for (accumulator, (_, arg)) in groups[index].accumulators.iter_mut().zip(&aggregates) {
                accumulator.add(eval::eval(arg, doc, &self.params)?.as_deref());
            }
        }
        if groups.is_empty() && self.query.group_by.is_empty() {
            static NO_DOCUMENT: Value = Value::Null;
            groups.push(Group {
                first: &NO_DOCUMENT,
                accumulators: fresh(),
            });
        }
        let mut rows = Vec::with_capacity(groups.len());
        for group in groups {
            let mut results = group.accumulators.iter().map(Accumulator::finish);
            let mut projection = self.query.projection.clone();
            for expr in projection.exprs_mut() {
                substitute_aggregates(expr, &mut results);
            }
            if let Some(row) = project(&projection, group.first, &self.params)? {
                memory.take(json_bytes(&row))?;
                rows.push(row);
            }
        }
        Ok(rows)
    }

    /// The projected rows in `ORDER BY` order (stable: ties keep document order).
    fn sorted<'a>(
        &self,
        docs: impl IntoIterator<Item = &'a Value>,
        memory: &mut QueryMemory,
    ) -> Result<Vec<Value>, SqlError> {
        let mut keyed = Vec::new();
        for doc in docs {
            let mut keys = Vec::with_capacity(self.query.order_by.len());
            for (expr, _) in &self.query.order_by {
                let key = eval::eval(expr, doc, &self.params)?.map(std::borrow::Cow::into_owned);
                memory.take(key.as_ref().map_or(1, json_bytes))?;
                keys.push(key);
            }
            keyed.push((keys, doc));
        }
        keyed.sort_by(|(a, _), (b, _)| {
            a.iter()
                .zip(b)
                .zip(&self.query.order_by)
                .map(|((x, y), (_, order))| {
                    let ord = sort_order(x.as_ref(), y.as_ref());
                    match order {
                        SortOrder::Ascending => ord,
                        SortOrder::Descending => ord.reverse(),
                    }
                })
                .find(|ord| ord.is_ne())
                .unwrap_or(Ordering::Equal)
        });
        let mut rows = Vec::with_capacity(keyed.len());
        for (_, doc) in keyed {
            if let Some(row) = self.project(doc)? {
                memory.take(json_bytes(&row))?;
                rows.push(row);
            }
        }
        Ok(rows)
    }

    /// Top-level `AND`-ed equalities `alias.field = constant`, usable for an index lookup
    /// (and, for the partition key path, to narrow a query to one logical partition).
    pub fn equality_constraints(&self) -> Vec<(&str, &Value)> {
        let mut out = Vec::new();
        if let Some(filter) = &self.query.filter {
            collect_equalities(filter, &self.params, &mut out);
        }
        out
    }
}

fn project(
    projection: &Projection,
    doc: &Value,
    params: &Params,
) -> Result<Option<Value>, SqlError> {
    Ok(match projection {
        Projection::Star => Some(doc.clone()),
        Projection::Value(expr) => eval::eval(expr, doc, params)?.map(std::borrow::Cow::into_owned),
        Projection::Fields(fields) => Some(eval::object(fields, doc, params)?),
    })
}

/// The aggregates of `expr` in source order (not looking inside an aggregate).
fn collect_aggregates<'a>(expr: &'a Expr, out: &mut Vec<(parser::Aggregate, &'a Expr)>) {
    match expr {
        Expr::Aggregate(kind, arg) => out.push((*kind, arg)),
        other => other.for_each_child(&mut |child| collect_aggregates(child, out)),
    }
}

/// Replaces the aggregates of `expr`, in [`collect_aggregates`]'s order, by `results`.
fn substitute_aggregates(expr: &mut Expr, results: &mut impl Iterator<Item = Option<Value>>) {
    if let Expr::Aggregate(..) = expr {
        *expr = match results.next().flatten() {
            Some(value) => Expr::Literal(value),
            None => Expr::Undefined,
        };
        return;
    }
    let _ = expr.try_for_each_child_mut(&mut |child| {
        substitute_aggregates(child, results);
        Ok(())
    });
}

/// A text that is equal for equal values: object keys sorted, numbers by value.
fn canonical(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Number(n) => {
                out.push('n');
                out.push_str(&n.as_f64().unwrap_or(f64::NAN).to_string());
            }
            Value::Array(items) => {
                out.push('[');
                for item in items {
                    write(item, out);
                    out.push(',');
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by_key(|(key, _)| *key);
                out.push('{');
                for (key, item) in entries {
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push(':');
                    write(item, out);
                    out.push(',');
                }
                out.push('}');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// The rules Cosmos DB applies across clauses, checked before anything runs.
fn check_clauses(query: &Query) -> Result<(), SqlError> {
    let nested_aggregate = query.filter.as_ref().is_some_and(Expr::contains_aggregate)
        || query.group_by.iter().any(Expr::contains_aggregate)
        || query.order_by.iter().any(|(e, _)| e.contains_aggregate())
        || query.projection_exprs().any(aggregate_inside_aggregate);
    if nested_aggregate {
        return Err(SqlError::new(
            "aggregate functions are only allowed in the SELECT list, and not inside one another",
        ));
    }
    let grouping = query.is_aggregate() || !query.group_by.is_empty();
    if grouping && !query.order_by.is_empty() {
        return Err(SqlError::new(
            "ORDER BY cannot be combined with GROUP BY or aggregates in this emulator",
        ));
    }
    if !query.group_by.is_empty() && query.projection == Projection::Star {
        return Err(SqlError::new("SELECT * is not valid with GROUP BY"));
    }
    if grouping
        && !query
            .projection_exprs()
            .all(|e| is_grouped(e, &query.group_by))
    {
        return Err(SqlError::new(if query.group_by.is_empty() {
            "mixing aggregates and plain values in SELECT needs GROUP BY"
        } else {
            "every value in SELECT must be an aggregate or appear in GROUP BY"
        }));
    }
    Ok(())
}

fn aggregate_inside_aggregate(expr: &Expr) -> bool {
    match expr {
        Expr::Aggregate(_, arg) => arg.contains_aggregate(),
        other => {
            let mut found = false;
            other.for_each_child(&mut |child| found = found || aggregate_inside_aggregate(child));
            found
        }
    }
}

/// True when `expr` reads documents only through aggregates or `GROUP BY` expressions.
fn is_grouped(expr: &Expr, group_by: &[Expr]) -> bool {
    match expr {
        Expr::Aggregate(..) | Expr::Literal(_) | Expr::Undefined | Expr::Param(_) => true,
        _ if group_by.contains(expr) => true,
        Expr::Root => false,
        other => {
            let mut grouped = !matches!(other, Expr::Path(_));
            other.for_each_child(&mut |child| grouped = grouped && is_grouped(child, group_by));
            grouped
        }
    }
}

fn collect_equalities<'a>(expr: &'a Expr, params: &'a Params, out: &mut Vec<(&'a str, &'a Value)>) {
    match expr {
        Expr::Chain(first, rest) if rest.iter().all(|(op, _)| *op == BinaryOp::And) => {
            collect_equalities(first, params, out);
            for (_, operand) in rest {
                collect_equalities(operand, params, out);
            }
        }
        Expr::Binary(BinaryOp::Eq, left, right) => {
            let constant = |e: &'a Expr| match e {
                Expr::Literal(v) => Some(v),
                Expr::Param(name) => params.get(name),
                _ => None,
            };
            let field = |e: &'a Expr| match e {
                Expr::Path(steps) => match steps.as_slice() {
                    [PathStep::Field(name)] => Some(name.as_str()),
                    _ => None,
                },
                _ => None,
            };
            if let (Some(f), Some(v)) = (field(left), constant(right)) {
                out.push((f, v));
            } else if let (Some(v), Some(f)) = (constant(left), field(right)) {
                out.push((f, v));
            }
        }
        _ => {}
    }
}

fn visit_params(query: &Query, visit: &mut impl FnMut(&str)) {
    fn walk(expr: &Expr, visit: &mut impl FnMut(&str)) {
        if let Expr::Param(name) = expr {
            visit(name);
        }
        expr.for_each_child(&mut |child| walk(child, visit));
    }
    query
        .projection_exprs()
        .chain(&query.filter)
        .chain(&query.group_by)
        .chain(query.order_by.iter().map(|(e, _)| e))
        .for_each(|e| walk(e, visit));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prepared(query: &str, params: Value) -> Result<PreparedQuery, SqlError> {
        let spec: QuerySpec =
            serde_json::from_value(json!({"query": query, "parameters": params})).expect("spec");
        PreparedQuery::prepare(&spec)
    }

    fn run(query: &str, params: Value, docs: &[Value]) -> Result<Vec<Value>, SqlError> {
        let q = prepared(query, params)?;
        let matching: Vec<&Value> = docs
            .iter()
            .filter(|d| q.matches(d).unwrap_or(false))
            .collect();
        q.run_all(matching)
    }

    fn docs() -> Vec<Value> {
        vec![
            json!({"id":"1","ownerId":"o1","year":2026,"month":3,"miles":10.5,"tags":["a","b"]}),
            json!({"id":"2","ownerId":"o1","year":2026,"month":4,"miles":2}),
            json!({"id":"3","ownerId":"o2","year":2026,"month":3,"miles":7}),
            json!({"id":"4","ownerId":"o2","year":2025,"month":3}),
        ]
    }

    #[test]
    fn the_study_query_selects_by_owner_year_and_month() {
        let out = run(
            "SELECT * FROM c WHERE c.ownerId = @o AND c.year = @y AND c.month = @m",
            json!([{"name":"@o","value":"o1"},{"name":"@y","value":2026},{"name":"@m","value":3}]),
            &docs(),
        )
        .expect("query runs");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["id"], "1");
    }

    #[test]
    fn or_not_in_and_between_follow_cosmos_semantics() {
        let ids = |q: &str| -> Vec<String> {
            run(q, json!([]), &docs())
                .expect("query runs")
                .into_iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect()
        };
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE c.month = 4 OR c.ownerId = 'o2'"),
            ["2", "3", "4"]
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE NOT (c.month = 3)"),
            ["2"]
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE c.id IN ('1', '4', 'x')"),
            ["1", "4"]
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE c.id NOT IN ('1', '4')"),
            ["2", "3"]
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE c.miles BETWEEN 2 AND 8"),
            ["2", "3"]
        );
        // A missing property is undefined: neither `> 1` nor `NOT (> 1)` keeps doc 4.
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE NOT (c.miles > 1)"),
            Vec::<String>::new()
        );
        // Comparing a string with a number is undefined, not false.
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE c.ownerId > 1"),
            Vec::<String>::new()
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE ARRAY_CONTAINS(c.tags, 'b')"),
            ["1"]
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c WHERE IS_DEFINED(c.miles) = false"),
            ["4"]
        );
    }

    #[test]
    fn projections_and_aggregates() {
        let out = run(
            "SELECT c.id, c.miles AS m FROM c WHERE c.id = '1'",
            json!([]),
            &docs(),
        )
        .expect("runs");
        assert_eq!(out, vec![json!({"id":"1","m":10.5})]);
        let out = run(
            "SELECT VALUE COUNT(1) FROM c WHERE c.year = 2026",
            json!([]),
            &docs(),
        )
        .expect("runs");
        assert_eq!(out, vec![json!(3)]);
        let out = run(
            "SELECT SUM(c.miles) AS total, MAX(c.miles) AS most, MIN(c.id) AS first, AVG(c.month) AS avg FROM c",
            json!([]),
            &docs(),
        )
        .expect("runs");
        assert_eq!(
            out,
            vec![json!({"total":19.5,"most":10.5,"first":"1","avg":3.25})]
        );
    }

    #[test]
    fn unsupported_and_malformed_queries_are_rejected_with_a_reason() {
        for (query, needle) in [
            ("SELECT * FROM c JOIN t IN c.tags", "JOIN"),
            ("SELECT * FROM c GROUP BY c.g", "SELECT *"),
            ("SELECT c.id, COUNT(1) AS n FROM c GROUP BY c.g", "GROUP BY"),
            ("SELECT VALUE COUNT(1) FROM c ORDER BY c.id", "ORDER BY"),
            ("SELECT TOP 1 * FROM c OFFSET 1 LIMIT 1", "TOP and OFFSET"),
            ("SELECT * FROM c OFFSET 1", "LIMIT"),
            ("SELECT * FROM c OFFSET -1 LIMIT 1", "OFFSET needs"),
            ("SELECT VALUE {a: 1, a: 2} FROM c", "twice"),
            ("SELECT VALUE SUM(COUNT(1)) FROM c", "inside one another"),
            ("SELECT * FROM c WHERE c.id = 'bad \\u12'", "\\u escape"),
            ("SELECT * FROM c WHERE", "expected an expression"),
            ("SELECT * FROM c WHERE x.id = 1", "could not be resolved"),
            ("SELECT * FROM c WHERE c.id = 'open", "unterminated"),
            ("SELECT * FROM c WHERE c.id = @missing", "@missing"),
            ("SELECT c.id, COUNT(1) FROM c", "GROUP BY"),
            ("SELECT * FROM c WHERE COUNT(1) > 1", "aggregate"),
            ("DELETE FROM c", "SELECT"),
            ("SELECT * FROM c WHERE FOO(c.id)", "FOO"),
        ] {
            let outcome = run(query, json!([]), &docs());
            let err = outcome.expect_err(query);
            assert!(err.to_string().contains(needle), "{query}: {err}");
        }
    }

    fn shop() -> Vec<Value> {
        vec![
            json!({"id":"a","city":"Oslo","n":3,"tags":["x"]}),
            json!({"id":"b","city":"Bergen","n":1}),
            json!({"id":"c","city":"Oslo","n":2}),
            json!({"id":"d","n":"text"}),
            json!({"id":"e","city":"Bergen","n":null}),
            json!({"id":"f","city":"Oslo","n":true}),
        ]
    }

    fn ids(query: &str) -> Vec<Value> {
        run(query, json!([]), &shop()).expect(query)
    }

    #[test]
    fn order_by_sorts_across_types_in_cosmos_order_and_ties_keep_document_order() {
        assert_eq!(
            ids("SELECT VALUE c.id FROM c ORDER BY c.n"),
            json!(["e", "f", "b", "c", "a", "d"])
                .as_array()
                .cloned()
                .unwrap_or_default()
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c ORDER BY c.city DESC, c.id ASC"),
            json!(["a", "c", "f", "b", "e", "d"])
                .as_array()
                .cloned()
                .unwrap_or_default()
        );
        assert_eq!(
            ids("SELECT TOP 2 c.id FROM c WHERE IS_DEFINED(c.city) ORDER BY c.id DESC"),
            vec![json!({"id": "f"}), json!({"id": "e"})]
        );
    }

    #[test]
    fn distinct_offset_limit_and_constructors() {
        assert_eq!(
            ids("SELECT DISTINCT VALUE c.city FROM c"),
            vec![json!("Oslo"), json!("Bergen")]
        );
        assert_eq!(
            ids("SELECT DISTINCT c.city FROM c WHERE IS_DEFINED(c.city) ORDER BY c.city"),
            vec![json!({"city": "Bergen"}), json!({"city": "Oslo"})]
        );
        assert_eq!(
            ids("SELECT VALUE c.id FROM c ORDER BY c.id OFFSET 1 LIMIT 2"),
            vec![json!("b"), json!("c")]
        );
        assert_eq!(
            ids("SELECT * FROM c OFFSET 10 LIMIT 2"),
            Vec::<Value>::new()
        );
        assert_eq!(
            ids("SELECT VALUE {\"key\": c.id, n: c.n * 2, none: c.missing, list: [c.n, c.missing]} FROM c WHERE c.id = 'a'"),
            vec![json!({"key": "a", "n": 6, "list": [3]})]
        );
        // Equal values are one, however they are written.
        let docs = vec![
            json!({"v": {"a": 1, "b": [2.0]}}),
            json!({"v": {"b": [2], "a": 1.0}}),
        ];
        let out = run("SELECT DISTINCT VALUE c.v FROM c", json!([]), &docs).expect("runs");
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn group_by_gives_one_row_per_group_with_its_aggregates() {
        assert_eq!(
            ids("SELECT c.city, COUNT(1) AS n, MAX(c.id) AS last FROM c GROUP BY c.city"),
            vec![
                json!({"city": "Oslo", "n": 3, "last": "f"}),
                json!({"city": "Bergen", "n": 2, "last": "e"}),
                json!({"n": 1, "last": "d"}),
            ]
        );
        assert_eq!(
            ids("SELECT VALUE {\"c\": c.city, \"total\": SUM(c.n) + 1} FROM c WHERE c.city = 'Bergen' GROUP BY c.city"),
            vec![json!({"c": "Bergen"})],
            "SUM over a null is undefined, and so is undefined + 1"
        );
        assert_eq!(
            ids("SELECT VALUE COUNT(1) FROM c WHERE c.id = 'none' GROUP BY c.city"),
            Vec::<Value>::new(),
            "no documents, no groups"
        );
        assert_eq!(
            ids("SELECT VALUE COUNT(1) FROM c WHERE c.id = 'none'"),
            vec![json!(0)],
            "without GROUP BY an aggregate answers over nothing"
        );
    }

    /// Splits documents over `parts` partitions, runs the plan's rewritten query in
    /// each and merges the results the way the SDKs' pipelines do.
    fn run_as_the_sdk_would(query: &str, docs: &[Value], parts: usize) -> Vec<Value> {
        let original = prepared(query, json!([])).expect(query);
        let info = plan::query_info(&original.query, None).expect("plan");
        // The SDK fills the ORDER BY resume filter; `true` on a first run.
        let rewritten = info["rewrittenQuery"]
            .as_str()
            .expect("rewritten")
            .replace(plan::ORDER_BY_FILTER, "true");
        let mut streams: Vec<Vec<Value>> = (0..parts)
            .map(|p| {
                let part: Vec<Value> = docs.iter().skip(p).step_by(parts).cloned().collect();
                run(&rewritten, json!([]), &part).expect(&rewritten)
            })
            .collect();
        let orders = info["orderBy"].as_array().cloned().unwrap_or_default();
        let mut merged = Vec::new();
        if !orders.is_empty() {
            // A k-way merge on orderByItems, keeping payloads.
            loop {
                let mut best: Option<usize> = None;
                for (i, stream) in streams.iter().enumerate() {
                    let Some(head) = stream.first() else { continue };
                    let better = best.is_none_or(|b| {
                        let (x, y) = (&head["orderByItems"], &streams[b][0]["orderByItems"]);
                        orders
                            .iter()
                            .enumerate()
                            .map(|(k, order)| {
                                let ord = sort_order(x[k].get("item"), y[k].get("item"));
                                if order == "Descending" {
                                    ord.reverse()
                                } else {
                                    ord
                                }
                            })
                            .find(|o| o.is_ne())
                            == Some(Ordering::Less)
                    });
                    if better {
                        best = Some(i);
                    }
                }
                let Some(b) = best else { break };
                merged.push(streams[b].remove(0)["payload"].clone());
            }
        } else {
            merged = streams.into_iter().flatten().collect();
        }
        if let Some(types) = info["groupByAliasToAggregateType"]
            .as_object()
            .filter(|types| !types.is_empty())
        {
            return merge_groups(&merged, types, info["hasSelectValue"] == json!(true));
        }
        if let Some(aggregate) = info["aggregates"].get(0).and_then(Value::as_str) {
            let items: Vec<Value> = merged
                .iter()
                .filter_map(|row| row[0].get("item").cloned())
                .collect();
            let total = match aggregate {
                "Count" | "Sum" => json!(items.iter().filter_map(Value::as_f64).sum::<f64>()),
                "Average" => {
                    let sum: f64 = items.iter().filter_map(|i| i["sum"].as_f64()).sum();
                    let count: f64 = items.iter().filter_map(|i| i["count"].as_f64()).sum();
                    json!(sum / count)
                }
                "Max" => items
                    .into_iter()
                    .max_by(|a, b| sort_order(Some(a), Some(b)))
                    .unwrap_or(Value::Null),
                _ => items
                    .into_iter()
                    .min_by(|a, b| sort_order(Some(a), Some(b)))
                    .unwrap_or(Value::Null),
            };
            return vec![total];
        }
        if info["distinctType"] != "None" {
            let mut seen = HashSet::new();
            merged.retain(|row| seen.insert(canonical(row)));
        }
        let offset = info["offset"].as_u64().unwrap_or(0) as usize;
        let take = info["limit"]
            .as_u64()
            .or(info["top"].as_u64())
            .unwrap_or(u64::MAX) as usize;
        merged.into_iter().skip(offset).take(take).collect()
    }

    /// Combines per-partition groups `{groupByItems, payload}` by their items, each
    /// payload column as `types` says.
    fn merge_groups(
        rows: &[Value],
        types: &serde_json::Map<String, Value>,
        value: bool,
    ) -> Vec<Value> {
        let mut groups: Vec<(String, serde_json::Map<String, Value>)> = Vec::new();
        for row in rows {
            let key = canonical(&row["groupByItems"]);
            let payload = row["payload"].as_object().cloned().unwrap_or_default();
            let index = match groups.iter().position(|(k, _)| *k == key) {
                Some(index) => index,
                None => {
                    groups.push((key, serde_json::Map::new()));
                    groups.len() - 1
                }
            };
            let merged = &mut groups[index].1;
            for (alias, kind) in types {
                let Some(part) = payload.get(alias) else {
                    continue;
                };
                let Some(kind) = kind.as_str() else {
                    merged.insert(alias.clone(), part.clone());
                    continue;
                };
                let Some(item) = part.get("item") else {
                    continue;
                };
                let combined = match (kind, merged.get(alias)) {
                    (_, None) => item.clone(),
                    ("Count" | "Sum", Some(sum)) => {
                        json!(sum.as_f64().unwrap_or(0.0) + item.as_f64().unwrap_or(0.0))
                    }
                    ("Average", Some(acc)) => json!({
                        "sum": acc["sum"].as_f64().unwrap_or(0.0) + item["sum"].as_f64().unwrap_or(0.0),
                        "count": acc["count"].as_f64().unwrap_or(0.0) + item["count"].as_f64().unwrap_or(0.0),
                    }),
                    ("Max", Some(best)) if sort_order(Some(item), Some(best)).is_gt() => {
                        item.clone()
                    }
                    ("Min", Some(best)) if sort_order(Some(item), Some(best)).is_lt() => {
                        item.clone()
                    }
                    (_, Some(best)) => best.clone(),
                };
                merged.insert(alias.clone(), combined);
            }
        }
        groups
            .into_iter()
            .map(|(_, mut columns)| {
                for (alias, kind) in types {
                    if kind == "Average" {
                        if let Some(acc) = columns.get(alias) {
                            let mean = acc["sum"].as_f64().unwrap_or(0.0)
                                / acc["count"].as_f64().unwrap_or(1.0);
                            columns.insert(alias.clone(), json!(mean));
                        }
                    }
                }
                if value {
                    columns.remove("$1").unwrap_or(Value::Null)
                } else {
                    Value::Object(columns)
                }
            })
            .collect()
    }

    /// Documents with groups (`g`), repeating numbers (`n`) and strings (`s`).
    fn forty_docs() -> Vec<Value> {
        (0..40)
            .map(|i| json!({"id": format!("d{i:02}"), "g": i % 4, "n": (i * 7) % 11, "s": format!("s{}", i % 5)}))
            .collect()
    }

    #[test]
    fn grouped_queries_merge_across_partitions_to_the_single_partition_answer() {
        let docs = forty_docs();
        // Numbers compare by value: partitions sum to 12.0 where one partition says 12.
        let normalise = |rows: Vec<Value>| {
            let mut keys: Vec<String> = rows.iter().map(canonical).collect();
            keys.sort();
            keys
        };
        for query in [
            "SELECT c.g, COUNT(1) AS n, SUM(c.n) AS total, MIN(c.s) AS first, MAX(c.n) AS most, AVG(c.n) AS mean FROM c GROUP BY c.g",
            "SELECT c.g, c.s FROM c WHERE c.n > 2 GROUP BY c.g, c.s",
            "SELECT VALUE COUNT(1) FROM c GROUP BY c.s",
            "SELECT COUNT(1) AS n, MAX(c.id) AS last FROM c WHERE c.g = 1",
        ] {
            let whole = run(query, json!([]), &docs).expect(query);
            let merged = run_as_the_sdk_would(query, &docs, 3);
            assert_eq!(normalise(merged), normalise(whole), "{query}");
        }
    }

    #[test]
    fn the_plans_rewritten_queries_merge_to_the_single_partition_answer() {
        let docs = forty_docs();
        for query in [
            "SELECT * FROM c ORDER BY c.n DESC, c.id",
            "SELECT VALUE c.id FROM c WHERE c.g != 1 ORDER BY c.s, c.n DESC, c.id",
            "SELECT c.id, c.n AS num FROM c ORDER BY c.n, c.id OFFSET 5 LIMIT 7",
            "SELECT TOP 9 c.id FROM c ORDER BY c.id DESC",
            "SELECT DISTINCT VALUE c.s FROM c ORDER BY c.s DESC",
            "SELECT DISTINCT VALUE c.g FROM c",
            "SELECT VALUE c.n FROM r c OFFSET 3 LIMIT 4",
        ] {
            let whole = run(query, json!([]), &docs).expect(query);
            let mut merged = run_as_the_sdk_would(query, &docs, 3);
            if query.contains("DISTINCT VALUE c.g") || !query.contains("ORDER BY") {
                // Unordered: the same rows, in an order the partitions decide.
                assert_eq!(merged.len(), whole.len(), "{query}");
                if query.contains("DISTINCT") {
                    merged.sort_by(|a, b| sort_order(Some(a), Some(b)));
                    let mut whole = whole.clone();
                    whole.sort_by(|a, b| sort_order(Some(a), Some(b)));
                    assert_eq!(merged, whole, "{query}");
                }
                continue;
            }
            assert_eq!(merged, whole, "{query}");
        }
        for query in [
            "SELECT VALUE COUNT(1) FROM c WHERE c.g = 2",
            "SELECT VALUE SUM(c.n) FROM c",
            "SELECT VALUE AVG(c.n) FROM c",
            "SELECT VALUE MAX(c.s) FROM c",
            "SELECT VALUE MIN(c.n) FROM c WHERE c.g > 0",
        ] {
            let whole = run(query, json!([]), &docs).expect(query);
            let merged = run_as_the_sdk_would(query, &docs, 3);
            let as_f64 = |v: &[Value]| {
                v.iter()
                    .map(|x| x.as_f64().or(x.as_str().map(|_| f64::NAN)))
                    .collect::<Vec<_>>()
            };
            if whole[0].is_string() {
                assert_eq!(merged, whole, "{query}");
            } else {
                assert_eq!(as_f64(&merged), as_f64(&whole), "{query}");
            }
        }
    }

    #[test]
    fn printed_expressions_parse_back_to_the_same_tree() {
        for text in [
            "SELECT VALUE [c.a.b[0], c[\"odd-name\"], c.x[c.i], -3, - c.n, 'q\"uote\\n', 1.5e300, null, true, undefined] FROM c",
            "SELECT VALUE {\"a\": (c.x + 1) * 2 - c.y / 3 || 'z', b: NOT c.t AND c.u OR c.v} FROM c",
            "SELECT VALUE c.n IN (1, 2) AND c.m NOT IN ('a') AND c.k BETWEEN @lo AND 9 FROM c",
            "SELECT VALUE [STARTSWITH(c.s, 'a', true), ARRAY_CONTAINS(c.t, {k: 1}, true), COUNT(1), AVG(c.n)] FROM c",
        ] {
            let first = parse(text).expect(text);
            let Projection::Value(expr) = &first.projection else {
                panic!("{text}: not a VALUE projection");
            };
            let printed = expr.to_sql("c");
            let again = parse(&format!("SELECT VALUE {printed} FROM c")).expect(&printed);
            assert_eq!(again.projection, first.projection, "{printed}");
        }
    }

    #[test]
    fn rewritten_queries_nest_no_deeper_than_needed() {
        let deep_filter = format!(
            "SELECT * FROM c WHERE {}c.a = 1 OR c.b = 2{} ORDER BY c.n",
            "(".repeat(60),
            ")".repeat(60)
        );
        let original = prepared(&deep_filter, json!([])).expect("accepted");
        let info = plan::query_info(&original.query, None).expect("plans");
        let rewritten = info["rewrittenQuery"].as_str().expect("rewritten");
        assert!(
            rewritten.ends_with("WHERE ({documentdb-formattableorderbyquery-filter}) AND (c.a = 1 OR c.b = 2) ORDER BY c.n ASC"),
            "{rewritten}"
        );
        // A sort key at the edge of the depth limit goes two levels deeper inside
        // `[{"item": …}]`: the plan says so instead of handing out a query that fails.
        let deep_key = format!(
            "SELECT * FROM c ORDER BY {}c.n{}",
            "(".repeat(63),
            ")".repeat(63)
        );
        let deepest = format!(
            "SELECT VALUE {}c.n{} FROM c",
            "[".repeat(63),
            "]".repeat(63)
        );
        prepared(&deepest, json!([])).expect("the deepest accepted nesting");
        let keyed = prepared(
            &format!(
                "SELECT * FROM c ORDER BY {}",
                &deepest[13..deepest.len() - 7]
            ),
            json!([]),
        )
        .expect("accepted as a sort key");
        let err = plan::query_info(&keyed.query, None).expect_err("too deep to rewrite");
        assert!(err.to_string().contains("pass the partition key"), "{err}");
        let fine = prepared(&deep_key, json!([])).expect("parentheses alone add no nesting");
        plan::query_info(&fine.query, None).expect("plans");
    }

    #[test]
    fn min_and_max_partials_carry_their_count_for_clients_that_declare_composites() {
        let min = prepared("SELECT VALUE MIN(c.n) FROM c", json!([])).expect("parses");
        let plain = plan::query_info(&min.query, Some("Aggregate")).expect("plan");
        let plain = plain["rewrittenQuery"].as_str().expect("rewritten");
        assert!(!plain.contains("item2"), "{plain}");
        let info =
            plan::query_info(&min.query, Some("Aggregate,CompositeAggregate")).expect("plan");
        let rewritten = info["rewrittenQuery"].as_str().expect("rewritten");
        let docs = [
            json!({"id": "a", "n": 4}),
            json!({"id": "b", "n": 2}),
            json!({"id": "c"}),
        ];
        assert_eq!(
            run(rewritten, json!([]), &docs).expect(rewritten),
            vec![json!([{"item": 2, "item2": {"min": 2, "count": 2}}])]
        );
        // A partition without the field: no value, and a count that says so.
        assert_eq!(
            run(rewritten, json!([]), &docs[2..]).expect(rewritten),
            vec![json!([{"item2": {"count": 0}}])]
        );
        let grouped = prepared(
            "SELECT c.g, MAX(c.n) AS highest FROM c GROUP BY c.g",
            json!([]),
        )
        .expect("parses");
        let info = plan::query_info(
            &grouped.query,
            Some("GroupBy,NonValueAggregate,CompositeAggregate"),
        )
        .expect("plan");
        let rewritten = info["rewrittenQuery"].as_str().expect("rewritten");
        let docs = [
            json!({"id": "a", "g": 1, "n": 4}),
            json!({"id": "b", "g": 1, "n": 7}),
        ];
        let rows = run(rewritten, json!([]), &docs).expect(rewritten);
        assert_eq!(
            rows[0]["payload"]["highest"],
            json!({"item": 7, "item2": {"max": 7, "count": 2}})
        );
    }

    #[test]
    fn the_plan_names_what_a_client_lacks_and_what_the_emulator_does_not_plan() {
        let python = "Aggregate,CompositeAggregate,Distinct,MultipleOrderBy,OffsetAndLimit,OrderBy,Top,NonStreamingOrderBy";
        let plan_for =
            |q: &str, features| plan::query_info(&prepared(q, json!([])).expect(q).query, features);
        let err = plan_for(
            "SELECT c.g, COUNT(1) AS n FROM c GROUP BY c.g",
            Some(python),
        )
        .expect_err("GROUP BY is not among the features");
        assert!(
            err.to_string()
                .contains("Query contained NonValueAggregate, GroupBy"),
            "{err}"
        );
        let err = plan_for("SELECT COUNT(1) AS n FROM c", Some(python)).expect_err("non-value");
        assert!(err.to_string().contains("NonValueAggregate"), "{err}");
        let err = plan_for("SELECT c.g, COUNT(1) + 1 AS n FROM c GROUP BY c.g", None)
            .expect_err("cannot be merged");
        assert!(
            err.to_string().contains("'n' computes with an aggregate"),
            "{err}"
        );
        let info = plan_for(
            "SELECT c.g, AVG(c.n) AS mean FROM c GROUP BY c.g",
            Some("GroupBy,NonValueAggregate"),
        )
        .expect("plan");
        assert_eq!(info["groupByExpressions"], json!(["c.g"]));
        assert_eq!(info["groupByAliases"], json!(["g", "mean"]));
        assert_eq!(
            info["groupByAliasToAggregateType"],
            json!({"g": null, "mean": "Average"})
        );
        assert_eq!(info["aggregates"], json!([]));
        assert_eq!(
            info["rewrittenQuery"],
            "SELECT [{\"item\": c.g}] AS groupByItems, {\"g\": c.g, \"mean\": {\"item\": {\"sum\": SUM(c.n), \"count\": COUNT(c.n)}}} AS payload FROM c GROUP BY c.g"
        );
        let info = plan_for("SELECT VALUE AVG(c.n) FROM c", Some(python)).expect("plan");
        assert_eq!(info["aggregates"], json!(["Average"]));
        assert_eq!(info["hasSelectValue"], json!(true));
        let info =
            plan_for("SELECT DISTINCT c.a FROM c ORDER BY c.a DESC", Some(python)).expect("plan");
        assert_eq!(info["distinctType"], "Ordered");
        assert_eq!(info["orderBy"], json!(["Descending"]));
        assert_eq!(info["orderByExpressions"], json!(["c.a"]));
    }

    #[test]
    fn equality_constraints_come_from_top_level_conjunctions_only() {
        let q = prepared(
            "SELECT * FROM c WHERE c.ownerId = @o AND (c.year = 1 OR c.year = 2) AND 3 = c.month",
            json!([{"name":"@o","value":"x"}]),
        )
        .expect("prepares");
        assert_eq!(
            q.equality_constraints(),
            vec![("ownerId", &json!("x")), ("month", &json!(3))]
        );
    }

    /// Runs `f` on a thread with the stack of a tokio worker (2 MiB), where the emulator
    /// parses and evaluates queries.
    fn on_worker_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(f)
            .expect("thread starts")
            .join()
            .expect("no panic")
    }

    #[test]
    fn long_chains_run_in_constant_stack_depth() {
        // Thousands of terms (tens of KB of SQL) used to build a tree as deep as the
        // chain, and evaluating it against a document overflowed the stack. 10,000 terms
        // stay under the 256 KB query limit.
        let terms = 10_000;
        let chain = |term: &str, op: &str| vec![term; terms].join(op);
        let queries = [
            (
                format!(
                    "SELECT VALUE c.id FROM c WHERE {}",
                    chain("c.month = 3", " AND ")
                ),
                json!(["1", "3", "4"]),
            ),
            (
                format!(
                    "SELECT VALUE c.id FROM c WHERE {} OR c.id = '2'",
                    chain("c.month = 9", " OR ")
                ),
                json!(["2"]),
            ),
            (
                format!(
                    "SELECT VALUE {} FROM c WHERE c.id = '1'",
                    chain("c.month", " + ")
                ),
                json!([3 * terms]),
            ),
            (
                format!(
                    "SELECT VALUE {} FROM c WHERE c.id = '1'",
                    chain("c.month", " - ")
                ),
                json!([3 - 3 * (terms as i64 - 1)]),
            ),
            (
                format!(
                    "SELECT VALUE c.month{} FROM c WHERE c.id = '1'",
                    " * 2 / 2".repeat(terms)
                ),
                json!([3]),
            ),
            (
                format!(
                    "SELECT VALUE LENGTH({}) FROM c WHERE c.id = '1'",
                    chain("c.ownerId", " || ")
                ),
                json!([2 * terms]),
            ),
        ];
        for (query, expected) in queries {
            let out = on_worker_stack(move || run(&query, json!([]), &docs()));
            assert_eq!(json!(out.expect("runs")), expected);
        }
    }

    #[test]
    fn every_kind_of_nesting_is_bounded_and_the_deepest_accepted_query_runs() {
        // Each kind wraps `c.month` (3) n times and keeps its value or truth.
        type Nest = fn(usize) -> String;
        let kinds: [(&str, Nest); 6] = [
            ("parentheses", |n| {
                format!("{}c.month{} = 3", "(".repeat(n), ")".repeat(n))
            }),
            ("NOT", |n| format!("{}c.month = 3", "NOT NOT ".repeat(n))),
            ("negation", |n| format!("{}c.month = 3", "- - ".repeat(n))),
            ("arrays", |n| {
                format!(
                    "ARRAY_CONTAINS({}c.month{}, {}3{})",
                    "[".repeat(n),
                    "]".repeat(n),
                    "[".repeat(n - 1),
                    "]".repeat(n - 1)
                )
            }),
            ("calls", |n| {
                format!("{}c.month{} = 3", "ABS(".repeat(n), ")".repeat(n))
            }),
            ("IN lists", |n| {
                format!("{}c.month = 3{}", "true IN (".repeat(n), ")".repeat(n))
            }),
        ];
        for (kind, nest) in kinds {
            let query = |n: usize| format!("SELECT VALUE c.id FROM c WHERE {}", nest(n));
            let deepest = (1..=300)
                .take_while(|&n| prepared(&query(n), json!([])).is_ok())
                .last()
                .unwrap_or(0);
            assert!(
                (16..300).contains(&deepest),
                "{kind}: {deepest} levels accepted"
            );
            let err = prepared(&query(deepest + 1), json!([])).expect_err(kind);
            assert!(
                err.to_string().contains("nested too deeply"),
                "{kind}: {err}"
            );
            let text = query(deepest);
            let out = on_worker_stack(move || run(&text, json!([]), &docs()));
            assert_eq!(json!(out.expect("runs")), json!(["1", "3", "4"]), "{kind}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_arbitrary_text_never_panics(text in ".{0,200}") {
            let _ = parse(&text);
        }

        #[test]
        fn parsing_sql_like_token_soup_never_panics(
            words in proptest::collection::vec(
                proptest::sample::select(vec![
                    "SELECT", "VALUE", "TOP", "*", "FROM", "c", "WHERE", "AND", "OR", "NOT",
                    "IN", "(", ")", "[", "]", ".", ",", "=", "<", ">=", "@p", "'s'", "1.5",
                    "COUNT", "SUM", "c.x", "BETWEEN", "-", "+", "||", "true", "null",
                    "DISTINCT", "ORDER", "GROUP", "BY", "DESC", "OFFSET", "LIMIT", "1", "{",
                    "}", ":", "k",
                ]),
                0..40,
            )
        ) {
            let text = words.join(" ");
            let spec = QuerySpec { query: text, parameters: vec![QueryParameter { name: "@p".into(), value: json!(1) }] };
            if let Ok(q) = PreparedQuery::prepare(&spec) {
                for doc in docs() {
                    let _ = q.matches(&doc);
                    let _ = q.project(&doc);
                }
                let d = docs();
                let _ = q.run_all(d.iter());
                let _ = plan::query_info(&q.query, None);
            }
        }
    }
}
