//! A bound in front of html5ever's tokenizer: no tag reaches it with more than
//! [`MAX_ATTRIBUTES`] attributes. The tokenizer checks each new attribute of a tag against
//! all the earlier ones (the rule that drops duplicates), so a tag with n attributes costs
//! n² comparisons; html5ever's newest release still does. Text never comes from the
//! attributes past the first few (only `<img alt>` is read), so the rest are dropped unread.
//!
//! To know where a tag's attributes are, this follows the tokenizer's states as far as
//! that needs: tags and their attribute values (quoted ones may hold `>`), comments, other
//! markup declarations (doctypes, bogus comments), and the raw-text elements the text sink
//! switches to ([`raw_kind`]), whose content is not markup. It is fed the same
//! chunks as the tokenizer and borrows every chunk it has nothing to drop from.

use std::borrow::Cow;

use html5ever::tokenizer::states::RawKind;

/// Attributes kept per tag. Real tags carry a few, framework components and SVG a few
/// dozen; the tokenizer's work per tag is bounded by the square of this.
pub(super) const MAX_ATTRIBUTES: usize = 64;

/// Longest tag name remembered: the raw-text elements' names are shorter.
const NAME_BYTES: usize = 16;

/// Where the stream is, in the tokenizer's terms (the WHATWG tokenization states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Data,
    /// After `<`.
    TagOpen,
    /// After `</`.
    EndTagOpen,
    TagName,
    BeforeAttributeName,
    AttributeName,
    AfterAttributeName,
    BeforeAttributeValue,
    /// Inside a value quoted with this byte.
    Quoted(u8),
    Unquoted,
    AfterQuoted,
    /// After a `/` in a tag.
    SelfClosing,
    /// After `<!` and this many dashes.
    MarkupOpen(u8),
    /// Inside `<!-- -->`, after this many dashes (at most 2) and maybe a `!` after them.
    Comment {
        dashes: u8,
        bang: bool,
    },
    /// `<!DOCTYPE>`, `<?...>`, `<![CDATA[...]>` and the like: to the next `>`.
    BogusComment,
    /// Inside a raw-text element, having matched this many bytes of `</` and its name.
    RawText(usize),
}

/// The attribute bound, as a filter over a stream of chunks.
pub(super) struct AttributeLimit {
    max: usize,
    state: State,
    /// The current tag's name, lower-cased, if it fits; then the raw-text element's name.
    name: [u8; NAME_BYTES],
    name_len: usize,
    /// The current tag is an end tag.
    end_tag: bool,
    /// Attributes the current tag has started.
    attributes: usize,
    /// Past the limit: the current tag's bytes are dropped until it ends.
    dropping: bool,
}

impl Default for AttributeLimit {
    fn default() -> Self {
        Self::new(MAX_ATTRIBUTES)
    }
}

