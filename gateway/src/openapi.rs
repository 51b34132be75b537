//! The OpenAPI 3 description served at `/openapi.json`. The paths are written here; the
//! schemas are generated from the contract's types (`dronelab_contract::invoice`).

use axum::Json;
use dronelab_contract::{request::PARAMETERS, routes};
use serde_json::{json, Value};

pub async fn serve() -> Json<Value> {
    Json(document())
}

pub fn document() -> Value {
    let [owner, year, month] = PARAMETERS;
    let param = |name: &str, schema: Value, description: &str| json!({"name": name, "in": "query", "required": true, "schema": schema, "description": description});
    let mut schemas = dronelab_contract::invoice::schemas();
    schemas.insert("Problem".into(), problem_schema());
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "dronelab gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Aggregates an owner's monthly deliveries, packages and drone utilization from three backends called in parallel. A failing backend leaves its section null, sets partial=true and is listed in errors; the answer is still 200."
        },
        "paths": {
            routes::INVOICES: {
                "get": {
                    "operationId": "getInvoice",
                    "summary": "An owner's monthly invoice",
                    "parameters": [
                        param(owner, json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}), "Drone-delivery owner id"),
                        param(year, json!({"type": "integer", "minimum": 2000, "maximum": 2100}), "Year"),
                        param(month, json!({"type": "integer", "minimum": 1, "maximum": 12}), "Month")
                    ],
                    "responses": {
                        "200": {
                            "description": "The invoice (possibly partial)",
                            "headers": {
                                "traceresponse": {"schema": {"type": "string"}, "description": "W3C trace context of this request"},
                                "x-trace-id": {"schema": {"type": "string"}, "description": "Trace id, for the trace viewer"}
                            },
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Invoice"}}}
                        },
                        "400": {"description": "Invalid parameters", "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}},
                        "503": {"description": "Overloaded; retry after the Retry-After header", "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
                    }
                }
            }
        },
        "components": {"schemas": schemas}
    })
}

/// RFC 9457 problem details as service-kit writes them.
fn problem_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "invalidParams": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "reason": {"type": "string"}}}}
        }
    })
}
