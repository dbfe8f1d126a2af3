//! Mailboxes: an mbox file is read as a folder of messages, each message a
//! document of its own, keyed `<mailbox key>/<n>.eml` (`n` counting from 1
//! in file order), so a search finds the message and not a 2 GB file, and a
//! message that fails costs the mailbox nothing else.
//!
//! A file is a mailbox by its name (`*.mbox`, `*.mbx`, or `mbox` itself, as
//! inside the folders Apple Mail exports) and by its first line (`From `);
//! a file so named that does not start like a mailbox is an ordinary
//! document. Messages are split where a line starts with `From ` (the mbox
//! convention that every writer escapes, as `>From `, inside a message); the
//! extractor takes the separator line off and undoes the escaping.
//!
//! The walk yields a mailbox where a directory of that name would be, and
//! its messages in the byte order of their keys, so the scan reads the
//! store's rows beside them as it does a directory's (`known.rs`). Each
//! message's fingerprint is the mailbox's with the message count after it,
//! the same for all of them: when the first message's stored fingerprint is
//! the mailbox's present one, the mailbox has not changed and its messages
//! are listed without a read. Otherwise one pass over the file finds where
//! each message starts and hashes each, so a mailbox that grew queues its new
//! messages and leaves the unchanged ones, and a message no longer there is
//! gone. Memory grows with the number of messages (a bound per message, at
//! most [`MAX_MESSAGES`](super::mailbox_split::MAX_MESSAGES)), never with their size.
//!
//! Reading one message needs where it starts: workers share an index of the
//! last mailboxes read ([`MailboxIndexes`](super::mailbox_split::MailboxIndexes)), rebuilt when the mailbox's size
//! or modification time changed, so a mailbox of many messages is read
//! through once, not once per message.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::folder::{DirSource, Entry, Link, MessageVersion, OpenError, SCAN_BATCH};
use super::keys::HEX_KEY;
use super::mailbox_split::{split, Split, FROM_LINE, MAX_MESSAGES};
use crate::error::Result;
use crate::portable::Stats;
use crate::source::contract::SourceError;
use crate::store::{Store, Vanished};

/// How a message's key ends: the message is an e-mail, read as an `.eml` is.
const MESSAGE_SUFFIX: &str = ".eml";

/// Whether a file named `name` is read as a mailbox (when it also starts
/// like one). Asked for every comparison of the walk's sort: no allocation.
pub(super) fn is_mailbox_name(name: &[u8]) -> bool {
    let ends_with = |suffix: &[u8]| {
        name.len() >= suffix.len() && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    name.eq_ignore_ascii_case(b"mbox") || ends_with(b".mbox") || ends_with(b".mbx")
}

/// The name of message `n` (from 1) below its mailbox.
fn message_name(n: u64) -> String {
    format!("{n}{MESSAGE_SUFFIX}")
}

/// The message number a name below a mailbox stands for, when it is one
/// [`message_name`] writes (no sign, no leading zero, from 1).
fn message_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(MESSAGE_SUFFIX)?;
    let canonical =
        !digits.is_empty() && !digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit());
    canonical.then(|| digits.parse().ok()).flatten()
}

/// 1 to `n` in the byte order of their message names (`1.eml`, `10.eml`,
/// `100.eml`, `11.eml`, ..., `2.eml`): a name's digits sort as text, and the
/// `.` after them sorts before any digit, so a number comes before the
/// numbers it begins. Made one at a time, nothing held.
pub(super) fn in_key_order(n: u64) -> impl Iterator<Item = u64> {
    let (mut next, mut left) = (1u64, n);
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        left -= 1;
        let this = next;
        if next.saturating_mul(10) <= n {
            next *= 10;
        } else {
            while next % 10 == 9 || next + 1 > n {
                next /= 10;
            }
            next += 1;
        }
        Some(this)
    })
}

/// The message entries of a mailbox found by a scan: their fingerprint, and
/// their versions when the mailbox was read (`None`: it has not changed
/// since the store's rows were written).
struct Listing {
    stat: String,
    count: u64,
    split: Option<Split>,
}

/// The documents a walk's entry stands for ([`DirSource::documents_of`]).
pub(super) struct Documents {
    /// The entries, in key order.
    pub(super) entries: Entries,
    /// For a mailbox-named file that was read: its path and how many
    /// messages it holds now (0: it is no mailbox, or no longer one).
    pub(super) read_mailbox: Option<(PathBuf, u64)>,
}

