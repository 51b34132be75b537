//! `loadtest`: dronelab's main job. Seeds the data, drives load against the gateway,
//! starts the local stack, and runs the four tuning stages of the study into a report.

pub mod calibration;
pub mod cli;
pub mod cluster;
mod connection;
pub mod data;
pub mod diagnose;
pub mod emulator;
pub mod load;
pub mod profile;
pub mod promtext;
pub mod record;
pub mod report;
pub mod resources;
pub mod seed;
pub mod shard;
pub mod stack;
pub mod stages;
pub mod study;
pub mod tune;
