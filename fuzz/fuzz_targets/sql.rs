//! The emulator's SQL: any query text and parameters parse or fail with an error, and a
//! query that prepares evaluates (filter, projection, grouping, sort, distinct) against
//! documents of every JSON shape, and plans, without panicking or overflowing the stack.
#![no_main]

use cosmos_engine::sql::{plan, PreparedQuery, QueryParameter, QuerySpec};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fuzz_target!(|input: (&str, Vec<(String, String)>)| {
    let (query, parameters) = input;
    let spec = QuerySpec {
        query: query.to_owned(),
        parameters: parameters
            .into_iter()
            .map(|(name, value)| QueryParameter {
                name,
                value: serde_json::from_str(&value).unwrap_or(Value::String(value)),
            })
            .collect(),
    };
    let Ok(prepared) = PreparedQuery::prepare(&spec) else {
        return;
    };
    let docs = [
        json!({"id": "1", "pk": "a", "n": 1, "s": "x", "a": [1, "b", {"c": null}], "o": {"p": {"q": 2.5}}}),
        json!({"id": "2", "pk": "b", "n": -3.5, "b": true}),
        json!({}),
    ];
    let mut matching = Vec::new();
    for doc in &docs {
        if prepared.matches(doc).unwrap_or(false) {
            let _ = prepared.project(doc);
            matching.push(doc);
        }
    }
    let _ = prepared.run_all(matching);
    let _ = prepared.equality_constraints();
    // Plans, and parses its own rewritten query.
    let _ = plan::query_info(&prepared.query, None);
});
