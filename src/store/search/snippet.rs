//! A short piece of a document's text with the places a query matched: what
//! an engine marks in its snippet, and what a caller is given.

/// A short piece of a document's text, on one line, with the places the
/// query matched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snippet {
    text: String,
    highlights: Vec<std::ops::Range<usize>>,
}

impl Snippet {
    /// The text: line breaks and control characters are spaces, [`ELLIPSIS`]
    /// marks text left out.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The matched pieces of [`Snippet::text`], as byte ranges in order.
    pub fn highlights(&self) -> &[std::ops::Range<usize>] {
        &self.highlights
    }

    /// The text with each matched piece between `open` and `close`.
    pub fn marked(&self, open: &str, close: &str) -> String {
        let mut out = String::with_capacity(self.text.len() + 8);
        for (piece, matched) in self.pieces() {
            match matched {
                true => out.extend([open, piece, close]),
                false => out.push_str(piece),
            }
        }
        out
    }

    /// The text in order, cut where a match starts or ends: each piece,
    /// and whether it matched.
    pub fn pieces(&self) -> impl Iterator<Item = (&str, bool)> {
        let mut at = 0;
        let mut pieces = Vec::with_capacity(self.highlights.len() * 2 + 1);
        for h in &self.highlights {
            pieces.push((&self.text[at..h.start], false));
            pieces.push((&self.text[h.clone()], true));
            at = h.end;
        }
        pieces.push((&self.text[at..], false));
        pieces.into_iter().filter(|(piece, _)| !piece.is_empty())
    }

    /// Read an engine's snippet, whose matches are between [`MARK_OPEN`]
    /// and [`MARK_CLOSE`]: control characters become spaces, the marks
    /// become highlights, and the ends are trimmed.
    pub(crate) fn from_marked(marked: &str) -> Snippet {
        let mut text = String::with_capacity(marked.len());
        let mut highlights = Vec::new();
        let mut open = None;
        let mut rest = marked;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix(MARK_OPEN) {
                open.get_or_insert(text.len());
                rest = after;
            } else if let Some(after) = rest.strip_prefix(MARK_CLOSE) {
                if let Some(start) = open.take() {
                    if start < text.len() {
                        highlights.push(start..text.len());
                    }
                }
                rest = after;
            } else {
                let c = rest.chars().next().expect("rest is not empty");
                text.push(if c.is_control() { ' ' } else { c });
                rest = &rest[c.len_utf8()..];
            }
        }
        // Trim, moving the highlights with the start.
        let lead = text.len() - text.trim_start().len();
        let end = text.trim_end().len().max(lead);
        let text = text[lead..end].to_owned();
        let highlights = highlights
            .into_iter()
            .map(|h| h.start.saturating_sub(lead).min(text.len())..h.end.saturating_sub(lead).min(text.len()))
            .filter(|h| h.start < h.end)
            .collect();
        Snippet { text, highlights }
    }
}

/// Put by the engines before a matched term in a snippet, and
/// [`MARK_CLOSE`] after it; [`Snippet::from_marked`] turns them into
/// highlights. Two control characters: a document's text could fake one
/// only by holding both, and then it only moves a highlight.
pub(crate) const MARK_OPEN: &str = "\u{1}\u{2}";
/// See [`MARK_OPEN`].
pub(crate) const MARK_CLOSE: &str = "\u{2}\u{1}";
/// Marks text left out of a snippet.
pub const ELLIPSIS: &str = "…";
