//! Output: machine-readable JSON or human tables, chosen by `--output`.

use std::io::IsTerminal;

#[cfg(feature = "admin")]
use comfy_table::presets::UTF8_FULL_CONDENSED;
#[cfg(feature = "admin")]
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

/// `--output` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// A table on a terminal, JSON otherwise.
    Auto,
    /// Human-readable table.
    Table,
    /// One JSON document on stdout (stable schema, see docs/).
    Json,
}

impl OutputFormat {
    /// Resolves `Auto` by whether stdout is a terminal.
    pub fn resolve(self) -> OutputFormat {
        match self {
            OutputFormat::Auto if std::io::stdout().is_terminal() => OutputFormat::Table,
            OutputFormat::Auto => OutputFormat::Json,
            other => other,
        }
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{text}");
    Ok(())
}

#[cfg(feature = "admin")]
/// A table with hostkeyctl's look and the given header, as wide as the
/// terminal at most: `COLUMNS` when set (also when stdout is a pipe),
/// else the terminal's width, else unlimited. Long cells wrap.
pub fn table(header: &[&str]) -> Table {
    table_fit(columns(), header)
}

#[cfg(feature = "admin")]
/// [`table`] fitted to `width` columns (unlimited when `None`).
pub fn table_fit(width: Option<u16>, header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if let Some(width) = width {
        table.set_width(width);
    }
    table
}

/// The width to fit: `COLUMNS` when set (shells set it without exporting
/// it, so a script's choice wins), else the terminal's, when stdout is one
/// (at least 40 either way).
pub fn columns() -> Option<u16> {
    fit_width(std::env::var("COLUMNS").ok().as_deref(), terminal_width)
}

/// [`columns`] from the value of `COLUMNS` and the terminal's width.
fn fit_width(columns: Option<&str>, terminal: impl FnOnce() -> Option<u16>) -> Option<u16> {
    columns
        .and_then(|c| c.trim().parse::<u16>().ok())
        .or_else(terminal)
        .filter(|w| *w >= 40)
}

#[cfg(feature = "admin")]
fn terminal_width() -> Option<u16> {
    std::io::stdout().is_terminal().then(|| Table::new().width()).flatten()
}

#[cfg(not(feature = "admin"))]
fn terminal_width() -> Option<u16> {
    None
}

/// `text` broken at spaces into lines of at most `width` characters (a
/// single word longer than that stays whole), continuation lines indented.
pub fn wrap(text: &str, width: Option<u16>, indent: &str) -> String {
    let Some(width) = width.map(usize::from) else {
        return text.to_owned();
    };
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let prefix = if lines.is_empty() { "" } else { indent };
        if !line.is_empty() && prefix.len() + line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| if i == 0 { l.clone() } else { format!("{indent}{l}") })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(feature = "admin")]
/// Keeps column `index` of `table` whole: never wrapped to fit the width
/// (a fingerprint cut in two cannot be compared or copied).
pub fn keep_whole(table: &mut Table, index: usize) {
    if let Some(column) = table.column_mut(index) {
        column.set_constraint(comfy_table::ColumnConstraint::ContentWidth);
    }
}

#[cfg(feature = "admin")]
/// Adds a row to a table. Cells may hold text from outside (node reports,
/// tags, AWS messages): every line of every cell is escaped ([`crate::escape`]),
/// the line breaks between them kept.
pub fn add_row<I, S>(table: &mut Table, cells: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    table.add_row(
        cells
            .into_iter()
            .map(|c| crate::escape::escape_lines(c.as_ref()))
            .collect::<Vec<_>>(),
    );
}

#[cfg(all(test, feature = "admin"))]
mod tests {
    use super::{add_row, table};

    /// Regression (hardening finding 6): text from nodes and AWS reached
    /// the terminal raw, escape sequences and all.
    #[test]
    fn table_cells_never_carry_escape_sequences() {
        let mut t = table(&["NODE", "ERROR"]);
        add_row(&mut t, ["evil\x1b]2;owned\x07", "line one\n\x1b[2Jline two"]);
        let rendered = t.to_string();
        assert!(!rendered.contains('\x1b') && !rendered.contains('\x07'), "{rendered:?}");
        assert!(rendered.contains("\\x1b[2Jline two"), "{rendered}");
    }

    #[test]
    fn text_wraps_at_spaces_to_the_width() {
        let text =
            "expected set: tags of arn:aws:secretsmanager:us-east-1:123456789012:secret:hk (version 1, AWSCURRENT)";
        let wrapped = super::wrap(text, Some(60), "  ");
        assert!(wrapped.lines().all(|l| l.chars().count() <= 60), "{wrapped}");
        assert_eq!(wrapped.replace("\n  ", " "), text);
        assert_eq!(super::wrap(text, None, "  "), text);
    }
}

#[cfg(test)]
mod width_tests {
    use super::fit_width;

    #[test]
    fn columns_wins_over_the_terminal_and_narrow_widths_are_ignored() {
        assert_eq!(fit_width(Some("100"), || Some(200)), Some(100));
        assert_eq!(fit_width(Some(" 100\n"), || None), Some(100));
        assert_eq!(fit_width(Some("wide"), || Some(120)), Some(120));
        assert_eq!(fit_width(None, || Some(120)), Some(120));
        assert_eq!(fit_width(Some("30"), || Some(120)), None);
        assert_eq!(fit_width(None, || None), None);
    }
}
