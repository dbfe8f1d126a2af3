//! HWP 5.x, the binary format of Hancom's Hangul word processor (the documents most
//! Korean offices and public bodies publish), read natively from Hancom's published
//! specification ("한글 문서 파일 형식 5.0"):
//!
//! - the file is an OLE compound file, opened by the `cfb` crate, which checks its sector
//!   chains (loops, sectors past the end) against the file's length;
//! - `FileHeader` says whether the records are deflated, and whether the document is
//!   password-protected (which ends with that reason, as encrypted PDFs and Office
//!   packages do) or a "distribution" document, copy-protected for viewers: its sections
//!   are in `ViewText`, each opened by a record whose bytes, unmasked by a generator the
//!   specification gives, hold the AES-128 key the rest of the stream is encrypted with.
//!   Public bodies publish in that form, so it is read;
//! - the text is in the `BodyText/Section0`, `Section1`... streams, each a run of records
//!   (a 32-bit header: tag, level, size). `HWPTAG_PARA_TEXT` records hold each paragraph's
//!   text as UTF-16LE, with control characters that stand for objects (tables, footnotes,
//!   fields...). A table's cells and a footnote's paragraphs are records of the same
//!   stream, at a deeper level, so reading every paragraph in order reads them too;
//! - `\u{5}HwpSummaryInformation`, an OLE property set, holds the title and author.
//!
//! Every byte inflated out of the sections counts against one budget (the same
//! `max_inflated` the zip containers get), a record's declared size is never trusted
//! beyond what arrives, the text is bounded by that budget, and the stop flag is polled
//! between records. HWP 3.x (Hangul 97 and older, not an OLE file) ends with its own
//! reason.

use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::sync::atomic::AtomicBool;

use aes::cipher::{BlockCipherDecrypt, KeyInit};
use aes::Aes128;
use cfb::CompoundFile;
use flate2::read::DeflateDecoder;

use super::text::{Decoded, Meta};
use super::title::{self, clean_title};
use super::zipped::{check_output, Capped};
use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Format};

/// What `FileHeader` starts with (then NULs up to 32 bytes).
const SIGNATURE: &[u8] = b"HWP Document File";

/// How an HWP 3.x file starts: a file of its own, not an OLE container.
pub(super) const HWP3_SIGNATURE: &[u8] = b"HWP Document File V3";

/// `FileHeader`'s length by specification: signature, version, properties, reserved.
const FILE_HEADER_LEN: u64 = 256;

/// `FileHeader` property bits.
const COMPRESSED: u32 = 1 << 0;
const PASSWORD: u32 = 1 << 1;
const DISTRIBUTION: u32 = 1 << 2;
const DRM: u32 = 1 << 4;

/// The record that holds a paragraph's text (`HWPTAG_BEGIN + 51`).
const HWPTAG_PARA_TEXT: u32 = 0x10 + 51;

/// The longest paragraph read: eight million characters. A record is read whole to be
/// decoded, and no honest paragraph comes near this.
const MAX_PARAGRAPH_BYTES: u32 = 16 << 20;

/// The record that opens a distribution document's section (`HWPTAG_BEGIN + 12`), and
/// its fixed length.
const HWPTAG_DISTRIBUTE_DOC_DATA: u32 = 0x10 + 12;
const DISTRIBUTE_DATA_LEN: usize = 256;

/// The summary stream; a property set is small, so more than this is not one.
const SUMMARY: &str = "\u{5}HwpSummaryInformation";
const MAX_SUMMARY_BYTES: u64 = 64 * 1024;

/// Whether `bytes` are an HWP 5.x document: a compound file with an HWP `FileHeader`.
/// Legacy Office files share the container and are told apart here.
pub(super) fn is_hwp5(bytes: &[u8]) -> bool {
    let Ok(mut file) = CompoundFile::open(Cursor::new(bytes)) else {
        return false;
    };
    let Ok(stream) = file.open_stream("/FileHeader") else {
        return false;
    };
    let mut head = Vec::new();
    stream.take(SIGNATURE.len() as u64).read_to_end(&mut head).is_ok() && head == SIGNATURE
}

