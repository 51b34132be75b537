//! What the backends answer and what the gateway makes of it. The gateway's OpenAPI
//! schemas are generated from these types ([`schemas`]), so the document cannot drift
//! from what is served.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /api/deliveries/summary`: the owner's deliveries in the month (0 without a
/// summary document).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliverySummary {
    pub count: u64,
}

/// `GET /api/packages/summary`: the owner's packages in the month and their weight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageSummary {
    pub count: u64,
    pub total_weight_kg: f64,
}

/// `GET /api/dronedeliveries/utilization`: summed over the owner's drones for the month,
/// each sum rounded to [`Utilization::DECIMALS`] decimals (the records' own precision).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Utilization {
    pub traveled_miles: f64,
    pub assigned_hours: f64,
}

impl Utilization {
    /// Decimals of both sums: a sum of floats carries binary noise (`252.39999999999998`)
    /// that is not in the data.
    pub const DECIMALS: i32 = 2;

    /// These sums rounded to [`Self::DECIMALS`].
    pub fn rounded(self) -> Self {
        let scale = 10f64.powi(Self::DECIMALS);
        let round = |x: f64| (x * scale).round() / scale;
        Self {
            traveled_miles: round(self.traveled_miles),
            assigned_hours: round(self.assigned_hours),
        }
    }
}

/// A section of the invoice, named after the backend that fills it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    Deliveries,
    Packages,
    Utilization,
}

impl Section {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Deliveries => "deliveries",
            Self::Packages => "packages",
            Self::Utilization => "utilization",
        }
    }
}

/// Why a section is missing from the invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SectionError {
    pub backend: Section,
    /// The backend's HTTP status, or `null` when no response came back.
    pub status: Option<u16>,
    pub detail: String,
}

/// `GET /api/invoices`: each section is its backend's answer, or `null` if the backend
/// failed; then `partial` is true and `errors` says why. Still a 200.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Invoice {
    pub owner_id: String,
    #[schemars(range(min = 2000, max = 2100))]
    pub year: u16,
    #[schemars(range(min = 1, max = 12))]
    pub month: u8,
    pub deliveries: Option<DeliverySummary>,
    pub packages: Option<PackageSummary>,
    pub utilization: Option<Utilization>,
    pub partial: bool,
    pub errors: Vec<SectionError>,
}

impl Invoice {
    /// What a partial invoice's JSON (compact, as served) contains and a complete one's
    /// does not: a load tool counts partial answers by it without parsing each one.
    pub const PARTIAL_MARKER: &'static [u8] = b"\"partial\":true";
}

/// OpenAPI 3.0 `components.schemas` for [`Invoice`] and everything it contains.
pub fn schemas() -> serde_json::Map<String, serde_json::Value> {
    let mut generator = schemars::generate::SchemaSettings::openapi3()
        .with(|settings| settings.definitions_path = "/components/schemas".into())
        .into_generator();
    let mut invoice = generator.root_schema_for::<Invoice>().to_value();
    // The root schema carries the others at the definitions path; lift them out.
    let mut schemas = match invoice
        .pointer_mut("/components/schemas")
        .map(serde_json::Value::take)
    {
        Some(serde_json::Value::Object(schemas)) => schemas,
        _ => serde_json::Map::new(),
    };
    if let Some(root) = invoice.as_object_mut() {
        for key in ["components", "$schema", "title"] {
            root.remove(key);
        }
    }
    schemas.insert("Invoice".into(), invoice);
    // serde writes every field, `null` included, so every property is required.
    for schema in schemas.values_mut() {
        if let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) {
            let required: Vec<serde_json::Value> = properties
                .keys()
                .cloned()
                .map(serde_json::Value::String)
                .collect();
            schema["required"] = serde_json::Value::Array(required);
        }
    }
    schemas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_partial_invoice_carries_the_partial_marker() {
        let mut invoice = Invoice {
            owner_id: "o1".into(),
            year: 2026,
            month: 3,
            deliveries: None,
            packages: None,
            utilization: None,
            partial: true,
            errors: Vec::new(),
        };
        let contains = |invoice: &Invoice| {
            let json = serde_json::to_vec(invoice).expect("json");
            json.windows(Invoice::PARTIAL_MARKER.len())
                .any(|w| w == Invoice::PARTIAL_MARKER)
        };
        assert!(contains(&invoice));
        invoice.partial = false;
        assert!(!contains(&invoice));
    }

    #[test]
    fn utilization_sums_are_served_to_two_decimals() {
        let noisy = Utilization {
            traveled_miles: 0.1 + 0.2 + 252.0,
            assigned_hours: 252.39999999999998,
        };
        let json = serde_json::to_string(&noisy.rounded()).expect("json");
        assert_eq!(json, r#"{"traveledMiles":252.3,"assignedHours":252.4}"#);
    }

    /// Every field a served invoice has is in the schema, and required.
    #[test]
    fn the_schema_lists_every_field_of_a_served_invoice() {
        let invoice = Invoice {
            owner_id: "o1".into(),
            year: 2026,
            month: 3,
            deliveries: Some(DeliverySummary { count: 1 }),
            packages: None,
            utilization: Some(Utilization::default()),
            partial: true,
            errors: vec![SectionError {
                backend: Section::Packages,
                status: Some(503),
                detail: "busy".into(),
            }],
        };
        let served = serde_json::to_value(&invoice).expect("json");
        let schemas = schemas();
        let schema = &schemas["Invoice"];
        let mut properties: Vec<&String> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .collect();
        let mut fields: Vec<&String> = served.as_object().expect("object").keys().collect();
        properties.sort();
        fields.sort();
        assert_eq!(properties, fields);
        assert_eq!(
            schema["required"].as_array().map(Vec::len),
            Some(fields.len()),
            "{schema}"
        );
        assert_eq!(
            schemas["Section"]["enum"],
            serde_json::json!(["deliveries", "packages", "utilization"])
        );
        assert!(
            schemas.contains_key("PackageSummary"),
            "{:?}",
            schemas.keys()
        );
    }
}
