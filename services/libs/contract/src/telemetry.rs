//! The names telemetry is written and read by, once: span attributes, span names and
//! metric names. The services write them (`service-kit`, `cosmos-kit`, the gateway),
//! the trace tooling reads them (`trace-analysis`, the trace viewer and its UI, which
//! gets them from the viewer), the tuning run scrapes them, and the Grafana dashboard
//! queries them. Where OpenTelemetry's semantic conventions name a thing, these are
//! its names.

/// Span attribute keys.
pub mod attribute {
    // OpenTelemetry's HTTP conventions.
    pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
    pub const HTTP_REQUEST_METHOD_ORIGINAL: &str = "http.request.method_original";
    pub const HTTP_ROUTE: &str = "http.route";
    pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const SERVER_PORT: &str = "server.port";
    pub const URL_FULL: &str = "url.full";
    pub const URL_PATH: &str = "url.path";
    pub const URL_SCHEME: &str = "url.scheme";
    pub const ERROR_TYPE: &str = "error.type";

    // OpenTelemetry's database conventions, and Azure Cosmos DB's own.
    pub const DB_SYSTEM_NAME: &str = "db.system.name";
    pub const DB_OPERATION_NAME: &str = "db.operation.name";
    pub const DB_COLLECTION_NAME: &str = "db.collection.name";
    pub const DB_RESPONSE_STATUS_CODE: &str = "db.response.status_code";
    pub const DB_QUERY_TEXT: &str = "db.query.text";
    pub const COSMOS_SUB_STATUS_CODE: &str = "azure.cosmosdb.response.sub_status_code";
    pub const COSMOS_REQUEST_CHARGE: &str = "azure.cosmosdb.operation.request_charge";
    /// The partition key range (physical partition) an attempt reached.
    pub const COSMOS_PARTITION_KEY_RANGE_ID: &str = "azure.cosmosdb.partition_key_range_id";
    /// The attempt's number among the attempts at the same range (1 = first try).
    pub const COSMOS_ATTEMPT: &str = "azure.cosmosdb.attempt";
    pub const COSMOS_EXECUTION_CONTEXT: &str = "azure.cosmosdb.execution_context";
    /// Which part of the container a query span covers (a feed range, all, a key).
    pub const COSMOS_QUERY_SCOPE: &str = "azure.cosmosdb.query.scope";
    /// Totals over an operation span's attempts.
    pub const COSMOS_CALLS: &str = "azure.cosmosdb.calls";
    pub const COSMOS_THROTTLED_CALLS: &str = "azure.cosmosdb.throttled_calls";
    pub const COSMOS_OPERATION_REQUEST_CHARGE: &str = "azure.cosmosdb.request_charge";

    // dronelab's own.
    pub const INVOICE_PARTIAL: &str = "dronelab.invoice.partial";
    pub const OWNER_ID: &str = "dronelab.owner_id";
    /// The invoice's month, `YYYY-MM`, and whether it is closed (before this month).
    pub const INVOICE_MONTH: &str = "dronelab.invoice.month";
    pub const INVOICE_MONTH_CLOSED: &str = "dronelab.invoice.month_closed";
    /// The invoice came from the gateway's closed-month cache.
    pub const INVOICE_CACHE_HIT: &str = "dronelab.invoice.cache_hit";
    /// A resource attribute: the antipattern lab's knobs that are on in this process
    /// (`ENV=value`, comma-separated), absent when all are off.
    pub const LAB_KNOBS: &str = "dronelab.lab.knobs";
    /// On a server span: the time (µs) its request's future spent in polls longer than
    /// [`super::SLOW_POLL`], holding a runtime worker (tokio-metrics' slow polls).
    pub const TASK_SLOW_POLL_US: &str = "dronelab.task.slow_poll_us";
    /// On a server span: the thread CPU time (µs) of all its request future's polls.
    /// Slow-poll time beyond it is time the worker was held without computing.
    pub const TASK_POLL_CPU_US: &str = "dronelab.task.poll_cpu_us";

    // How OpenTelemetry data reads in the Jaeger model.
    pub const SPAN_KIND: &str = "span.kind";
    pub const OTEL_STATUS_CODE: &str = "otel.status_code";
    pub const OTEL_STATUS_DESCRIPTION: &str = "otel.status_description";
    pub const OTEL_SCOPE_NAME: &str = "otel.scope.name";
    pub const OTEL_SCOPE_VERSION: &str = "otel.scope.version";
    /// The span's W3C trace state, as Jaeger's OTLP translation tags it.
    pub const W3C_TRACESTATE: &str = "w3c.tracestate";
    pub const ERROR: &str = "error";
}

/// `db.system.name` of Azure Cosmos DB.
pub const COSMOS_DB_SYSTEM: &str = "azure.cosmosdb";

