//! The title a document gives itself, collected while its format is read.
//!
//! Every format hands its raw title text to a [`TitleText`] (the engine's, which keeps at
//! most 300 characters), piece by piece as its reader meets it, and takes the finished
//! title from [`TitleText::finish`]: that is the one way a title leaves a format module,
//! so every title is cleaned alike and no placeholder gets through.
//!
//! Looking a title up must never cost the document its text: [`lookup`] turns a failed
//! lookup (a missing part, bad XML) into no title.

pub(crate) use leasehold::extract::{clean_date, clean_language, clean_title, TitleText};

use leasehold::extract::ExtractError;

/// A metadata lookup (a title, or title, author and date together) whose failure is
/// forgotten: the document's text does not depend on them, so a missing or broken
/// metadata part means none, not a failed document. A raised stop flag still stops: the
/// worker has lost its lease either way.
pub(crate) fn lookup<T: Default>(result: Result<T, ExtractError>) -> Result<T, ExtractError> {
    match result {
        Err(ExtractError::Stopped) => Err(ExtractError::Stopped),
        Err(_) => Ok(T::default()),
        Ok(found) => Ok(found),
    }
}

/// The most raw characters a date's text is collected to: an ISO 8601 date-time with its
/// zone is 25, so anything longer is not a date, and a hostile one costs nothing more.
const MAX_RAW_DATE_CHARS: usize = 64;

/// Raw date text, collected piece by piece (a reader may meet it in several events) and
/// cut at [`MAX_RAW_DATE_CHARS`]; [`DateText::finish`] reads it with `clean_date`.
#[derive(Debug, Default)]
pub(crate) struct DateText {
    raw: String,
    chars: usize,
}

impl DateText {
    /// Adds raw text; past the cap it is dropped, and the date it spoils is `None`.
    pub(crate) fn push_str(&mut self, raw: &str) {
        for c in raw.chars() {
            if self.chars > MAX_RAW_DATE_CHARS {
                return;
            }
            self.raw.push(c);
            self.chars += 1;
        }
    }

    /// The day the text names, or `None` for no date, a malformed one, or an overlong one.
    pub(crate) fn finish(self) -> Option<String> {
        if self.chars > MAX_RAW_DATE_CHARS {
            return None;
        }
        clean_date(&self.raw)
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
    fn date_text_is_cleaned_and_bounded() {
        let date = |pieces: &[&str]| {
            let mut date = DateText::default();
            for piece in pieces {
                date.push_str(piece);
            }
            date.finish()
        };
        assert_eq!(date(&["2026-01-", "15T09:30:00Z"]).as_deref(), Some("2026-01-15"));
        assert_eq!(date(&[" 2026-13-40 "]), None, "a month out of range");
        assert_eq!(date(&["yesterday"]), None);
        assert_eq!(date(&[]), None);
        let long = format!("2026-01-15{}", " ".repeat(1 << 20));
        assert_eq!(date(&[&long]), None, "an overlong date is no date");
    }

    #[test]
    fn a_failed_lookup_is_no_title_but_a_stop_still_stops() {
        let broken = ExtractError::malformed(leasehold::extract::Format::Docx, "bad XML");
        assert_eq!(lookup::<Option<String>>(Err(broken)).unwrap(), None);
        assert!(matches!(
            lookup::<Option<String>>(Err(ExtractError::Stopped)),
            Err(ExtractError::Stopped)
        ));
        assert_eq!(lookup(Ok(Some("T".to_owned()))).unwrap().as_deref(), Some("T"));
    }
}
