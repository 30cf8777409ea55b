//! `simulate --output html`: one self-contained page (inline SVG and CSS, nothing fetched) that
//! plots, for the booster and the NTH + Cluster Autoscaler baseline side by side, Ready capacity,
//! Pending pods and desired size per group over time, with notices, interruptions, boosts and
//! scale-ups marked.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::world::{Sample, TimelineEntry};
use super::{clock, render_text, Report, RunReport};
use crate::output::Width;

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 22.0;

const PALETTE: [&str; 10] =
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/// What a vertical marker stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mark {
    Notice,
    Interruption,
    Boost,
    ScaleUp,
}

impl Mark {
    fn of(entry: &TimelineEntry) -> Option<Mark> {
        match entry.actor {
            "nth" if entry.action.ends_with(" Event") => Some(Mark::Notice),
            "aws" if entry.action == "instance interrupted" => Some(Mark::Interruption),
            "booster" if entry.action == "boost" => Some(Mark::Boost),
            "ca" if entry.action == "scale-up" => Some(Mark::ScaleUp),
            _ => None,
        }
    }

    fn color(self) -> &'static str {
        match self {
            Mark::Notice => "#f0a000",
            Mark::Interruption => "#d00000",
            Mark::Boost => "#00a050",
            Mark::ScaleUp => "#4060d0",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mark::Notice => "NTH notice",
            Mark::Interruption => "instance interrupted",
            Mark::Boost => "boost",
            Mark::ScaleUp => "CA scale-up",
        }
    }
}

/// One plotted line: a step function through its points.
struct Line {
    label: String,
    color: &'static str,
    points: Vec<(u64, u32)>,
}

/// The page.
pub(super) fn render(name: &str, report: &Report) -> String {
    let groups: Vec<&str> = report.booster.groups.iter().map(|g| g.name.as_str()).collect();
    let runs: Vec<(&str, &RunReport)> = std::iter::once(("with spots-booster", &report.booster))
        .chain(report.baseline.as_ref().map(|b| ("NTH + Cluster Autoscaler", b)))
        .collect();
    let x_max = report.simulated_seconds.max(1);
    type Values = fn(&Sample) -> Vec<u32>;
    let charts: [(&str, bool, Values); 3] = [
        ("Ready, schedulable nodes per group", true, |s| s.ready_nodes.clone()),
        ("Pending pods", false, |s| vec![s.pending_pods]),
        ("Desired capacity per group", true, |s| s.desired.clone()),
    ];
    let mut page = String::new();
    let title = format!("spots-booster simulate {name}");
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n<p>{} simulated. Markers: {}.</p>\n",
        escape(&title),
        escape(&title),
        clock(report.simulated_seconds),
        [Mark::Notice, Mark::Interruption, Mark::Boost, Mark::ScaleUp]
            .map(|m| format!("<span style=\"color:{}\">&#9474; {}</span>", m.color(), m.name()))
            .join(" "),
    );
    page += &summary_table(report);
    for (chart_title, per_group, values) in charts {
        let lines_of = |run: &RunReport| -> Vec<Line> {
            let series: Vec<Vec<(u64, u32)>> = transpose(&run.samples, values);
            series
                .into_iter()
                .enumerate()
                .map(|(i, points)| Line {
                    label: if per_group { groups.get(i).copied().unwrap_or("?").to_string() } else { "pods".into() },
                    color: PALETTE[i % PALETTE.len()],
                    points,
                })
                .collect()
        };
        let all: Vec<(&str, &RunReport, Vec<Line>)> = runs.iter().map(|(n, r)| (*n, *r, lines_of(r))).collect();
        let y_max = all.iter().flat_map(|(_, _, lines)| lines.iter().flat_map(|l| l.points.iter().map(|p| p.1))).max();
        let y_max = nice_ceiling(y_max.unwrap_or(0).max(1));
        let _ = write!(page, "<section>\n<h2>{}</h2>\n<div class=\"pair\">\n", escape(chart_title));
        for (run_name, run, lines) in &all {
            let _ = write!(
                page,
                "<figure>\n<figcaption>{}</figcaption>\n{}</figure>\n",
                escape(run_name),
                svg(lines, x_max, y_max, &run.timeline)
            );
        }
        page += "</div>\n";
        if per_group {
            page += &legend(&groups);
        }
        page += "</section>\n";
    }
    let _ = write!(
        page,
        "<details>\n<summary>Timelines and summary as text</summary>\n<pre>{}</pre>\n</details>\n",
        escape(&render_text(name, report, Width::Unbounded))
    );
    page += RENDER_CHECK;
    page += "</body>\n</html>\n";
    page
}