/// A walk's entry itself (every file's case, with no allocation), or a
/// mailbox's messages.
pub(super) enum Entries {
    One(Option<Entry>),
    Messages(Box<dyn Iterator<Item = Entry> + Send>),
}

impl Iterator for Entries {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        match self {
            Entries::One(entry) => entry.take(),
            Entries::Messages(messages) => messages.next(),
        }
    }
}

impl Documents {
    fn one(entry: Entry) -> Self {
        Documents {
            entries: Entries::One(Some(entry)),
            read_mailbox: None,
        }
    }
}

impl DirSource {
    /// The documents a walk's `entry` stands for: itself, or, when it is a
    /// mailbox, its messages in key order. Why anything was left out is added
    /// to `skipped` (a mailbox that could not be read, or past the cap).
    pub(super) fn documents_of(
        &self,
        store: &Store,
        entry: Entry,
        skipped: &mut Vec<String>,
    ) -> Result<Documents> {
        let name = entry
            .path
            .file_name()
            .map(|n| n.as_encoded_bytes())
            .unwrap_or_default();
        if matches!(entry.link, Link::Outside | Link::Broken) || !is_mailbox_name(name) {
            return Ok(Documents::one(entry));
        }
        let (stat, meta) = self.fingerprint(&entry, &mut Stats::default());
        if !meta.is_some_and(|m| m.is_file) {
            return Ok(Documents::one(entry));
        }
        let Some(listing) = self.listing(store, &entry, format!("mailbox:{stat}"), skipped)? else {
            // No mailbox (any more): a watcher looking at it forgets its messages.
            let path = entry.path.clone();
            return Ok(Documents {
                read_mailbox: Some((path, 0)),
                ..Documents::one(entry)
            });
        };
        let read_mailbox = listing
            .split
            .is_some()
            .then(|| (entry.path.clone(), listing.count));
        Ok(Documents {
            entries: Entries::Messages(Box::new(self.message_entries(entry, listing))),
            read_mailbox,
        })
    }

    /// What the scan takes of the mailbox `entry`: from the store when its
    /// first and last messages (in key order: the first and the last a scan
    /// writes) were recorded with the mailbox as it is now, else from a read.
    /// `None` when it is no mailbox. One that cannot be read keeps what the
    /// store holds of it (noted), so it costs no message and blocks nothing
    /// else from being marked gone.
    fn listing(
        &self,
        store: &Store,
        entry: &Entry,
        stat: String,
        skipped: &mut Vec<String>,
    ) -> Result<Option<Listing>> {
        let rel = self.rel_of(&entry.path);
        let first = self.key_of(&rel.join(message_name(1)));
        let stored = store.source_stats(std::slice::from_ref(&first))?;
        let recorded = stored.get(&first).and_then(|known| {
            let (stat, count) = known.stat.rsplit_once(':')?;
            Some((stat.to_owned(), count.parse::<u64>().ok()?))
        });
        if let Some((_, count)) = recorded.as_ref().filter(|(was, _)| *was == stat) {
            let last = self.key_of(&rel.join(message_name(in_key_order(*count).last().unwrap_or(1))));
            let whole = format!("{stat}:{count}");
            let stored = store.source_stats(std::slice::from_ref(&last))?;
            if stored.get(&last).is_some_and(|known| known.stat == whole) {
                return Ok(Some(Listing {
                    stat,
                    count: *count,
                    split: None,
                }));
            }
        }
        let read = match self.open_inside(&entry.path) {
            Ok(Some(file)) => split(file, true),
            // Outside the root after all (swapped since the walk): fetch refuses it.
            Ok(None) => return Ok(None),
            Err(OpenError::Resolving(e) | OpenError::Opening(e)) => Err(e),
        };
        match read {
            Ok(Some(split)) => {
                if split.capped {
                    skipped.push(format!(
                        "{}: a mailbox of more than {MAX_MESSAGES} messages: the messages after those are left out",
                        entry.path.display()
                    ));
                }
                Ok(Some(Listing {
                    stat,
                    count: split.count(),
                    split: Some(split),
                }))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                skipped.push(format!(
                    "{}: cannot read the mailbox ({e}): its messages are left as they were",
                    entry.path.display()
                ));
                Ok(recorded.map(|(stat, count)| Listing {
                    stat,
                    count,
                    split: None,
                }))
            }
        }
    }

