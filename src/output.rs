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
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if let Some(width) = columns() {
        table.set_width(width);
    }
    table
}

/// The terminal width from `COLUMNS` (at least 40), if set.
pub fn columns() -> Option<u16> {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|w| *w >= 40)
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
/// Adds a row to a table. Cells may hold text from outside (node reports,
/// tags, AWS messages): every line of every cell is escaped ([`escape`]),
/// the line breaks between them kept.
pub fn add_row<I, S>(table: &mut Table, cells: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    table.add_row(cells.into_iter().map(|c| escape_lines(c.as_ref())).collect::<Vec<_>>());
}

/// [`escape`] applied to each line, keeping the line breaks: for messages
/// that have several lines of their own (an error and what to do).
pub fn escape_lines(text: &str) -> String {
    text.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// Makes text from outside (a node's report, an SSM error stream, a tag,
/// an instance name) safe to show on a terminal or in a log line: control
/// characters and the Unicode format characters that reorder or hide text
/// are shown as escapes (`\x1b`, `\n`, `\u{202e}`); everything else is kept.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || is_format_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Unicode "format" characters that change how text reads without showing
/// themselves: bidirectional overrides and isolates, zero-width characters.
fn is_format_char(c: char) -> bool {
    matches!(c as u32, 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2069 | 0xFEFF)
}

/// At most `max` characters of `text`, escaped and in double quotes, with
/// `...` when cut: how errors show a value they refuse.
pub fn quoted_prefix(text: &str, max: usize) -> String {
    let cut: String = text.chars().take(max).collect();
    let more = if text.chars().count() > max { "..." } else { "" };
    format!("\"{}\"{more}", escape(&cut).replace('"', "\\\""))
}

#[cfg(all(test, feature = "admin"))]
mod tests {
    use super::{add_row, escape, quoted_prefix, table};

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
    fn control_and_format_characters_are_escaped() {
        assert_eq!(escape("a\x1b[31mb"), "a\\x1b[31mb");
        assert_eq!(escape("x\ny\r\t\x07"), "x\\ny\\r\\t\\x07");
        assert_eq!(escape("abc\u{202e}def"), "abc\\u{202e}def");
        assert_eq!(escape("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(escape("ünïcödé ok"), "ünïcödé ok");
        assert_eq!(
            escape("a\\x1b"),
            "a\\\\x1b",
            "a literal backslash cannot fake an escape"
        );
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

    #[test]
    fn prefixes_are_quoted_and_cut() {
        assert_eq!(quoted_prefix("ab\"c", 10), "\"ab\\\"c\"");
        assert_eq!(quoted_prefix("abcdef", 3), "\"abc\"...");
    }
}
