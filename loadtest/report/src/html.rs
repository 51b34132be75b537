//! `report.html`: the comparison table, per-operation bars against the study, and per
//! stage its diagnosis and time series, all inline (SVG charts, embedded CSS).

use std::fmt::Write as _;

use trace_analysis::diagnosis::FindingKind;

use super::lab;
use super::model::{describe_load, CosmosSample, Report, StageReport};
use super::svg::{bar_chart, escape, line_chart, Series};
use loadgen::IntervalSample;

const STYLE: &str = include_str!("report.css");

/// Colours of up to nine partitions' lines (they repeat beyond).
const PARTITION_COLOURS: [&str; 9] = [
    "#2563eb", "#7c3aed", "#db2777", "#ea580c", "#ca8a04", "#16a34a", "#0891b2", "#4b5563",
    "#9333ea",
];

pub fn render(report: &Report) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>dronelab tuning run {}</h1><p>Profile <b>{:?}</b>, {:.0} s per stage, {} CPUs. Load: {}.</p>",
        escape(&report.run_id),
        report.profile,
        report.load.duration().as_secs_f64(),
        report.machine.cpus,
        escape(&describe_load(&report.load))
    );
    body.push_str("<h2>Measured vs the study</h2>");
    body.push_str(&markdown_table_to_html(&report.markdown_table()));
    body.push_str(&per_operation(report));
    body.push_str(&lab(report));
    body.push_str(&report.capacity_html());
    for stage in &report.stages {
        body.push_str(&stage_section(stage));
    }
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>dronelab run {}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        escape(&report.run_id)
    )
}

/// Calls, RU and throughput per stage, measured beside the study's.
fn per_operation(report: &Report) -> String {
    let names: Vec<String> = report.stages.iter().map(|s| s.name.clone()).collect();
    let bars = |title: &str,
                measured: &dyn Fn(&StageReport) -> f64,
                published: &dyn Fn(&dronelab_study::published::Published) -> f64| {
        bar_chart(
            title,
            &names,
            &[
                (
                    "measured",
                    "#2563eb",
                    report.stages.iter().map(measured).collect(),
                ),
                (
                    "study",
                    "#9ca3af",
                    report
                        .stages
                        .iter()
                        .map(|s| s.study.as_ref().map(published).unwrap_or(0.0))
                        .collect(),
                ),
            ],
        )
    };
    let mut out = String::from("<h2>Per operation</h2><div class=row>");
    out.push_str(&bars(
        "Cosmos calls per operation",
        &|s| s.cosmos.calls_per_operation,
        &|p| p.calls_per_operation,
    ));
    out.push_str(&bars(
        "RU per operation",
        &|s| s.cosmos.ru_per_operation,
        &|p| p.ru_per_operation,
    ));
    out.push_str(&bars("Throughput (req/s)", &|s| s.throughput_rps, &|p| {
        p.throughput_rps
    }));
    out.push_str("</div>");
    out
}

/// The antipattern lab's knobs a stage switched on (nothing for the study's stages).
fn knobs(s: &StageReport) -> String {
    if s.knobs.is_empty() {
        return String::new();
    }
    format!(
        "<p>Antipattern lab knobs on: <code>{}</code></p>",
        escape(&s.knobs.describe())
    )
}

/// A stage's diagnosis and its load, latency and Cosmos time series.
fn stage_section(s: &StageReport) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<h2>{}</h2><p>{}</p>{}{}<div class=row>",
        escape(&s.name),
        escape(&s.description),
        knobs(s),
        diagnosis(s)
    );
    let t = |f: &dyn Fn(&IntervalSample) -> f64| -> Vec<(f64, f64)> {
        s.series.iter().map(|x| (x.t as f64, f(x))).collect()
    };
    let per_second = s.interval_secs.max(1) as f64;
    out.push_str(&line_chart(
        "Users and throughput (req/s)",
        &[
            Series::new("users", "#9ca3af", t(&|x| x.users as f64)),
            Series::new("ok req/s", "#16a34a", t(&|x| x.ok as f64 / per_second)),
            Series::new(
                "failed req/s",
                "#dc2626",
                t(&|x| x.errors as f64 / per_second),
            ),
        ],
        None,
    ));
    out.push_str(&line_chart(
        "End-to-end latency (ms)",
        &[
            Series::new("p50", "#16a34a", t(&|x| x.latency_ms.p50)),
            Series::new("p95", "#f59e0b", t(&|x| x.latency_ms.p95)),
            Series::new("p99", "#dc2626", t(&|x| x.latency_ms.p99)),
        ],
        None,
    ));
    let c = |f: &dyn Fn(&CosmosSample) -> f64| -> Vec<(f64, f64)> {
        s.cosmos_series.iter().map(|x| (x.t as f64, f(x))).collect()
    };
    out.push_str(&line_chart(
        "Cosmos calls per second: 2xx vs 429",
        &[
            Series::new("2xx", "#16a34a", c(&|x| x.ok as f64)),
            Series::new("429", "#dc2626", c(&|x| x.throttled as f64)),
        ],
        None,
    ));
    let partitions = s
        .cosmos_series
        .iter()
        .map(|x| x.ru_per_partition.len())
        .max()
        .unwrap_or(0);
    let per_partition: Vec<Series> = (0..partitions)
        .map(|p| {
            Series::new(
                format!("p{p}"),
                PARTITION_COLOURS[p % PARTITION_COLOURS.len()],
                c(&|x| x.ru_per_partition.get(p).copied().unwrap_or(0.0)),
            )
        })
        .collect();
    out.push_str(&line_chart(
        "RU/s per partition (dashed: provisioned)",
        &per_partition,
        Some(s.cosmos.provisioned_ru_per_partition),
    ));
    out.push_str(&resource_charts(s));
    out.push_str("</div>");
    if let Some(r) = &s.resources {
        let _ = write!(out, "<p>CPU and memory from {}:</p>", escape(&r.source));
        out.push_str(&markdown_table_to_html(
            s.resources_markdown()
                .lines()
                .filter(|l| l.starts_with('|'))
                .collect::<Vec<_>>()
                .join("\n")
                .as_str(),
        ));
    } else if let Some(reason) = &s.resources_unavailable {
        let _ = write!(out, "<p>CPU and memory: {}</p>", escape(reason));
    }
    out
}

