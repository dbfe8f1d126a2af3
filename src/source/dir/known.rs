//! The store's side of a directory scan: the documents it knows, read in the
//! byte order of their keys beside a walk that yields files in that order
//! (`DirSource::walk`), one page at a time. A key the walk passes without
//! finding is a document whose file is gone; a key the walk finds that the
//! store's range did not hold is new. So an unchanged tree costs one read of
//! each known row and no write, and the vanished files are found in the same
//! pass.

use std::collections::{HashMap, VecDeque};

use super::folder::DirSource;
use super::keys::{key_in_folder, HEX_KEY};
use crate::error::Result;
use crate::store::{KnownSource, Store, Vanished};

/// Rows read from the store per query.
const PAGE: usize = 1000;

/// The store's present documents of one folder in key order, read a page
/// ahead. A store may index several folders: one keyed relative to its root
/// and others by full path (`DirSource::keyed_by_full_path`); a folder's
/// keys are one range for a full-path folder, and all but the full-path
/// ones for the relative folder, so the others' rows are passed over.
pub(super) struct KnownCursor<'s> {
    store: &'s Store,
    /// The folder's key prefix (`DirSource::key_prefix`).
    prefix: &'s str,
    ahead: VecDeque<(String, KnownSource)>,
    /// The last key read from the store (the next page starts after it).
    read_to: Option<String>,
    /// The store has nothing after `read_to`.
    exhausted: bool,
}

impl<'s> KnownCursor<'s> {
    pub(super) fn new(store: &'s Store, prefix: &'s str) -> Self {
        KnownCursor {
            store,
            prefix,
            ahead: VecDeque::new(),
            // Every key of a full-path folder sorts after its prefix.
            read_to: (!prefix.is_empty()).then(|| prefix.to_owned()),
            exhausted: false,
        }
    }

    /// Hand every known document up to and including `through` (all that are
    /// left, without it) to `each`, in key order.
    pub(super) fn take_through(
        &mut self,
        through: Option<&str>,
        mut each: impl FnMut(String, KnownSource),
    ) -> Result<()> {
        loop {
            if self.ahead.is_empty() && !self.read_page()? {
                return Ok(());
            }
            while let Some((key, _)) = self.ahead.front() {
                if through.is_some_and(|t| key.as_str() > t) {
                    return Ok(());
                }
                let (key, known) = self.ahead.pop_front().expect("front exists");
                each(key, known);
            }
        }
    }

    /// Read the next page; false when the store has no more.
    fn read_page(&mut self) -> Result<bool> {
        if self.exhausted {
            return Ok(false);
        }
        let page = self.store.sources_after(self.read_to.as_deref(), PAGE)?;
        let prefix = self.prefix;
        // A folder's keys are contiguous: past its prefix, nothing is its.
        let past = !prefix.is_empty() && page.last().is_some_and(|(k, _)| !k.starts_with(prefix));
        self.exhausted = page.len() < PAGE || past;
        if let Some((last, _)) = page.last() {
            self.read_to = Some(last.clone());
        }
        let got = !page.is_empty();
        self.ahead
            .extend(page.into_iter().filter(|(k, _)| key_in_folder(prefix, k)));
        Ok(got)
    }
}

/// The known documents of one batch's key range, by key.
pub(super) type KnownInRange = HashMap<String, KnownSource>;

/// What a scan has learnt so far, beside its walk: where the store's range
/// stands and which known documents the walk passed without finding.
pub(super) struct ScanState<'s> {
    source: &'s DirSource,
    cursor: KnownCursor<'s>,
    /// The last key of the ranges read so far.
    through: Option<String>,
    /// Known documents in a range the walk covered but did not yield.
    passed: Vec<Vanished>,
    /// Known keys of paths that are not UTF-8 (`hex:`): the walk yields such
    /// a file where its name sorts, not where its key does, so they are
    /// judged at the end, against `found_apart`.
    hex_known: Vec<Vanished>,
    /// Keys looked up one by one (`hex:` keys, and any key out of order).
    found_apart: std::collections::HashSet<String>,
}

impl<'s> ScanState<'s> {
    pub(super) fn new(store: &'s Store, source: &'s DirSource) -> Self {
        ScanState {
            source,
            cursor: KnownCursor::new(store, source.key_prefix()),
            through: None,
            passed: Vec::new(),
            hex_known: Vec::new(),
            found_apart: Default::default(),
        }
    }

    /// The stored fingerprints of a batch's `keys` (walk order; the known
    /// ones only). Keys after the last range are matched against the store's
    /// rows up to the batch's last key (to the end with `last`); the others
    /// are looked up one by one. Known rows the walk passed are noted.
    pub(super) fn known_for(&mut self, keys: &[&str], last: bool) -> Result<KnownInRange> {
        let after = self.through.as_deref();
        let source = self.source;
        let hex = |key: &str| source.below_root(key).is_some_and(|k| k.starts_with(HEX_KEY));
        let (ordered, apart): (Vec<&str>, Vec<&str>) = keys
            .iter()
            .partition(|k| !hex(k) && after.is_none_or(|t| **k > t));
        let through = if last {
            None
        } else {
            match ordered.iter().max() {
                Some(k) => Some((*k).to_owned()),
                None => return self.look_up_apart(&apart),
            }
        };
        let wanted: std::collections::HashSet<&str> = ordered.iter().copied().collect();
        let mut out = self.look_up_apart(&apart)?;
        let (passed, hex_known) = (&mut self.passed, &mut self.hex_known);
        self.cursor.take_through(through.as_deref(), |key, known| {
            if wanted.contains(key.as_str()) {
                out.insert(key, known);
            } else if hex(&key) {
                hex_known.push(Vanished {
                    key,
                    stat: known.stat,
                });
            } else {
                passed.push(Vanished {
                    key,
                    stat: known.stat,
                });
            }
        })?;
        if through.is_some() {
            self.through = through;
        }
        Ok(out)
    }

    /// Keys the range cannot answer, looked up by key.
    fn look_up_apart(&mut self, apart: &[&str]) -> Result<KnownInRange> {
        if apart.is_empty() {
            return Ok(KnownInRange::new());
        }
        let keys: Vec<String> = apart.iter().map(|k| (*k).to_owned()).collect();
        self.found_apart.extend(keys.iter().cloned());
        self.cursor.store.source_stats(&keys)
    }

    /// The known documents the whole walk did not find: their files are gone.
    pub(super) fn vanished(self) -> Vec<Vanished> {
        let found = self.found_apart;
        self.passed
            .into_iter()
            .chain(self.hex_known)
            .filter(|v| !found.contains(&v.key))
            .collect()
    }
}