/// A poll of a request's future longer than this holds a runtime worker: awaited I/O
/// returns from `poll` in microseconds, a blocking call does not (tokio-metrics' default
/// is 50 µs; 1 ms leaves room for serialising a large answer on a slow machine).
pub const SLOW_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// `db.operation.name` of the Cosmos operations the services make.
pub mod operation {
    pub const READ_ITEM: &str = "read_item";
    pub const QUERY_ITEMS: &str = "query_items";
    pub const UPSERT_ITEM: &str = "upsert_item";
}

/// Span event names.
pub mod event {
    /// A Cosmos client was built while this span was current: its metadata reads and
    /// new connections were paid inside the request (one per request is Improper
    /// Instantiation). For a reader of the trace: the diagnosis judges the cost itself
    /// (the endpoint's metadata reads per request), not this event.
    pub const COSMOS_CLIENT_CREATED: &str = "cosmos client created";
}

/// The span names the services write that are not made from a request (every other one
/// is [`server_span`] or [`cosmos_attempt_span`]).
pub mod span {
    /// The gateway's client span of its call to each backend.
    pub const CALL_DELIVERIES: &str = "GET deliveries";
    pub const CALL_PACKAGES: &str = "GET packages";
    pub const CALL_UTILIZATION: &str = "GET utilization";
    /// utilization-service's audit write (the lab's synchronous I/O), blocking or awaited.
    pub const AUDIT_WRITE: &str = "audit write";
    /// An overloaded backend's wait in line, and its modelled work (the lab's retry storm).
    pub const OVERLOAD_QUEUE: &str = "wait for capacity";
    pub const OVERLOAD_WORK: &str = "work";

    /// utilization-service's query of one container (one span per feed range).
    pub fn query(container: &str) -> String {
        format!("query {container}")
    }
}

/// The name of a Cosmos attempt's client span: `<operation> <container>`.
pub fn cosmos_attempt_span(operation: &str, container: &str) -> String {
    format!("{operation} {container}")
}

/// The name of an HTTP server span: `<method> <route>`, e.g. `GET /api/invoices`.
/// (Put together by hand: it is made for every traced request, and `format!` costs
/// several times as much.)
pub fn server_span(method: &str, route: &str) -> String {
    let mut name = String::with_capacity(method.len() + 1 + route.len());
    name.push_str(method);
    name.push(' ');
    name.push_str(route);
    name
}

/// Prometheus metric names, as the text exposition writes them (a counter's with its
/// `_total`).
pub mod metric {
    pub const HTTP_SERVER_REQUESTS: &str = "http_server_requests_total";
    pub const HTTP_SERVER_REQUEST_DURATION: &str = "http_server_request_duration_seconds";
    pub const HTTP_SERVER_ACTIVE_REQUESTS: &str = "http_server_active_requests";
    pub const COSMOS_REQUESTS: &str = "cosmos_requests_total";
    pub const COSMOS_REQUEST_UNITS: &str = "cosmos_request_units";
    pub const COSMOS_CALLS_PER_OPERATION: &str = "cosmos_calls_per_operation";
    pub const GATEWAY_INVOICES: &str = "gateway_invoices_total";
    pub const GATEWAY_BACKEND_CALL_DURATION: &str = "gateway_backend_call_duration_seconds";
    pub const GATEWAY_CONCURRENCY_LIMIT: &str = "gateway_concurrency_limit";
    pub const EMULATOR_REQUESTS: &str = "cosmos_emulator_requests_total";
    pub const EMULATOR_REQUEST_UNITS: &str = "cosmos_emulator_request_units_total";
    pub const EMULATOR_REQUEST_UNITS_LAST_SECOND: &str =
        "cosmos_emulator_request_units_last_second";
    pub const EMULATOR_MAX_REQUEST_UNITS_PER_SECOND: &str =
        "cosmos_emulator_max_request_units_per_second";
    pub const EMULATOR_PROVISIONED_REQUEST_UNITS_PER_SECOND: &str =
        "cosmos_emulator_provisioned_request_units_per_second";
    pub const EMULATOR_DOCUMENTS: &str = "cosmos_emulator_documents";
    pub const PROCESS_CPU_SECONDS: &str = "process_cpu_seconds_total";
    /// Spans the service ended, and what became of them: exported, dropped (the export
    /// queue was full) or lost in a failed export.
    pub const OTEL_SPANS_ENDED: &str = "otel_spans_ended_total";
    pub const OTEL_SPANS_EXPORTED: &str = "otel_spans_exported_total";
    pub const OTEL_SPANS_DROPPED: &str = "otel_spans_dropped_total";
    pub const OTEL_SPANS_EXPORT_FAILED: &str = "otel_spans_export_failed_total";
    pub const PROCESS_RESIDENT_MEMORY: &str = "process_resident_memory_bytes";

    /// A counter's name as registered with prometheus-client, which adds `_total`.
    pub fn registered(name: &str) -> &str {
        name.strip_suffix("_total").unwrap_or(name)
    }
}
