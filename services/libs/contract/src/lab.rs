//! The antipattern lab's knobs: each switches one performance antipattern on in the
//! service where it would really live. Every knob is off by default (the study's
//! stages never set one), has a flag with this environment variable as its fallback,
//! and shows on the service's spans as a resource attribute when it is on
//! ([`crate::telemetry::attribute::LAB_KNOBS`]). Stage files set knobs by their
//! environment variable (`[knobs]`), checked against [`KNOBS`].

use std::collections::BTreeMap;

use crate::Service;

/// One knob: its environment variable, the service that reads it, its values (the
/// first is the default, "off").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabKnob {
    pub env: &'static str,
    pub service: Service,
    pub values: &'static [&'static str],
    /// What the values do, for error messages and docs.
    pub help: &'static str,
}

impl LabKnob {
    pub fn default_value(&self) -> &'static str {
        self.values[0]
    }
}

/// An enum of a knob's values, each with its text (the first is the default, "off"),
/// parsed and printed by that text; `VALUES` lists them in order.
macro_rules! knob_values {
    ($(#[$meta:meta])* $name:ident {
        $(#[$first_meta:meta])* $first:ident = $first_text:literal,
        $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub enum $name {
            $(#[$first_meta])*
            #[default]
            $first,
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const VALUES: &'static [&'static str] = &[$first_text, $($text),+];
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $first_text => Ok(Self::$first),
                    $($text => Ok(Self::$variant),)+
                    other => Err(format!("{other:?}: use one of {}", Self::VALUES.join(", "))),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    Self::$first => $first_text,
                    $(Self::$variant => $text,)+
                })
            }
        }
    };
}

/// `--audit-write`: utilization-service records each answer in an audit store (a
/// modelled 20 ms write). `blocking` makes that write a synchronous call inside the
/// async handler (Synchronous I/O); `async` awaits the same write.
pub const ENV_AUDIT_WRITE: &str = "UTILIZATION_AUDIT_WRITE";

/// `--point-reads`: `per-drone` makes utilization-service list the owner's drones for
/// the month and read each drone's record with its own point read, one after another,
/// instead of one query (Chatty I/O).
pub const ENV_POINT_READS: &str = "UTILIZATION_POINT_READS";

/// `--client-per-request`: `on` makes utilization-service build a new Cosmos client for
/// every request instead of sharing one (Improper Instantiation).
pub const ENV_CLIENT_PER_REQUEST: &str = "UTILIZATION_CLIENT_PER_REQUEST";

/// `--retry-storm`: `on` makes the gateway retry a failed backend call at once, up to
/// [`STORM_RETRIES`] times, without its retry budget, backoff or jitter (Retry Storm).
pub const ENV_RETRY_STORM: &str = "GATEWAY_RETRY_STORM";

/// Retries per backend call in a storm.
pub const STORM_RETRIES: u32 = 10;

/// `--overload`: `on` gives delivery-service a small fixed capacity (the fault a retry
/// storm makes worse): see [`Overload`].
pub const ENV_DELIVERY_OVERLOAD: &str = "DELIVERY_OVERLOAD";

/// `--invoice-cache`: `closed-months` makes the gateway keep the complete invoices of
/// closed months, which can no longer change (the fix of No Caching; off, every invoice
/// is recomputed from the three backends).
pub const ENV_INVOICE_CACHE: &str = "GATEWAY_INVOICE_CACHE";

/// The most invoices the gateway's closed-month cache holds (the oldest go first).
pub const INVOICE_CACHE_ENTRIES: usize = 100_000;

/// `--scan-ingest`: package-service's package-scan ingest, a second tenant of the
/// Cosmos account that writes [`SCAN_INGEST_WRITES_PER_SECOND`] scan events under one
/// partition key value ([`SCAN_TENANT`]). `shared-container` writes them into the
/// tuned utilization container, so its one physical partition's budget goes to the
/// neighbour (Noisy Neighbor); `own-container` writes them into [`SCAN_CONTAINER`], with
/// throughput of its own (the fix).
pub const ENV_SCAN_INGEST: &str = "PACKAGE_SCAN_INGEST";

