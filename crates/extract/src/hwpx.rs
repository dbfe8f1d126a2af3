//! HWPX, Hancom's XML format (OWPML, KS X 6101): a zip whose `mimetype` says
//! `application/hwp+zip`, its body in `Contents/section0.xml`, `section1.xml`... Each
//! paragraph is an `<hp:p>` whose runs hold the text in `<hp:t>` elements, with
//! `<hp:tab/>`, `<hp:lineBreak/>` and fixed spaces among it; a table's cells hold
//! paragraphs of their own (`<hp:tc>` → `<hp:subList>` → `<hp:p>`), so one streaming pass
//! over every `<hp:t>` reads the tables too. The title, author and date are in the package
//! document `Contents/content.hpf` (`<opf:title>`, `<opf:meta name="creator">`,
//! `<opf:meta name="ModifiedDate">`), read by `zipped`'s metadata reader as every
//! container's are. Every part is read through `zipped`'s container,
//! under its inflate budget and its refusal of entity declarations.

use std::sync::atomic::AtomicBool;

use quick_xml::events::{BytesStart, Event};

use super::text::Decoded;
use super::zipped::{check_output, event_text, Container};
use leasehold::extract::{ExtractError, Format};

/// The package document: the metadata and the list of parts.
const CONTENT_HPF: &str = "Contents/content.hpf";

/// The text of an HWPX document, its paragraphs one to a line; reads at most
/// `max_inflated` bytes out of the zip and writes at most as many bytes of text.
pub(super) fn extract(bytes: &[u8], max_inflated: u64, stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    let mut container = Container::open(bytes, Format::Hwpx, max_inflated)?;
    let sections = section_names(&container.names());
    if sections.is_empty() {
        return Err(container.malformed("zip archive has no Contents/section0.xml"));
    }
    let mut body = Body::default();
    for name in &sections {
        container.each_xml_event(name, stop, |event| {
            body.event(&event, name)?;
            check_output(&body.out, max_inflated, Format::Hwpx)
        })?;
    }
    body.out.truncate(body.out.trim_end().len());
    // A package document that cannot be read is no title, author or date: `metadata` says so.
    let meta = container.metadata(CONTENT_HPF, stop)?;
    Ok(Decoded::described(body.out, meta))
}

/// The section parts in their order (`section10.xml` after `section9.xml`).
fn section_names(names: &[String]) -> Vec<String> {
    let mut numbered: Vec<(u32, &String)> = names
        .iter()
        .filter_map(|name| {
            let n = name.strip_prefix("Contents/section")?.strip_suffix(".xml")?;
            Some((n.parse().ok()?, name))
        })
        .collect();
    numbered.sort();
    numbered.into_iter().map(|(_, name)| name.clone()).collect()
}

/// Where the reader is in a section. Elements are matched by local name, so any prefix
/// (`hp:`, or another a producer declares) works.
#[derive(Default)]
struct Body {
    out: String,
    /// Inside `<hp:t>`: only there is character data document text.
    text_depth: usize,
}

