//! Cosmos DB REST header names the emulator reads or writes.

pub const REQUEST_CHARGE: &str = "x-ms-request-charge";
pub const SUBSTATUS: &str = "x-ms-substatus";
pub const RETRY_AFTER_MS: &str = "x-ms-retry-after-ms";
pub const ACTIVITY_ID: &str = "x-ms-activity-id";
pub const SESSION_TOKEN: &str = "x-ms-session-token";
pub const ITEM_COUNT: &str = "x-ms-item-count";
pub const CONTINUATION: &str = "x-ms-continuation";
pub const MAX_ITEM_COUNT: &str = "x-ms-max-item-count";
pub const PARTITION_KEY: &str = "x-ms-documentdb-partitionkey";
pub const PARTITION_KEY_RANGE_ID: &str = "x-ms-documentdb-partitionkeyrangeid";
pub const START_EPK: &str = "x-ms-start-epk";
pub const END_EPK: &str = "x-ms-end-epk";
pub const IS_QUERY: &str = "x-ms-documentdb-isquery";
pub const IS_QUERY_PLAN: &str = "x-ms-cosmos-is-query-plan-request";
/// Sent with a query-plan request: the query-pipeline features the SDK has.
pub const SUPPORTED_QUERY_FEATURES: &str = "x-ms-cosmos-supported-query-features";
pub const IS_UPSERT: &str = "x-ms-documentdb-is-upsert";
pub const OFFER_THROUGHPUT: &str = "x-ms-offer-throughput";
pub const AUTOPILOT_SETTINGS: &str = "x-ms-cosmos-offer-autopilot-settings";
pub const DATE: &str = "x-ms-date";
pub const LSN: &str = "lsn";
pub const ETAG: &str = "etag";
pub const IF_MATCH: &str = "if-match";
pub const IF_NONE_MATCH: &str = "if-none-match";
/// `Incremental Feed` asks a document feed for the change feed (latest-version mode).
pub const A_IM: &str = "a-im";
pub const IF_MODIFIED_SINCE: &str = "if-modified-since";
/// Marks a transactional batch or a bulk request (not served by this emulator).
pub const IS_BATCH_REQUEST: &str = "x-ms-cosmos-is-batch-request";