/// Scan events the ingest offers per second: upserts of ~1 KB (≈ 5.6 RU as an insert,
/// ≈ 11 RU once an id is rewritten), well beyond one partition's share of the Noisy
/// Neighbor pair's 1,500 RU/s (167 RU/s).
pub const SCAN_INGEST_WRITES_PER_SECOND: u32 = 50;
/// Writes the ingest keeps in flight at most; a tick finding them all busy is skipped.
pub const SCAN_INGEST_IN_FLIGHT: usize = 8;
/// How long the ingest runs before it stops by itself (a lab's load is bounded).
pub const SCAN_INGEST_DURATION: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// Distinct scan documents: ids repeat, so the container stops growing.
pub const SCAN_INGEST_DOCUMENTS: u64 = 1_000;
/// The partition key value of every scan event (the ingest's tenant).
pub const SCAN_TENANT: &str = "package-scans";
/// The neighbour's own container (partition key `/ownerId`, like the shared one).
pub const SCAN_CONTAINER: &str = "package-scans";
/// Its manual throughput when the ingest creates it: Cosmos DB's minimum. The neighbour
/// may throttle itself there; it no longer spends ours.
pub const SCAN_CONTAINER_RU_PER_SECOND: u64 = 400;

/// Every knob of the lab.
pub const KNOBS: [LabKnob; 7] = [
    LabKnob {
        env: ENV_AUDIT_WRITE,
        service: Service::Utilization,
        values: AuditWrite::VALUES,
        help: "off: no audit write; blocking: a 20 ms synchronous write inside the async handler (Synchronous I/O); async: the same write awaited",
    },
    LabKnob {
        env: ENV_POINT_READS,
        service: Service::Utilization,
        values: PointReads::VALUES,
        help: "off: one query sums the month; per-drone: list the drones, then one point read per drone, one after another (Chatty I/O)",
    },
    LabKnob {
        env: ENV_CLIENT_PER_REQUEST,
        service: Service::Utilization,
        values: ClientPerRequest::VALUES,
        help: "off: one Cosmos client shared by every request; on: a new client per request (Improper Instantiation)",
    },
    LabKnob {
        env: ENV_RETRY_STORM,
        service: Service::Gateway,
        values: RetryStorm::VALUES,
        help: "off: retries within a budget, with backoff and jitter; on: up to 10 retries at once, unbudgeted (Retry Storm)",
    },
    LabKnob {
        env: ENV_DELIVERY_OVERLOAD,
        service: Service::Delivery,
        values: Overload::VALUES,
        help: "off: as fast as Cosmos DB; on: 2 requests at a time, 20 ms each, 503 after 50 ms in line (the fault a retry storm makes worse)",
    },
    LabKnob {
        env: ENV_INVOICE_CACHE,
        service: Service::Gateway,
        values: InvoiceCache::VALUES,
        help: "off: every invoice recomputed (No Caching); closed-months: complete invoices of closed months kept in the gateway",
    },
    LabKnob {
        env: ENV_SCAN_INGEST,
        service: Service::Package,
        values: ScanIngest::VALUES,
        help: "off: no ingest; shared-container: 50 scan writes/s into the tuned utilization container, one partition key (Noisy Neighbor); own-container: the same writes into a container with its own throughput",
    },
];

/// The knob read from `env`, if the lab has one.
pub fn knob(env: &str) -> Option<&'static LabKnob> {
    KNOBS.iter().find(|k| k.env == env)
}

knob_values! {
    /// How utilization-service writes its audit record.
    AuditWrite {
        Off = "off",
        /// A synchronous write that holds the runtime's worker thread.
        Blocking = "blocking",
        /// The same write, awaited.
        Async = "async",
    }
}

knob_values! {
    /// How utilization-service reads a month's records.
    PointReads {
        /// One query.
        Off = "off",
        /// The drones' ids first, then a point read per drone.
        PerDrone = "per-drone",
    }
}

knob_values! {
    /// Whether utilization-service builds a Cosmos client per request.
    ClientPerRequest {
        /// One client, built at startup and shared.
        Off = "off",
        /// A new client (and its metadata reads and connections) for every request.
        On = "on",
    }
}

knob_values! {
    /// How the gateway retries a failed backend call.
    RetryStorm {
        /// Within its retry budget, with exponential backoff and full jitter.
        Off = "off",
        /// At once, up to [`STORM_RETRIES`] times, unbudgeted.
        On = "on",
    }
}

knob_values! {
    /// Whether delivery-service runs with a small fixed capacity. On, it serves
    /// [`OVERLOAD_SLOTS`] requests at a time, each holding its slot for
    /// [`OVERLOAD_WORK`] (about 100 requests per second), and answers 503 with
    /// `Retry-After` to a request that waited [`OVERLOAD_QUEUE_WAIT`] for a slot — a
    /// saturated backend with a bounded queue.
    Overload {
        Off = "off",
        On = "on",
    }
}