impl AttributeLimit {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            state: State::Data,
            name: [0; NAME_BYTES],
            name_len: 0,
            end_tag: false,
            attributes: 0,
            dropping: false,
        }
    }

    /// The next chunk with every attribute past the limit removed; borrowed when none is.
    /// All the bytes the states turn on are ASCII, so cuts fall on character boundaries.
    pub(super) fn filter<'a>(&mut self, chunk: &'a str) -> Cow<'a, str> {
        // What is kept of the chunk so far, once something is cut, and where the range
        // being kept starts (`None` while dropping).
        let mut cut = self.dropping;
        let mut out = String::new();
        let mut kept_from = if self.dropping { None } else { Some(0) };
        for (i, &byte) in chunk.as_bytes().iter().enumerate() {
            let was_dropping = self.dropping;
            let self_closing = self.state == State::SelfClosing;
            let tag_ended = self.step(byte);
            if !was_dropping && self.dropping {
                cut = true;
                out.push_str(&chunk[kept_from.take().unwrap_or(i)..i]);
            } else if was_dropping && tag_ended {
                out.push_str(if self_closing { "/>" } else { ">" });
                self.dropping = false;
                kept_from = Some(i + 1);
            }
        }
        if !cut {
            return Cow::Borrowed(chunk);
        }
        if let Some(from) = kept_from {
            out.push_str(&chunk[from..]);
        }
        Cow::Owned(out)
    }

    /// Moves on by one byte; true when it ended a tag.
    fn step(&mut self, byte: u8) -> bool {
        use State::*;
        match self.state {
            Data => {
                if byte == b'<' {
                    self.state = TagOpen;
                }
            }
            TagOpen => match byte {
                b'!' => self.state = MarkupOpen(0),
                b'/' => self.state = EndTagOpen,
                b'?' => self.state = BogusComment,
                b if b.is_ascii_alphabetic() => self.start_tag(false, b),
                _ => {
                    self.state = Data;
                    return self.step(byte);
                }
            },
            EndTagOpen => match byte {
                b'>' => self.state = Data,
                b if b.is_ascii_alphabetic() => self.start_tag(true, b),
                _ => self.state = BogusComment,
            },
            TagName => match byte {
                b if is_space(b) => self.state = BeforeAttributeName,
                b'/' => self.state = SelfClosing,
                b'>' => return self.end_tag(),
                b => self.push_name(b),
            },
            BeforeAttributeName => match byte {
                b if is_space(b) => {}
                b'/' => self.state = SelfClosing,
                b'>' => return self.end_tag(),
                _ => self.start_attribute(),
            },
            AttributeName => match byte {
                b if is_space(b) => self.state = AfterAttributeName,
                b'/' => self.state = SelfClosing,
                b'=' => self.state = BeforeAttributeValue,
                b'>' => return self.end_tag(),
                _ => {}
            },
            AfterAttributeName => match byte {
                b if is_space(b) => {}
                b'/' => self.state = SelfClosing,
                b'=' => self.state = BeforeAttributeValue,
                b'>' => return self.end_tag(),
                _ => self.start_attribute(),
            },
            BeforeAttributeValue => match byte {
                b if is_space(b) => {}
                b'"' | b'\'' => self.state = Quoted(byte),
                b'>' => return self.end_tag(),
                _ => self.state = Unquoted,
            },
            Quoted(quote) => {
                if byte == quote {
                    self.state = AfterQuoted;
                }
            }
            Unquoted => match byte {
                b if is_space(b) => self.state = BeforeAttributeName,
                b'>' => return self.end_tag(),
                _ => {}
            },
            AfterQuoted => match byte {
                b if is_space(b) => self.state = BeforeAttributeName,
                b'/' => self.state = SelfClosing,
                b'>' => return self.end_tag(),
                _ => {
                    self.state = BeforeAttributeName;
                    return self.step(byte);
                }
            },
            SelfClosing => match byte {
                b'>' => return self.end_tag(),
                _ => {
                    self.state = BeforeAttributeName;
                    return self.step(byte);
                }
            },
            MarkupOpen(dashes) => match byte {
                b'-' if dashes == 1 => {
                    self.state = Comment {
                        dashes: 2,
                        bang: false,
                    }
                }
                b'-' => self.state = MarkupOpen(1),
                _ => {
                    self.state = BogusComment;
                    return self.step(byte);
                }
            },
            Comment { dashes, bang } => {
                self.state = match byte {
                    b'>' if dashes == 2 => Data,
                    b'-' if !bang => Comment {
                        dashes: (dashes + 1).min(2),
                        bang: false,
                    },
                    b'-' => Comment {
                        dashes: 1,
                        bang: false,
                    },
                    b'!' if dashes == 2 && !bang => Comment { dashes, bang: true },
                    _ => Comment {
                        dashes: 0,
                        bang: false,
                    },
                };
            }
            BogusComment => {
                if byte == b'>' {
                    self.state = Data;
                }
            }
            RawText(matched) => self.raw_text(matched, byte),
        }
        false
    }

    fn start_tag(&mut self, end_tag: bool, first: u8) {
        self.state = State::TagName;
        self.end_tag = end_tag;
        self.attributes = 0;
        self.name_len = 0;
        self.push_name(first);
    }

    /// Remembers the name's first [`NAME_BYTES`] bytes; a longer name is no raw-text
    /// element's, which the length past the buffer records.
    fn push_name(&mut self, byte: u8) {
        if let Some(slot) = self.name.get_mut(self.name_len) {
            *slot = byte.to_ascii_lowercase();
        }
        self.name_len += 1;
    }

    fn start_attribute(&mut self) {
        self.state = State::AttributeName;
        self.attributes += 1;
        if self.attributes > self.max {
            self.dropping = true;
        }
    }

    /// The tag ends: a start tag of a raw-text element opens raw text, as in the sink.
    fn end_tag(&mut self) -> bool {
        let name = self.name.get(..self.name_len).unwrap_or_default();
        let raw = !self.end_tag && std::str::from_utf8(name).is_ok_and(|n| raw_kind(n).is_some());
        self.state = if raw { State::RawText(0) } else { State::Data };
        true
    }

    /// Looks for `</name` followed by white space, `/` or `>`: the only end of raw text.
    fn raw_text(&mut self, matched: usize, byte: u8) {
        let name = &self.name[..self.name_len];
        self.state = match matched {
            0 => State::RawText(usize::from(byte == b'<')),
            1 if byte == b'/' => State::RawText(2),
            m if m >= 2 && m - 2 < name.len() => {
                if byte.to_ascii_lowercase() == name[m - 2] {
                    State::RawText(m + 1)
                } else {
                    State::RawText(usize::from(byte == b'<'))
                }
            }
            _ if matched == name.len() + 2 => {
                self.end_tag = true;
                self.attributes = 0;
                match byte {
                    b if is_space(b) => State::BeforeAttributeName,
                    b'/' => State::SelfClosing,
                    b'>' => State::Data,
                    b'<' => State::RawText(1),
                    _ => State::RawText(0),
                }
            }
            _ => State::RawText(usize::from(byte == b'<')),
        };
    }
}

