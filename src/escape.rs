//! Making text from outside (a node's report, an SSM error stream, a tag,
//! an instance name, AWS's own messages) safe to show on a terminal or in a
//! log line.

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

#[cfg(test)]
mod tests {
    use super::{escape, quoted_prefix};

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
    fn prefixes_are_quoted_and_cut() {
        assert_eq!(quoted_prefix("ab\"c", 10), "\"ab\\\"c\"");
        assert_eq!(quoted_prefix("abcdef", 3), "\"abc\"...");
    }
}
