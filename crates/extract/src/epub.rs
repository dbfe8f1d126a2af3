//! EPUB: a zip whose `META-INF/container.xml` names the package document (OPF); the OPF's
//! spine lists the chapters in reading order, and each chapter is XHTML that the HTML
//! extractor renders. Reading order matters for search snippets, so the spine, not the
//! archive's order, decides. The title is the OPF's first `<dc:title>`, read in the same
//! pass as the spine (an EPUB 3 book may have several, the first is the main one); the
//! chapters' own `<title>` elements are not the book's. The author is the first
//! `<dc:creator>`; the date EPUB 3's `<meta property="dcterms:modified">`, else the first
//! `<dc:date>` (an EPUB 2 book's publication date).

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use quick_xml::events::Event;

use super::html;
use super::text::{Decoded, Meta};
use super::zipped::{attr, check_output, Container, MetaReader};
use crate::stop::check_stop;
use leasehold::extract::{ExtractError, Format};

const CONTAINER_XML: &str = "META-INF/container.xml";

/// Media types of spine items that hold text; images or SVG pages in the spine are skipped.
const TEXT_TYPES: [&str; 2] = ["application/xhtml+xml", "text/html"];

pub(super) fn extract(bytes: &[u8], max_inflated: u64, stop: &AtomicBool) -> Result<Decoded, ExtractError> {
    let mut container = Container::open(bytes, Format::Epub, max_inflated)?;
    let opf = package_path(&mut container, stop)?;
    let Package { chapters, meta } = package(&mut container, &opf, stop)?;
    let mut out = String::new();
    for chapter in chapters {
        check_stop(stop)?;
        let xhtml = container.read_string(&chapter)?;
        let text = html::to_text(&xhtml, stop)?;
        if !text.is_empty() {
            out.push_str(&text);
            out.push_str("\n\n");
        }
        check_output(&out, max_inflated, Format::Epub)?;
    }
    out.truncate(out.trim_end().len());
    Ok(Decoded::described(out, meta))
}

/// The OPF's path inside the zip: the first `<rootfile full-path="...">`.
fn package_path(container: &mut Container<'_>, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut path = None;
    container.each_xml_event(CONTAINER_XML, stop, |event| {
        if let Event::Start(e) | Event::Empty(e) = &event {
            if path.is_none() && e.local_name().as_ref() == "rootfile" {
                path = attr(e, "full-path");
            }
        }
        Ok(())
    })?;
    let path =
        path.ok_or_else(|| container.malformed(format!("{CONTAINER_XML} names no package document")))?;
    container.resolve("", &path, CONTAINER_XML)
}

/// What the package document says: the chapters and the book's title, author and date.
struct Package {
    /// The zip paths of the spine's text chapters, in reading order.
    chapters: Vec<String>,
    meta: Meta,
}

