//! Cutting a text into the parts the search index takes one at a time
//! (DESIGN §14). FTS5 holds every term of the row it is writing in memory,
//! and SQLite lets one transaction write at a time: a text indexed whole
//! makes both grow with the document. In parts of [`PART_BYTES`], written at
//! most [`TX_TEXT_BYTES`] to a transaction, neither does. The price: the
//! words of a query must meet within one part (about 150,000 words) of a
//! longer text, as FTS5 matches a row.

use std::io::{self, Read};

/// The most text in one row of the index.
pub const PART_BYTES: usize = 1024 * 1024;

/// The most index text one write transaction takes (a lone part may be all
/// of it): what bounds how long a completion holds SQLite's write lock.
pub(crate) const TX_TEXT_BYTES: usize = 1024 * 1024;

/// How far back from the end of a full part a cut looks for a space, so a
/// word is not split in two: a text without spaces is cut at a character.
const SPACE_WINDOW: usize = 4096;

/// The length of the first part of `bytes` (all of it when it fits in
/// `max`): up to the last ASCII space or line break in the part's last
/// [`SPACE_WINDOW`] bytes, else up to the last whole UTF-8 character. Never
/// 0 for a non-empty input.
fn cut(bytes: &[u8], max: usize) -> usize {
    if bytes.len() <= max {
        return bytes.len();
    }
    let window = &bytes[max.saturating_sub(SPACE_WINDOW)..max];
    if let Some(at) = window.iter().rposition(u8::is_ascii_whitespace) {
        let end = max - window.len() + at + 1;
        if end > 0 {
            return end;
        }
    }
    // A byte 0b10xx_xxxx continues a character: cut before the one it continues.
    let boundary = (1..=max).rev().find(|&i| bytes[i] & 0xC0 != 0x80).unwrap_or(0);
    if boundary > 0 {
        return boundary;
    }
    // `max` is smaller than the first character: take that character whole.
    1 + bytes[1..].iter().take_while(|b| *b & 0xC0 == 0x80).count()
}

/// The parts of `text`, in order: each at most [`PART_BYTES`] (or one
/// character, if that is longer), cut between words where it can be.
pub fn parts(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (part, after) = rest.split_at(cut(rest.as_bytes(), PART_BYTES));
        rest = after;
        Some(part)
    })
}

/// The parts of a text read from `reader` (a result file), cut as
/// [`parts`] cuts the same text: at most one part is in memory. Text that
/// is not UTF-8 is an error ([`io::ErrorKind::InvalidData`]).
pub struct PartReader<R> {
    reader: R,
    /// Bytes read and not yet handed out.
    pending: Vec<u8>,
    ended: bool,
}

impl<R: Read> PartReader<R> {
    /// Parts of what `reader` yields.
    pub fn new(reader: R) -> Self {
        PartReader {
            reader,
            pending: Vec::new(),
            ended: false,
        }
    }

    /// Read until a whole part (or the end) is pending. `read_to_end` grows
    /// the buffer as the reads come in, so a short text costs its own size,
    /// not a part's (a search cuts a snippet from each hit's file this way).
    fn fill(&mut self) -> io::Result<()> {
        let want = PART_BYTES + 1;
        if !self.ended && self.pending.len() < want {
            let missing = (want - self.pending.len()) as u64;
            let read = (&mut self.reader).take(missing).read_to_end(&mut self.pending)?;
            // Short of the limit, `read_to_end` stopped at the end.
            self.ended = (read as u64) < missing;
        }
        Ok(())
    }
}

impl<R: Read> Iterator for PartReader<R> {
    type Item = io::Result<String>;

    fn next(&mut self) -> Option<io::Result<String>> {
        if let Err(e) = self.fill() {
            return Some(Err(e));
        }
        if self.pending.is_empty() {
            return None;
        }
        let rest = self.pending.split_off(cut(&self.pending, PART_BYTES));
        let part = std::mem::replace(&mut self.pending, rest);
        Some(String::from_utf8(part).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)))
    }
}

/// `items` in runs whose text (`len` of each) stays within [`TX_TEXT_BYTES`],
/// in order; an item longer than that is a run of its own.
pub(crate) fn by_text_bytes<T>(items: &[T], len: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = len(item);
        if i > start && bytes + n > TX_TEXT_BYTES {
            runs.push(&items[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += n;
    }
    if start < items.len() {
        runs.push(&items[start..]);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_text_is_one_part() {
        assert_eq!(parts("a few words").collect::<Vec<_>>(), ["a few words"]);
        assert_eq!(parts("").count(), 0);
    }

    #[test]
    fn long_texts_are_cut_after_a_space_within_the_limit() {
        let text = "word ".repeat(PART_BYTES / 5 * 3);
        let cut: Vec<&str> = parts(&text).collect();
        assert!(cut.len() >= 3);
        assert_eq!(cut.concat(), text);
        for p in &cut {
            assert!(p.len() <= PART_BYTES);
            assert!(p.ends_with(' ') || std::ptr::eq(*p, *cut.last().unwrap()));
        }
    }

    #[test]
    fn a_text_without_spaces_is_cut_between_characters() {
        let text = "계".repeat(PART_BYTES); // 3 bytes each
        let cut: Vec<&str> = parts(&text).collect();
        assert_eq!(cut.concat(), text);
        assert!(cut
            .iter()
            .all(|p| p.len() <= PART_BYTES && p.chars().all(|c| c == '계')));
    }

    #[test]
    fn a_limit_below_one_character_still_moves_on() {
        assert_eq!(cut("계정".as_bytes(), 2), 3);
        assert_eq!(cut(b"ab cd", 4), 3);
        assert_eq!(cut(b"abcdef", 4), 4);
    }

    #[test]
    fn the_reader_cuts_as_the_text_is_cut() {
        let text = format!("{}{}", "alpha beta ".repeat(60_000), "계정".repeat(90_000));
        let from_text: Vec<&str> = parts(&text).collect();
        // One byte at a time: the reader must not depend on how reads split.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let from_reader: Vec<String> = PartReader::new(Trickle(text.as_bytes()))
            .collect::<io::Result<_>>()
            .unwrap();
        assert_eq!(from_reader, from_text);
    }

    #[test]
    fn the_reader_refuses_text_that_is_not_utf8() {
        let mut r = PartReader::new(&b"ok \xff\xfe"[..]);
        assert_eq!(r.next().unwrap().unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn runs_keep_within_the_budget_and_a_long_item_goes_alone() {
        let sizes = [TX_TEXT_BYTES / 2, TX_TEXT_BYTES / 2, 1, TX_TEXT_BYTES * 3, 5, 6];
        let runs = by_text_bytes(&sizes, |n| *n);
        let lens: Vec<usize> = runs.iter().map(|r| r.len()).collect();
        assert_eq!(lens, [2, 1, 1, 2]);
        assert_eq!(runs.concat(), sizes);
        assert!(by_text_bytes(&[] as &[usize], |n| *n).is_empty());
    }
}