/// One series per value the extractor returns, each as (seconds, value) points.
fn transpose(samples: &[Sample], values: fn(&Sample) -> Vec<u32>) -> Vec<Vec<(u64, u32)>> {
    let mut series: Vec<Vec<(u64, u32)>> = Vec::new();
    for sample in samples {
        for (i, v) in values(sample).into_iter().enumerate() {
            if series.len() <= i {
                series.push(Vec::new());
            }
            series[i].push((sample.at_seconds, v));
        }
    }
    series
}

/// A round axis maximum at or above `n`: 1, 2 or 5 times a power of ten.
fn nice_ceiling(n: u32) -> u32 {
    let mut step = 1u32;
    loop {
        for m in [1, 2, 5] {
            if let Some(candidate) = step.checked_mul(m) {
                if candidate >= n {
                    return candidate;
                }
            } else {
                return u32::MAX;
            }
        }
        step = match step.checked_mul(10) {
            Some(s) => s,
            None => return u32::MAX,
        };
    }
}

fn svg(lines: &[Line], x_max: u64, y_max: u32, timeline: &[TimelineEntry]) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |t: u64| LEFT + plot_w * (t.min(x_max) as f64) / (x_max as f64);
    let y = |v: u32| TOP + plot_h - plot_h * f64::from(v.min(y_max)) / f64::from(y_max);
    let mut out =
        format!("<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\">\n");
    // Whole-number ticks: the maxima are 1, 2 or 5 times a power of ten.
    let ticks = [4, 5, 2].into_iter().find(|n| y_max.is_multiple_of(*n)).unwrap_or(1);
    for k in 0..=ticks {
        let label = u64::from(y_max) * u64::from(k) / u64::from(ticks);
        let at = TOP + plot_h - plot_h * f64::from(k) / f64::from(ticks);
        let _ = writeln!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{at:.1}\" y2=\"{at:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            WIDTH - RIGHT,
            LEFT - 4.0,
            at + 4.0
        );
    }
    for k in 0..=6u64 {
        let t = x_max * k / 6;
        let anchor = match k {
            0 => "start",
            6 => "end",
            _ => "middle",
        };
        let _ = writeln!(
            out,
            "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
            x(t),
            HEIGHT - 6.0,
            clock(t)
        );
    }
    let mut marks: BTreeMap<(u64, Mark), Vec<String>> = BTreeMap::new();
    for entry in timeline {
        if let Some(mark) = Mark::of(entry) {
            marks.entry((entry.at_seconds, mark)).or_default().push(format!("{} {}", entry.action, entry.target));
        }
    }
    for ((at, mark), what) in &marks {
        let shown: Vec<&str> = what.iter().take(5).map(String::as_str).collect();
        let more = if what.len() > 5 { format!(" and {} more", what.len() - 5) } else { String::new() };
        let _ = writeln!(
            out,
            "<line class=\"mark\" stroke=\"{}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\"><title>{} {}: {}{more}</title></line>",
            mark.color(),
            TOP + plot_h,
            clock(*at),
            mark.name(),
            escape(&shown.join(", ")),
            x = x(*at),
        );
    }
    for line in lines {
        let Some(&(t0, v0)) = line.points.first() else { continue };
        let mut d = format!("M{:.1},{:.1}", x(t0), y(v0));
        for &(t, v) in &line.points[1..] {
            let _ = write!(d, "H{:.1}V{:.1}", x(t), y(v));
        }
        let _ = writeln!(
            out,
            "<path class=\"series\" stroke=\"{}\" d=\"{d}\"><title>{}</title></path>",
            line.color,
            escape(&line.label)
        );
    }
    out + "</svg>\n"
}

fn legend(groups: &[&str]) -> String {
    let items: Vec<String> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| format!("<span style=\"color:{}\">&#9632; {}</span>", PALETTE[i % PALETTE.len()], escape(g)))
        .collect();
    format!("<p class=\"legend\">{}</p>\n", items.join(" "))
}

