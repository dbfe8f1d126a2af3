//! Where a mailbox's messages lie: one pass that splits the file at its
//! `From ` lines (hashing each message when a scan asks), and the splits of
//! the mailboxes read last, shared by the workers fetching their messages.

use std::collections::VecDeque;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

/// Messages of one mailbox taken at most; the rest are left out with a note.
/// A message costs the scan about 50 bytes while its mailbox is read.
pub(super) const MAX_MESSAGES: usize = 1_000_000;
/// What every message starts with; inside a message the writer escapes it.
pub(super) const FROM_LINE: &[u8] = b"From ";
/// Bytes read per block while a mailbox is split.
pub(super) const BLOCK: usize = 64 * 1024;
/// Mailboxes whose index the workers keep.
const INDEXES_KEPT: usize = 4;

/// Where a mailbox's messages lie: message `i` (from 1) is the bytes from
/// `bounds[i - 1]` to `bounds[i]`.
#[derive(Debug, Default)]
pub(super) struct Split {
    pub(super) bounds: Vec<u64>,
    /// Each message's SHA-256, when asked for.
    pub(super) hashes: Vec<[u8; 32]>,
    /// More than [`MAX_MESSAGES`] messages: the rest were left out.
    pub(super) capped: bool,
}

impl Split {
    /// How many messages were taken.
    pub(super) fn count(&self) -> u64 {
        self.bounds.len().saturating_sub(1) as u64
    }

    /// Message `n`'s byte range (from 1), if there is one.
    pub(super) fn range(&self, n: u64) -> Option<(u64, u64)> {
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        Some((*self.bounds.get(i)?, *self.bounds.get(i + 1)?))
    }
}

/// Splits the mailbox `reader` holds into messages, hashing each when `hash`;
/// `None` when it does not start with a `From ` line (not a mailbox). Reads
/// block by block, so a line of any length costs one block.
pub(super) fn split(mut reader: impl Read, hash: bool) -> io::Result<Option<Split>> {
    use sha2::Digest;
    // A separator is a line break and `From `: a block keeps its last bytes
    // for the next, so that one cut across two blocks is still seen.
    const KEEP: usize = FROM_LINE.len();
    let mut buf = vec![0u8; BLOCK + KEEP];
    let (mut held, mut base) = (0usize, 0u64);
    let mut out = Split::default();
    let mut hasher = sha2::Sha256::new();
    loop {
        let read = read_some(&mut reader, &mut buf[held..])?;
        let end = held + read;
        let eof = read == 0;
        if out.bounds.is_empty() {
            if end < FROM_LINE.len() && !eof {
                held = end;
                continue;
            }
            if !buf[..end].starts_with(FROM_LINE) {
                return Ok(None);
            }
            out.bounds.push(0);
        }
        let data = &buf[..end];
        let mut hashed_to = 0;
        let mut at = 0;
        while let Some(nl) = data[at..].iter().position(|&b| b == b'\n') {
            let line = at + nl + 1;
            if end - line < FROM_LINE.len() {
                break;
            }
            if data[line..].starts_with(FROM_LINE) {
                if hash {
                    hasher.update(&data[hashed_to..line]);
                    out.hashes.push(std::mem::take(&mut hasher).finalize().into());
                }
                hashed_to = line;
                out.bounds.push(base + line as u64);
                if out.bounds.len() > MAX_MESSAGES {
                    // The last message taken ends here; another begins.
                    out.capped = true;
                    return Ok(Some(out));
                }
            }
            at = line;
        }
        // A separator begun in the last bytes is looked for again with the next block.
        let keep = if eof { 0 } else { KEEP.min(end - hashed_to) };
        if hash {
            hasher.update(&data[hashed_to..end - keep]);
        }
        if eof {
            if hash {
                out.hashes.push(hasher.finalize().into());
            }
            out.bounds.push(base + end as u64);
            return Ok(Some(out));
        }
        buf.copy_within(end - keep..end, 0);
        base += (end - keep) as u64;
        held = keep;
    }
}

