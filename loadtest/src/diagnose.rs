//! `loadtest diagnose`: reads end-to-end traces from a Jaeger-compatible query API (the
//! local trace viewer, or a real Jaeger) and prints what the bottleneck is, with the
//! numbers that show it, and what to try next. The rules are in
//! `trace_analysis::diagnosis`.

use dronelab_contract::{routes, Service};
use trace_analysis::client::{diagnose_window, ClientError, TraceApi, TraceLinks, TraceWindow};

#[derive(Debug, Clone, clap::Args)]
pub struct DiagnoseArgs {
    /// Base URL of a Jaeger-compatible query API (the trace viewer, or Jaeger's
    /// query service).
    #[arg(
        long,
        env = "DRONELAB_TRACES_API",
        default_value_t = Service::TraceViewer.default_url(),
        value_parser = crate::client_url::client_url
    )]
    pub api: url::Url,
    /// The entry service whose operations are diagnosed.
    #[arg(long, default_value = Service::Gateway.name())]
    pub service: String,
    /// The operation (root span name) to diagnose.
    #[arg(long, default_value_t = format!("GET {}", routes::INVOICES))]
    pub operation: String,
    /// How far back to look (Jaeger duration: 90s, 5m, 1h).
    #[arg(long, default_value = "5m")]
    pub lookback: String,
    /// Most traces to read (newest first).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub limit: u32,
    /// Print the diagnosis as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `loadtest diagnose`.
pub async fn run(args: DiagnoseArgs) -> Result<(), ClientError> {
    let api = TraceApi::new(args.api.clone());
    let window = TraceWindow {
        service: args.service.clone(),
        operation: args.operation.clone(),
        start_us: None,
        end_us: None,
        lookback: Some(args.lookback.clone()),
        limit: args.limit,
        load_per_second: Vec::new(),
    };
    let (mut diagnosis, links) = diagnose_window(&api, &window).await?;
    diagnosis.sample = sample_text(&args, diagnosis.traces);
    diagnosis.check_half_sample();
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "diagnosis": diagnosis, "traces": links, "sample": diagnosis.sample })
        );
    } else {
        print!("{}{}", diagnosis.text(), links_text(&links, ""));
    }
    Ok(())
}

/// What the diagnosis read: how many traces, of which operation, from when, and that
/// they are the requests the services chose to trace. A service sampling at a ratio
/// (`OTEL_TRACES_SAMPLER=parentbased_traceidratio`) traces that share of its requests,
/// so counts are of the share and a rare problem may be missing; the tuning run's local
/// stack traces every request.
fn sample_text(args: &DiagnoseArgs, traces: usize) -> String {
    format!(
        "{traces} traces of {} {:?}, the newest within {} (at most {}); only the requests the services sampled (their OTEL_TRACES_SAMPLER) are traced, so at a ratio below 1 the figures are of that share",
        args.service, args.operation, args.lookback, args.limit
    )
}

/// One line per link.
pub fn links_text(links: &TraceLinks, indent: &str) -> String {
    let mut out = String::new();
    for (label, link) in links.labelled() {
        out.push_str(&format!("{indent}{label:17} {link}\n"));
    }
    out
}
