//! The title a document gives itself, collected while its format is read.
//!
//! Every format hands its raw title text to a [`TitleText`], piece by piece as its reader
//! meets it, and takes the finished title from [`TitleText::finish`]: that is the one way
//! a title leaves a format module, so every title is cleaned by [`clean_title`] and no
//! placeholder gets through. The collector keeps at most [`MAX_TITLE_CHARS`] characters,
//! so a hostile document that puts megabytes in its title costs no memory for it.
//!
//! Looking a title up must never cost the document its text: [`lookup`] turns a failed
//! lookup (a missing part, bad XML) into no title.

use leasehold::extract::{clean_title, MAX_TITLE_CHARS};

use super::ExtractError;

/// Titles that say there is none: a word processor's name for a new document, kept by
/// authors who never set one. Compared after cleaning, ignoring ASCII case.
const PLACEHOLDERS: [&str; 2] = ["untitled", "untitled document"];

/// Raw title text, made one line as it arrives and cut at [`MAX_TITLE_CHARS`] characters.
/// White space and control characters separate words, as in [`clean_title`], so a long
/// run of them costs one space and what is kept is exactly what `clean_title` would keep
/// of the whole raw text.
#[derive(Debug, Default)]
pub(crate) struct TitleText {
    text: String,
    chars: usize,
    /// A separator came after the last word: a space is owed before the next one.
    space_owed: bool,
}

impl TitleText {
    /// Adds raw text; once full, it is ignored at no cost.
    pub(crate) fn push_str(&mut self, raw: &str) {
        for c in raw.chars() {
            if self.is_full() {
                return;
            }
            self.push(c);
        }
    }

    /// Adds one raw character.
    pub(crate) fn push(&mut self, c: char) {
        if self.is_full() {
            return;
        }
        if c.is_whitespace() || c.is_control() {
            self.space_owed = !self.text.is_empty();
            return;
        }
        if std::mem::take(&mut self.space_owed) {
            self.text.push(' ');
            self.chars += 1;
            if self.is_full() {
                return;
            }
        }
        self.text.push(c);
        self.chars += 1;
    }

    /// Whether no word has come yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Whether nothing more will be kept.
    pub(crate) fn is_full(&self) -> bool {
        self.chars >= MAX_TITLE_CHARS
    }

    /// The cleaned title, or `None` when nothing worth a title was collected.
    pub(crate) fn finish(self) -> Option<String> {
        tidy(&self.text)
    }
}

/// [`clean_title`], and `None` for a placeholder such as "Untitled".
pub(crate) fn tidy(raw: &str) -> Option<String> {
    clean_title(raw).filter(|title| {
        !PLACEHOLDERS
            .iter()
            .any(|placeholder| title.eq_ignore_ascii_case(placeholder))
    })
}

/// A title lookup whose failure is forgotten: the document's text does not depend on its
/// title, so a missing or broken metadata part means no title, not a failed document. A
/// raised stop flag still stops: the worker has lost its lease either way.
pub(crate) fn lookup(result: Result<Option<String>, ExtractError>) -> Result<Option<String>, ExtractError> {
    match result {
        Err(ExtractError::Stopped) => Err(ExtractError::Stopped),
        Err(_) => Ok(None),
        Ok(title) => Ok(title),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collected(pieces: &[&str]) -> Option<String> {
        let mut title = TitleText::default();
        for piece in pieces {
            title.push_str(piece);
        }
        title.finish()
    }

    #[test]
    fn pieces_join_into_one_clean_line() {
        assert_eq!(
            collected(&["  Annual", "\n report", "\t\u{7}", " 2026  "]).as_deref(),
            Some("Annual report 2026")
        );
        assert_eq!(collected(&["Ann", "ual"]).as_deref(), Some("Annual"));
        assert_eq!(collected(&[" \n ", "--"]), None);
        assert_eq!(collected(&[]), None);
    }

    #[test]
    fn what_is_kept_is_what_clean_title_keeps_of_the_whole() {
        let spaced = format!("{}word {}", " ".repeat(1 << 20), "more words ".repeat(100));
        let long_word = "x".repeat(1 << 20);
        for raw in [spaced.as_str(), long_word.as_str(), "a b", "é ü 계정"] {
            assert_eq!(
                collected(&[raw]),
                clean_title(raw),
                "{:?}",
                &raw[..raw.len().min(40)]
            );
        }
        assert_eq!(collected(&[&long_word]).unwrap().chars().count(), MAX_TITLE_CHARS);
    }

    #[test]
    fn placeholders_are_no_title() {
        for placeholder in [
            "Untitled",
            "  untitled\n",
            "UNTITLED DOCUMENT",
            "Untitled  document",
        ] {
            assert_eq!(tidy(placeholder), None, "{placeholder:?}");
        }
        assert_eq!(tidy("Untitled 3").as_deref(), Some("Untitled 3"));
        assert_eq!(
            tidy("Microsoft Word - x.doc").as_deref(),
            Some("Microsoft Word - x.doc")
        );
    }

    #[test]
    fn a_failed_lookup_is_no_title_but_a_stop_still_stops() {
        let broken = ExtractError::malformed(leasehold::extract::Format::Docx, "bad XML");
        assert_eq!(lookup(Err(broken)).unwrap(), None);
        assert!(matches!(
            lookup(Err(ExtractError::Stopped)),
            Err(ExtractError::Stopped)
        ));
        assert_eq!(lookup(Ok(Some("T".into()))).unwrap().as_deref(), Some("T"));
    }
}