    /// The entries of a mailbox's messages, in key order.
    fn message_entries(&self, mailbox: Entry, listing: Listing) -> impl Iterator<Item = Entry> + Send {
        let rel = self.rel_of(&mailbox.path);
        let source = self.clone();
        let stat = format!("{}:{}", listing.stat, listing.count);
        in_key_order(listing.count).map(move |n| {
            // A message over the input limit is versioned by its hash too: it
            // fails at fetch, and stays failed until it changes.
            let version = listing
                .split
                .as_ref()
                .map(|split| match split.hashes.get(n as usize - 1) {
                    Some(hash) => format!("sha256:{}", hex::encode(hash)),
                    None => format!("stat:{stat}"),
                });
            Entry {
                key: source.key_of(&rel.join(message_name(n))),
                path: mailbox.path.clone(),
                // A link's own checks are the mailbox's (`open_inside` at
                // each read), not each message's.
                link: Link::No,
                message: Some(MessageVersion {
                    stat: stat.clone(),
                    version,
                }),
            }
        })
    }

    /// `path` below the root.
    fn rel_of(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.root).unwrap_or(path).to_path_buf()
    }

    /// What the keys of the messages of the mailbox at `path` start with,
    /// and whether the rest of each is in hex (a path that is not UTF-8).
    fn messages_prefix(&self, path: &Path) -> (String, bool) {
        let first = self.key_of(&self.rel_of(path).join(message_name(1)));
        let hexed = self.below_root(&first).is_some_and(|k| k.starts_with(HEX_KEY));
        let name = match hexed {
            true => hex::encode(message_name(1)),
            false => message_name(1),
        };
        let prefix = first.strip_suffix(name.as_str()).unwrap_or(&first).to_owned();
        (prefix, hexed)
    }

    /// Mark gone what the store holds of the mailbox-named file at `path`
    /// that it no longer has: its messages past the first `count`, and, when
    /// it is a mailbox, the row of the file itself (from before it was one).
    /// A watcher's look at one file has no walk beside the store's rows to
    /// find them. Returns how many.
    pub(super) fn forget_messages_after(&self, store: &Store, path: &Path, count: u64) -> Result<usize> {
        let (prefix, hexed) = self.messages_prefix(path);
        let mut lost = Vec::new();
        super::known::KnownCursor::new(store, &prefix).take_through(None, |key, known| {
            let rest = key.strip_prefix(prefix.as_str()).unwrap_or_default();
            let name = match hexed {
                true => hex::decode(rest).ok().and_then(|b| String::from_utf8(b).ok()),
                false => Some(rest.to_owned()),
            };
            if name.as_deref().and_then(message_number).is_none_or(|n| n > count) {
                lost.push(Vanished {
                    key,
                    stat: known.stat,
                });
            }
        })?;
        if count > 0 {
            let file = self.key_of(&self.rel_of(path));
            if let Some(known) = store.source_stats(std::slice::from_ref(&file))?.remove(&file) {
                lost.push(Vanished {
                    key: file,
                    stat: known.stat,
                });
            }
        }
        let mut gone = 0;
        for chunk in lost.chunks(SCAN_BATCH) {
            gone += store.mark_vanished(chunk)?;
        }
        Ok(gone)
    }

    /// The bytes of message `n` of the mailbox at `mailbox`, or `None` when
    /// `mailbox` is not a file (a folder named like one: the key is a path).
    /// A mailbox rewritten since it was split (the bytes found do not start a
    /// message) is split again once; a message not found is worth retrying,
    /// since a mailbox being rewritten may hold it again.
    pub(super) fn fetch_message(
        &self,
        key: &str,
        mailbox: &Path,
        n: u64,
        max_bytes: u64,
    ) -> std::result::Result<Option<Vec<u8>>, SourceError> {
        // Checked before the open: a directory is not opened for reading
        // everywhere (Windows, a folder that can be entered but not listed).
        if !std::fs::metadata(mailbox).is_ok_and(|m| m.is_file()) {
            return Ok(None);
        }
        let opened = self
            .open_inside(mailbox)
            .map_err(|e| e.for_document(key, mailbox))?;
        let Some(mut file) = opened else {
            return Err(SourceError::OutsideRoot { key: key.to_owned() });
        };
        let unreadable = |source| SourceError::Unreadable {
            key: key.to_owned(),
            path: mailbox.to_path_buf(),
            source,
        };
        for _ in 0..2 {
            let meta = file.metadata().map_err(unreadable)?;
            if !meta.is_file() {
                return Ok(None);
            }
            let stamp = (mailbox.to_path_buf(), meta.len(), meta.modified().ok());
            let split = self.mailboxes.split_of(&stamp, &mut file).map_err(unreadable)?;
            let Some((start, end)) = split.as_deref().and_then(|s| s.range(n)) else {
                let moved = io::Error::other(format!(
                    "the mailbox holds no message {n} now (it changed since the scan)"
                ));
                return Err(unreadable(moved));
            };
            if end - start > max_bytes {
                return Err(SourceError::TooLarge {
                    key: key.to_owned(),
                    size: end - start,
                    limit: max_bytes,
                });
            }
            let mut bytes = vec![0; (end - start) as usize];
            file.seek(SeekFrom::Start(start)).map_err(unreadable)?;
            file.read_exact(&mut bytes).map_err(unreadable)?;
            if bytes.starts_with(FROM_LINE) {
                return Ok(Some(bytes));
            }
            self.mailboxes.forget(&stamp);
        }
        let moved = io::Error::other("the mailbox is being rewritten");
        Err(unreadable(moved))
    }
}

