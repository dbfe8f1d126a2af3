//! EPUB: a zip whose `META-INF/container.xml` names the package document (OPF); the OPF's
//! spine lists the chapters in reading order, and each chapter is XHTML that the HTML
//! extractor renders. Reading order matters for search snippets, so the spine, not the
//! archive's order, decides.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use quick_xml::events::Event;

use super::odf::attr;
use super::zipped::{check_output, Container};
use super::{check_stop, html, ExtractError, Format};

const CONTAINER_XML: &str = "META-INF/container.xml";

/// Media types of spine items that hold text; images or SVG pages in the spine are skipped.
const TEXT_TYPES: [&str; 2] = ["application/xhtml+xml", "text/html"];

pub(super) fn extract(bytes: &[u8], max_inflated: u64, stop: &AtomicBool) -> Result<String, ExtractError> {
    let mut container = Container::open(bytes, Format::Epub, max_inflated)?;
    let opf = package_path(&mut container, stop)?;
    let chapters = spine(&mut container, &opf, stop)?;
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
    Ok(out)
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

/// The zip paths of the spine's text chapters, in reading order.
fn spine(container: &mut Container<'_>, opf: &str, stop: &AtomicBool) -> Result<Vec<String>, ExtractError> {
    let mut manifest: HashMap<String, (String, String)> = HashMap::new();
    let mut order = Vec::new();
    container.each_xml_event(opf, stop, |event| {
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
    order
        .iter()
        .filter_map(|id| manifest.get(id))
        .filter(|(_, media_type)| TEXT_TYPES.contains(&media_type.as_str()))
        .map(|(href, _)| container.resolve(base, href, opf))
        .collect()
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
        extract(bytes, u64::MAX, &AtomicBool::new(false))
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
