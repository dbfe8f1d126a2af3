//! Inline SVG charts for `leasehold report --html`: columns over time, bars
//! by category, a line, and a timeline of spans. Plain strings, no library
//! and nothing fetched: the page must open on a machine with no network.
//! Every text that comes from data (keys, reasons, account names) is escaped.

use std::fmt::Write as _;

/// Width and height of every chart, in SVG user units.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
/// Room for the axis labels.
const LEFT: f64 = 48.0;
const BOTTOM: f64 = 28.0;
const TOP: f64 = 12.0;
/// Room above the plot for a legend: it never covers the data.
const LEGEND: f64 = 18.0;

/// Colours of the series, in order.
pub const COLOURS: [&str; 4] = ["#3a6ea5", "#c0504d", "#9bbb59", "#8064a2"];

/// `text` safe inside XML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn open_svg(class: &str, height: f64, label: &str) -> String {
    format!(
        "<svg class=\"chart {class}\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" \
         role=\"img\" aria-label=\"{}\">",
        escape(label)
    )
}

/// What a chart with nothing to draw says.
pub const EMPTY: &str = "no data in the history";
/// How that saying starts in the SVG: a label's own text, escaped, never holds
/// it, so a chart whose labels say "no data" is not taken for an empty one.
pub const EMPTY_MARK: &str = "<text class=\"empty\"";

fn empty(svg: &mut String, height: f64) {
    let _ = write!(
        svg,
        "{EMPTY_MARK} x=\"{}\" y=\"{}\" text-anchor=\"middle\">{EMPTY}</text>",
        WIDTH / 2.0,
        height / 2.0
    );
}

/// The y axis: a baseline and the largest value, at the plot's `top`.
fn y_axis(svg: &mut String, max: f64, top: f64) {
    let base = HEIGHT - BOTTOM;
    let _ = write!(
        svg,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{base}\" x2=\"{WIDTH}\" y2=\"{base}\" stroke=\"#888\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
         <text x=\"{}\" y=\"{base}\" text-anchor=\"end\">0</text>",
        LEFT - 4.0,
        top + 10.0,
        trim(max),
        LEFT - 4.0
    );
}

/// A number without a needless fraction.
fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{}", v as i64)
    } else {
        let text = format!("{v:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Columns over time: one group per bucket, one column per series. `labels`
/// name the buckets (a few are shown); `series` are (name, one value per bucket).
pub fn columns(label: &str, labels: &[String], series: &[(&str, Vec<f64>)]) -> String {
    let mut svg = open_svg("columns", HEIGHT, label);
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max);
    if labels.is_empty() || max <= 0.0 {
        empty(&mut svg, HEIGHT);
    } else {
        // Several series are named in a row above the plot.
        let top = if series.len() > 1 { TOP + LEGEND } else { TOP };
        y_axis(&mut svg, max, top);
        let slot = (WIDTH - LEFT) / labels.len() as f64;
        let bar = (slot * 0.8 / series.len().max(1) as f64).max(1.0);
        let plot = HEIGHT - BOTTOM - top;
        for (s, (name, values)) in series.iter().enumerate() {
            for (i, v) in values.iter().enumerate() {
                let h = plot * v / max;
                let x = LEFT + slot * i as f64 + slot * 0.1 + bar * s as f64;
                let _ = write!(
                    svg,
                    "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" fill=\"{}\">\
                     <title>{}: {} at {}</title></rect>",
                    HEIGHT - BOTTOM - h,
                    COLOURS[s % COLOURS.len()],
                    escape(name),
                    trim(*v),
                    escape(&labels[i])
                );
            }
        }
        x_labels(&mut svg, labels);
        if series.len() > 1 {
            legend(&mut svg, series.iter().map(|(n, _)| *n));
        }
    }
    svg.push_str("</svg>");
    svg
}

/// What the axis shows of a bucket's time (`2026-12-04T09:30:15.250+01:00`,
/// local): its time of day when the range lies within one day, else its
/// month, day and minute. The full time is each column's tooltip.
fn axis_time(label: &str, first: &str, last: &str) -> String {
    let same_day = first.get(..10).is_some() && first.get(..10) == last.get(..10);
    match (same_day, label.get(11..19), label.get(5..10), label.get(11..16)) {
        (true, Some(time), _, _) => time.to_owned(),
        (false, _, Some(day), Some(minute)) => format!("{day} {minute}"),
        _ => label.to_owned(),
    }
}

/// The first, middle and last bucket times under the x axis, short.
fn x_labels(svg: &mut String, labels: &[String]) {
    let slot = (WIDTH - LEFT) / labels.len() as f64;
    let mut shown = vec![0, labels.len() / 2, labels.len() - 1];
    shown.dedup();
    for i in shown {
        let anchor = if i == 0 {
            "start"
        } else if i + 1 == labels.len() {
            "end"
        } else {
            "middle"
        };
        let x = match anchor {
            "start" => LEFT + slot * i as f64,
            "end" => LEFT + slot * (i + 1) as f64,
            _ => LEFT + slot * (i as f64 + 0.5),
        };
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            HEIGHT - 8.0,
            escape(&axis_time(&labels[i], &labels[0], &labels[labels.len() - 1]))
        );
    }
}

/// The series' names in a row above the plot, from its left edge.
fn legend<'a>(svg: &mut String, names: impl Iterator<Item = &'a str>) {
    let mut x = LEFT;
    for (i, name) in names.enumerate() {
        let y = TOP - 6.0;
        let _ = write!(
            svg,
            "<rect x=\"{x}\" y=\"{y}\" width=\"10\" height=\"10\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            COLOURS[i % COLOURS.len()],
            x + 14.0,
            y + 9.0,
            escape(name)
        );
        x += 14.0 + 7.0 * name.chars().count() as f64 + 24.0;
    }
}

