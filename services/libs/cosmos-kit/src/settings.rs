//! Where the Cosmos account is, how to authenticate, how the SDK retries throttled
//! requests, and connecting the SDK client with those settings.

use std::time::Duration;

use azure_core::credentials::Secret;
use azure_data_cosmos::options::{OperationOptionsBuilder, ThrottlingRetryOptionsBuilder};
use azure_data_cosmos::{AccountEndpoint, AccountReference, CosmosClient, RoutingStrategy};
use dronelab_contract::{Service, DATABASE, PUBLIC_EMULATOR_KEY};

/// Environment variables the Cosmos SDK reads itself: `AZURE_COSMOS_EMULATOR_HOST`
/// names an emulator host (other than localhost) whose `http://` endpoint it accepts.
pub const SDK_ENVIRONMENT: &[&str] = &["AZURE_COSMOS_EMULATOR_HOST"];

/// A secret that never appears in logs or `Debug` output.
#[derive(Clone)]
pub struct SecretString(String);

impl SecretString {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// [`PUBLIC_EMULATOR_KEY`], the local stack's key.
    pub fn public_emulator_key() -> Self {
        Self(PUBLIC_EMULATOR_KEY.to_owned())
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for SecretString {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            Err("must not be empty".into())
        } else {
            Ok(Self(s.trim().to_owned()))
        }
    }
}

/// Whether this build reaches `https://` URLs: the cargo feature `tls`, the SDK's
/// rustls. It is reqwest's only TLS in dronelab, so it holds for every reqwest client of
/// the build. The services turn it on by default; the local tuning run leaves it out.
const TLS_BUILT: bool = cfg!(feature = "tls");

/// Refuses an `https://` URL in a build without TLS, saying which feature to add, before
/// a client would fail on its first request.
pub fn refuse_https_without_tls(url: &str) -> Result<(), String> {
    https_needs_tls(url, TLS_BUILT)
}

fn https_needs_tls(url: &str, tls_built: bool) -> Result<(), String> {
    let https = url
        .get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
    if https && !tls_built {
        return Err(
            "https needs TLS, which this build left out: build with the cargo \
                    feature `tls` (`cargo run --release -p loadtest --features tls -- …`)"
                .to_owned(),
        );
    }
    Ok(())
}

/// The region a service says it runs in unless told (the study's).
const DEFAULT_REGION: &str = "South Central US";

/// Where the Cosmos account is and how the SDK retries throttled requests.
#[derive(Debug, Clone, clap::Args)]
pub struct CosmosArgs {
    /// Cosmos DB account endpoint.
    #[arg(
        long = "cosmos-endpoint",
        env = "COSMOS_ENDPOINT",
        default_value_t = format!("http://{}", Service::CosmosEmulator.default_listen())
    )]
    pub endpoint: String,
    /// Cosmos DB master key. Prefer the COSMOS_KEY environment variable (from a
    /// Kubernetes Secret, say) or --cosmos-key-file: a value on the command line is
    /// visible to every user in the process list.
    #[arg(long = "cosmos-key", env = "COSMOS_KEY", default_value = PUBLIC_EMULATOR_KEY,
          hide_default_value = true, hide_env_values = true)]
    pub key: SecretString,
    /// A file holding the Cosmos DB master key (e.g. a mounted Secret); wins over
    /// --cosmos-key.
    #[arg(long = "cosmos-key-file", env = "COSMOS_KEY_FILE", value_parser = key_from_file)]
    pub key_file: Option<SecretString>,
    /// Database holding the lab's containers.
    #[arg(
        long = "cosmos-database",
        env = "COSMOS_DATABASE",
        default_value = DATABASE
    )]
    pub database: String,
    /// Retries of a throttled (429) request before giving up (SDK default: 9).
    #[arg(long = "cosmos-max-retries", env = "COSMOS_MAX_RETRIES")]
    pub max_retries: Option<u32>,
    /// Longest total wait across 429 retries, in seconds (SDK default: 30).
    #[arg(
        long = "cosmos-max-retry-wait-secs",
        env = "COSMOS_MAX_RETRY_WAIT_SECS"
    )]
    pub max_retry_wait_secs: Option<u64>,
    /// The Azure region the service runs in (the SDK prefers the account's nearest).
    #[arg(
        long = "cosmos-region",
        env = "COSMOS_REGION",
        default_value = DEFAULT_REGION
    )]
    pub region: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid Cosmos endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("cannot reach Cosmos DB at {endpoint}: {source}")]
    Client {
        endpoint: String,
        source: azure_data_cosmos::CosmosError,
    },
}