/// CPU (cores) and resident memory per component over the stage.
fn resource_charts(s: &StageReport) -> String {
    let Some(r) = &s.resources else {
        return String::new();
    };
    let per_component = |value: &dyn Fn(&crate::resources::ResourceSample, &str) -> Option<f64>| {
        r.components
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Series::new(
                    c.name.clone(),
                    PARTITION_COLOURS[i % PARTITION_COLOURS.len()],
                    s.resource_series
                        .iter()
                        .filter_map(|x| Some((x.t as f64, value(x, &c.name)?)))
                        .collect(),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut out = line_chart(
        "CPU per component (cores)",
        &per_component(&|x, name| x.cpu_cores.get(name).copied()),
        None,
    );
    out.push_str(&line_chart(
        "Resident memory per component (MB)",
        &per_component(&|x, name| x.rss_mb.get(name).copied()),
        None,
    ));
    out
}

fn diagnosis(stage: &StageReport) -> String {
    let mut out = String::new();
    if let Some(d) = &stage.diagnosis {
        for (i, f) in d.findings.iter().enumerate() {
            let class = match (i, f.kind) {
                (_, FindingKind::NoCosmosBottleneck) => "finding ok",
                (0, _) => "finding",
                _ => "finding also",
            };
            let _ = write!(
                out,
                "<div class='{class}'><b>{}</b> — {}<br>next: {}</div>",
                escape(&f.title),
                escape(&f.evidence),
                escape(&f.next_step)
            );
        }
        for caveat in d.caveats() {
            let _ = write!(out, "<div class='finding also'>{}</div>", escape(&caveat));
        }
    }
    if let Some(warning) = stage.spans.as_ref().and_then(|s| s.warning()) {
        let _ = write!(
            out,
            "<div class='finding'><b>Spans lost</b> — {}</div>",
            escape(&warning)
        );
    }
    let links = stage.link_list();
    if !links.is_empty() {
        let links: Vec<String> = links
            .into_iter()
            .map(|(label, link)| format!("<a href='{}'>{label}</a>", escape(link)))
            .collect();
        let _ = write!(out, "<p>Traces: {}</p>", links.join(" · "));
    }
    out
}

/// The confusion matrix and each antipattern's stages side by side, with trace links.
fn lab(report: &Report) -> String {
    let pairs = report.antipatterns();
    if pairs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Antipattern lab</h2><table><tr><th>stage</th><th>antipattern</th><th>expected</th><th>named</th><th></th></tr>",
    );
    for row in report.lab_matrix() {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&row.stage),
            escape(row.antipattern.as_deref().unwrap_or("study")),
            escape(&row.expect),
            escape(&row.named_text()),
            if row.agrees() { "✓" } else { "✗" }
        );
    }
    out.push_str("</table>");
    for (name, stages) in pairs {
        let about = lab::pair_kind(&stages)
            .and_then(FindingKind::about)
            .unwrap_or_default();
        let (signal, rows) = lab::pair_rows(&stages);
        let _ = write!(
            out,
            "<h3>{}</h3><p>{}.</p><table><tr><th>stage</th><th>throughput (req/s)</th><th>e2e p50/p99 (ms)</th><th>RU/invoice</th><th>Cosmos calls/invoice</th><th>{}</th><th>named</th><th>typical trace</th></tr>",
            escape(name),
            escape(about),
            escape(&signal)
        );
        for [stage, rps, latency, ru, calls, value, named, trace] in rows {
            let trace = if trace.is_empty() {
                "–".to_owned()
            } else {
                format!("<a href='{}'>open</a>", escape(&trace))
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{rps}</td><td>{latency}</td><td>{ru}</td><td>{calls}</td><td>{value}</td><td>{named}</td><td>{trace}</td></tr>",
                escape(&stage)
            );
        }
        out.push_str("</table>");
    }
    out
}

fn markdown_table_to_html(md: &str) -> String {
    let mut out = String::from("<table>");
    for (i, line) in md.lines().filter(|l| !l.starts_with("|---")).enumerate() {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let tag = if i == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for cell in cells {
            let _ = write!(out, "<{tag}>{}</{tag}>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}