/// Horizontal bars, one per (category, value), largest first as given.
pub fn bars(label: &str, items: &[(String, f64)]) -> String {
    let row = 22.0;
    let height = (items.len() as f64 * row + 2.0 * TOP).max(60.0);
    let mut svg = open_svg("bars", height, label);
    let max = items.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    if items.is_empty() || max <= 0.0 {
        empty(&mut svg, height);
    }
    let left = 260.0;
    for (i, (name, v)) in items.iter().enumerate().filter(|_| max > 0.0) {
        let y = TOP + row * i as f64;
        let w = (WIDTH - left - 60.0) * v / max;
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect class=\"bar\" x=\"{left}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\">\
             <title>{}: {}</title></rect>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            left - 6.0,
            y + 14.0,
            escape(&shorten(name, 40)),
            row - 6.0,
            COLOURS[0],
            escape(name),
            trim(*v),
            left + w + 4.0,
            y + 14.0,
            trim(*v)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// `text` cut to `n` characters, with an ellipsis when cut.
fn shorten(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_owned()
    } else {
        let head: String = text.chars().take(n.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

/// A line through one value per bucket.
pub fn line(label: &str, labels: &[String], values: &[f64]) -> String {
    let mut svg = open_svg("line", HEIGHT, label);
    let max = values.iter().copied().fold(0.0, f64::max);
    if labels.is_empty() || values.is_empty() {
        empty(&mut svg, HEIGHT);
    } else {
        let max = max.max(1.0);
        y_axis(&mut svg, max, TOP);
        let slot = (WIDTH - LEFT) / labels.len() as f64;
        let plot = HEIGHT - BOTTOM - TOP;
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{:.1},{:.1}",
                    LEFT + slot * (i as f64 + 0.5),
                    HEIGHT - BOTTOM - plot * v / max
                )
            })
            .collect();
        let _ = write!(
            svg,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>",
            COLOURS[0],
            points.join(" ")
        );
        x_labels(&mut svg, labels);
    }
    svg.push_str("</svg>");
    svg
}

/// One span on a timeline lane.
pub struct Span {
    /// The lane (an account's name).
    pub lane: String,
    /// Where it starts and ends, as fractions (0..1) of the page's time range.
    pub from: f64,
    pub to: f64,
    /// What a pointer over it says.
    pub title: String,
}

/// Lanes of spans over the time range; `ends` label its two ends.
pub fn timeline(label: &str, lanes: &[String], spans: &[Span], ends: (&str, &str)) -> String {
    let row = 26.0;
    let height = (lanes.len() as f64 * row + 2.0 * TOP + BOTTOM).max(70.0);
    let mut svg = open_svg("timeline", height, label);
    if lanes.is_empty() {
        empty(&mut svg, height);
    }
    let left = 140.0;
    let span_width = WIDTH - left - 10.0;
    for (i, lane) in lanes.iter().enumerate() {
        let y = TOP + row * i as f64;
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <line x1=\"{left}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#ccc\"/>",
            left - 6.0,
            y + 15.0,
            escape(&shorten(lane, 20)),
            y + 10.0,
            WIDTH - 10.0,
            y + 10.0
        );
        for s in spans.iter().filter(|s| &s.lane == lane) {
            let x = left + span_width * s.from.clamp(0.0, 1.0);
            let w = (span_width * (s.to.clamp(0.0, 1.0) - s.from.clamp(0.0, 1.0))).max(3.0);
            let _ = write!(
                svg,
                "<rect class=\"incident\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"20\" fill=\"{}\">\
                 <title>{}</title></rect>",
                COLOURS[1],
                escape(&s.title)
            );
        }
    }
    if !lanes.is_empty() {
        let y = height - 8.0;
        let _ = write!(
            svg,
            "<text x=\"{left}\" y=\"{y}\">{}</text><text x=\"{}\" y=\"{y}\" text-anchor=\"end\">{}</text>",
            escape(ends.0),
            WIDTH - 10.0,
            escape(ends.1)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_escaped_and_empty_charts_say_so() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        let svg = bars("b", &[("<script>".into(), 2.0)]);
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(columns("c", &[], &[("x", vec![])]).contains("no data"));
        assert!(line("l", &["a".into()], &[3.0]).contains("<polyline"));
        assert_eq!(shorten("abcdef", 4), "abc…");
        let (a, b) = ("2026-12-04T09:30:15.250+01:00", "2026-12-04T17:05:00.000+01:00");
        assert_eq!(axis_time(a, a, b), "09:30:15");
        assert_eq!(axis_time(a, a, "2026-12-06T01:00:00.000+01:00"), "12-04 09:30");
        // Two series: the legend lies above the plot's top, not on it.
        let two = columns("c", &["t".into()], &[("a", vec![1.0]), ("b", vec![2.0])]);
        let legend_y = TOP - 6.0;
        assert!(two.contains(&format!("y=\"{legend_y}\" width=\"10\"")), "{two}");
        // The highest bar drawn starts below the legend's swatches.
        let tallest_bar_top = two
            .split("<rect class=\"bar\"")
            .skip(1)
            .filter_map(|bar| bar.split("y=\"").nth(1)?.split('"').next()?.parse::<f64>().ok())
            .fold(f64::INFINITY, f64::min);
        assert!(legend_y + 10.0 < tallest_bar_top, "{two}");
        assert_eq!(
            (trim(2.0), trim(0.0125), trim(1.5)),
            ("2".into(), "0.013".into(), "1.5".into())
        );
    }
}
