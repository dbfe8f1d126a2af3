//! Keys, paths and reasons from the store, as a terminal may show them. A
//! file name may hold a newline or an escape sequence: printed as it is, it
//! would forge lines of output or drive the terminal. Free text (a reason, a
//! snippet) goes through `upstream::one_line` instead, which keeps it on one
//! line. `--json` needs neither (JSON escapes control characters itself).

use std::borrow::Cow;

/// A key or path as text output shows it: as it is when it holds nothing a
/// terminal acts on, else the way failure lines show keys (`{:?}`: quoted,
/// control characters escaped). A name that itself starts with `"` is quoted
/// too, so a quoted name always means an escaped one.
pub fn shown(text: &str) -> Cow<'_, str> {
    if text.starts_with('"') || text.chars().any(acts_on_terminal) {
        Cow::Owned(format!("{text:?}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Free text on one line, as a terminal may show it: every character
/// [`shown`] would escape becomes a space.
pub fn on_one_line(text: &str) -> String {
    text.chars()
        .map(|c| if acts_on_terminal(c) { ' ' } else { c })
        .collect()
}

/// Control characters (newlines, escape, C1 controls) and the bidirectional
/// overrides and isolates, which reorder what follows them on the line.
fn acts_on_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_print_as_they_are_and_others_escaped_and_quoted() {
        assert_eq!(shown("reports/q3 final.pdf"), "reports/q3 final.pdf");
        assert_eq!(shown("café/naïve.txt"), "café/naïve.txt");
        assert_eq!(shown("new\nline.txt"), "\"new\\nline.txt\"");
        assert_eq!(shown("esc\u{1b}[31mred"), "\"esc\\u{1b}[31mred\"");
        assert_eq!(shown("csi\u{9b}2J"), "\"csi\\u{9b}2J\"");
        assert_eq!(shown("\"quoted\""), "\"\\\"quoted\\\"\"");
        assert!(!shown("rtl\u{202e}txt.exe").contains('\u{202e}'));
    }
}
