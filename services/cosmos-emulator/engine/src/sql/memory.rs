//! How much memory a query may hold, and what a JSON value takes.

use serde_json::Value;

use super::SqlError;

/// The most one value the query builds (a projected row, an array, an object, a
/// concatenated string) may take, in serialized bytes: twice Cosmos DB's largest document.
pub const MAX_VALUE_BYTES: usize = 4 << 20;
/// The most a sorted, grouped or de-duplicated query may hold in one partition (its rows,
/// sort keys, group keys and seen values).
pub const MAX_QUERY_BYTES: usize = 64 << 20;
/// The most rows one page carries, in serialized bytes (Cosmos DB's page limit is about
/// 4 MB); a page always carries at least one row.
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// The serialized size of `value`, near enough to budget by (JSON text, no spaces).
pub fn json_bytes(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| json_bytes(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + json_bytes(v))
                .sum::<usize>()
        }
    }
}

/// `bytes` for one value the query builds, or the error that refuses it.
pub fn check_value(bytes: usize) -> Result<(), SqlError> {
    if bytes > MAX_VALUE_BYTES {
        return Err(SqlError::new(format!(
            "the query builds a value of more than {} MiB (an array, object or string): that is more than a query may hold",
            MAX_VALUE_BYTES >> 20
        )));
    }
    Ok(())
}

/// What a query run holds so far against [`MAX_QUERY_BYTES`].
#[derive(Debug, Default)]
pub struct QueryMemory {
    used: usize,
}

impl QueryMemory {
    /// Counts `bytes` more, or refuses the query.
    pub fn take(&mut self, bytes: usize) -> Result<(), SqlError> {
        self.used = self.used.saturating_add(bytes);
        if self.used > MAX_QUERY_BYTES {
            return Err(SqlError::new(format!(
                "the query needs more than {} MiB in one partition to sort, group or de-duplicate its rows: narrow it (a WHERE, TOP, the partition key) or project less",
                MAX_QUERY_BYTES >> 20
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_those_of_the_json_text_within_a_few_bytes() {
        for value in [
            serde_json::json!({"a": [1, "two", null, {"b": true}], "long": "x".repeat(1000)}),
            serde_json::json!([]),
            serde_json::json!("s"),
        ] {
            let text = serde_json::to_string(&value).expect("json").len();
            let estimate = json_bytes(&value);
            assert!(
                estimate >= text && estimate <= text + 32,
                "{estimate} vs {text}"
            );
        }
    }

    #[test]
    fn a_budget_refuses_past_its_bound() {
        let mut memory = QueryMemory::default();
        assert!(memory.take(MAX_QUERY_BYTES).is_ok());
        assert!(memory.take(1).is_err());
        assert!(check_value(MAX_VALUE_BYTES).is_ok());
        assert!(check_value(MAX_VALUE_BYTES + 1).is_err());
    }
}
