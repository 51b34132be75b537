//! The tuning run's report: `report.json` (its schema in the loadtest README),
//! `report.md` (the measured rows beside the study's) and `report.html` (charts drawn as
//! inline SVG: nothing is fetched, it opens offline).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::calibration::{EmulatorModel, RunProfile};
use crate::load::{LoadSummary, Outcome, Percentiles, Profile, SecondSample};
use crate::stages::{Stage, StageConfig};
use crate::study::{self, Published};

#[derive(Debug, Clone, Default, Serialize)]
pub struct CosmosFigures {
    pub requests: u64,
    pub throttled_requests: u64,
    pub ru_total: f64,
    pub ru_per_operation: f64,
    pub calls_per_operation: f64,
    pub max_ru_per_partition_per_sec: f64,
    pub provisioned_ru_per_partition: f64,
}

/// One second of Cosmos activity on the stage's container.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CosmosSample {
    pub t: u64,
    pub ok: u64,
    pub throttled: u64,
    pub ru_per_partition: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub name: String,
    pub description: String,
    pub config: StageConfig,
    pub requests: u64,
    pub successful_requests: u64,
    pub failed_requests: u64,
    pub outcomes: std::collections::BTreeMap<Outcome, u64>,
    pub throughput_rps: f64,
    pub latency_ms: Percentiles,
    pub utilization_latency_ms: Percentiles,
    pub cosmos: CosmosFigures,
    pub study: Option<Published>,
    pub series: Vec<SecondSample>,
    pub cosmos_series: Vec<CosmosSample>,
    /// What the stage's traces say (absent when no trace API was reachable).
    pub diagnosis: Option<trace_analysis::diagnosis::Diagnosis>,
    pub trace_links: Option<trace_analysis::client::TraceLinks>,
}

impl StageReport {
    fn link_list(&self) -> Vec<(&'static str, &str)> {
        self.trace_links
            .iter()
            .flat_map(|l| {
                [
                    ("typical trace", &l.typical),
                    ("slowest trace", &l.slowest),
                    ("trace with a 429", &l.throttled),
                ]
            })
            .filter_map(|(label, link)| link.as_deref().map(|l| (label, l)))
            .collect()
    }

