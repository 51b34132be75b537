//! `dronelab-study`: what the lab reproduces, as data every other part reads. It talks
//! to nothing: writing the data set into Cosmos DB is `dronelab-seed`'s.
//!
//! - [`stages`]: the stage files of `loadtest/stages/` (RU/s, partitions, query knobs);
//!   the Kubernetes overlays mirror them;
//! - [`calibration`]: the run profiles (how long a stage's step load runs) and the
//!   emulator model that give a 2-core machine the study's shape;
//! - [`data`]: the deterministic data set, and the owner-month requests the load picks
//!   from it;
//! - [`published`]: the study's own figures, set beside each measured stage.

pub mod calibration;
pub mod capacity;
pub mod data;
pub mod published;
pub mod stages;

pub use calibration::{EmulatorModel, RunProfile};
pub use data::{DataSet, OwnerMonths, Popularity};
pub use stages::{Stage, StageConfig, StageError, MAX_BUSY_THREADS};
