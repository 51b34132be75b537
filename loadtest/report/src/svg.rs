//! Line and bar charts as inline SVG, so the HTML report opens offline.

use std::fmt::Write as _;

/// One line of a chart.
pub struct Series {
    name: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Self {
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

pub fn line_chart(title: &str, series: &[Series], hline: Option<f64>) -> String {
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

pub fn bar_chart(title: &str, labels: &[String], series: &[(&str, &str, Vec<f64>)]) -> String {
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

/// Escapes text for HTML and SVG.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
