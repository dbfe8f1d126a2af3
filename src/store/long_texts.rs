//! Completions whose text to index is long (DESIGN §14): the text goes into
//! the search index in parts ([`search::parts`]), so that neither FTS5's
//! memory nor a write transaction grows with a document. The further parts
//! go in first, staged, in short transactions that also renew the claim's
//! lease; the completion then carries the first part and makes the others
//! live. A batch's completions go in as many transactions as keep each
//! one's text within [`parts::TX_TEXT_BYTES`].

use std::borrow::Cow;

use super::completion::Completion;
use super::search::parts::{self, by_text_bytes, PART_BYTES};
use super::search::IndexDoc;
use super::Store;
use crate::error::Result;
use crate::job::{Claim, Fenced, Owner};
use crate::store::search::Labels;

impl Store {
    /// Put further parts of `claim`'s result text into the search index,
    /// invisible until the claim's completion is accepted (or gone with its
    /// refusal), and renew the claim's lease: one short transaction, fenced.
    /// `result` is the result (path, checksum), `title` and `author` what
    /// the document says of itself ([`Completion::title`],
    /// [`Completion::author`]), as the completion will name them: every part
    /// is searched with them, so that `title:` and `author:` terms hold in
    /// each. The caller keeps `parts` within
    /// [`parts::TX_TEXT_BYTES`] a call; a rejection means the claim is no
    /// longer ours, and its completion will be refused.
    pub fn stage_search_parts(
        &self,
        claim: &Claim,
        result: (&str, &str),
        title: Option<&str>,
        author: Option<&str>,
        parts: &[&str],
    ) -> Result<Fenced> {
        let owner = claim.owner();
        let (title, author) = (
            title.and_then(crate::extract::clean_title),
            author.and_then(crate::extract::clean_title),
        );
        let labels = Labels::of(&claim.key, title.as_deref(), author.as_deref());
        let out = self.engine().search_stage(&owner, result, &labels, parts)?;
        super::events::refused("renew", &owner, &out);
        Ok(out)
    }

    /// `c` with its text to index cut to its first part, the further parts
    /// staged under `owner`'s claim first (in transactions of their own). A
    /// refused staging stops there: the completion will be refused too.
    pub(super) fn stage_further_parts<'a>(
        &self,
        owner: &Owner,
        mut c: Completion<'a>,
    ) -> Result<Completion<'a>> {
        let long = c
            .index_text()
            .filter(|t| t.len() > PART_BYTES && self.options().search_index);
        let Some(text) = long else {
            return Ok(c);
        };
        let mut cut = parts::parts(text);
        let first = cut.next().map_or(0, str::len);
        let further: Vec<&str> = cut.collect();
        for group in by_text_bytes(&further, |p| p.len()) {
            let out = self.engine().search_stage(
                owner,
                (&c.result_path, &c.checksum),
                c.labels.as_deref().unwrap_or(&Labels::default()),
                group,
            )?;
            super::events::refused("renew", owner, &out);
            if !out.is_accepted() {
                break;
            }
        }
        // The first part is the text's beginning: the completion keeps that.
        c.index = c.index.take().map(|text| match text {
            Cow::Borrowed(t) => Cow::Borrowed(&t[..first]),
            Cow::Owned(mut t) => {
                t.truncate(first);
                Cow::Owned(t)
            }
        });
        Ok(c)
    }

    /// `doc` with its text cut to its first part, the further parts staged
    /// first ([`Store::reindex_stage_parts`]).
    pub(super) fn stage_further_parts_of_accepted<'a>(&self, doc: &IndexDoc<'a>) -> Result<IndexDoc<'a>> {
        if doc.text.len() <= PART_BYTES {
            return Ok(*doc);
        }
        let mut cut = parts::parts(doc.text);
        let first = cut.next().unwrap_or_default();
        let further: Vec<&str> = cut.collect();
        for (i, run) in by_text_bytes(&further, |p| p.len()).into_iter().enumerate() {
            self.reindex_stage_parts(doc, run, i == 0)?;
        }
        Ok(IndexDoc { text: first, ..*doc })
    }

    /// Put further parts of an accepted text read back from the mirror into
    /// the search index (`leasehold reindex`), staged under its checksum
    /// until [`Store::reindex_texts`] puts its first part in and makes them
    /// live, if it is still the accepted result then. `fresh`: the first
    /// call for this text, which retires what an interrupted reindex staged.
    pub fn reindex_stage_parts(&self, doc: &IndexDoc<'_>, parts: &[&str], fresh: bool) -> Result<()> {
        self.engine().search_stage_accepted(doc, parts, fresh)
    }

    /// Delete one transaction's worth of the index's retired parts (a long
    /// text replaced or removed), if there are any: what a completion leaves
    /// to do, a little after each batch. Whether more are left.
    pub(crate) fn purge_search_parts_step(&self) -> Result<bool> {
        self.engine().search_purge(false)
    }

    /// Delete every retired part from the search index, and purge the
    /// deleted text from its pages, one short transaction at a time (`gc`,
    /// `reindex`).
    pub fn purge_search_parts(&self) -> Result<()> {
        while self.engine().search_purge(true)? {}
        Ok(())
    }
}