    /// The stage's findings as Markdown list items.
    pub fn diagnosis_markdown(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.diagnosis {
            let _ = writeln!(out, "- diagnosis from {} traces:", d.traces);
            for (i, f) in d.findings.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  - {}**{}** — {}. Next: {}.",
                    if i == 0 { "" } else { "also: " },
                    f.title,
                    f.evidence,
                    f.next_step
                );
            }
        }
        let links = self.link_list();
        if !links.is_empty() {
            let links: Vec<String> = links
                .into_iter()
                .map(|(label, link)| format!("[{label}]({link})"))
                .collect();
            let _ = writeln!(out, "- traces: {}", links.join(" · "));
        }
        out
    }

    fn diagnosis_html(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.diagnosis {
            for (i, f) in d.findings.iter().enumerate() {
                let class = match (i, f.kind) {
                    (_, trace_analysis::diagnosis::FindingKind::NoCosmosBottleneck) => "finding ok",
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
        }
        let links = self.link_list();
        if !links.is_empty() {
            let links: Vec<String> = links
                .into_iter()
                .map(|(label, link)| format!("<a href='{}'>{label}</a>", escape(link)))
                .collect();
            let _ = write!(out, "<p>Traces: {}</p>", links.join(" · "));
        }
        out
    }

    pub fn new(
        stage: &Stage,
        load: &LoadSummary,
        utilization_latency_ms: Percentiles,
        cosmos: CosmosFigures,
        series: Vec<SecondSample>,
        cosmos_series: Vec<CosmosSample>,
    ) -> Self {
        Self {
            name: stage.name.clone(),
            description: stage.description.clone(),
            config: stage.config.clone(),
            requests: load.requests,
            successful_requests: load.successful_requests,
            failed_requests: load.failed_requests,
            outcomes: load.outcomes.clone(),
            throughput_rps: (load.throughput_rps * 100.0).round() / 100.0,
            latency_ms: load.latency_ms,
            utilization_latency_ms,
            cosmos,
            study: study::published_for(&stage.name),
            series,
            cosmos_series,
            diagnosis: None,
            trace_links: None,
        }
    }

    pub fn one_line(&self) -> String {
        format!(
            "{:.1} req/s, {} ok / {} failed, e2e p50 {:.0} ms p95 {:.0} ms, utilization avg {:.0} ms, Cosmos {} calls ({} throttled), {:.1} RU/op, {:.2} calls/op",
            self.throughput_rps,
            self.successful_requests,
            self.failed_requests,
            self.latency_ms.p50,
            self.latency_ms.p95,
            self.utilization_latency_ms.avg,
            self.cosmos.requests,
            self.cosmos.throttled_requests,
            self.cosmos.ru_per_operation,
            self.cosmos.calls_per_operation,
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub run_id: String,
    pub profile: RunProfile,
    pub load: Profile,
    pub emulator_model: EmulatorModel,
    pub duration_secs: f64,
    pub machine: Machine,
    pub stages: Vec<StageReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub os: &'static str,
}

impl Report {
    pub fn new(
        run_id: String,
        profile: RunProfile,
        load: Profile,
        emulator_model: EmulatorModel,
        stages: Vec<StageReport>,
        duration: Duration,
    ) -> Self {
        Self {
            run_id,
            profile,
            load,
            emulator_model,
            duration_secs: (duration.as_secs_f64() * 10.0).round() / 10.0,
            machine: Machine {
                cpus: std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1),
                os: std::env::consts::OS,
            },
            stages,
        }
    }

    /// Writes the three files into `dir` and points `reports/latest` at it.
    pub fn write(&self, dir: &Path, reports: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("report.json"), json)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("report.html"), self.html())?;
        let latest = reports.join("latest");
        let _ = std::fs::remove_file(&latest);
        #[cfg(unix)]
        if let Some(name) = dir.file_name() {
            std::os::unix::fs::symlink(name, &latest)?;
        }
        Ok(())
    }

    /// Each stage's measured row with the study's published row beneath it.
    pub fn markdown_table(&self) -> String {
        let mut out = String::from(
            "| stage | | throughput (req/s) | utilization avg (ms) | p50/p95/p99 (ms) | successful | throttled (429) | RU/op | calls/op | max RU/s per partition (provisioned) |\n|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.stages {
            let u = &s.utilization_latency_ms;
            let c = &s.cosmos;
            let _ = writeln!(
                out,
                "| {} | measured | {:.1} | {:.0} | {:.0}/{:.0}/{:.0} | {} | {} | {:.1} | {:.2} | {:.0} ({:.0}) |",
                s.name, s.throughput_rps, u.avg, u.p50, u.p95, u.p99, s.successful_requests,
                c.throttled_requests, c.ru_per_operation, c.calls_per_operation,
                c.max_ru_per_partition_per_sec, c.provisioned_ru_per_partition
            );
            if let Some(p) = &s.study {
                let _ = writeln!(
                    out,
                    "| | study | {:.0} | {:.0} | {:.0}/{:.0}/{:.0} | {} | {} | {:.1} | {:.0} | {:.0} ({:.0}) |",
                    p.throughput_rps, p.utilization_avg_ms, p.utilization_p50_ms, p.utilization_p95_ms,
                    p.utilization_p99_ms, p.successful_requests, p.throttled_requests, p.ru_per_operation,
                    p.calls_per_operation, p.max_ru_per_partition_per_sec, p.provisioned_ru_per_partition
                );
            }
        }
        out
    }

    fn markdown(&self) -> String {
        let mut out = format!(
            "# dronelab tuning run {}\n\nProfile `{:?}` ({:.0} s per stage), {:.0} s in all, on {} CPUs. Load: {}.\n\n{}\n",
            self.run_id,
            self.profile,
            self.load.duration().as_secs_f64(),
            self.duration_secs,
            self.machine.cpus,
            describe_load(&self.load),
            self.markdown_table()
        );
        out.push_str(
            "\nThroughput counts successful (complete, 200) invoices. Utilization latency is server side (the utilization service's own histogram, the study's figure); the study's absolute numbers come from a cluster in Azure, ours from the emulator's calibrated model: compare the shape (what each change does), not the values.\n",
        );
        for s in &self.stages {
            let _ = write!(
                out,
                "\n## {}\n\n{}\n\n- client latency (end to end): avg {:.0} ms, p50 {:.0}, p90 {:.0}, p95 {:.0}, p99 {:.0}, max {:.0}\n- outcomes: {:?}\n- Cosmos: {} calls, {} throttled, {:.0} RU in total\n",
                s.name, s.description, s.latency_ms.avg, s.latency_ms.p50, s.latency_ms.p90, s.latency_ms.p95,
                s.latency_ms.p99, s.latency_ms.max, s.outcomes, s.cosmos.requests, s.cosmos.throttled_requests,
                s.cosmos.ru_total
            );
            out.push_str(&s.diagnosis_markdown());
        }
        out
    }

    fn html(&self) -> String {
        let mut body = String::new();
        let _ = write!(
            body,
            "<h1>dronelab tuning run {}</h1><p>Profile <b>{:?}</b>, {:.0} s per stage, {} CPUs. Load: {}.</p>",
            escape(&self.run_id),
            self.profile,
            self.load.duration().as_secs_f64(),
            self.machine.cpus,
            escape(&describe_load(&self.load))
        );
        body.push_str("<h2>Measured vs the study</h2>");
        body.push_str(&markdown_table_to_html(&self.markdown_table()));
        body.push_str("<h2>Per operation</h2><div class=row>");
        let bars = |title: &str, measured: Vec<f64>, published: Vec<f64>| {
            bar_chart(
                title,
                &self
                    .stages
                    .iter()
                    .map(|s| s.name.clone())
                    .collect::<Vec<_>>(),
                &[
                    ("measured", "#2563eb", measured),
                    ("study", "#9ca3af", published),
                ],
            )
        };
        body.push_str(&bars(
            "Cosmos calls per operation",
            self.stages
                .iter()
                .map(|s| s.cosmos.calls_per_operation)
                .collect(),
            self.stages
                .iter()
                .map(|s| s.study.map(|p| p.calls_per_operation).unwrap_or(0.0))
                .collect(),
        ));
        body.push_str(&bars(
            "RU per operation",
            self.stages
                .iter()
                .map(|s| s.cosmos.ru_per_operation)
                .collect(),
            self.stages
                .iter()
                .map(|s| s.study.map(|p| p.ru_per_operation).unwrap_or(0.0))
                .collect(),
        ));
        body.push_str(&bars(
            "Throughput (req/s)",
            self.stages.iter().map(|s| s.throughput_rps).collect(),
            self.stages
                .iter()
                .map(|s| s.study.map(|p| p.throughput_rps).unwrap_or(0.0))
                .collect(),
        ));
        body.push_str("</div>");
        for s in &self.stages {
            let _ = write!(
                body,
                "<h2>{}</h2><p>{}</p>{}<div class=row>",
                escape(&s.name),
                escape(&s.description),
                s.diagnosis_html()
            );
            let t = |f: &dyn Fn(&SecondSample) -> f64| -> Vec<(f64, f64)> {
                s.series.iter().map(|x| (x.t as f64, f(x))).collect()
            };
            body.push_str(&line_chart(
                "Users and throughput (req/s)",
                &[
                    Series::new("users", "#9ca3af", t(&|x| x.users as f64)),
                    Series::new("ok req/s", "#16a34a", t(&|x| x.ok as f64)),
                    Series::new("failed req/s", "#dc2626", t(&|x| x.errors as f64)),
                ],
                None,
            ));
            body.push_str(&line_chart(
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
            body.push_str(&line_chart(
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
            let palette = [
                "#2563eb", "#7c3aed", "#db2777", "#ea580c", "#ca8a04", "#16a34a", "#0891b2",
                "#4b5563", "#9333ea",
            ];
            let per_partition: Vec<Series> = (0..partitions)
                .map(|p| {
                    Series::new(
                        format!("p{p}"),
                        palette[p % palette.len()],
                        c(&|x| x.ru_per_partition.get(p).copied().unwrap_or(0.0)),
                    )
                })
                .collect();
            body.push_str(&line_chart(
                "RU/s per partition (dashed: provisioned)",
                &per_partition,
                Some(s.cosmos.provisioned_ru_per_partition),
            ));
            body.push_str("</div>");
        }
        format!(
            "<!doctype html><html lang=en><head><meta charset=utf-8><title>dronelab run {}</title><style>body{{font-family:system-ui,sans-serif;margin:24px;color:#111}}table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ddd;padding:4px 8px;text-align:right}}th{{background:#f3f4f6}}.row{{display:flex;flex-wrap:wrap;gap:12px}}.finding{{border-left:4px solid #dc2626;background:#fef2f2;padding:6px 10px;margin:6px 0;max-width:900px}}.finding.ok{{border-color:#16a34a;background:#f0fdf4}}.also{{border-color:#9ca3af;background:#f9fafb}}svg{{background:#fff;border:1px solid #e5e7eb}}</style></head><body>{body}</body></html>",
            escape(&self.run_id)
        )
    }
}

fn describe_load(p: &Profile) -> String {
    match *p {
        Profile::Step { start_users, step_users, step_secs, max_users, duration_secs } => format!(
            "step load, {start_users} users + {step_users} every {step_secs} s up to {max_users}, {duration_secs} s, no think time"
        ),
        Profile::Constant { users, duration_secs } => format!("{users} users for {duration_secs} s"),
        Profile::Arrival { rate_per_sec, duration_secs, .. } => {
            format!("{rate_per_sec} requests/s for {duration_secs} s (open loop)")
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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

/// One line of a chart.
struct Series {
    name: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

impl Series {
    fn new(name: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            color,
            points,
        }
    }
}

const W: f64 = 520.0;
const H: f64 = 220.0;
const PAD: f64 = 40.0;

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    let scaled = v / magnitude;
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|s| *s >= scaled)
        .unwrap_or(10.0);
    step * magnitude
}

fn frame(
    title: &str,
    y_max: f64,
    x_max: Option<f64>,
    inner: &str,
    legend: &[(&str, &str)],
) -> String {
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}' font-size='11'><text x='{PAD}' y='14' font-weight='bold'>{}</text>",
        escape(title)
    );
    for i in 0..=4 {
        let y = H - PAD + (PAD + 20.0 - H) * i as f64 / 4.0;
        let _ = write!(
            svg,
            "<line x1='{PAD}' x2='{}' y1='{y:.1}' y2='{y:.1}' stroke='#eee'/><text x='{}' y='{:.1}' text-anchor='end'>{}</text>",
            W - 10.0,
            PAD - 4.0,
            y + 4.0,
            fmt_num(y_max * i as f64 / 4.0)
        );
    }
    if let Some(x_max) = x_max {
        let _ = write!(
            svg,
            "<text x='{}' y='{}' text-anchor='end'>{} s</text>",
            W - 10.0,
            H - PAD + 14.0,
            fmt_num(x_max)
        );
    }
    svg.push_str(inner);
    let mut x = PAD;
    for (name, color) in legend {
        let _ = write!(svg, "<rect x='{x}' y='{}' width='10' height='10' fill='{color}'/><text x='{}' y='{}'>{}</text>", H - 14.0, x + 13.0, H - 5.0, escape(name));
        x += 14.0 + 6.5 * name.len() as f64 + 10.0;
    }
    svg.push_str("</svg>");
    svg
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn line_chart(title: &str, series: &[Series], hline: Option<f64>) -> String {
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(hline)
            .fold(0.0, f64::max),
    );
    let sx = |x: f64| PAD + (W - PAD - 10.0) * x / x_max;
    let sy = |y: f64| H - PAD - (H - 2.0 * PAD - 20.0 + PAD) * y / y_max;
    let mut inner = String::new();
    for line in series {
        let points: Vec<String> = line
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        let _ = write!(
            inner,
            "<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>",
            line.color,
            points.join(" ")
        );
    }
    if let Some(h) = hline {
        let _ = write!(
            inner,
            "<line x1='{PAD}' x2='{}' y1='{:.1}' y2='{:.1}' stroke='#111' stroke-dasharray='5,4'/>",
            W - 10.0,
            sy(h),
            sy(h)
        );
    }
    let legend: Vec<(&str, &str)> = series
        .iter()
        .take(9)
        .map(|s| (s.name.as_str(), s.color))
        .collect();
    frame(title, y_max, Some(x_max), &inner, &legend)
}

fn bar_chart(title: &str, labels: &[String], series: &[(&str, &str, Vec<f64>)]) -> String {
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|(_, _, v)| v.iter().copied())
            .fold(0.0, f64::max),
    );
    let groups = labels.len().max(1) as f64;
    let group_w = (W - PAD - 10.0) / groups;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    let sy = |y: f64| (H - 2.0 * PAD - 20.0 + PAD) * y / y_max;
    let mut inner = String::new();
    for (g, label) in labels.iter().enumerate() {
        let x0 = PAD + group_w * g as f64 + group_w * 0.1;
        for (i, (_, color, values)) in series.iter().enumerate() {
            let v = values.get(g).copied().unwrap_or(0.0);
            let h = sy(v);
            let _ = write!(
                inner,
                "<rect x='{:.1}' y='{:.1}' width='{bar_w:.1}' height='{h:.1}' fill='{color}'><title>{}</title></rect>",
                x0 + bar_w * i as f64,
                H - PAD - h,
                fmt_num(v)
            );
        }
        let _ = write!(
            inner,
            "<text x='{:.1}' y='{}' text-anchor='middle'>{}</text>",
            x0 + group_w * 0.4,
            H - PAD + 14.0,
            escape(label)
        );
    }
    let legend: Vec<(&str, &str)> = series.iter().map(|(n, c, _)| (*n, *c)).collect();
    frame(title, y_max, None, &inner, &legend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axis_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(23.0), 25.0);
        assert_eq!(nice_max(260.0), 500.0);
    }

    #[test]
    fn charts_are_self_contained_svg() {
        let svg = line_chart(
            "t <x>",
            &[Series::new("a", "#000", vec![(0.0, 1.0), (1.0, 2.0)])],
            Some(1.5),
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("t &lt;x&gt;") && svg.contains("stroke-dasharray"));
        assert!(!svg.contains("http://") || svg.contains("xmlns='http://www.w3.org/2000/svg'"));
    }
}