/// Reads the package document: the spine's text chapters, the first `<dc:title>`, the
/// first `<dc:creator>`, and the date (EPUB 3's `<meta property="dcterms:modified">`,
/// else the first `<dc:date>`).
fn package(container: &mut Container<'_>, opf: &str, stop: &AtomicBool) -> Result<Package, ExtractError> {
    let mut manifest: HashMap<String, (String, String)> = HashMap::new();
    let mut order = Vec::new();
    let mut meta = MetaReader::default();
    container.each_xml_event(opf, stop, |event| {
        meta.event(&event, opf, Format::Epub);
        if let Event::Start(e) | Event::Empty(e) = &event {
            match e.local_name().as_ref() {
                "item" => {
                    if let (Some(id), Some(href)) = (attr(e, "id"), attr(e, "href")) {
                        manifest.insert(id, (href, attr(e, "media-type").unwrap_or_default()));
                    }
                }
                "itemref" => order.extend(attr(e, "idref")),
                _ => {}
            }
        }
        Ok(())
    })?;
    let base = opf.rsplit_once('/').map_or("", |(dir, _)| dir);
    let chapters = order
        .iter()
        .filter_map(|id| manifest.get(id))
        .filter(|(_, media_type)| TEXT_TYPES.contains(&media_type.as_str()))
        .map(|(href, _)| container.resolve(base, href, opf))
        .collect::<Result<_, _>>()?;
    Ok(Package {
        chapters,
        meta: meta.finish(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::zipped::tests::zip_with;
    use super::super::zipped::{resolve, BadPath};
    use super::*;

    const CONTAINER: &[u8] = br#"<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/pkg/book.opf" media-type="application/oebps-package+xml"/></rootfiles></container>"#;

    const OPF: &[u8] = br#"<package xmlns="http://www.idpf.org/2007/opf"><manifest>
        <item id="c2" href="../text/two%20words.xhtml" media-type="application/xhtml+xml"/>
        <item id="c1" href="one.xhtml#start" media-type="application/xhtml+xml"/>
        <item id="img" href="cover.png" media-type="image/png"/>
        </manifest><spine><itemref idref="c1"/><itemref idref="img"/><itemref idref="c2"/><itemref idref="missing"/></spine></package>"#;

    fn run(bytes: &[u8]) -> Result<String, ExtractError> {
        extract(bytes, u64::MAX, &AtomicBool::new(false)).map(|done| done.text)
    }

    /// A one-chapter book whose package document has `metadata` as its metadata.
    fn book_with_metadata(metadata: &str) -> Vec<u8> {
        let opf = format!(
            r#"<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">{metadata}</metadata><manifest><item id="c1" href="one.xhtml" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="c1"/></spine></package>"#
        );
        zip_with(&[
            ("mimetype", b"application/epub+zip".as_slice()),
            (CONTAINER_XML, CONTAINER),
            ("OEBPS/pkg/book.opf", opf.as_bytes()),
            (
                "OEBPS/pkg/one.xhtml",
                b"<html><head><title>Chapter one</title></head><body><p>indigo compass</p></body></html>"
                    .as_slice(),
            ),
        ])
    }

    fn title_of(metadata: &str) -> Option<String> {
        let done = extract(&book_with_metadata(metadata), u64::MAX, &AtomicBool::new(false)).unwrap();
        assert_eq!(done.text, "indigo compass");
        done.title
    }

    #[test]
    fn the_title_is_the_packages_first_dc_title() {
        let main = r#"<dc:identifier>x</dc:identifier><dc:title id="t1">The  Indigo
            Compass</dc:title><dc:title id="t2">A subtitle</dc:title>"#;
        assert_eq!(title_of(main).as_deref(), Some("The Indigo Compass"));
        // Old OEB packages capitalise it.
        assert_eq!(
            title_of("<dc:Title>Old book</dc:Title>").as_deref(),
            Some("Old book")
        );
        // A chapter's own <title> is not the book's.
        assert_eq!(title_of("<dc:language>en</dc:language>"), None);
        // A title that cannot be read is no title; the book is still read.
        assert_eq!(title_of("<dc:title>&nosuch;</dc:title>"), None);
    }

    #[test]
    fn author_is_the_first_creator_and_date_the_modified_else_dc_date() {
        let meta = |metadata: &str| {
            let done = extract(&book_with_metadata(metadata), u64::MAX, &AtomicBool::new(false)).unwrap();
            assert_eq!(done.text, "indigo compass");
            (done.author, done.date)
        };
        let epub3 = r#"<dc:title>T</dc:title><dc:date>2020-05-01</dc:date><dc:creator id="a1">Ana Ruiz</dc:creator><dc:creator>Bo Li</dc:creator><meta property="dcterms:modified">2026-01-15T09:30:00Z</meta><meta refines="a1" property="role">aut</meta>"#;
        assert_eq!(meta(epub3), (Some("Ana Ruiz".into()), Some("2026-01-15".into())));
        let epub2 = r#"<dc:creator opf:role="aut" xmlns:opf="http://www.idpf.org/2007/opf">Ana</dc:creator><dc:date>2020-05</dc:date><dc:date>2021</dc:date><meta name="cover" content="img"/>"#;
        assert_eq!(meta(epub2), (Some("Ana".into()), Some("2020-05".into())));
        assert_eq!(meta("<dc:title>T</dc:title>"), (None, None));
    }

    #[test]
    fn sample_has_its_phrase_without_script() {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../samples/formats/book.epub"
        ))
        .unwrap();
        let text = run(&bytes).unwrap();
        assert!(
            text.contains("indigo compass") && !text.contains("forbidden"),
            "{text:?}"
        );
    }

    #[test]
    fn chapters_follow_the_spine_with_relative_paths() {
        let bytes = zip_with(&[
            ("mimetype", b"application/epub+zip".as_slice()),
            (CONTAINER_XML, CONTAINER),
            ("OEBPS/pkg/book.opf", OPF),
            (
                "OEBPS/text/two words.xhtml",
                b"<html><body><p>second</p></body></html>".as_slice(),
            ),
            (
                "OEBPS/pkg/one.xhtml",
                b"<html><body><h1>first</h1><style>x{}</style></body></html>".as_slice(),
            ),
            ("OEBPS/pkg/cover.png", b"\x89PNG".as_slice()),
        ]);
        assert_eq!(run(&bytes).unwrap(), "first\n\nsecond");
    }

    #[test]
    fn missing_parts_are_malformed() {
        let no_container = zip_with(&[("mimetype", b"application/epub+zip".as_slice())]);
        let no_rootfile = zip_with(&[(CONTAINER_XML, b"<container/>".as_slice())]);
        let missing_chapter = zip_with(&[(CONTAINER_XML, CONTAINER), ("OEBPS/pkg/book.opf", OPF)]);
        for (bytes, reason) in [
            (no_container, "container.xml"),
            (no_rootfile, "no package document"),
            (missing_chapter, "one.xhtml"),
        ] {
            match run(&bytes) {
                Err(ExtractError::Malformed {
                    format: Format::Epub,
                    reason: r,
                }) => assert!(r.contains(reason), "{r}"),
                other => panic!("expected Malformed epub, got {other:?}"),
            }
        }
    }

    #[test]
    fn resolve_handles_dots_fragments_and_escapes() {
        assert_eq!(
            resolve("OEBPS", "text/ch1.xhtml#p3").as_deref(),
            Ok("OEBPS/text/ch1.xhtml")
        );
        assert_eq!(resolve("a/b", "../c%20d.xhtml").as_deref(), Ok("a/c d.xhtml"));
        assert_eq!(resolve("/a/b", "/c.xhtml").as_deref(), Ok("c.xhtml"));
        assert_eq!(resolve("", "../escape.xhtml"), Err(BadPath::Outside));
        assert_eq!(resolve("a", "../../escape.xhtml"), Err(BadPath::Outside));
        assert_eq!(resolve("", "bad%zz"), Err(BadPath::BadEscape));
    }

    /// A path that climbs out of the archive is refused as that, wherever the EPUB names
    /// it, not looked up and reported missing.
    #[test]
    fn paths_outside_the_archive_are_refused() {
        let escaping_container =
            br#"<container><rootfiles><rootfile full-path="../../etc/passwd"/></rootfiles></container>"#;
        let escaping_chapter = br#"<package><manifest><item id="c1" href="../../../etc/passwd" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="c1"/></spine></package>"#;
        let cases = [
            (
                zip_with(&[(CONTAINER_XML, escaping_container.as_slice())]),
                "META-INF/container.xml names \"../../etc/passwd\", a path outside the archive (refused)",
            ),
            (
                zip_with(&[
                    (CONTAINER_XML, CONTAINER),
                    ("OEBPS/pkg/book.opf", escaping_chapter.as_slice()),
                ]),
                "OEBPS/pkg/book.opf names \"../../../etc/passwd\", a path outside the archive (refused)",
            ),
        ];
        for (bytes, expected) in cases {
            match run(&bytes) {
                Err(ExtractError::Malformed {
                    format: Format::Epub,
                    reason,
                }) => assert_eq!(reason, expected),
                other => panic!("expected Malformed epub, got {other:?}"),
            }
        }
    }
}
