//! Which format a document is: magic bytes first, since they cannot be
//! wrong by accident (a zip is told apart by its entries); then the
//! extension, which decides between the text formats that have no magic;
//! content sniffing last, for unnamed text.

use leasehold::extract::{image_kind, ExtractError, Format};

#[cfg(feature = "hwp")]
use crate::hwp;
#[cfg(feature = "office")]
use crate::zipped;
use crate::{rtf, text};

/// The OLE compound file signature: HWP 5.x, the legacy Office formats, and how Office
/// stores an encrypted OOXML package.
pub(crate) const CFB_MAGIC: &[u8] = b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1";

/// Chooses the format. Magic bytes come first because they cannot be wrong by accident
/// (a zip is told apart by its entries); the extension decides between the text formats,
/// which have no magic; content sniffing is the last resort for unnamed text. Binary
/// content we cannot name is `Unsupported` rather than decoded into garbage.
pub(crate) fn detect(name: &str, bytes: &[u8]) -> Result<Format, ExtractError> {
    let ext = extension(name);
    if bytes.starts_with(b"%PDF-") {
        return Ok(Format::Pdf);
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return detect_zip(ext.as_deref(), bytes);
    }
    if image_kind(bytes).is_some() {
        return Ok(Format::Image);
    }
    if rtf::looks_like_rtf(bytes) {
        return Ok(Format::Rtf);
    }
    if is_hwp(bytes) {
        return Ok(Format::Hwp);
    }
    if let Some(reason) = ext.as_deref().and_then(|ext| legacy_office(ext, bytes)) {
        return Err(ExtractError::Unsupported { reason });
    }
    // Named as a binary format but without its magic: let that extractor say how it is
    // broken instead of calling it unsupported.
    if let Some(format) = ext.as_deref().and_then(binary_format) {
        return Ok(format);
    }
    if text::looks_binary(bytes) {
        return Err(ExtractError::Unsupported {
            reason: "binary content of no known format".into(),
        });
    }
    Ok(text_format(ext.as_deref()).unwrap_or_else(|| sniff_text(bytes)))
}

/// The lower-cased extension of the last path component; accepts `/` and `\` separators
/// because names come from any platform.
pub(crate) fn extension(name: &str) -> Option<String> {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let (stem, ext) = file.rsplit_once('.')?;
    if stem.is_empty() || ext.is_empty() {
        return None;
    }
    Some(ext.to_ascii_lowercase())
}

/// A zip is named by its entries (see `zipped::detect`); a zip that is none of ours but is
/// named as one of them goes to that extractor, which reports exactly what is missing.
fn detect_zip(ext: Option<&str>, bytes: &[u8]) -> Result<Format, ExtractError> {
    #[cfg(feature = "office")]
    let named = zipped::detect(bytes);
    #[cfg(not(feature = "office"))]
    let named = {
        let _ = bytes;
        None
    };
    named
        .or_else(|| ext.and_then(binary_format).filter(|f| is_zip_format(*f)))
        .ok_or_else(|| ExtractError::Unsupported {
            reason: "zip archive that is not a document of a known format".into(),
        })
}

fn is_zip_format(format: Format) -> bool {
    !matches!(
        format,
        Format::PlainText
            | Format::Markdown
            | Format::Html
            | Format::Pdf
            | Format::Rtf
            | Format::Hwp
            | Format::Email
            | Format::Image
    )
}

/// The formats with magic bytes, by extension.
pub(crate) fn binary_format(ext: &str) -> Option<Format> {
    Some(match ext {
        "pdf" => Format::Pdf,
        "docx" => Format::Docx,
        "odt" | "ott" => Format::Odt,
        "ods" | "ots" => Format::Ods,
        "odp" | "otp" => Format::Odp,
        "epub" => Format::Epub,
        "rtf" => Format::Rtf,
        "xlsx" => Format::Xlsx,
        "pptx" => Format::Pptx,
        "hwp" => Format::Hwp,
        "hwpx" => Format::Hwpx,
        "png" | "jpg" | "jpeg" | "tif" | "tiff" | "webp" | "gif" => Format::Image,
        _ => return None,
    })
}

pub(crate) fn text_format(ext: Option<&str>) -> Option<Format> {
    match ext? {
        "txt" | "text" | "log" => Some(Format::PlainText),
        "md" | "markdown" => Some(Format::Markdown),
        "html" | "htm" => Some(Format::Html),
        "eml" => Some(Format::Email),
        _ => None,
    }
}

/// Why a legacy Office file (Word, Excel or PowerPoint 97-2003: a compound file named
/// `.doc`, `.xls` or `.ppt`) is not read here: no built-in reader, and no converter
/// took it (the command line sets antiword's and catdoc's tools up when installed).
fn legacy_office(ext: &str, bytes: &[u8]) -> Option<String> {
    let (what, tools) = match ext {
        "doc" => ("a Word 97-2003 document", "antiword or catdoc"),
        "xls" => ("an Excel 97-2003 workbook", "xls2csv (catdoc)"),
        "ppt" => ("a PowerPoint 97-2003 deck", "catppt (catdoc)"),
        _ => return None,
    };
    bytes.starts_with(CFB_MAGIC).then(|| {
        format!("{what}: read through {tools}, which is not installed; install it, or name a converter for .{ext} in [extract.commands]")
    })
}

/// An HWP document by its content: HWP 5.x's compound file with an HWP `FileHeader`
/// (legacy Office files share the container), or HWP 3.x's own signature.
fn is_hwp(bytes: &[u8]) -> bool {
    #[cfg(feature = "hwp")]
    {
        bytes.starts_with(hwp::HWP3_SIGNATURE) || (bytes.starts_with(CFB_MAGIC) && hwp::is_hwp5(bytes))
    }
    #[cfg(not(feature = "hwp"))]
    {
        let _ = bytes;
        false
    }
}

/// For text without a telling extension: HTML announces itself in its first tag.
fn sniff_text(bytes: &[u8]) -> Format {
    if text::looks_like_html(&text::decode_prefix(bytes)) {
        Format::Html
    } else {
        Format::PlainText
    }
}