/// The text of an HWP document, its paragraphs one to a line; reads at most
/// `max_inflated` bytes out of its sections and writes at most as many bytes of text.
pub(super) fn extract(bytes: &[u8], max_inflated: u64, stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    if bytes.starts_with(HWP3_SIGNATURE) {
        return Err(ExtractError::Unsupported {
            reason: "an HWP 3.x document (Hangul 97 or older): only HWP 5.x and HWPX are read".into(),
        });
    }
    let mut file = CompoundFile::open(Cursor::new(bytes))
        .map_err(|e| malformed(format!("not a readable compound file: {e}")))?;
    let header = read_header(&mut file)?;
    let mut out = String::new();
    let mut budget = max_inflated;
    let storage = if header.distribution {
        "/ViewText"
    } else {
        "/BodyText"
    };
    let sections = section_names(&file, storage);
    if sections.is_empty() {
        return Err(malformed(format!("no sections in {storage}")));
    }
    for name in sections {
        check_stop(stop)?;
        let stream = file
            .open_stream(&name)
            .map_err(|e| malformed(format!("cannot open {name}: {e}")))?;
        budget = if header.distribution {
            let plain = decrypt_section(stream, budget, &name)?;
            budget -= plain.len() as u64;
            read_section(
                Cursor::new(plain),
                header.compressed,
                budget,
                &name,
                stop,
                &mut out,
            )?
        } else {
            read_section(stream, header.compressed, budget, &name, stop, &mut out)?
        };
        check_output(&out, max_inflated, Format::Hwp)?;
    }
    out.truncate(out.trim_end().len());
    // A summary that cannot be read is no title or author, never a failed document.
    let meta = title::lookup(summary(&mut file))?;
    Ok(Decoded::described(out, meta))
}

fn malformed(reason: impl std::fmt::Display) -> ExtractError {
    ExtractError::malformed(Format::Hwp, reason)
}

/// What `FileHeader` says of how the sections are stored.
struct Header {
    /// Their records are deflated.
    compressed: bool,
    /// They are `ViewText`'s, encrypted ([`decrypt_section`]).
    distribution: bool,
}

/// Reads `FileHeader`: how the sections are stored, or why the text cannot be read.
fn read_header<F: Read + io::Seek>(file: &mut CompoundFile<F>) -> Result<Header, ExtractError> {
    let stream = file
        .open_stream("/FileHeader")
        .map_err(|e| malformed(format!("no FileHeader stream: {e}")))?;
    let mut header = Vec::new();
    stream
        .take(FILE_HEADER_LEN)
        .read_to_end(&mut header)
        .map_err(|e| malformed(format!("cannot read FileHeader: {e}")))?;
    if !header.starts_with(SIGNATURE) || header.len() < 40 {
        return Err(malformed("FileHeader has no HWP signature"));
    }
    let word = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
    let (version, properties) = (word(32), word(36));
    if version >> 24 != 5 {
        return Err(ExtractError::Unsupported {
            reason: format!(
                "an HWP document of version {}: only HWP 5.x and HWPX are read",
                version >> 24
            ),
        });
    }
    if properties & PASSWORD != 0 {
        return Err(ExtractError::Unsupported {
            reason: "a password-protected (encrypted) HWP document: decryption is not supported".into(),
        });
    }
    if properties & DRM != 0 {
        return Err(ExtractError::Unsupported {
            reason: "an HWP document under DRM: its text is encrypted with a key it does not hold".into(),
        });
    }
    Ok(Header {
        compressed: properties & COMPRESSED != 0,
        distribution: properties & DISTRIBUTION != 0,
    })
}