/// The key in `path` (surrounding whitespace and a final newline ignored).
fn key_from_file(path: &str) -> Result<SecretString, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    text.parse().map_err(|e| format!("{path}: the key {e}"))
}

impl CosmosArgs {
    /// An emulator at `endpoint` with its public key, everything else as the command
    /// line defaults it (tools and tests that start an emulator of their own).
    pub fn emulator_at(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            key: SecretString::public_emulator_key(),
            key_file: None,
            database: DATABASE.to_owned(),
            max_retries: None,
            max_retry_wait_secs: None,
            region: DEFAULT_REGION.to_owned(),
        }
    }

    /// The master key: from --cosmos-key-file if given, else --cosmos-key / COSMOS_KEY.
    pub fn key(&self) -> &SecretString {
        self.key_file.as_ref().unwrap_or(&self.key)
    }

    /// Builds the SDK client (reads the account once).
    pub async fn connect(&self) -> Result<CosmosClient, ConnectError> {
        refuse_https_without_tls(&self.endpoint).map_err(|reason| ConnectError::Endpoint {
            endpoint: self.endpoint.clone(),
            reason,
        })?;
        let endpoint: AccountEndpoint =
            self.endpoint
                .parse()
                .map_err(|e: azure_data_cosmos::CosmosError| ConnectError::Endpoint {
                    endpoint: self.endpoint.clone(),
                    reason: e.to_string(),
                })?;
        let account = AccountReference::with_authentication_key(
            endpoint,
            Secret::from(self.key().expose().to_owned()),
        );
        let mut builder = CosmosClient::builder()
            .with_diagnostics_handler(std::sync::Arc::new(crate::telemetry::ClientCreationEvents));
        if self.max_retries.is_some() || self.max_retry_wait_secs.is_some() {
            let mut retry = ThrottlingRetryOptionsBuilder::new();
            if let Some(n) = self.max_retries {
                retry = retry.with_max_retry_count(n);
            }
            if let Some(secs) = self.max_retry_wait_secs {
                retry = retry.with_max_retry_wait_time(Duration::from_secs(secs));
            }
            builder = builder.with_default_operation_options(
                OperationOptionsBuilder::new()
                    .with_throttling_retry_options(retry.build())
                    .build(),
            );
        }
        builder
            .build(
                account,
                RoutingStrategy::ProximityTo(self.region.clone().into()),
            )
            .await
            .map_err(|source| ConnectError::Client {
                endpoint: self.endpoint.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_never_shows() {
        let key: SecretString = " s3cret ".parse().expect("a key");
        assert_eq!(key.expose(), "s3cret");
        assert_eq!(format!("{key:?}"), "<redacted>");
        assert!(" ".parse::<SecretString>().is_err());
    }

    #[test]
    fn https_without_tls_says_which_feature() {
        let url = "HTTPS://account.documents.azure.com:443/";
        let refused = https_needs_tls(url, false).expect_err("no TLS in this build");
        assert!(refused.contains("--features tls"), "{refused}");
        assert!(https_needs_tls(url, true).is_ok());
        assert!(https_needs_tls("http://127.0.0.1:8081/", false).is_ok());
        assert!(https_needs_tls("", false).is_ok());
    }

    #[test]
    fn a_key_file_wins_over_the_key() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cosmos: CosmosArgs,
        }
        let dir = std::env::temp_dir().join(format!("cosmos-kit-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("key");
        std::fs::write(&file, "from-the-file\n").expect("write");
        let path = file.to_string_lossy().into_owned();
        let cli = Cli::try_parse_from(["x", "--cosmos-key-file", &path]).expect("parses");
        assert_eq!(cli.cosmos.key().expose(), "from-the-file");
        let cli = Cli::try_parse_from(["x"]).expect("parses");
        assert_eq!(cli.cosmos.key().expose(), PUBLIC_EMULATOR_KEY);
        let missing = Cli::try_parse_from(["x", "--cosmos-key-file", "/no/such/key"]);
        let error = missing.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("cannot read /no/such/key"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