/// One read, retried when interrupted.
fn read_some(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// A mailbox file as it was when split: its path, size and modification time.
pub(super) type Stamp = (PathBuf, u64, Option<SystemTime>);

/// The splits of the mailboxes read last, shared by every worker fetching
/// from this source, so the messages of one mailbox cost one read of it.
/// The list is locked only to find or add a mailbox's slot; the slot is
/// filled once, outside the list's lock, and the workers on that mailbox wait
/// for that one read while the others go on.
#[derive(Debug, Clone, Default)]
pub(super) struct MailboxIndexes(Arc<Mutex<VecDeque<(Stamp, Slot)>>>);

/// A mailbox's split once read (`None`: it was no mailbox), or why it could not be.
type Slot = Arc<OnceLock<std::result::Result<Option<Arc<Split>>, String>>>;

impl MailboxIndexes {
    /// The split of the mailbox `file` (stamped `stamp`), read once while
    /// `stamp` stands. `None`: not a mailbox.
    pub(super) fn split_of(&self, stamp: &Stamp, file: &mut std::fs::File) -> io::Result<Option<Arc<Split>>> {
        let slot = self.slot(stamp);
        let read = slot.get_or_init(|| {
            file.seek(SeekFrom::Start(0))
                .and_then(|_| split(&mut *file, false))
                .map(|split| split.map(Arc::new))
                .map_err(|e| e.to_string())
        });
        match read {
            Ok(split) => Ok(split.clone()),
            Err(why) => {
                // A failed read is not kept: the next fetch tries again.
                self.forget(stamp);
                Err(io::Error::other(why.clone()))
            }
        }
    }

    /// The slot for `stamp`, made the most recent; a mailbox's older stamps
    /// and the least recent mailbox past [`INDEXES_KEPT`] are dropped.
    fn slot(&self, stamp: &Stamp) -> Slot {
        let mut kept = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = match kept.iter().position(|(s, _)| s == stamp) {
            Some(at) => kept.remove(at).map(|(_, slot)| slot).unwrap_or_default(),
            None => Slot::default(),
        };
        kept.retain(|(s, _)| s.0 != stamp.0);
        if kept.len() >= INDEXES_KEPT {
            kept.pop_front();
        }
        kept.push_back((stamp.clone(), slot.clone()));
        slot
    }

    /// Drop what is kept for `stamp`.
    pub(super) fn forget(&self, stamp: &Stamp) {
        let mut kept = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.retain(|(s, _)| s != stamp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_bytes(bytes: &[u8], block: usize) -> Option<Split> {
        // A reader that hands out at most `block` bytes per read, so that
        // separators fall across the blocks.
        struct Dribble<'a>(&'a [u8], usize);
        impl Read for Dribble<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        split(Dribble(bytes, block), true).unwrap()
    }

    #[test]
    fn messages_are_split_at_from_lines_wherever_the_reads_end() {
        let mailbox = b"From a@x Mon Jan  1 00:00:00 2024\nSubject: one\n\n>From the start\n\n\
                        From b@x Mon Jan  1 00:00:00 2024\nSubject: two\n\nFromage\n\n\
                        From c@x Mon Jan  1 00:00:00 2024\nSubject: three\n";
        let second = mailbox.windows(8).position(|w| w == b"From b@x").unwrap() as u64;
        let third = mailbox.windows(8).position(|w| w == b"From c@x").unwrap() as u64;
        for block in [1, 2, 3, 5, 6, 7, 64, 100_000] {
            let split = split_bytes(mailbox, block).expect("a mailbox");
            assert_eq!(split.count(), 3, "block {block}");
            assert_eq!(split.range(1), Some((0, second)));
            assert_eq!(split.range(2), Some((second, third)));
            assert_eq!(split.range(3), Some((third, mailbox.len() as u64)));
            assert_eq!(split.range(4), None);
            use sha2::Digest;
            let want: [u8; 32] = sha2::Sha256::digest(&mailbox[second as usize..third as usize]).into();
            assert_eq!(split.hashes[1], want, "block {block}");
            assert_eq!(split.hashes.len(), 3);
        }
    }

    /// A line longer than a block (a base64 attachment without line breaks)
    /// is read through block by block; a separator right after it is found.
    #[test]
    fn a_line_longer_than_a_block_is_read_through() {
        let mut mailbox = b"From a@x Mon Jan  1 00:00:00 2024\nSubject: long\n\n".to_vec();
        mailbox.extend(std::iter::repeat_n(b'Q', 3 * BLOCK + 7));
        let second = mailbox.len() as u64 + 1;
        mailbox.extend_from_slice(b"\nFrom b@x Mon Jan  1 00:00:00 2024\nSubject: short\n");
        let split = split(&mailbox[..], false).unwrap().unwrap();
        assert_eq!(split.count(), 2);
        assert_eq!(split.range(2), Some((second, mailbox.len() as u64)));
    }

    #[test]
    fn a_file_not_starting_with_a_from_line_is_no_mailbox() {
        assert!(split_bytes(b"Subject: hi\n\nFrom here on\n", 4).is_none());
        assert!(split_bytes(b"", 4).is_none());
        assert!(split_bytes(b"Fro", 4).is_none());
        assert_eq!(split_bytes(b"From ", 2).map(|s| s.count()), Some(1));
    }

    #[test]
    fn a_flood_of_separators_is_capped() {
        let flood = b"From \n".repeat(MAX_MESSAGES + 1);
        let split = split(&flood[..], true).unwrap().unwrap();
        assert!(split.capped);
        assert_eq!(
            (split.count(), split.hashes.len()),
            (MAX_MESSAGES as u64, MAX_MESSAGES)
        );
        let full = b"From \n".repeat(MAX_MESSAGES);
        let split = super::split(&full[..], false).unwrap().unwrap();
        assert!(!split.capped);
        assert_eq!(split.count(), MAX_MESSAGES as u64);
    }
}