/// A distribution document's section, decrypted: its first record holds the key
/// ([`distribution_key`]), the rest is AES-128 in ECB mode, as the specification has it.
/// The stream is read whole, since a block cipher needs its blocks, and is charged to the
/// `budget` (the caller takes its length off): many directory entries may name one big
/// stream, and each would otherwise be read and decrypted in full.
fn decrypt_section(stream: impl Read, budget: u64, name: &str) -> Result<Vec<u8>, ExtractError> {
    let mut bytes = Vec::new();
    stream
        .take(budget.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| malformed(format!("cannot read {name}: {e}")))?;
    if bytes.len() as u64 > budget {
        return Err(malformed(format!(
            "{name} passes the limit of {budget} bytes left to read"
        )));
    }
    let mut input = bytes.as_slice();
    let first = record_header(&mut input).map_err(|e| malformed(format!("cannot read {name}: {e}")))?;
    let data = match first {
        Some((HWPTAG_DISTRIBUTE_DOC_DATA, size)) if size as usize == DISTRIBUTE_DATA_LEN => input
            .get(..DISTRIBUTE_DATA_LEN)
            .ok_or_else(|| malformed(format!("{name} is cut short in its key record")))?,
        _ => return Err(malformed(format!("{name} does not open with its key record"))),
    };
    let cipher =
        Aes128::new_from_slice(&distribution_key(data)).map_err(|e| malformed(format!("{name}: {e}")))?;
    let key_record_end = bytes.len() - input.len() + DISTRIBUTE_DATA_LEN;
    let mut encrypted = bytes;
    encrypted.drain(..key_record_end);
    let whole = encrypted.len() - encrypted.len() % 16;
    encrypted.truncate(whole);
    for chunk in encrypted.chunks_exact_mut(16) {
        let mut block = aes::Block::default();
        block.copy_from_slice(chunk);
        cipher.decrypt_block(&mut block);
        chunk.copy_from_slice(&block);
    }
    Ok(encrypted)
}

/// The AES key of a distribution document's section, from its 256-byte key record: the
/// record is masked with bytes from the C runtime's `rand()` (the Microsoft generator)
/// seeded by its first four bytes, each of a run of 1 to 16 equal bytes; the key is the
/// 16 bytes at 4 plus the seed's low four bits of the unmasked record.
fn distribution_key(data: &[u8]) -> [u8; 16] {
    let seed = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let mut state = seed;
    let mut rand = move || {
        state = state.wrapping_mul(214_013).wrapping_add(2_531_011);
        (state >> 16) & 0x7FFF
    };
    let mut mask = [0u8; DISTRIBUTE_DATA_LEN];
    let mut at = 0;
    while at < DISTRIBUTE_DATA_LEN {
        let value = (rand() & 0xFF) as u8;
        let run = (rand() & 0xF) as usize + 1;
        for slot in mask.iter_mut().skip(at).take(run) {
            *slot = value;
        }
        at += run;
    }
    let start = 4 + (seed & 0xF) as usize;
    let mut key = [0u8; 16];
    for (k, slot) in key.iter_mut().enumerate() {
        *slot = data[start + k] ^ mask[start + k];
    }
    key
}

/// The sections of `storage` in their order (`Section10` after `Section9`).
fn section_names<F>(file: &CompoundFile<F>, storage: &str) -> Vec<String> {
    let Ok(entries) = file.read_storage(storage) else {
        return Vec::new();
    };
    let mut numbered: Vec<(u32, String)> = entries
        .filter(|e| e.is_stream())
        .filter_map(|e| {
            let n = e.name().strip_prefix("Section")?.parse().ok()?;
            Some((n, e.path().to_string_lossy().into_owned()))
        })
        .collect();
    numbered.sort();
    numbered.into_iter().map(|(_, path)| path).collect()
}

/// Appends one section's paragraphs to `out`, inflating it if the document says so, and
/// returns what is left of the budget.
fn read_section(
    stream: impl Read,
    compressed: bool,
    budget: u64,
    name: &str,
    stop: &AtomicBool,
    out: &mut String,
) -> Result<u64, ExtractError> {
    let raw: Box<dyn Read> = if compressed {
        Box::new(DeflateDecoder::new(stream))
    } else {
        Box::new(stream)
    };
    let mut input = BufReader::new(Capped::new(raw, budget));
    let read = read_records(&mut input, stop, out);
    let capped = input.into_inner();
    if capped.exceeded() {
        return Err(malformed(format!(
            "{name} inflates past the limit of {budget} bytes"
        )));
    }
    match read {
        Ok(()) => Ok(capped.remaining()),
        Err(Halt::Stop(e)) => Err(e),
        Err(Halt::Io(e)) => Err(malformed(format!("cannot read {name}: {e}"))),
    }
}

