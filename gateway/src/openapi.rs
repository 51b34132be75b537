//! The OpenAPI 3 description served at `/openapi.json`.

use serde_json::{json, Value};

pub fn document() -> Value {
    let param = |name: &str, schema: Value, description: &str| json!({"name": name, "in": "query", "required": true, "schema": schema, "description": description});
    let nullable_object =
        |properties: Value| json!({"type": "object", "nullable": true, "properties": properties});
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "dronelab gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Aggregates an owner's monthly deliveries, packages and drone utilization from three backends called in parallel. A failing backend leaves its section null, sets partial=true and is listed in errors; the answer is still 200."
        },
        "paths": {
            "/api/invoices": {
                "get": {
                    "operationId": "getInvoice",
                    "summary": "An owner's monthly invoice",
                    "parameters": [
                        param("ownerId", json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}), "Drone-delivery owner id"),
                        param("year", json!({"type": "integer", "minimum": 2000, "maximum": 2100}), "Year"),
                        param("month", json!({"type": "integer", "minimum": 1, "maximum": 12}), "Month")
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
        "components": {
            "schemas": {
                "Invoice": {
                    "type": "object",
                    "required": ["ownerId", "year", "month", "deliveries", "packages", "utilization", "partial", "errors"],
                    "properties": {
                        "ownerId": {"type": "string"},
                        "year": {"type": "integer"},
                        "month": {"type": "integer"},
                        "deliveries": nullable_object(json!({"count": {"type": "integer"}})),
                        "packages": nullable_object(json!({"count": {"type": "integer"}, "totalWeightKg": {"type": "number"}})),
                        "utilization": nullable_object(json!({"traveledMiles": {"type": "number"}, "assignedHours": {"type": "number"}})),
                        "partial": {"type": "boolean"},
                        "errors": {"type": "array", "items": {"$ref": "#/components/schemas/BackendError"}}
                    }
                },
                "BackendError": {
                    "type": "object",
                    "properties": {
                        "backend": {"type": "string", "enum": ["deliveries", "packages", "utilization"]},
                        "status": {"type": "integer", "nullable": true},
                        "detail": {"type": "string"}
                    }
                },
                "Problem": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string"},
                        "title": {"type": "string"},
                        "status": {"type": "integer"},
                        "detail": {"type": "string"},
                        "invalidParams": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "reason": {"type": "string"}}}}
                    }
                }
            }
        }
    })
}