/// The mailbox and message number a path below the root names, when its
/// last part is a message name and the part before it a mailbox name.
pub(super) fn message_path(path: &Path) -> Option<(&Path, u64)> {
    let n = message_number(path.file_name()?.to_str()?)?;
    let mailbox = path.parent()?;
    is_mailbox_name(mailbox.file_name()?.as_encoded_bytes()).then_some((mailbox, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers_in_key_order(n: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (1..=n).collect();
        v.sort_by_key(|i| message_name(*i));
        v
    }

    #[test]
    fn messages_come_in_the_byte_order_of_their_names() {
        for n in [0, 1, 9, 10, 11, 99, 100, 101, 1234, 10_000] {
            assert_eq!(
                in_key_order(n).collect::<Vec<_>>(),
                numbers_in_key_order(n),
                "n = {n}"
            );
        }
    }

    #[test]
    fn message_names_round_trip_and_odd_ones_are_refused() {
        assert_eq!(message_number(&message_name(17)), Some(17));
        for odd in ["0.eml", "017.eml", "+1.eml", "1.EML", ".eml", "1", "1.eml.txt"] {
            assert_eq!(message_number(odd), None, "{odd}");
        }
    }

    #[test]
    fn mailbox_names() {
        for yes in ["Inbox.mbox", "archive.MBX", "mbox", "MBOX"] {
            assert!(is_mailbox_name(yes.as_bytes()), "{yes}");
        }
        for no in ["mbox.txt", "Inbox", "x.mboxes", ".mbox.d"] {
            assert!(!is_mailbox_name(no.as_bytes()), "{no}");
        }
    }

    const MAILBOX: &[u8] = b"From a@x Mon Jan  1 00:00:00 2024\nSubject: one\n\nfirst\n\n\
                             From b@x Mon Jan  1 00:00:00 2024\nSubject: two\n\nsecond\n\n\
                             From c@x Mon Jan  1 00:00:00 2024\nSubject: three\n\nthird\n";

    use super::super::folder::test_folder as setup;

    fn version(store: &Store, key: &str) -> String {
        store.job_by_key(key).unwrap().expect(key).version
    }

    /// The rescan of a mailbox whose size and time did not change reads none
    /// of it: bytes changed under the same fingerprint go unseen, as a file's
    /// do (here, bytes that would make it no mailbox at all).
    #[test]
    fn an_unchanged_mailbox_is_listed_without_a_read() {
        let (_dir, root, store, src) = setup();
        let path = root.join("inbox.mbox");
        std::fs::write(&path, MAILBOX).unwrap();
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!((found.new, found.skipped.len()), (3, 0), "{found:?}");
        let before = version(&store, "inbox.mbox/2.eml");

        let time = std::fs::metadata(&path).unwrap().modified().unwrap();
        let same_size = String::from_utf8(MAILBOX.to_vec())
            .unwrap()
            .replacen("From", "Frog", 1);
        std::fs::write(&path, same_size.replace("second", "SECOND")).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(time)
            .unwrap();
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!(
            (found.new, found.changed, found.unchanged),
            (0, 0, 3),
            "{found:?}"
        );
        std::fs::write(
            &path,
            String::from_utf8(MAILBOX.to_vec())
                .unwrap()
                .replace("second", "SECOND"),
        )
        .unwrap();

        let later = time + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!(
            (found.new, found.changed, found.unchanged),
            (0, 1, 2),
            "{found:?}"
        );
        assert_ne!(version(&store, "inbox.mbox/2.eml"), before);
        use crate::source::contract::Source;
        let second = src.fetch("inbox.mbox/2.eml", 1 << 20).unwrap();
        assert!(second.starts_with(b"From b@x") && second.ends_with(b"SECOND\n\n"));
    }

    /// A watcher's look at a mailbox queues its new messages and marks the
    /// ones it no longer holds gone.
    #[test]
    fn a_watcher_sees_a_mailbox_grow_and_shrink() {
        let (_dir, root, store, src) = setup();
        let path = root.join("inbox.mbox");
        let third = MAILBOX.windows(8).position(|w| w == b"From c@x").unwrap();
        std::fs::write(&path, &MAILBOX[..third]).unwrap();
        let one = |store: &Store| {
            src.discover_paths(store, std::slice::from_ref(&path), 1 << 20)
                .unwrap()
        };
        assert_eq!(one(&store).new, 2);
        std::fs::write(&path, MAILBOX).unwrap();
        let found = one(&store);
        assert_eq!(
            (found.new, found.changed, found.unchanged),
            (1, 0, 2),
            "{found:?}"
        );
        let first = MAILBOX.windows(6).position(|w| w == b"\nFrom ").unwrap() + 1;
        std::fs::write(&path, &MAILBOX[..first]).unwrap();
        let found = one(&store);
        assert_eq!((found.unchanged, found.gone), (1, 2), "{found:?}");
        for key in ["inbox.mbox/2.eml", "inbox.mbox/3.eml"] {
            let job = store.job_by_key(key).unwrap().unwrap();
            assert!(job.source_gone, "{key}");
        }
        // No longer a mailbox: its last message goes, the file is a document.
        std::fs::write(&path, b"notes, not mail\n").unwrap();
        let found = one(&store);
        assert_eq!((found.new, found.gone), (1, 1), "{found:?}");
        assert!(store.job_by_key("inbox.mbox/1.eml").unwrap().unwrap().source_gone);
        // A mailbox again: the file's own row goes, its messages come.
        std::fs::write(&path, MAILBOX).unwrap();
        let found = one(&store);
        assert_eq!((found.new, found.changed, found.gone), (0, 3, 1), "{found:?}");
        assert!(store.job_by_key("inbox.mbox").unwrap().unwrap().source_gone);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(one(&store).gone, 3);
    }

    /// Apple Mail exports a mailbox as a folder named `*.mbox` holding a file
    /// named `mbox`: the folder's files are files, the file's messages messages.
    #[test]
    fn a_folder_named_like_a_mailbox_is_a_folder() {
        use crate::source::contract::Source;
        let (_dir, root, store, src) = setup();
        let folder = root.join("Inbox.mbox");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("mbox"), MAILBOX).unwrap();
        std::fs::write(folder.join("1.eml"), b"Subject: a file\n\nsaved apart\n").unwrap();
        std::fs::write(root.join("notes.mbox"), b"not a mailbox at all\n").unwrap();
        let found = src.discover(&store, 1 << 20).unwrap();
        assert_eq!(found.new, 5, "{found:?}");
        assert_eq!(
            src.fetch("Inbox.mbox/1.eml", 1 << 20).unwrap(),
            b"Subject: a file\n\nsaved apart\n"
        );
        let third = src.fetch("Inbox.mbox/mbox/3.eml", 1 << 20).unwrap();
        assert!(third.starts_with(b"From c@x") && third.ends_with(b"third\n"));
        assert_eq!(
            src.fetch("notes.mbox", 1 << 20).unwrap(),
            b"not a mailbox at all\n"
        );
        // Not there now, but a mailbox being rewritten may hold it again.
        let missing = src.fetch("Inbox.mbox/mbox/4.eml", 1 << 20).unwrap_err();
        assert!(
            matches!(missing, SourceError::Unreadable { .. }) && !missing.is_permanent(),
            "{missing}"
        );
        assert!(matches!(
            src.fetch("Inbox.mbox/mbox/2.eml", 10),
            Err(SourceError::TooLarge { .. })
        ));
    }
}
