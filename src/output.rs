//! How the one-shot commands print: tables for people, fitted to a terminal's 120 columns unless
//! asked for `wide`, and JSON or YAML for programs.

use serde::Serialize;

/// The width `table` and `inspect` tables fit in.
pub(crate) const TABLE_WIDTH: usize = 120;

/// No column is cut narrower than this (or its header).
const MIN_COLUMN: usize = 6;

/// How wide a table may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    /// Cut the widest cells (ending them with `…`) until every line fits this many characters.
    Fit(usize),
    /// Every cell whole.
    Unbounded,
}

/// Left-aligned columns separated by two spaces.
pub fn table(header: &[&str], rows: &[Vec<String>], width: Width) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    if let Width::Fit(limit) = width {
        fit(&mut widths, header, limit);
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let cell = cut(cell, *w);
            if i + 1 == cells.len() {
                s.push_str(&cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    out
}

/// Narrows the last column (free text: details, reasons) first, then the widest, one character
/// at a time, until the line fits or nothing can give. Names and ids stay whole the longest.
fn fit(widths: &mut [usize], header: &[&str], limit: usize) {
    let total = |widths: &[usize]| widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    let floor = |i: usize| header[i].chars().count().max(MIN_COLUMN);
    let Some(last) = widths.len().checked_sub(1) else { return };
    while total(widths) > limit {
        if widths[last] > floor(last) {
            widths[last] -= 1;
            continue;
        }
        let Some(widest) = (0..widths.len()).filter(|&i| widths[i] > floor(i)).max_by_key(|&i| (widths[i], i)) else {
            return;
        };
        widths[widest] -= 1;
    }
}

fn cut(cell: &str, width: usize) -> String {
    if cell.chars().count() <= width {
        return cell.to_string();
    }
    cell.chars().take(width.saturating_sub(1)).chain(['…']).collect()
}

/// The width a table printed as `output` fits in, or `None` when `output` is JSON or YAML.
pub(crate) fn table_width(output: crate::config::OutputFormat) -> Option<Width> {
    use crate::config::OutputFormat;
    match output {
        OutputFormat::Json | OutputFormat::Yaml => None,
        OutputFormat::Table => Some(Width::Fit(TABLE_WIDTH)),
        OutputFormat::Wide => Some(Width::Unbounded),
    }
}

/// JSON (pretty) or YAML of a report.
pub(crate) fn structured<T: Serialize>(value: &T, yaml: bool) -> String {
    if yaml {
        serde_yaml::to_string(value).expect("reports serialize")
    } else {
        serde_json::to_string_pretty(value).expect("reports serialize") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec!["spot-a".into(), "x".repeat(80), "y".repeat(70)],
            vec!["spot-b-with-a-long-name".into(), "short".into(), "z".into()],
        ]
    }

    #[test]
    fn fitted_tables_keep_every_line_within_the_width_and_mark_what_was_cut() {
        let out = table(&["GROUP", "DETAIL", "MORE"], &rows(), Width::Fit(TABLE_WIDTH));
        for line in out.lines() {
            assert!(line.chars().count() <= TABLE_WIDTH, "{} columns: {line}", line.chars().count());
        }
        assert!(out.contains("spot-b-with-a-long-name"), "the narrow column is whole: {out}");
        assert!(out.contains(&"x".repeat(80)), "the free-text last column gives way first: {out}");
        assert_eq!(out.matches('…').count(), 1, "{out}");
    }

    #[test]
    fn wide_tables_cut_nothing() {
        let out = table(&["GROUP", "DETAIL", "MORE"], &rows(), Width::Unbounded);
        assert!(out.contains(&"x".repeat(80)) && out.contains(&"y".repeat(70)) && !out.contains('…'));
    }

    #[test]
    fn headers_survive_any_squeeze() {
        let out = table(&["GROUP", "DETAIL"], &[vec!["a".repeat(50), "b".repeat(50)]], Width::Fit(10));
        assert!(out.starts_with("GROUP   DETAIL\n"), "{out}");
    }
}
