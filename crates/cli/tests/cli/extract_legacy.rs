//! Legacy Office files (Word, Excel and PowerPoint 97-2003) through the tools Recoll uses,
//! which `.ci/run` installs from the distribution's packages (antiword, catdoc):
//! found on `PATH`, they read `.doc` and `.xls` with nothing configured; without
//! them, the document fails saying what would read it.

use std::path::Path;

use crate::common::output::{ok, stdout};
use crate::common::{leasehold, on_path, run_json, run_with_path};

/// Real files: a document saved as Word 97-2003 (olefile's test file), a
/// workbook saved as Excel 97-2003 and a deck saved as PowerPoint 97-2003
/// (oletools' test data).
fn corpus(dir: &Path) -> std::path::PathBuf {
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    for file in ["word-97.doc", "excel-97.xls", "powerpoint-97.ppt"] {
        std::fs::copy(fixtures.join(file), docs.join(file)).unwrap();
    }
    docs
}

#[test]
fn legacy_office_files_are_read_through_the_installed_converters() {
    for program in ["antiword", "xls2csv", "catppt"] {
        assert!(
            on_path(program).is_some(),
            "{program} is not installed: .ci/run installs antiword and catdoc"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let data = dir.path().join("data");
    // An RTF saved as `.doc`, as WordPad does: not a compound file, so not
    // antiword's; the built-in reader takes it.
    let memo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/formats/memo.rtf");
    std::fs::copy(memo, docs.join("memo.doc")).unwrap();
    let summary = run_json(&data, &docs, &[]);
    assert_eq!(
        (&summary["indexed"], &summary["dead"]),
        (&4.into(), &0.into()),
        "{summary}"
    );
    let found = |query: &str| stdout(&ok(leasehold(&data, &["search", "-l", query])));
    assert!(found("\"crimson tundra\"").contains("memo.doc"));
    assert!(found("\"saved as Word 97-2003\"").contains("word-97.doc"));
    assert!(found("\"have fun parsing\"").contains("excel-97.xls"));
    // The deck's one slide holds an embedded object; its design's name is its text.
    assert!(found("Larissa").contains("powerpoint-97.ppt"));
    let note = stdout(&ok(leasehold(&data, &["inspect", "word-97.doc"])));
    assert!(note.contains("converter antiword"), "{note}");
    let note = stdout(&ok(leasehold(&data, &["inspect", "powerpoint-97.ppt"])));
    assert!(note.contains("converter catppt"), "{note}");
}

#[test]
fn without_the_converters_a_legacy_file_says_what_would_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let data = dir.path().join("data");
    let summary = run_with_path(&data, &docs, &dir.path().join("no-tools"));
    assert_eq!(
        (&summary["indexed"], &summary["dead"]),
        (&0.into(), &3.into()),
        "{summary}"
    );
    let reasons = summary["failures"].to_string();
    assert!(
        reasons.contains("a Word 97-2003 document: read through antiword or catdoc, which is not installed"),
        "{reasons}"
    );
    assert!(
        reasons.contains("an Excel 97-2003 workbook: read through xls2csv (catdoc)"),
        "{reasons}"
    );
    assert!(
        reasons.contains("a PowerPoint 97-2003 deck: read through catppt (catdoc)"),
        "{reasons}"
    );
}

/// The fixtures' container damaged as a hostile file would be: a loop in the
/// directory's sector chain (xls2csv then allocates without end) and a header
/// claiming 2^32 FAT sectors (antiword then fails to allocate). Each ends dead
/// at its memory limit with the tool's own words, though xls2csv exits 0 after
/// its failure, and the run goes on. (A converter that spins is ended at its
/// deadline: `command`'s unit tests.) Linux only: macOS does not enforce the
/// memory limit (`RLIMIT_AS`).
#[test]
#[cfg(target_os = "linux")]
fn damaged_legacy_files_end_dead_within_their_memory() {
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let word = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let mut looped = std::fs::read(docs.join("excel-97.xls")).unwrap();
    let (dir_start, fat) = (word(&looped, 0x30), word(&looped, 0x4C));
    let entry = 512 * (fat + 1) + 4 * dir_start;
    looped[entry..entry + 4].copy_from_slice(&(dir_start as u32).to_le_bytes());
    std::fs::write(docs.join("excel-97.xls"), looped).unwrap();
    let mut huge = std::fs::read(docs.join("word-97.doc")).unwrap();
    huge[0x2C..0x30].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(docs.join("word-97.doc"), huge).unwrap();

    let data = dir.path().join("data");
    let limits = ["--extract-memory", "128MiB", "--extract-timeout", "60s"];
    let summary = run_json(&data, &docs, &limits);
    assert_eq!(
        (&summary["dead"], &summary["left"]),
        (&2.into(), &0.into()),
        "{summary}"
    );
    let reasons = summary["failures"].to_string();
    assert!(
        reasons.contains("converter xls2csv failed: it wrote no text, only: ")
            && reasons.contains("Cannot allocate memory"),
        "{reasons}"
    );
    assert!(
        reasons.contains("converter antiword failed: exited with status 1 (Memory allocation failed"),
        "{reasons}"
    );
}

/// Where antiword and catdoc are both installed, catdoc is tried when antiword
/// fails (here an antiword that refuses every file): the document is read, and
/// its note says by which tool and after which.
#[test]
fn catdoc_reads_a_word_file_antiword_fails_on() {
    let dir = tempfile::tempdir().unwrap();
    let docs = corpus(dir.path());
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let catdoc = on_path("catdoc").expect("catdoc is installed: .ci/run installs it");
    std::os::unix::fs::symlink(catdoc, tools.join("catdoc")).unwrap();
    let antiword = tools.join("antiword");
    std::fs::write(
        &antiword,
        "#!/bin/sh\necho 'this is not a Word document' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&antiword, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    let summary = run_with_path(&data, &docs, &tools);
    assert_eq!(summary["failures"].as_array().unwrap().len(), 2, "{summary}");
    assert!(
        !summary["failures"].to_string().contains("word-97.doc"),
        "{summary}"
    );
    let found = |query: &str| stdout(&ok(leasehold(&data, &["search", "-l", query])));
    assert!(found("\"saved as Word 97-2003\"").contains("word-97.doc"));
    let note = stdout(&ok(leasehold(&data, &["inspect", "word-97.doc"])));
    assert!(note.contains("converter catdoc, after antiword failed"), "{note}");
}