knob_values! {
    /// Whether the gateway caches invoices.
    InvoiceCache {
        /// Every invoice recomputed from the backends.
        Off = "off",
        /// Complete invoices of closed months kept (they can no longer change).
        ClosedMonths = "closed-months",
    }
}

knob_values! {
    /// Where package-service's scan ingest writes, if it runs.
    ScanIngest {
        Off = "off",
        /// Into the tuned utilization container, sharing its throughput.
        SharedContainer = "shared-container",
        /// Into [`SCAN_CONTAINER`], with throughput of its own.
        OwnContainer = "own-container",
    }
}

/// Requests delivery-service serves at once when overloaded.
pub const OVERLOAD_SLOTS: usize = 2;
/// The work each holds its slot for.
pub const OVERLOAD_WORK: std::time::Duration = std::time::Duration::from_millis(20);
/// The longest a request waits for a slot before the 503.
pub const OVERLOAD_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// A stage's knobs, each known to the lab and set to one of its values.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LabKnobs(BTreeMap<String, String>);

impl LabKnobs {
    /// Checks every entry: a known knob, one of its values.
    pub fn new(entries: BTreeMap<String, String>) -> Result<Self, String> {
        for (env, value) in &entries {
            let knob = knob(env).ok_or_else(|| {
                let known: Vec<&str> = KNOBS.iter().map(|k| k.env).collect();
                format!("knob {env} is not one of the lab's ({})", known.join(", "))
            })?;
            if !knob.values.contains(&value.as_str()) {
                return Err(format!(
                    "knob {env} = {value:?}: use one of {} ({})",
                    knob.values.join(", "),
                    knob.help
                ));
            }
        }
        Ok(Self(entries))
    }

    /// The knobs `service` reads, as environment variables.
    pub fn for_service(&self, service: Service) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter(|(env, _)| knob(env).is_some_and(|k| k.service == service))
            .map(|(env, value)| (env.clone(), value.clone()))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value the stage gives the knob read from `env`, if it sets it.
    pub fn get(&self, env: &str) -> Option<&str> {
        self.0.get(env).map(String::as_str)
    }

    /// `ENV=value` pairs, for one line of text.
    pub fn describe(&self) -> String {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join(", ")
    }
}

impl<'de> serde::Deserialize<'de> for LabKnobs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = BTreeMap::<String, String>::deserialize(deserializer)?;
        Self::new(entries).map_err(serde::de::Error::custom)
    }
}

/// The resource attribute's value for a service's knobs that are on (`None` when all
/// are off): `ENV=value` pairs.
pub fn knobs_on(knobs: &[(&'static str, String)]) -> Option<String> {
    let on: Vec<String> = knobs
        .iter()
        .filter(|(env, value)| knob(env).is_some_and(|k| k.default_value() != value))
        .map(|(env, value)| format!("{env}={value}"))
        .collect();
    (!on.is_empty()).then(|| on.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_is_off_by_default_and_parses() {
        for knob in KNOBS {
            assert_eq!(knob.default_value(), "off", "{}", knob.env);
        }
        for text in ["off", "blocking", "async"] {
            let mode: AuditWrite = text.parse().expect(text);
            assert_eq!(mode.to_string(), text);
        }
        assert_eq!(AuditWrite::default(), AuditWrite::Off);
        assert!("sync".parse::<AuditWrite>().is_err());
    }

    #[test]
    fn stage_knobs_are_checked_and_split_by_service() {
        let knobs = LabKnobs::new(BTreeMap::from([(
            ENV_AUDIT_WRITE.to_owned(),
            "blocking".to_owned(),
        )]))
        .expect("known");
        assert_eq!(
            knobs.for_service(Service::Utilization).get(ENV_AUDIT_WRITE),
            Some(&"blocking".to_owned())
        );
        assert!(knobs.for_service(Service::Gateway).is_empty());
        let unknown = LabKnobs::new(BTreeMap::from([("GATEWAY_X".into(), "on".into())]));
        assert!(unknown
            .expect_err("unknown")
            .contains("GATEWAY_X is not one of"));
        let bad = LabKnobs::new(BTreeMap::from([(ENV_AUDIT_WRITE.into(), "sync".into())]));
        assert!(bad
            .expect_err("bad value")
            .contains("use one of off, blocking, async"));
    }

    #[test]
    fn only_knobs_that_are_on_show_on_spans() {
        assert_eq!(knobs_on(&[(ENV_AUDIT_WRITE, "off".into())]), None);
        assert_eq!(
            knobs_on(&[(ENV_AUDIT_WRITE, "blocking".into())]).as_deref(),
            Some("UTILIZATION_AUDIT_WRITE=blocking")
        );
    }
}
