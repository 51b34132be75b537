//! Effective partition keys (EPKs) and the split of the hash space into physical partitions.
//!
//! The EPK of a document is computed with the SDK driver's own hashing
//! (`FeedRange::for_partition`), so the emulator routes a document to exactly the
//! partition key range the SDK expects. A container with N physical partitions
//! splits the V2 hash space evenly: V2 hashes clear the two top bits of the first
//! byte, so real EPKs live in `00…` to `3F…`, and the boundaries are
//! `i × 2^126 / N` written as 16-byte upper-case hex (`""` and `"FF"` at the ends,
//! as the service does).

use azure_data_cosmos_driver::models::{
    EffectivePartitionKey, FeedRange, PartitionKey, PartitionKeyDefinition, PartitionKeyValue,
};
use serde_json::Value;

/// Upper limit on partitions per container: plenty for a lab, small enough for memory.
pub const MAX_PARTITIONS: usize = 256;

/// Boundaries of one physical partition's key range: `[min, max)`.
#[derive(Debug, Clone)]
pub struct EpkRange {
    pub min: EffectivePartitionKey,
    pub max: EffectivePartitionKey,
}

impl EpkRange {
    pub fn contains(&self, epk: &EffectivePartitionKey) -> bool {
        *epk >= self.min && *epk < self.max
    }

    pub fn overlaps(&self, min: &EffectivePartitionKey, max: &EffectivePartitionKey) -> bool {
        self.min < *max && *min < self.max
    }
}

/// Splits the hash space into `count` equal ranges.
pub fn split_ranges(count: usize) -> Vec<EpkRange> {
    let count = count.clamp(1, MAX_PARTITIONS);
    let span: u128 = 1u128 << 126;
    let boundary = |i: usize| -> EffectivePartitionKey {
        if i == 0 {
            return EffectivePartitionKey::MIN;
        }
        if i == count {
            return EffectivePartitionKey::MAX;
        }
        let value = span / count as u128 * i as u128;
        let hex = format!("{value:032X}");
        EffectivePartitionKey::try_from(hex.as_str()).unwrap_or(EffectivePartitionKey::MAX)
    };
    (0..count)
        .map(|i| EpkRange {
            min: boundary(i),
            max: boundary(i + 1),
        })
        .collect()
}

/// Why a partition key value could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PartitionKeyError(pub String);

/// A document's (or request's) logical partition key: the JSON components, as sent in
/// `x-ms-documentdb-partitionkey`, and its EPK.
#[derive(Debug, Clone)]
pub struct LogicalKey {
    /// Canonical JSON text of the components, e.g. `["o00042"]`; the identity of the
    /// logical partition.
    pub json: String,
    pub epk: EffectivePartitionKey,
}

impl LogicalKey {
    /// Builds the key from its JSON components (`null`, strings, numbers, booleans, and
    /// `{}` for *undefined*).
    pub fn from_components(
        components: &[Value],
        definition: &PartitionKeyDefinition,
    ) -> Result<Self, PartitionKeyError> {
        if components.len() != definition.paths().len() {
            return Err(PartitionKeyError(format!(
                "partition key has {} component(s) but the container's definition has {} path(s)",
                components.len(),
                definition.paths().len()
            )));
        }
        let mut values = Vec::with_capacity(components.len());
        for component in components {
            values.push(component_value(component)?);
        }
        let key = PartitionKey::try_from(values)
            .map_err(|e| PartitionKeyError(format!("invalid partition key: {e}")))?;
        let epk = FeedRange::for_partition(key, definition)
            .min_inclusive()
            .clone();
        let json = serde_json::to_string(components).unwrap_or_default();
        Ok(Self { json, epk })
    }