impl Body {
    fn event(&mut self, event: &Event<'_>, part: &str) -> Result<(), ExtractError> {
        match event {
            Event::Start(e) if e.local_name().as_ref() == "t" => self.text_depth += 1,
            Event::End(e) => match e.local_name().as_ref() {
                "t" => self.text_depth = self.text_depth.saturating_sub(1),
                "p" => self.out.push('\n'),
                _ => {}
            },
            Event::Empty(e) => self.empty(e),
            _ if self.text_depth > 0 => {
                if let Some(text) = event_text(event, part, Format::Hwpx)? {
                    self.out.push_str(&text);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The characters HWPX writes as elements inside a run's text.
    fn empty(&mut self, e: &BytesStart<'_>) {
        match e.local_name().as_ref() {
            "tab" => self.out.push('\t'),
            "lineBreak" => self.out.push('\n'),
            "fwSpace" | "nbSpace" => self.out.push(' '),
            "hyphen" => self.out.push('-'),
            "p" => self.out.push('\n'),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::zipped::tests::zip_with;
    use super::*;

    const NO_LIMIT: u64 = 1 << 30;

    fn run(bytes: &[u8], limit: u64) -> Result<Decoded, ExtractError> {
        extract(bytes, limit, &AtomicBool::new(false))
    }

    fn section(body: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph">{body}</hs:sec>"#
        )
    }

    fn para(text: &str) -> String {
        format!("<hp:p><hp:run><hp:t>{text}</hp:t></hp:run></hp:p>")
    }

    /// A real form (a public body's 간이기안문, written by a third-party HWPX writer):
    /// the labels of its table's cells.
    #[test]
    fn the_draft_forms_table_labels_are_read() {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../samples/formats/draft-form.hwpx"
        ))
        .unwrap();
        let read = run(&bytes, NO_LIMIT).unwrap();
        for label in ["생산등록번호", "등록일", "결재일", "공개구분", "협조자"] {
            assert!(read.text.contains(label), "{label:?} in {:?}", read.text);
        }
        assert_eq!(read.author.as_deref(), Some("rhwp"));
    }

    /// Sections in their numbered order, the characters written as elements, a table's
    /// cell paragraphs, and the package document's title, author and date.
    #[test]
    fn sections_runs_tables_and_metadata() {
        let cell = |text: &str| format!("<hp:tc><hp:subList>{}</hp:subList></hp:tc>", para(text));
        let first = section(&format!(
            "{}<hp:p><hp:run><hp:tbl><hp:tr>{}{}</hp:tr></hp:tbl></hp:run></hp:p>",
            para("계정<hp:tab/>잠금<hp:lineBreak/>해제<hp:fwSpace/>안내 &amp; 절차"),
            cell("첫 칸"),
            cell("둘째 칸"),
        ));
        let hpf = r#"<opf:package xmlns:opf="http://www.idpf.org/2007/opf/"><opf:metadata><opf:title>계정 &amp; 안내</opf:title><opf:meta name="creator" content="text">행정안전부</opf:meta><opf:meta name="ModifiedDate" content="text">2026-03-02T09:00:00Z</opf:meta></opf:metadata></opf:package>"#;
        let bytes = zip_with(&[
            ("mimetype", b"application/hwp+zip"),
            ("Contents/content.hpf", hpf.as_bytes()),
            ("Contents/section10.xml", section(&para("끝")).as_bytes()),
            ("Contents/section2.xml", section(&para("중간")).as_bytes()),
            ("Contents/section0.xml", first.as_bytes()),
        ]);
        let read = run(&bytes, NO_LIMIT).unwrap();
        assert_eq!(
            read.text,
            "계정\t잠금\n해제 안내 & 절차\n첫 칸\n둘째 칸\n\n중간\n끝"
        );
        assert_eq!(read.title.as_deref(), Some("계정 & 안내"));
        assert_eq!(read.author.as_deref(), Some("행정안전부"));
        assert_eq!(read.date.as_deref(), Some("2026-03-02"));
    }

    /// A zip bomb stops at the budget, an entity declaration is refused, a package with
    /// no section says so, and a broken package document costs only the metadata.
    #[test]
    fn hostile_and_broken_packages_end_with_their_reason() {
        let bomb = section(&para(&"가".repeat(4 << 20)));
        let bytes = zip_with(&[
            ("mimetype", b"application/hwp+zip"),
            ("Contents/section0.xml", bomb.as_bytes()),
        ]);
        assert!(bytes.len() < 256 * 1024, "{} bytes", bytes.len());
        let err = run(&bytes, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("inflates past the limit"), "{err}");

        let entities = r#"<!DOCTYPE s [<!ENTITY a "aaaaaaaaaa">]><s><hp:p><hp:t>&a;</hp:t></hp:p></s>"#;
        let bytes = zip_with(&[("Contents/section0.xml", entities.as_bytes())]);
        let err = run(&bytes, NO_LIMIT).unwrap_err().to_string();
        assert!(err.contains("entit"), "{err}");

        let bytes = zip_with(&[
            ("mimetype", b"application/hwp+zip"),
            ("Contents/header.xml", b"<h/>"),
        ]);
        let err = run(&bytes, NO_LIMIT).unwrap_err().to_string();
        assert!(err.contains("no Contents/section0.xml"), "{err}");

        let bytes = zip_with(&[
            ("Contents/section0.xml", section(&para("본문")).as_bytes()),
            ("Contents/content.hpf", b"<opf:title>cut"),
        ]);
        let read = run(&bytes, NO_LIMIT).unwrap();
        assert_eq!((read.text.as_str(), read.title), ("본문", None));
        let bytes = zip_with(&[
            ("Contents/section0.xml", section(&para("본문")).as_bytes()),
            (
                "Contents/content.hpf",
                b"<m><title>whole</title><meta name=\"creator\">bad &undefined; xml",
            ),
        ]);
        let read = run(&bytes, NO_LIMIT).unwrap();
        assert_eq!((read.title.as_deref(), read.author), (Some("whole"), None));
    }
}
