//! The SQL subset the emulator understands, and its execution over documents.
//!
//! Supported: `SELECT [TOP n] * | VALUE expr | expr [AS name], …  FROM alias [WHERE expr]`
//! with parameters, comparisons, `AND`/`OR`/`NOT`, `IN`, `BETWEEN`, arithmetic, a few
//! scalar functions and `COUNT/SUM/MIN/MAX/AVG` (answered per physical partition, as a
//! real partition would). Anything else is rejected with a message naming the construct.

mod eval;
mod lexer;
mod parser;

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

pub use eval::{matches, Params};
pub use parser::{parse, Expr, Projection, Query};

use eval::Accumulator;
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
        let nested_aggregate = query.filter.as_ref().is_some_and(contains_aggregate)
            || match &query.projection {
                Projection::Star => false,
                Projection::Value(e) => nested_in(e),
                Projection::Fields(fields) => fields.iter().any(|(_, e)| nested_in(e)),
            };
        if nested_aggregate {
            return Err(SqlError::new(
                "aggregate functions are only allowed as whole items of the SELECT list",
            ));
        }
        if let Projection::Fields(fields) = &query.projection {
            let aggregates = fields
                .iter()
                .filter(|(_, e)| matches!(e, Expr::Aggregate(..)))
                .count();
            if aggregates != 0 && aggregates != fields.len() {
                return Err(SqlError::new(
                    "mixing aggregates and plain values in SELECT needs GROUP BY, which this emulator does not support",
                ));
            }
        }
        Ok(Self { query, params })
    }

    pub fn matches(&self, doc: &Value) -> Result<bool, SqlError> {
        match &self.query.filter {
            Some(filter) => matches(filter, doc, &self.params),
            None => Ok(true),
        }
    }

    /// Applies the projection to one matching document (non-aggregate queries).
    /// Returns `None` when the projected value is undefined (Cosmos drops such rows).
    pub fn project(&self, doc: &Value) -> Result<Option<Value>, SqlError> {
        Ok(match &self.query.projection {
            Projection::Star => Some(doc.clone()),
            Projection::Value(expr) => {
                eval::eval(expr, doc, &self.params)?.map(std::borrow::Cow::into_owned)
            }
            Projection::Fields(fields) => {
                let mut row = serde_json::Map::with_capacity(fields.len());
                for (name, expr) in fields {
                    if let Some(value) = eval::eval(expr, doc, &self.params)? {
                        row.insert(name.clone(), value.into_owned());
                    }
                }
                Some(Value::Object(row))
            }
        })
    }

    /// Runs an aggregate projection over `docs`, producing the single result row.
    pub fn aggregate<'a>(
        &self,
        docs: impl Iterator<Item = &'a Value>,
    ) -> Result<Option<Value>, SqlError> {
        let items: Vec<(&str, &Expr)> = match &self.query.projection {
            Projection::Value(expr) => vec![("", expr)],
            Projection::Fields(fields) => fields.iter().map(|(n, e)| (n.as_str(), e)).collect(),
            Projection::Star => return Err(SqlError::new("SELECT * is not an aggregate")),
        };
        let mut accumulators = Vec::with_capacity(items.len());
        for (_, expr) in &items {
            let Expr::Aggregate(kind, arg) = expr else {
                return Err(SqlError::new("expected an aggregate"));
            };
            accumulators.push((Accumulator::new(*kind), arg.as_ref()));
        }
        for doc in docs {
            for (acc, arg) in &mut accumulators {
                let value = eval::eval(arg, doc, &self.params)?;
                acc.add(value.as_deref());
            }
        }
        if matches!(self.query.projection, Projection::Value(_)) {
            return Ok(accumulators[0].0.finish());
        }
        let mut row = serde_json::Map::new();
        for ((name, _), (acc, _)) in items.iter().zip(&accumulators) {
            if let Some(value) = acc.finish() {
                row.insert((*name).to_owned(), value);
            }
        }
        Ok(Some(Value::Object(row)))
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

/// True if an aggregate appears anywhere in `expr`.
fn contains_aggregate(expr: &Expr) -> bool {
    match expr {
        Expr::Aggregate(..) => true,
        Expr::Literal(_) | Expr::Undefined | Expr::Param(_) | Expr::Root => false,
        Expr::Path(steps) => steps.iter().any(|s| match s {
            PathStep::Index(i) => contains_aggregate(i),
            PathStep::Field(_) => false,
        }),
        Expr::Unary(_, inner) => contains_aggregate(inner),
        Expr::Binary(_, l, r) => contains_aggregate(l) || contains_aggregate(r),
        Expr::Chain(first, rest) => {
            contains_aggregate(first) || rest.iter().any(|(_, e)| contains_aggregate(e))
        }
        Expr::In { needle, list, .. } => {
            contains_aggregate(needle) || list.iter().any(contains_aggregate)
        }
        Expr::Between(a, b, c) => {
            contains_aggregate(a) || contains_aggregate(b) || contains_aggregate(c)
        }
        Expr::Call(_, args) | Expr::Array(args) => args.iter().any(contains_aggregate),
    }
}

/// An aggregate below the top of a SELECT item (`COUNT(1) + 1`, `SUM(COUNT(1))`).
fn nested_in(expr: &Expr) -> bool {
    match expr {
        Expr::Aggregate(_, arg) => contains_aggregate(arg),
        other => contains_aggregate(other),
    }
}

fn visit_params(query: &Query, visit: &mut impl FnMut(&str)) {
    fn walk(expr: &Expr, visit: &mut impl FnMut(&str)) {
        match expr {
            Expr::Param(name) => visit(name),
            Expr::Literal(_) | Expr::Undefined | Expr::Root => {}
            Expr::Path(steps) => {
                for step in steps {
                    if let PathStep::Index(index) = step {
                        walk(index, visit);
                    }
                }
            }
            Expr::Unary(_, inner) | Expr::Aggregate(_, inner) => walk(inner, visit),
            Expr::Binary(_, l, r) => {
                walk(l, visit);
                walk(r, visit);
            }
            Expr::Chain(first, rest) => {
                walk(first, visit);
                rest.iter().for_each(|(_, e)| walk(e, visit));
            }
            Expr::In { needle, list, .. } => {
                walk(needle, visit);
                list.iter().for_each(|e| walk(e, visit));
            }
            Expr::Between(a, b, c) => {
                walk(a, visit);
                walk(b, visit);
                walk(c, visit);
            }
            Expr::Call(_, args) | Expr::Array(args) => args.iter().for_each(|e| walk(e, visit)),
        }
    }
    match &query.projection {
        Projection::Star => {}
        Projection::Value(e) => walk(e, visit),
        Projection::Fields(fields) => fields.iter().for_each(|(_, e)| walk(e, visit)),
    }
    if let Some(filter) = &query.filter {
        walk(filter, visit);
    }
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
        if q.query.is_aggregate() {
            return Ok(q.aggregate(matching.into_iter())?.into_iter().collect());
        }
        let mut out = Vec::new();
        for d in matching {
            if let Some(v) = q.project(d)? {
                out.push(v);
            }
        }
        Ok(out)
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
            ("SELECT * FROM c ORDER BY c.id", "ORDER BY"),
            ("SELECT c.g FROM c GROUP BY c.g", "GROUP BY"),
            ("SELECT c.id FROM c OFFSET 2 LIMIT 3", "OFFSET/LIMIT"),
            ("SELECT * FROM c JOIN t IN c.tags", "JOIN"),
            ("SELECT * FROM c WHERE", "expected an expression"),
            ("SELECT * FROM c WHERE x.id = 1", "could not be resolved"),
            ("SELECT * FROM c WHERE c.id = 'open", "unterminated"),
            ("SELECT * FROM c WHERE c.id = @missing", "@missing"),
            ("SELECT c.id, COUNT(1) FROM c", "GROUP BY"),
            ("SELECT * FROM c WHERE COUNT(1) > 1", "aggregate"),
            ("SELECT VALUE COUNT(1) + 1 FROM c", "aggregate"),
            ("DELETE FROM c", "SELECT"),
            ("SELECT * FROM c WHERE FOO(c.id)", "FOO"),
        ] {
            let outcome = run(query, json!([]), &docs());
            let err = outcome.expect_err(query);
            assert!(err.to_string().contains(needle), "{query}: {err}");
        }
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
                let _ = q.aggregate(d.iter());
            }
        }
    }
}
