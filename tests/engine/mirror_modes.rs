//! The mirror's files are 0600 and its directories 0700 whatever the umask.
//! The umask is per process, and this binary runs its tests on threads: a
//! umask that strips the owner's bits made another test's temporary
//! directory unwritable. So the body runs alone, in a child of this binary
//! that runs this one test.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use leasehold::mirror::Mirror;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Set in the child that runs the body.
const ALONE: &str = "LEASEHOLD_TEST_UMASK_ALONE";

#[test]
fn files_are_0600_and_directories_0700_whatever_the_umask() {
    if std::env::var_os(ALONE).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "mirror_modes::files_are_0600_and_directories_0700_whatever_the_umask",
                "--test-threads=1",
            ])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("1 passed"),
            "the child ran the body alone: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    // A umask that strips even the owner's bits: without an explicit chmod, new
    // directories would be 0400 and new files 0400.
    // SAFETY: umask(2) only swaps the process's mask.
    let old = unsafe { libc::umask(0o377) };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mirror");
    let outcome = std::panic::catch_unwind(|| {
        let m = Mirror::open(&root).unwrap();
        let w = m.write(1_002_003, 1, b"text").unwrap();
        let doc = m.doc_dir(1_002_003).unwrap();
        assert_eq!(doc, m.root().join("s000/3d2"));
        for dir in [m.root(), &m.root().join("s000"), &doc] {
            assert_eq!(mode(dir), 0o700, "{}", dir.display());
        }
        assert_eq!(mode(&doc.join(".lock")), 0o600);
        assert_eq!(mode(&m.root().join(&w.rel_path)), 0o600);

        // A lock file made under a laxer rule is brought back to 0600 by the next write.
        std::fs::set_permissions(doc.join(".lock"), std::fs::Permissions::from_mode(0o644)).unwrap();
        m.write(1_002_003, 2, b"more").unwrap();
        assert_eq!(mode(&doc.join(".lock")), 0o600);
    });
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
