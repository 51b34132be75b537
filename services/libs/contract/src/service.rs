//! The processes: names (also their OpenTelemetry `service.name`), default loopback
//! ports, and the routes they serve.

use std::net::{Ipv4Addr, SocketAddr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Gateway,
    Delivery,
    Package,
    Utilization,
    CosmosEmulator,
    TraceViewer,
}

impl Service {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Delivery => "delivery-service",
            Self::Package => "package-service",
            Self::Utilization => "utilization-service",
            Self::CosmosEmulator => "cosmos-emulator",
            Self::TraceViewer => "trace-viewer",
        }
    }

    /// The port a process listens on when started by hand without `--listen`; the local
    /// stack uses free ports instead. The trace viewer's is its UI and query API.
    pub const fn default_port(self) -> u16 {
        match self {
            Self::Gateway => 8080,
            Self::CosmosEmulator => 8081,
            Self::Delivery => 8091,
            Self::Package => 8092,
            Self::Utilization => 8093,
            Self::TraceViewer => 16686,
        }
    }

    pub fn default_listen(self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.default_port()))
    }

    /// `http://127.0.0.1:<default port>/`.
    pub fn default_url(self) -> url::Url {
        loopback_url(self.default_listen())
    }
}

/// The base URL of a server listening at `addr`.
pub fn loopback_url(addr: SocketAddr) -> url::Url {
    url::Url::parse(&format!("http://{addr}/"))
        .expect("http with an IP address and a port is a valid URL")
}

/// The gateway's least limit of calls in flight to one backend: its adaptive limit never
/// drops below it. Here because the capacity model reads it too.
pub const GATEWAY_BACKEND_LIMIT_FLOOR: usize = 64;

/// The trace viewer's OTLP receivers (the standard OTLP ports).
pub const OTLP_GRPC_PORT: u16 = 4317;
pub const OTLP_HTTP_PORT: u16 = 4318;

/// Every route of the invoice path, plus the routes every service serves.
pub mod routes {
    /// Gateway: an owner's monthly invoice.
    pub const INVOICES: &str = "/api/invoices";
    /// Gateway: its OpenAPI 3 document.
    pub const OPENAPI: &str = "/openapi.json";
    /// delivery-service.
    pub const DELIVERY_SUMMARY: &str = "/api/deliveries/summary";
    /// package-service.
    pub const PACKAGE_SUMMARY: &str = "/api/packages/summary";
    /// utilization-service.
    pub const UTILIZATION: &str = "/api/dronedeliveries/utilization";
    /// Every service: alive.
    pub const HEALTHZ: &str = "/healthz";
    /// Every service: ready to serve (its Cosmos container answers).
    pub const READYZ: &str = "/readyz";
    /// Every service: Prometheus text format.
    pub const METRICS: &str = "/metrics";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_urls_are_loopback_with_the_port() {
        assert_eq!(
            Service::Gateway.default_url().as_str(),
            "http://127.0.0.1:8080/"
        );
        assert_eq!(Service::Utilization.default_listen().port(), 8093);
    }
}
