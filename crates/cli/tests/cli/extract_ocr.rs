//! OCR through tesseract, which `.ci/run` installs from the distribution's
//! packages with its English and Korean packs and poppler's `pdftoppm`: found
//! on `PATH`, it reads pictures and the scanned pages of a PDF; without it,
//! those are kept as "no text" saying what would read them.

use std::path::{Path, PathBuf};

use crate::common::output::{json, ok, stdout};
use crate::common::{leasehold, on_path, run_json, run_with_path};

/// Real pictures and a real scan (tests/fixtures/README.md): a typewritten
/// recipe (PNG), a map (JPEG), a Korean notice scanned black and white (TIFF),
/// and a PDF whose first page has a text layer and whose second is a scan.
fn corpus(dir: &Path) -> PathBuf {
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    for file in [
        "typewriter.png",
        "baiona.jpg",
        "korean-page.tif",
        "scanned-page.pdf",
    ] {
        std::fs::copy(fixtures.join(file), docs.join(file)).unwrap();
    }
    docs
}

/// A configuration file with `[extract]`'s `lines`.
fn config(dir: &Path, lines: &str) -> PathBuf {
    let path = dir.join("leasehold.toml");
    std::fs::write(&path, format!("[extract]\n{lines}\n")).unwrap();
    path
}

/// The file names `search -l` printed.
fn names(out: std::process::Output) -> Vec<String> {
    let listed = stdout(&ok(out));
    listed
        .lines()
        .map(|line| {
            Path::new(line)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn installed(program: &str) -> bool {
    on_path(program).is_some()
}

#[test]
fn pictures_and_scanned_pages_are_read_by_ocr_and_say_so() {
    for program in ["tesseract", "pdftoppm"] {
        assert!(
            installed(program),
            "{program} is not installed: .ci/run installs tesseract-ocr and poppler-utils"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let data = dir.path().join("data");
    let config = config(dir.path(), "ocr_languages = [\"eng\", \"kor\"]");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "run",
        docs.to_str().unwrap(),
        "--json",
    ];
    let summary = json(leasehold(&data, &args));
    assert_eq!(
        (&summary["indexed"], &summary["dead"]),
        (&4.into(), &0.into()),
        "{summary}"
    );
    let found = |query: &str| names(leasehold(&data, &["search", "-l", query]));
    assert_eq!(found("Linzensoep kruidnagel"), ["typewriter.png"]);
    assert_eq!(found("Milafranga"), ["baiona.jpg"]);
    assert_eq!(found("열람실 난방"), ["korean-page.tif"]);
    // The scanned page is read and the text layer of the other is kept.
    assert_eq!(found("LinnSequencer saffron"), ["scanned-page.pdf"]);
    assert_eq!(found("type:image Linzensoep"), ["typewriter.png"]);

    let inspect = |key: &str| stdout(&ok(leasehold(&data, &["inspect", key])));
    assert!(
        inspect("scanned-page.pdf").contains("extracted as pdf, OCR by tesseract (eng+kor) on 1 of 2 pages"),
        "{}",
        inspect("scanned-page.pdf")
    );
    assert!(inspect("korean-page.tif").contains("tiff image, OCR by tesseract (eng+kor)"));
    assert!(inspect("baiona.jpg").contains("jpeg image, OCR by tesseract (eng+kor)"));
}

#[test]
fn without_tesseract_pictures_are_kept_as_no_text_saying_what_would_read_them() {
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let data = dir.path().join("data");
    let summary = run_with_path(&data, &docs, &dir.path().join("no-tools"));
    assert_eq!(
        (&summary["indexed"], &summary["dead"]),
        (&4.into(), &0.into()),
        "{summary}"
    );
    let listed = stdout(&ok(leasehold(&data, &["list", "--no-text"])));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    for line in lines {
        assert!(
            line.ends_with("no text: a picture: OCR reads it when tesseract is installed"),
            "{line}"
        );
    }
    // The PDF keeps its text layer; its scanned page waits for OCR.
    assert_eq!(
        names(leasehold(&data, &["search", "-l", "saffron"])),
        ["scanned-page.pdf"]
    );

    // `ocr_languages = []` turns OCR off where tesseract is installed.
    let off = config(dir.path(), "ocr_languages = []");
    let fresh = dir.path().join("fresh");
    let args = [
        "--config",
        off.to_str().unwrap(),
        "run",
        docs.to_str().unwrap(),
        "--json",
    ];
    json(leasehold(&fresh, &args));
    let listed = stdout(&ok(leasehold(&fresh, &["list", "--no-text"])));
    assert_eq!(listed.lines().count(), 3, "{listed}");
}

#[test]
fn a_language_tesseract_does_not_have_is_refused_at_start() {
    assert!(installed("tesseract"), ".ci/run installs tesseract-ocr");
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let config = config(dir.path(), "ocr_languages = [\"eng\", \"tlh\"]");
    let out = leasehold(
        &dir.path().join("data"),
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            docs.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("[extract] ocr_languages: tesseract has no tlh (it has: "),
        "{said}"
    );
    assert!(out.stdout.is_empty());
}

/// A PNG that claims 20,000 × 20,000 grey pixels: 400 MB once inflated, from
/// a file of 390 KB. tesseract's reader fails at the memory limit and the
/// document is dead with its words; the picture beside it is read. Linux only:
/// macOS does not enforce the memory limit (`RLIMIT_AS`).
#[test]
#[cfg(target_os = "linux")]
fn a_picture_bomb_ends_dead_at_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("bomb.png"), png_bomb(20_000)).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    std::fs::copy(fixtures.join("typewriter.png"), docs.join("typewriter.png")).unwrap();
    let data = dir.path().join("data");
    let summary = run_json(&data, &docs, &["--extract-memory", "256MiB"]);
    assert_eq!(
        (&summary["indexed"], &summary["dead"]),
        (&1.into(), &1.into()),
        "{summary}"
    );
    let failure = &summary["failures"][0];
    assert_eq!(failure["key"], "bomb.png");
    assert!(
        failure["error"]
            .as_str()
            .unwrap()
            .starts_with("converter tesseract failed: exited with status 1"),
        "{failure}"
    );
}

/// A grey PNG of `side` × `side` zero pixels, compressed as far as zlib goes.
#[cfg(target_os = "linux")]
fn png_bomb(side: u32) -> Vec<u8> {
    use std::io::Write;
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    }
    let mut header = Vec::new();
    header.extend_from_slice(&side.to_be_bytes());
    header.extend_from_slice(&side.to_be_bytes());
    header.extend_from_slice(&[8, 0, 0, 0, 0]);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let row = vec![0u8; side as usize + 1];
    for _ in 0..side {
        z.write_all(&row).unwrap();
    }
    let pixels = z.finish().unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &pixels);
    chunk(&mut png, b"IEND", b"");
    png
}
