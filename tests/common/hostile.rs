//! Hostile documents, generated: each reproduces a way a real file has broken a
//! parser (deep nesting, a deflate bomb, a zip bomb, a text bomb).

use std::io::Write;

use flate2::{Compress, Compression, FlushCompress};

/// A one-page PDF with a correct xref. `content` is the page's content stream dictionary
/// extras and data; `extra` objects follow the five fixed ones (catalog, pages, page, font,
/// content), unreferenced but parsed at load like every object in the xref.
pub fn pdf(font: &str, content_dict: &str, content: &[u8], extra: &[Vec<u8>]) -> Vec<u8> {
    let mut objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_vec(),
        format!("<< /Type /Font /Subtype /Type1 /BaseFont /{font} >>").into_bytes(),
    ];
    let mut stream = format!("<< /Length {} {content_dict} >>\nstream\n", content.len()).into_bytes();
    stream.extend_from_slice(content);
    stream.extend_from_slice(b"\nendstream");
    objects.push(stream);
    objects.extend(extra.iter().cloned());

    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        writeln!(out, "{} 0 obj", i + 1).unwrap();
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    write!(out, "xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).unwrap();
    for offset in offsets {
        writeln!(out, "{offset:010} 00000 n ").unwrap();
    }
    write!(
        out,
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    )
    .unwrap();
    out
}

pub fn text_pdf(font: &str, phrase: &str) -> Vec<u8> {
    let content = format!("BT /F1 12 Tf 72 720 Td ({phrase}) Tj ET");
    pdf(font, "", content.as_bytes(), &[])
}

/// Arrays nested `depth` deep in an extra object: lopdf's parser recurses once per level.
pub fn nested_pdf(depth: usize) -> Vec<u8> {
    let mut nested = vec![b'['; depth];
    nested.extend(std::iter::repeat_n(b']', depth));
    pdf("Helvetica", "", b"BT ET", &[nested])
}

/// A zlib stream that inflates to `mib` MiB of zeros, built by repeating one fully flushed
/// deflate block (compressing a GiB in a debug build would take minutes).
pub fn zeros_zlib(mib: usize) -> Vec<u8> {
    let chunk = || {
        let mut compress = Compress::new(Compression::best(), false);
        let mut out = Vec::with_capacity(4096);
        compress
            .compress_vec(&vec![0u8; 1 << 20], &mut out, FlushCompress::Full)
            .unwrap();
        out
    };
    let block = chunk();
    assert_eq!(block, chunk(), "a fully flushed block is reproducible");
    let mut out = vec![0x78, 0xDA];
    for _ in 0..mib {
        out.extend_from_slice(&block);
    }
    out.extend_from_slice(&[0x03, 0x00]); // final, empty, fixed-Huffman block
    let total = (mib as u64) << 20;
    let adler = (((total % 65521) as u32) << 16) | 1; // Adler-32 of `total` zero bytes
    out.extend_from_slice(&adler.to_be_bytes());
    out
}

pub fn bomb_pdf(mib: usize) -> Vec<u8> {
    pdf("Helvetica", "/Filter /FlateDecode", &zeros_zlib(mib), &[])
}

/// A DOCX whose `word/document.xml` inflates to about `mib` MiB of text in
/// paragraphs (a "text bomb": small on disk, huge once extracted).
pub fn text_bomb_docx(mib: usize) -> Vec<u8> {
    let para = "<w:p><w:r><w:t>word word word word word word word word word word word word</w:t></w:r></w:p>";
    let count = (mib << 20) / para.len();
    let mut xml = String::with_capacity(count * para.len() + 200);
    xml.push_str(r#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>"#);
    for _ in 0..count {
        xml.push_str(para);
    }
    xml.push_str("</w:body></w:document>");
    zip_of(&[
        ("[Content_Types].xml", br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#.as_slice()),
        ("_rels/.rels", br#"<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#.as_slice()),
        ("word/document.xml", xml.as_bytes()),
    ])
}

/// A DOCX whose main part is a zip bomb: `mib` MiB of zeros behind a tiny entry.
pub fn zip_bomb_docx(mib: usize) -> Vec<u8> {
    let zeros = vec![b' '; mib << 20];
    zip_of(&[("word/document.xml", zeros.as_slice())])
}

/// A zip archive of `entries`, deflated.
pub fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    out.into_inner()
}

/// HTML with `depth` nested `<div>`s around one phrase.
pub fn nested_html(depth: usize) -> String {
    format!(
        "<html><body>{}velvet harbor{}</body></html>",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    )
}

/// A valid PDF whose one content stream repeats a text operation `lines` times:
/// honest, but it keeps a parser busy (about 6 s of CPU for 800,000 lines).
pub fn busy_pdf(lines: usize) -> Vec<u8> {
    let content = "BT /F1 12 Tf 72 720 Td (hello world again) Tj ET\n".repeat(lines);
    pdf("Helvetica", "", content.as_bytes(), &[])
}