    /// Parses the `x-ms-documentdb-partitionkey` header value (a JSON array).
    pub fn from_header(
        header: &str,
        definition: &PartitionKeyDefinition,
    ) -> Result<Self, PartitionKeyError> {
        let components: Vec<Value> = serde_json::from_str(header).map_err(|_| {
            PartitionKeyError(format!(
                "x-ms-documentdb-partitionkey must be a JSON array, got {header:?}"
            ))
        })?;
        Self::from_components(&components, definition)
    }

    /// Extracts the key from a document body following the definition's paths;
    /// a missing property is *undefined* (`{}`), as in Cosmos.
    pub fn from_document(
        doc: &Value,
        definition: &PartitionKeyDefinition,
    ) -> Result<Self, PartitionKeyError> {
        let components: Vec<Value> = definition
            .paths()
            .iter()
            .map(|path| {
                path.trim_start_matches('/')
                    .split('/')
                    .try_fold(doc, |node, segment| node.get(segment))
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Default::default()))
            })
            .collect();
        Self::from_components(&components, definition)
    }
}

fn component_value(component: &Value) -> Result<PartitionKeyValue, PartitionKeyError> {
    Ok(match component {
        Value::Null => PartitionKeyValue::NULL,
        Value::Bool(b) => PartitionKeyValue::from(*b),
        Value::String(s) => PartitionKeyValue::from(s.clone()),
        Value::Number(n) => {
            let f = n
                .as_f64()
                .ok_or_else(|| PartitionKeyError("partition key number is out of range".into()))?;
            PartitionKeyValue::try_from(f)
                .map_err(|e| PartitionKeyError(format!("invalid partition key number: {e}")))?
        }
        Value::Object(map) if map.is_empty() => PartitionKeyValue::UNDEFINED,
        other => {
            return Err(PartitionKeyError(format!(
                "a partition key value must be a string, number, boolean or null, got {other}"
            )))
        }
    })
}

/// Parses an EPK bound from a header (`x-ms-start-epk`/`x-ms-end-epk`).
pub fn parse_epk(text: &str) -> Result<EffectivePartitionKey, PartitionKeyError> {
    EffectivePartitionKey::try_from(text)
        .map_err(|_| PartitionKeyError(format!("invalid effective partition key {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ranges_cover_the_space_without_gaps() {
        for n in [1, 2, 3, 9, 16] {
            let ranges = split_ranges(n);
            assert_eq!(ranges.len(), n);
            assert_eq!(ranges[0].min, EffectivePartitionKey::MIN);
            assert_eq!(ranges[n - 1].max, EffectivePartitionKey::MAX);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].max, pair[1].min);
                assert!(pair[0].min < pair[0].max);
            }
        }
    }

    #[test]
    fn owners_spread_over_all_nine_partitions() {
        let definition: PartitionKeyDefinition = "/ownerId".into();
        let ranges = split_ranges(9);
        let mut per_range = [0usize; 9];
        for i in 0..900 {
            let key =
                LogicalKey::from_document(&json!({"ownerId": format!("o{i:05}")}), &definition)
                    .expect("key");
            let index = ranges
                .iter()
                .position(|r| r.contains(&key.epk))
                .expect("covered");
            per_range[index] += 1;
        }
        // 100 expected per range; a uniform hash stays well inside these bounds.
        assert!(
            per_range.iter().all(|&n| (50..=150).contains(&n)),
            "{per_range:?}"
        );
    }

    #[test]
    fn document_and_header_forms_agree() {
        let definition: PartitionKeyDefinition = "/ownerId".into();
        let from_doc =
            LogicalKey::from_document(&json!({"ownerId": "o1"}), &definition).expect("doc");
        let from_header = LogicalKey::from_header(r#"["o1"]"#, &definition).expect("header");
        assert_eq!(from_doc.epk, from_header.epk);
        assert_eq!(from_doc.json, from_header.json);
        assert!(LogicalKey::from_header("o1", &definition).is_err());
        assert!(LogicalKey::from_header(r#"[[1]]"#, &definition).is_err());
        assert!(LogicalKey::from_header(r#"["a","b"]"#, &definition).is_err());
    }
}
