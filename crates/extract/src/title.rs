//! The title a document gives itself, collected while its format is read.
//!
//! Every format hands its raw title text to a [`TitleText`] (the engine's, which keeps at
//! most 300 characters), piece by piece as its reader meets it, and takes the finished
//! title from [`TitleText::finish`]: that is the one way a title leaves a format module,
//! so every title is cleaned alike and no placeholder gets through.
//!
//! Looking a title up must never cost the document its text: [`lookup`] turns a failed
//! lookup (a missing part, bad XML) into no title.

pub(crate) use leasehold::extract::TitleText;

use super::ExtractError;

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