/// Why reading the records ended early.
enum Halt {
    Stop(ExtractError),
    Io(io::Error),
}

impl From<io::Error> for Halt {
    fn from(e: io::Error) -> Self {
        Halt::Io(e)
    }
}

/// Walks the records, decoding every paragraph's text and skipping the rest unread.
fn read_records(input: &mut impl BufRead, stop: &AtomicBool, out: &mut String) -> Result<(), Halt> {
    while let Some((tag, size)) = record_header(input)? {
        check_stop(stop).map_err(Halt::Stop)?;
        let mut body = input.take(u64::from(size));
        if tag == HWPTAG_PARA_TEXT {
            if size > MAX_PARAGRAPH_BYTES {
                let why = format!("a paragraph of {size} bytes, over the {MAX_PARAGRAPH_BYTES} read");
                return Err(io::Error::new(io::ErrorKind::InvalidData, why).into());
            }
            let mut bytes = Vec::new();
            body.read_to_end(&mut bytes)?;
            if bytes.len() as u64 != u64::from(size) {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a paragraph cut short").into());
            }
            push_paragraph(&bytes, out);
        } else if io::copy(&mut body, &mut io::sink())? != u64::from(size) {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a record cut short").into());
        }
    }
    Ok(())
}

/// The next record's tag and size, or `None` at the end of the stream (or at a few bytes
/// of padding after its last record). The header packs tag (10 bits), level (10) and
/// size (12); a size of 0xFFF means the real one follows.
fn record_header(input: &mut impl Read) -> io::Result<Option<(u32, u32)>> {
    let mut word = [0u8; 4];
    let mut got = 0;
    while got < word.len() {
        match input.read(&mut word[got..]) {
            Ok(0) => return Ok(None),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let header = u32::from_le_bytes(word);
    let tag = header & 0x3FF;
    let size = match header >> 20 {
        0xFFF => read_u32(input)?,
        size => size,
    };
    Ok(Some((tag, size)))
}

fn read_u32(input: &mut impl Read) -> io::Result<u32> {
    let mut word = [0u8; 4];
    input.read_exact(&mut word)?;
    Ok(u32::from_le_bytes(word))
}

/// Decodes one `HWPTAG_PARA_TEXT` (UTF-16LE) into `out`. Characters below 32 are
/// controls: a few stand alone (line and paragraph ends, a hyphen, fixed spaces); the
/// others stand for an object or a field and take eight code units (the control, its
/// parameters, the control again), which are skipped. A tab is such an eight-unit control.
fn push_paragraph(bytes: &[u8], out: &mut String) {
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    let mut i = 0;
    while i < units.len() {
        let unit = units[i];
        if unit >= 32 {
            let run = units[i..].iter().take_while(|u| **u >= 32).count();
            out.extend(
                char::decode_utf16(units[i..i + run].iter().copied()).map(|c| c.unwrap_or('\u{FFFD}')),
            );
            i += run;
            continue;
        }
        match unit {
            9 => out.push('\t'),
            10 | 13 => out.push('\n'),
            24 => out.push('-'),
            30 | 31 => out.push(' '),
            _ => {}
        }
        i += if matches!(unit, 0 | 10 | 13 | 24..=31) {
            1
        } else {
            8
        };
    }
}

/// The title and author `\u{5}HwpSummaryInformation` records ([`property_set`]).
fn summary<F: Read + io::Seek>(file: &mut CompoundFile<F>) -> Result<Meta, ExtractError> {
    let stream = file
        .open_stream(format!("/{SUMMARY}"))
        .map_err(|e| malformed(format!("no summary: {e}")))?;
    let mut bytes = Vec::new();
    stream
        .take(MAX_SUMMARY_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| malformed(format!("cannot read the summary: {e}")))?;
    let text = |id: u32| property_set(&bytes, id).and_then(|raw| clean_title(&raw));
    Ok(Meta {
        title: text(PIDSI_TITLE),
        author: text(PIDSI_AUTHOR),
        ..Meta::default()
    })
}

/// The summary information properties (MS-OLEPS's `PIDSI_*`) read here.
const PIDSI_TITLE: u32 = 2;
const PIDSI_AUTHOR: u32 = 4;

/// Property types: a code-page string and a UTF-16 one (what HWP writes).
const VT_LPSTR: u32 = 0x1E;
const VT_LPWSTR: u32 = 0x1F;

/// The string property `id` of the first section of an OLE property set (MS-OLEPS 2.21):
/// a header naming the section's offset, the section's table of (id, offset) pairs, and
/// each value as its type then its length-prefixed characters. Any offset or length that
/// points outside the stream is no value.
fn property_set(bytes: &[u8], id: u32) -> Option<String> {
    let u32_at = |at: usize| -> Option<u32> {
        let word = bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(word.try_into().ok()?))
    };
    let section = usize::try_from(u32_at(44)?).ok()?;
    let count = u32_at(section.checked_add(4)?)?;
    let value = (0..count.min(1024)).find_map(|k| {
        let entry = section
            .checked_add(8)?
            .checked_add(usize::try_from(k).ok()? * 8)?;
        (u32_at(entry)? == id).then(|| u32_at(entry + 4))?
    })?;
    let at = section.checked_add(usize::try_from(value).ok()?)?;
    let (kind, len) = (u32_at(at)?, usize::try_from(u32_at(at + 4)?).ok()?);
    let start = at + 8;
    let raw = match kind {
        VT_LPWSTR => {
            let units = bytes.get(start..start.checked_add(len.checked_mul(2)?)?)?;
            String::from_utf16_lossy(
                &units
                    .chunks_exact(2)
                    .map(|p| u16::from_le_bytes([p[0], p[1]]))
                    .collect::<Vec<_>>(),
            )
        }
        VT_LPSTR => String::from_utf8_lossy(bytes.get(start..start.checked_add(len)?)?).into_owned(),
        _ => return None,
    };
    Some(raw.trim_end_matches('\0').to_owned())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::write::DeflateEncoder;
    use flate2::Compression;

    use super::*;

    const NO_LIMIT: u64 = 1 << 30;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/../../tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("fixture is readable")
    }

    fn run(bytes: &[u8], limit: u64) -> Result<Decoded, ExtractError> {
        extract(bytes, limit, &AtomicBool::new(false))
    }

    /// A compound file with a `FileHeader` of `properties` and the given streams.
    fn hwp_file(properties: u32, streams: &[(&str, &[u8])]) -> Vec<u8> {
        let mut file = CompoundFile::create(Cursor::new(Vec::new())).unwrap();
        let mut header = SIGNATURE.to_vec();
        header.resize(32, 0);
        header.extend_from_slice(&0x0500_0300u32.to_le_bytes());
        header.extend_from_slice(&properties.to_le_bytes());
        header.resize(FILE_HEADER_LEN as usize, 0);
        file.create_stream("/FileHeader")
            .unwrap()
            .write_all(&header)
            .unwrap();
        for (path, bytes) in streams {
            let storage = &path[..path.rfind('/').unwrap()];
            if !file.exists(storage) {
                file.create_storage(storage).unwrap();
            }
            file.create_stream(path).unwrap().write_all(bytes).unwrap();
        }
        file.flush().unwrap();
        file.into_inner().into_inner()
    }

    fn record(tag: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if payload.len() < 0xFFF {
            out.extend_from_slice(&(tag | (payload.len() as u32) << 20).to_le_bytes());
        } else {
            out.extend_from_slice(&(tag | 0xFFF << 20).to_le_bytes());
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(payload);
        out
    }

    /// A paragraph's text record: `units` as UTF-16LE.
    fn para_text(units: &[u16]) -> Vec<u8> {
        let bytes: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
        record(HWPTAG_PARA_TEXT, &bytes)
    }

    fn utf16(text: &str) -> Vec<u16> {
        text.encode_utf16().collect()
    }

    fn deflate(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = DeflateEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_tables_cells_are_read_with_the_title_and_author() {
        let read = run(&fixture("table.hwp"), NO_LIMIT).unwrap();
        for cell in ["제목 셀", "동해물과 백두산이 마르고 닳도록", "세로쓰기", "가운데"]
        {
            assert!(read.text.contains(cell), "{cell:?} in {:?}", read.text);
        }
        assert_eq!(read.title.as_deref(), Some("표 테스트"));
        assert_eq!(read.author.as_deref(), Some("JiminP"));
    }

    /// Hancom's own specification is published as a distribution document: its
    /// `ViewText` is decrypted, not refused.
    #[test]
    fn a_distribution_document_is_decrypted_and_read() {
        let read = run(&fixture("hwp-format-distribution.hwp"), NO_LIMIT).unwrap();
        for words in ["Hwp Document File Formats 5.0", "데이터 레코드", "문서 요약"] {
            assert!(read.text.contains(words), "{words:?}");
        }
        assert_eq!(read.author.as_deref(), Some("(주)한글과컴퓨터"));
        assert!(read.text.len() > 90_000, "{} bytes", read.text.len());
        // Its encrypted sections are charged to the budget before they are decrypted.
        let err = run(&fixture("hwp-format-distribution.hwp"), 1000)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("passes the limit of 1000 bytes left to read"),
            "{err}"
        );
    }

    /// Controls below 32 take their width: a tab and a table stand for eight code units
    /// (the tab reads as a tab, the table as nothing), a line break and a hyphen for one.
    #[test]
    fn controls_take_their_width_and_sections_keep_their_order() {
        let mut first = utf16("one");
        first.extend([9, 1, 2, 3, 4, 5, 6, 9]);
        first.extend(utf16("two"));
        first.extend([11, 0x6c74, 0x6274, 0, 0, 0, 0, 11]);
        first.extend(utf16("three"));
        first.extend([24, 10, 30, 31]);
        first.extend(utf16("\u{D55C}\u{AE00}"));
        first.push(13);
        let later = para_text(&[utf16("last").as_slice(), &[13]].concat());
        let file = hwp_file(
            0,
            &[
                ("/BodyText/Section10", &later),
                ("/BodyText/Section2", &para_text(&utf16("middle\r"))),
                ("/BodyText/Section0", &para_text(&first)),
            ],
        );
        let read = run(&file, NO_LIMIT).unwrap();
        assert_eq!(read.text, "one\ttwothree-\n  한글\nmiddle\nlast");
    }

    #[test]
    fn deflated_sections_are_inflated_within_the_budget() {
        let section = para_text(&utf16("squeezed words\r"));
        let file = hwp_file(COMPRESSED, &[("/BodyText/Section0", &deflate(&section))]);
        assert_eq!(run(&file, NO_LIMIT).unwrap().text, "squeezed words");

        // Ten megabytes of one paragraph in a few kilobytes: stopped at the budget.
        let bomb = para_text(&vec![u16::from(b'a'); 5 << 20]);
        let file = hwp_file(COMPRESSED, &[("/BodyText/Section0", &deflate(&bomb))]);
        assert!(file.len() < 64 * 1024, "{} bytes", file.len());
        let err = run(&file, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("inflates past the limit of 1048576 bytes"), "{err}");
    }

    /// A record may say it holds four gigabytes: only what arrives is read, a paragraph
    /// that long is refused before it is read, and a few bytes after the last record
    /// are padding, not a record.
    #[test]
    fn a_record_claiming_gigabytes_is_cut_short_not_believed() {
        let claims = |tag: u32| {
            let mut section = (tag | 0xFFF << 20).to_le_bytes().to_vec();
            section.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
            section.extend_from_slice(&[0x41, 0, 0x42, 0]);
            let file = hwp_file(0, &[("/BodyText/Section0", &section)]);
            run(&file, NO_LIMIT).unwrap_err().to_string()
        };
        let err = claims(HWPTAG_PARA_TEXT);
        assert!(
            err.contains("a paragraph of 4294967280 bytes, over the 16777216 read"),
            "{err}"
        );
        let err = claims(HWPTAG_PARA_TEXT - 1);
        assert!(err.contains("cut short"), "{err}");

        let mut padded = para_text(&utf16("kept\r"));
        padded.extend_from_slice(&[0, 0]);
        let file = hwp_file(0, &[("/BodyText/Section0", &padded)]);
        assert_eq!(run(&file, NO_LIMIT).unwrap().text, "kept");
        let file = hwp_file(0, &[("/Other/Stream", b"x")]);
        assert!(run(&file, NO_LIMIT)
            .unwrap_err()
            .to_string()
            .contains("no sections in /BodyText"));
    }

    #[test]
    fn password_drm_and_hwp3_documents_say_why_they_are_not_read() {
        let body = para_text(&utf16("secret\r"));
        let password = hwp_file(PASSWORD, &[("/BodyText/Section0", &body)]);
        let err = run(&password, NO_LIMIT).unwrap_err();
        assert!(matches!(err, ExtractError::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("password-protected"), "{err}");
        let drm = hwp_file(DRM, &[("/BodyText/Section0", &body)]);
        assert!(run(&drm, NO_LIMIT).unwrap_err().to_string().contains("DRM"));
        let hwp3 = b"HWP Document File V3.00 \x1a\x01\x02\x03\x04\x05rest of a Hangul 97 file";
        assert!(run(hwp3, NO_LIMIT).unwrap_err().to_string().contains("HWP 3.x"));
        // A distribution document whose section does not open with its key record.
        let broken = hwp_file(DISTRIBUTION, &[("/ViewText/Section0", &body)]);
        let err = run(&broken, NO_LIMIT).unwrap_err().to_string();
        assert!(err.contains("does not open with its key record"), "{err}");
    }

    /// The container's own damage: a loop in the directory's sector chain (an error), a
    /// header claiming billions of FAT sectors and the file cut at every sector boundary
    /// (an error, or the text read so far): never a panic or a hang.
    #[test]
    fn a_damaged_compound_file_fails_cleanly() {
        let good = fixture("table.hwp");
        let word = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());

        // The directory's first sector made to chain to itself in the FAT.
        let mut looped = good.clone();
        let dir_start = word(&good, 0x30) as usize;
        let fat_sector = word(&good, 0x4C) as usize;
        let entry = 512 * (fat_sector + 1) + 4 * dir_start;
        looped[entry..entry + 4].copy_from_slice(&(dir_start as u32).to_le_bytes());
        assert!(run(&looped, NO_LIMIT).is_err());

        let mut huge = good.clone();
        huge[0x2C..0x30].copy_from_slice(&u32::MAX.to_le_bytes());
        let _ = run(&huge, NO_LIMIT);

        for cut in (0..good.len()).step_by(512) {
            let _ = run(&good[..cut], NO_LIMIT);
        }
    }

    #[test]
    fn a_raised_stop_flag_stops_between_records() {
        let err = extract(&fixture("table.hwp"), NO_LIMIT, &AtomicBool::new(true)).unwrap_err();
        assert!(matches!(err, ExtractError::Stopped), "{err}");
    }

    /// What tells HWP from the legacy Office files that share its container.
    #[test]
    fn only_a_compound_file_with_an_hwp_header_is_hwp() {
        assert!(is_hwp5(&fixture("table.hwp")));
        let mut word = CompoundFile::create(Cursor::new(Vec::new())).unwrap();
        word.create_stream("/WordDocument")
            .unwrap()
            .write_all(b"not hwp")
            .unwrap();
        word.flush().unwrap();
        assert!(!is_hwp5(&word.into_inner().into_inner()));
        assert!(!is_hwp5(b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1 and nothing else"));
    }
}