fn summary_table(report: &Report) -> String {
    let b = &report.booster.summary;
    let base = report.baseline.as_ref().map(|r| &r.summary);
    let rows: [(&str, u64, Option<u64>); 6] = [
        ("Capacity gap (pod-seconds Pending)", b.capacity_gap_pod_seconds, base.map(|s| s.capacity_gap_pod_seconds)),
        ("Peak Pending pods", u64::from(b.peak_pending_pods), base.map(|s| u64::from(s.peak_pending_pods))),
        ("PDB violations", u64::from(b.pdb_violations), base.map(|s| u64::from(s.pdb_violations))),
        ("Pods killed with their node", u64::from(b.pods_killed), base.map(|s| u64::from(s.pods_killed))),
        ("Drained nodes", u64::from(b.drained_nodes), base.map(|s| u64::from(s.drained_nodes))),
        // The baseline boosts nothing: its cell says so rather than a zero.
        ("Double boosts", u64::from(b.double_boosts), None),
    ];
    let mut out = String::from("<table class=\"summary\">\n<tr><th></th><th>with spots-booster</th>");
    if base.is_some() {
        out += "<th>NTH + Cluster Autoscaler</th>";
    }
    out += "</tr>\n";
    for (label, mine, theirs) in rows {
        let _ = write!(out, "<tr><td>{label}</td><td>{mine}</td>");
        if base.is_some() {
            let _ = write!(out, "<td>{}</td>", theirs.map_or("-".to_string(), |t| t.to_string()));
        }
        out += "</tr>\n";
    }
    out + "</table>\n"
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
h2{font-size:1.05em;margin:1.4em 0 .3em}\
.pair{display:flex;gap:1.5em;flex-wrap:wrap}\
figure{margin:0}figcaption{font-size:.9em;color:#555}\
svg{background:#fafafa;border:1px solid #ddd}\
.grid{stroke:#e4e4e4}.tick{font-size:10px;fill:#666}\
.mark{stroke-width:1;stroke-dasharray:3 3;opacity:.7}\
.series{fill:none;stroke-width:1.6}\
.legend{font-size:.85em}\
table.summary{border-collapse:collapse}table.summary td,table.summary th{border:1px solid #ccc;padding:.2em .6em;text-align:right}\
table.summary td:first-child{text-align:left}\
pre{font-size:11px}";

/// Counts, once laid out, the plotted lines that have a visible extent: a headless browser reads
/// the count back from `data-rendered` (see tests/simulate_html.rs).
const RENDER_CHECK: &str = "<script>\
document.body.dataset.rendered=String(Array.from(document.querySelectorAll('path.series'))\
.filter(function(p){var b=p.getBBox();return b.width>0;}).length);\
</script>\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_summary_row_has_a_cell_per_run() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/scenarios/single-rebalance.yaml");
        let scenario = super::super::parse_scenario(&std::fs::read_to_string(path).unwrap()).unwrap();
        let report = super::super::simulate(&scenario, Some(crate::config::Baseline::NthCa));
        let table = summary_table(&report);
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("<tr><td>")).collect();
        assert_eq!(rows.len(), 6);
        assert!(rows.iter().all(|r| r.matches("<td>").count() == 3), "{table}");
        assert!(table.contains("<tr><td>Double boosts</td><td>0</td><td>-</td></tr>"), "{table}");
    }

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!([1, 3, 7, 11, 45, 99, 101].map(nice_ceiling), [1, 5, 10, 20, 50, 100, 200]);
        assert_eq!(nice_ceiling(u32::MAX), u32::MAX);
    }

    #[test]
    fn text_from_the_scenario_cannot_open_markup() {
        assert_eq!(escape("<script>\"a\" & 'b'"), "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;");
    }

    #[test]
    fn steps_hold_their_value_until_the_next_sample() {
        let lines = [Line { label: "g".into(), color: PALETTE[0], points: vec![(0, 0), (30, 10), (60, 10)] }];
        let svg = svg(&lines, 60, 10, &[]);
        assert!(svg.contains("d=\"M44.0,198.0H298.0V8.0H552.0V8.0\""), "{svg}");
    }
}
