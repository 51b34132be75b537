//! `cosmos-engine`: what dronelab's Cosmos DB emulator is, apart from how it is reached.
//! It knows nothing of HTTP; the `cosmos-emulator` crate serves it.
//!
//! - [`store`]: the account's databases, containers and documents; each container's
//!   physical partitions with their RU budgets and counters; the write-ahead log that
//!   makes a data directory durable;
//! - [`sql`]: the SQL subset, run inside one physical partition, and the query plan an
//!   SDK merges partitions' answers by;
//! - [`epk`]: effective partition keys, hashed exactly as the SDK does, and the split of
//!   the hash space into physical partitions;
//! - [`throughput`]: request charges, per-partition RU budgets, the latency model;
//! - [`stats`]: per-partition counters and the view of all of them.

pub mod epk;
pub mod sql;
pub mod stats;
pub mod store;
pub mod throughput;
