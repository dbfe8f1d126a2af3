//! The one completion of a claim ([`crate::Store::complete`]): the accepted
//! result and what goes with it, written in the transaction that accepts it.

use std::borrow::Cow;

use crate::store::search::Labels;

/// What a completion records besides the claim ([`Store::complete`]): the
/// accepted result and its checksum, and optionally a note for the history,
/// the text for the sink, the text to make searchable and the result's size.
/// Each setter also takes an `Option`, `None` leaving the item out.
///
/// Borrowed from the caller; the store keeps its own copy only where a
/// completion waits for a shared transaction (a copy that owns its text).
///
/// # Example
/// ```
/// # use leasehold::Completion;
/// let text = "the document's text";
/// let c = Completion::new("r/a", "abc").note("utf-8 text").deliver(text).index(text);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion<'a> {
    /// The accepted result, relative to the mirror root.
    pub(crate) result_path: Cow<'a, str>,
    /// Its SHA-256.
    pub(crate) checksum: Cow<'a, str>,
    /// What extraction decided (format, encoding, converter).
    pub(crate) note: Option<Cow<'a, str>>,
    /// Text to queue for the sink.
    pub(crate) deliver: Option<Cow<'a, str>>,
    /// The result's text to make searchable.
    pub(crate) index: Option<Cow<'a, str>>,
    /// The result file's size in bytes.
    pub(crate) result_bytes: Option<u64>,
    /// Why the result's text holds no word; None when it has words.
    pub(crate) no_text: Option<Cow<'a, str>>,
    /// The title the document gives itself; None when it gives none.
    pub(crate) title: Option<Cow<'a, str>>,
    /// Who it says wrote it.
    pub(crate) author: Option<Cow<'a, str>>,
    /// The date it gives itself, as `clean_date` writes it.
    pub(crate) date: Option<Cow<'a, str>>,
    /// Its page count, when it says.
    pub(crate) pages: Option<u32>,
    /// Its language, as `clean_language` writes it.
    pub(crate) language: Option<Cow<'a, str>>,
    /// What the index's title and author columns get, made once from the
    /// claim's key by [`Completion::labelled`] (the store's `complete`), so
    /// that no engine reads the row back for them. Boxed: a completion
    /// waits in the write queue beside much smaller operations.
    pub(crate) labels: Option<Box<Labels>>,
}

impl<'a> Completion<'a> {
    /// A completion of `result_path` (relative to the mirror root) with its
    /// SHA-256 `checksum`, nothing else.
    pub fn new(result_path: &'a str, checksum: &'a str) -> Self {
        Completion {
            result_path: Cow::Borrowed(result_path),
            checksum: Cow::Borrowed(checksum),
            note: None,
            deliver: None,
            index: None,
            result_bytes: None,
            no_text: None,
            title: None,
            author: None,
            date: None,
            pages: None,
            language: None,
            labels: None,
        }
    }

    /// Mark the result's text as holding no word (no letter or digit), with
    /// why as far as the caller can tell (`"the file is empty"`): the store
    /// counts and lists such documents apart ([`crate::store::Totals::no_text`],
    /// [`crate::JobFilter::no_text`]). None (the default) for a text with words.
    pub fn no_text(mut self, reason: impl CompletionText<'a>) -> Self {
        self.no_text = reason.text().map(Cow::Borrowed);
        self
    }

    /// The title the document gives itself (see
    /// [`crate::extract::Extracted::title`]), recorded with the result and
    /// searched as the index's `title` column, ranked above the text. Without
    /// one the index titles the document by its file name, and the previous
    /// version's title is cleared.
    ///
    /// The title is cleaned as extractors clean theirs
    /// ([`crate::extract::clean_title`]: one line, at most 300 characters,
    /// none without a letter or digit), so that whatever an embedder's
    /// extractor returns (a NUL, a megabyte) is a title both engines store.
    pub fn title(mut self, title: impl CompletionText<'a>) -> Self {
        self.title = title.text().and_then(crate::extract::clean_title).map(Cow::Owned);
        self
    }

    /// Who the document says wrote it ([`crate::extract::Extracted::author`]),
    /// recorded with the result and searched as the index's `author` column
    /// (`author:`), ranked above the text; cleaned as a title is.
    pub fn author(mut self, author: impl CompletionText<'a>) -> Self {
        self.author = author
            .text()
            .and_then(crate::extract::clean_title)
            .map(Cow::Owned);
        self
    }