/// White space in the tokenizer's tag states (CR is LF to it).
fn is_space(byte: u8) -> bool {
    matches!(byte, b'\t' | b'\n' | b'\x0C' | b'\r' | b' ')
}

/// Splits `s` into pieces of about `size` bytes on char boundaries.
pub(super) fn chunks(s: &str, size: usize) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(size);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

/// Elements whose content is never visible text, by the tokenizer state their content
/// needs. `noscript` is hidden because with scripting on, as in browsers, its content is
/// unparsed markup rather than text; `title` is the tab's label, not the page's text.
pub(super) fn raw_kind(name: &str) -> Option<RawKind> {
    match name {
        "script" => Some(RawKind::ScriptData),
        "style" | "noscript" | "iframe" | "noembed" | "noframes" => Some(RawKind::Rawtext),
        "title" => Some(RawKind::Rcdata),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Filters `html` with a limit of two attributes, in chunks of `size` bytes.
    fn limited(html: &str, size: usize) -> String {
        let mut limit = AttributeLimit::new(2);
        chunks(html, size)
            .map(|chunk| limit.filter(chunk).into_owned())
            .collect()
    }

    /// Input, and what the tokenizer may see of it with at most two attributes a tag.
    const CASES: &[(&str, &str)] = &[
        ("<p a b>x</p>", "<p a b>x</p>"),
        ("<p a b c d>x</p>", "<p a b >x</p>"),
        ("<p a=1 b='2' c=\"3\" d>x", "<p a=1 b='2' >x"),
        ("<p a='>' b=\">\" c='>'>x", "<p a='>' b=\">\" >x"),
        ("<p a b c/>x", "<p a b />x"),
        ("<img a b alt='velvet'>x", "<img a b >x"),
        ("<P A B C>x</P a b c>y", "<P A B >x</P a b >y"),
        ("<p a\"b c'd e=f>x", "<p a\"b c'd >x"),
        ("<p a=\"1\"b c>x", "<p a=\"1\"b >x"),
        (
            "<!-- <p a b c d> --> x <p a b c>",
            "<!-- <p a b c d> --> x <p a b >",
        ),
        ("<!--> <p a b c d>", "<!--> <p a b >"),
        ("<!-- a --!> <p a b c>", "<!-- a --!> <p a b >"),
        (
            "<!DOCTYPE html a b c d><p a b c>",
            "<!DOCTYPE html a b c d><p a b >",
        ),
        ("<?xml a b c?><p a b c>", "<?xml a b c?><p a b >"),
        (
            "<script>if (a<b c d e) x='</p a b c>'</script><p a b c>",
            "<script>if (a<b c d e) x='</p a b c>'</script><p a b >",
        ),
        ("<style a>x</STYLE a b c d>y", "<style a>x</STYLE a b >y"),
        (
            "<title><p a b c d></titles a b c></title>",
            "<title><p a b c d></titles a b c></title>",
        ),
        ("a < b c d e f and 1<2 c d e f", "a < b c d e f and 1<2 c d e f"),
        ("<p a b c", "<p a b "),
    ];

    #[test]
    fn drops_attributes_past_the_limit_and_nothing_else() {
        for (input, expected) in CASES {
            for size in [1, 2, 3, 5, input.len()] {
                assert_eq!(&limited(input, size), expected, "{input:?} in chunks of {size}");
            }
        }
    }

    #[test]
    fn borrows_chunks_with_nothing_to_drop() {
        let mut limit = AttributeLimit::new(2);
        assert!(matches!(limit.filter("<p a b>text</p><p"), Cow::Borrowed(_)));
        assert!(matches!(limit.filter(" c d e"), Cow::Owned(_)));
        assert_eq!(limit.filter(" f>kept"), ">kept");
        assert!(matches!(limit.filter("<p a>text"), Cow::Borrowed(_)));
    }

    #[test]
    fn multibyte_text_around_dropped_attributes_is_whole() {
        let html = "<p caf\u{e9}=\u{e9} b \u{e9}t\u{e9} d=\"\u{e9}\">\u{e9}t\u{e9}</p>";
        for size in 1..8 {
            assert_eq!(limited(html, size), "<p caf\u{e9}=\u{e9} b >\u{e9}t\u{e9}</p>");
        }
    }
}
