//! The title a document gives itself, cleaned the one way every title is:
//! collected piece by piece as a format's reader meets it ([`TitleText`]),
//! or at once ([`clean_title`], for a title from elsewhere, such as an
//! embedder's extractor). At most [`MAX_TITLE_CHARS`] characters are kept,
//! so a hostile document that puts megabytes in its title costs no memory
//! for it.

/// The longest title kept, in characters: a title is a line, and a document
/// that puts its whole text in `<title>` should not double its index entry.
pub const MAX_TITLE_CHARS: usize = 300;

/// Titles that say there is none: a word processor's name for a new document, kept by
/// authors who never set one. Compared after cleaning, ignoring ASCII case.
const PLACEHOLDERS: [&str; 2] = ["untitled", "untitled document"];

/// Raw title text, made one line as it arrives and cut at [`MAX_TITLE_CHARS`] characters.
/// White space and control characters separate words, so a long run of them costs one
/// space. Formats feed it piece by piece as their readers meet the title; [`clean_title`]
/// is it fed at once.
#[derive(Debug, Default)]
pub struct TitleText {
    text: String,
    chars: usize,
    /// A separator came after the last word: a space is owed before the next one.
    space_owed: bool,
}

impl TitleText {
    /// Adds raw text; once full, it is ignored at no cost.
    pub fn push_str(&mut self, raw: &str) {
        for c in raw.chars() {
            if self.is_full() {
                return;
            }
            self.push(c);
        }
    }

