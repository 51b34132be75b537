//! Command-line configuration, with environment-variable fallbacks (names shared with the
//! rest of dronelab: the configuration table of the top-level README).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use clap::{ArgAction, Parser};
use dronelab_contract::{Service, PUBLIC_EMULATOR_KEY};

use cosmos_engine::store::Layout;
use cosmos_engine::throughput::LatencyModel;

/// The account master key (decoded). Never printed.
#[derive(Clone)]
pub struct MasterKey(Vec<u8>);

impl MasterKey {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

impl std::str::FromStr for MasterKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|_| {
                "the master key must be base64 (like the public emulator key)".to_owned()
            })?;
        if bytes.is_empty() {
            return Err("the master key must not be empty".to_owned());
        }
        Ok(Self(bytes))
    }
}

/// The master key in the file at `path`.
fn key_from_file(path: &str) -> Result<MasterKey, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    text.parse().map_err(|e| format!("{path}: {e}"))
}

fn non_negative(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must be a finite number ≥ 0"))
    }
}

fn fraction(s: &str) -> Result<f64, String> {
    let v = non_negative(s)?;
    if v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must be between 0 and 1"))
    }
}

fn container_partitions(s: &str) -> Result<(String, usize), String> {
    let (name, count) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' should look like <container>=<partitions>"))?;
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| format!("'{count}' is not a partition count"))?;
    if !(1..=cosmos_engine::epk::MAX_PARTITIONS).contains(&count) || name.trim().is_empty() {
        return Err(format!(
            "'{s}': partitions must be 1..={} and the container named",
            cosmos_engine::epk::MAX_PARTITIONS
        ));
    }
    Ok((name.trim().to_owned(), count))
}

/// A local Cosmos DB (SQL API) with physical partitions, RU budgets, 429s and latency.
#[derive(Debug, Clone, Parser)]
#[command(name = "cosmos-emulator", version, about)]
pub struct Config {
    /// Address to listen on (HTTP/1.1 and HTTP/2 cleartext).
    #[arg(long, env = "LISTEN_ADDR", default_value_t = Service::CosmosEmulator.default_listen())]
    pub listen: SocketAddr,

    /// Account master key (base64); requests must be signed with it, and the admin
    /// routes that change the emulator need it too. Prefer the environment variable or
    /// --key-file: a value on the command line is visible to every user in the process
    /// list.
    #[arg(long, env = "COSMOS_EMULATOR_KEY", default_value = PUBLIC_EMULATOR_KEY, hide_default_value = true, hide_env_values = true)]
    pub key: MasterKey,

    /// A file holding the master key (base64); wins over --key.
    #[arg(long, env = "COSMOS_EMULATOR_KEY_FILE", value_parser = key_from_file)]
    pub key_file: Option<MasterKey>,

    /// Accept signed requests whatever their `x-ms-date` (for clock-skew experiments);
    /// otherwise a date more than 15 minutes from the emulator's clock is refused, as
    /// Cosmos DB does.
    #[arg(long, env = "COSMOS_EMULATOR_ALLOW_CLOCK_SKEW")]
    pub allow_clock_skew: bool,

    /// Directory that keeps all data across restarts; in memory when not given.
    #[arg(long, env = "COSMOS_EMULATOR_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Physical partitions per new container.
    #[arg(long, env = "COSMOS_EMULATOR_PARTITIONS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=cosmos_engine::epk::MAX_PARTITIONS as i64))]
    pub partitions: u16,

    /// Per-container override, `<container>=<partitions>` (repeatable or comma-separated).
    #[arg(long = "container-partitions", env = "COSMOS_EMULATOR_CONTAINER_PARTITIONS",
          value_delimiter = ',', value_parser = container_partitions)]
    pub container_partitions: Vec<(String, usize)>,

    /// Enforce per-partition RU budgets with 429s (`false` = unlimited throughput).
    #[arg(long, env = "COSMOS_EMULATOR_THROTTLING", default_value_t = true, action = ArgAction::Set)]
    pub throttling: bool,

    /// Simulate service latency (`false` = answer as fast as possible).
    #[arg(long, env = "COSMOS_EMULATOR_LATENCY", default_value_t = true, action = ArgAction::Set)]
    pub latency: bool,

    /// Network round trip added to every response, in ms.
    #[arg(long, env = "COSMOS_EMULATOR_RTT_MS", default_value_t = 1.0, value_parser = non_negative)]
    pub rtt_ms: f64,

    /// Fixed service time of a request inside a partition, in ms.
    #[arg(long, env = "COSMOS_EMULATOR_SERVICE_MS", default_value_t = 0.5, value_parser = non_negative)]
    pub service_ms: f64,

    /// Extra service time per request unit charged, in ms.
    #[arg(long, env = "COSMOS_EMULATOR_MS_PER_RU", default_value_t = 0.4, value_parser = non_negative)]
    pub ms_per_ru: f64,

    /// Relative jitter applied to every delay (0–1).
    #[arg(long, env = "COSMOS_EMULATOR_JITTER", default_value_t = 0.25, value_parser = fraction)]
    pub jitter: f64,

    /// Requests a physical partition serves at once; more wait in line.
    #[arg(long, env = "COSMOS_EMULATOR_PARTITION_CONCURRENCY", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub partition_concurrency: u16,
}

impl Config {
    /// The master key: from --key-file if given, else --key / COSMOS_EMULATOR_KEY.
    pub fn master_key(&self) -> &MasterKey {
        self.key_file.as_ref().unwrap_or(&self.key)
    }

    /// Defaults for tests and embedding: in memory, one partition, throttling on,
    /// latency off, listening on an ephemeral loopback port.
    pub fn for_tests() -> Self {
        let mut config = Self::parse_from(["cosmos-emulator"]);
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.latency = false;
        config
    }

    pub fn layout(&self) -> Layout {
        Layout {
            default_partitions: usize::from(self.partitions),
            container_partitions: self
                .container_partitions
                .iter()
                .cloned()
                .collect::<HashMap<_, _>>(),
            partition_slots: usize::from(self.partition_concurrency),
        }
    }

    pub fn latency_model(&self) -> LatencyModel {
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        LatencyModel {
            enabled: self.latency,
            round_trip: ms(self.rtt_ms),
            base_service: ms(self.service_ms),
            per_ru: ms(self.ms_per_ru),
            jitter: self.jitter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_wins_over_the_key() {
        let dir = std::env::temp_dir().join(format!("emulator-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("key");
        std::fs::write(&file, "a2V5IGZyb20gdGhlIGZpbGU=\n").expect("write");
        let path = file.to_string_lossy().into_owned();
        let config =
            Config::try_parse_from(["cosmos-emulator", "--key-file", &path]).expect("parses");
        assert_eq!(config.master_key().bytes(), b"key from the file");
        let config = Config::try_parse_from(["cosmos-emulator"]).expect("parses");
        let public: MasterKey = PUBLIC_EMULATOR_KEY.parse().expect("key");
        assert_eq!(config.master_key().bytes(), public.bytes());
        std::fs::write(&file, "not base64!").expect("write");
        let refused = Config::try_parse_from(["cosmos-emulator", "--key-file", &path]);
        let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("base64"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