    /// The date the document gives itself ([`crate::extract::Extracted::date`]),
    /// recorded with the result and shown with it; a date
    /// [`crate::extract::clean_date`] cannot read is left out.
    pub fn date(mut self, date: impl CompletionText<'a>) -> Self {
        self.date = date.text().and_then(crate::extract::clean_date).map(Cow::Owned);
        self
    }

    /// How many pages the document says it has ([`crate::extract::Extracted::pages`]),
    /// recorded with the result and shown with it.
    pub fn pages(mut self, pages: impl Into<Option<u32>>) -> Self {
        self.pages = pages.into();
        self
    }

    /// The language the document says it is in ([`crate::extract::Extracted::language`]),
    /// recorded with the result and shown with it; a tag
    /// [`crate::extract::clean_language`] cannot read is left out.
    pub fn language(mut self, language: impl CompletionText<'a>) -> Self {
        self.language = language
            .text()
            .and_then(crate::extract::clean_language)
            .map(Cow::Owned);
        self
    }

    /// A note for the document's history: what extraction decided.
    pub fn note(mut self, note: impl CompletionText<'a>) -> Self {
        self.note = note.text().map(Cow::Borrowed);
        self
    }

    /// Text to queue for the sink, in the transaction that accepts the
    /// result: an accepted result is queued exactly once, a refused one never.
    /// The outbox cap ([`crate::StoreOptions::outbox`]) is applied there too.
    pub fn deliver(mut self, text: impl CompletionText<'a>) -> Self {
        self.deliver = text.text().map(Cow::Borrowed);
        self
    }

    /// The result's text, made searchable in the transaction that accepts
    /// it (replacing the previous version's). Without it an accepted result
    /// takes the previous text out of the index and puts none in.
    pub fn index(mut self, text: impl CompletionText<'a>) -> Self {
        self.index = text.text().map(Cow::Borrowed);
        self
    }

    /// The result file's size in bytes, recorded with it: `search` and
    /// `show` then leave out a result that was truncated or added to (a stat
    /// per hit), and a rerun a link or directory put in its place
    /// (`pipeline::recheck_results`). Without it only its existence is
    /// checked.
    pub fn result_bytes(mut self, bytes: impl Into<Option<u64>>) -> Self {
        self.result_bytes = bytes.into();
        self
    }

    /// The same completion owning its text.
    pub(crate) fn into_owned(self) -> Completion<'static> {
        let own = |t: Cow<'_, str>| Cow::Owned(t.into_owned());
        Completion {
            result_path: own(self.result_path),
            checksum: own(self.checksum),
            note: self.note.map(own),
            deliver: self.deliver.map(own),
            index: self.index.map(own),
            result_bytes: self.result_bytes,
            no_text: self.no_text.map(own),
            title: self.title.map(own),
            author: self.author.map(own),
            date: self.date.map(own),
            pages: self.pages,
            language: self.language.map(own),
            labels: self.labels,
        }
    }

    /// The completion with the index's labels of document `key` (its title
    /// else its file name, and its author).
    pub(crate) fn labelled(mut self, key: &str) -> Self {
        self.labels = Some(Box::new(Labels::of(
            key,
            self.title.as_deref(),
            self.author.as_deref(),
        )));
        self
    }

    /// The text to index, if any.
    pub(crate) fn index_text(&self) -> Option<&str> {
        self.index.as_deref()
    }
}

/// What a [`Completion`]'s text setters take: a `&str` or `&String`, or an
/// `Option` of a `&str` (`None` leaves the item out).
pub trait CompletionText<'a> {
    /// The text, if any.
    fn text(self) -> Option<&'a str>;
}

impl<'a> CompletionText<'a> for &'a str {
    fn text(self) -> Option<&'a str> {
        Some(self)
    }
}

impl<'a> CompletionText<'a> for &'a String {
    fn text(self) -> Option<&'a str> {
        Some(self.as_str())
    }
}

impl<'a> CompletionText<'a> for Option<&'a str> {
    fn text(self) -> Option<&'a str> {
        self
    }
}