    /// Adds one raw character.
    pub fn push(&mut self, c: char) {
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
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Whether nothing more will be kept.
    pub fn is_full(&self) -> bool {
        self.chars >= MAX_TITLE_CHARS
    }

    /// The title: `None` when nothing with a letter or digit was collected,
    /// or only a placeholder such as "Untitled".
    pub fn finish(self) -> Option<String> {
        let title = self.text.trim_end();
        let placeholder = PLACEHOLDERS.iter().any(|p| title.eq_ignore_ascii_case(p));
        (title.chars().any(char::is_alphanumeric) && !placeholder).then(|| title.to_owned())
    }
}

/// A title as the document wrote it, made one tidy line: runs of spaces,
/// line breaks and control characters become one space, the ends are
/// trimmed, and at most [`MAX_TITLE_CHARS`] characters are kept. `None`
/// when nothing with a letter or digit is left, or a placeholder
/// ("Untitled").
pub fn clean_title(raw: &str) -> Option<String> {
    let mut title = TitleText::default();
    title.push_str(raw);
    title.finish()
}

/// A date as a document records it, as `YYYY-MM-DD` (or `YYYY-MM`, `YYYY` when it
/// says no more): ISO 8601 (`2026-01-15T09:30:00Z`, `2026-01-15`, `2026-01`, `2026`),
/// as office documents and e-books write it, and a PDF date (`D:20260115093000+01'00'`,
/// `D:2026`). The time and zone are left out: a day is what a person reads. `None` for
/// anything else, a month or day out of range, or a year before 1000.
pub fn clean_date(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let (year, month, day) = match raw.strip_prefix("D:") {
        Some(pdf) => (pdf.get(..4)?, pdf.get(4..6), pdf.get(6..8)),
        None => {
            let mut parts = raw.split(['T', ' ']).next()?.splitn(3, '-');
            (parts.next()?, parts.next(), parts.next())
        }
    };
    let (month, day) = (month.filter(|m| !m.is_empty()), day.filter(|d| !d.is_empty()));
    if year.len() != 4 || !digits(year) || year < "1000" {
        return None;
    }
    let in_range =
        |s: &str, max: u32| s.len() == 2 && digits(s) && (1..=max).contains(&s.parse::<u32>().unwrap_or(0));
    Some(match (month, day) {
        (None, _) => year.to_owned(),
        (Some(m), None) if in_range(m, 12) => format!("{year}-{m}"),
        (Some(m), Some(d)) if in_range(m, 12) && in_range(d, 31) => format!("{year}-{m}-{d}"),
        _ => return None,
    })
}

/// A language tag as a document gives it (`ko`, `en-US`, `ko_KR`, `x-none`
/// dropped), in BCP 47's shape: parts of 1 to 8 ASCII letters or digits joined
/// by `-` (`_` is read as `-`), the first of 2 or 3 letters, lower case, the
/// rest as given; at most 35 characters. `None` for anything else.
pub fn clean_language(raw: &str) -> Option<String> {
    let tag = raw.trim().replace('_', "-");
    let mut parts = tag.split('-');
    let primary = parts.next()?;
    let letters = |s: &str, n: std::ops::RangeInclusive<usize>| {
        n.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphabetic())
    };
    let part = |s: &str| (1..=8).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric());
    if tag.len() > 35 || !letters(primary, 2..=3) || !parts.all(part) {
        return None;
    }
    Some(match tag.split_once('-') {
        Some((primary, rest)) => format!("{}-{rest}", primary.to_ascii_lowercase()),
        None => tag.to_ascii_lowercase(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_tags_keep_their_shape_or_are_none() {
        for (raw, tag) in [
            ("ko", Some("ko")),
            (" en-US ", Some("en-US")),
            ("ko_KR", Some("ko-KR")),
            ("DE-de", Some("de-de")),
            ("zh-Hant-TW", Some("zh-Hant-TW")),
            ("x-none", None),
            ("", None),
            ("english", None),
            ("en--US", None),
            ("en-<script>", None),
        ] {
            assert_eq!(clean_language(raw).as_deref(), tag, "{raw:?}");
        }
        assert_eq!(clean_language(&format!("en-{}", "-abc".repeat(10))), None);
    }

    #[test]
    fn titles_are_one_tidy_line_or_none() {
        assert_eq!(
            clean_title("  Annual\n\treport\u{7}  2026 ").as_deref(),
            Some("Annual report 2026")
        );
        assert_eq!(clean_title(" \n -- "), None);
        assert_eq!(clean_title(""), None);
        let long = "word ".repeat(100);
        let kept = clean_title(&long).expect("a title");
        assert!(
            kept.chars().count() <= MAX_TITLE_CHARS && !kept.ends_with(' '),
            "{kept:?}"
        );
        assert_eq!(clean_title("계정 관리").as_deref(), Some("계정 관리"));
        let long_word = "x".repeat(1 << 20);
        assert_eq!(clean_title(&long_word).unwrap().chars().count(), MAX_TITLE_CHARS);
        let spaced = format!("{}word{}", " ".repeat(1 << 20), " more".repeat(100));
        assert!(clean_title(&spaced).unwrap().starts_with("word more"));
    }

    #[test]
    fn dates_are_days_from_iso_and_pdf_forms_or_none() {
        let cases = [
            ("2026-01-15T09:30:00Z", Some("2026-01-15")),
            ("2026-01-15", Some("2026-01-15")),
            (" 2026-01 ", Some("2026-01")),
            ("2026", Some("2026")),
            ("D:20260115093000+01'00'", Some("2026-01-15")),
            ("D:202601", Some("2026-01")),
            ("D:2026", Some("2026")),
            ("2026-13-01", None),
            ("2026-02-00", None),
            ("0999-01-01", None),
            ("D:20x6", None),
            ("yesterday", None),
            ("", None),
            ("2026-1-5", None),
            ("D:", None),
        ];
        for (raw, want) in cases {
            assert_eq!(clean_date(raw).as_deref(), want, "{raw:?}");
        }
    }

    #[test]
    fn placeholders_are_no_title() {
        for placeholder in [
            "Untitled",
            "  untitled\n",
            "UNTITLED DOCUMENT",
            "Untitled  document",
        ] {
            assert_eq!(clean_title(placeholder), None, "{placeholder:?}");
        }
        assert_eq!(clean_title("Untitled 3").as_deref(), Some("Untitled 3"));
    }
}
