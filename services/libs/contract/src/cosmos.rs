//! The Cosmos DB side of the contract: one database, four containers.

/// The database every service reads.
pub const DATABASE: &str = "dronedelivery";

/// The well-known master key of the public Cosmos DB emulator: dronelab's emulator's
/// default, and the services' default key. Fine for a local lab only.
pub const PUBLIC_EMULATOR_KEY: &str =
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";

/// The lab's containers. Utilization records are stored twice, keyed two ways: that
/// difference is what stage 4 of the study measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Container {
    /// Utilization records keyed by `/droneId`: an owner's records span every partition.
    Utilization,
    /// The same records keyed by `/ownerId`: an owner's records share one partition.
    UtilizationByOwner,
    /// One delivery summary per owner-month, keyed by `/ownerId`.
    Deliveries,
    /// One package summary per owner-month, keyed by `/ownerId`.
    Packages,
}

impl Container {
    pub const ALL: [Container; 4] = [
        Self::Utilization,
        Self::UtilizationByOwner,
        Self::Deliveries,
        Self::Packages,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Utilization => "utilization",
            Self::UtilizationByOwner => "utilization-by-owner",
            Self::Deliveries => "deliveries",
            Self::Packages => "packages",
        }
    }

    pub const fn partition_key_path(self) -> &'static str {
        match self {
            Self::Utilization => "/droneId",
            Self::UtilizationByOwner | Self::Deliveries | Self::Packages => "/ownerId",
        }
    }

    /// The utilization container a query shape reads.
    pub const fn utilization(use_partition_key: bool) -> Self {
        if use_partition_key {
            Self::UtilizationByOwner
        } else {
            Self::Utilization
        }
    }
}

impl std::fmt::Display for Container {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Id of an owner's monthly summary document (containers `deliveries` and `packages`):
/// `o00042-2026-03`. The backends point-read it by this id and the owner's key.
pub fn summary_id(owner_id: &str, year: u16, month: u8) -> String {
    format!("{owner_id}-{year}-{month:02}")
}

/// Id of a drone's monthly utilization record.
pub fn utilization_id(drone_id: &str, year: u16, month: u8) -> String {
    format!("{drone_id}-{year}-{month:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_keys_follow_the_query_shape() {
        let names: std::collections::BTreeSet<&str> =
            Container::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), Container::ALL.len());
        assert_eq!(
            Container::utilization(true).partition_key_path(),
            "/ownerId"
        );
        assert_eq!(
            Container::utilization(false).partition_key_path(),
            "/droneId"
        );
    }

    #[test]
    fn ids_pad_the_month() {
        assert_eq!(summary_id("o00042", 2026, 3), "o00042-2026-03");
        assert_eq!(utilization_id("d00042-1", 2025, 11), "d00042-1-2025-11");
    }
}
