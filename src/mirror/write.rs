//! The write path: temp file, fsync, `renameat2(NOREPLACE)`, directory fsync.
//! A generation file, once visible, is never replaced.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::layout::{io_err, new_file, unique_suffix};
use super::lock::{lock_doc, LockMode};
use super::{Fault, Mirror, MirrorError, Written, TEMP_ATTEMPTS, TEMP_PREFIX, WRITE_LOCK_WAIT};
use crate::fault::{crash_point, stop_point, CrashPoint, StopPoint};

pub(super) fn cstring(path: &Path) -> Result<CString, MirrorError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| MirrorError::UnsafePath {
        path: path.display().to_string(),
    })
}

/// Renames without ever replacing `to`: a stale claim must not clobber a generation that exists.
/// Uses renameat2(RENAME_NOREPLACE); falls back to link()+unlink where the filesystem lacks it.
pub(super) fn rename_noreplace(from: &Path, to: &Path) -> Result<(), MirrorError> {
    let (c_from, c_to) = (cstring(from)?, cstring(to)?);
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EEXIST) => Err(MirrorError::GenerationExists {
            path: to.to_path_buf(),
        }),
        Some(libc::EINVAL | libc::ENOSYS) => link_then_unlink(from, to),
        _ => Err(io_err(to)(err)),
    }
}

pub(super) fn link_then_unlink(from: &Path, to: &Path) -> Result<(), MirrorError> {
    match fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(MirrorError::GenerationExists {
                path: to.to_path_buf(),
            })
        }
        Err(e) => return Err(io_err(to)(e)),
    }
    fs::remove_file(from).map_err(io_err(from))
}

/// Creates the temp file for a write; O_EXCL + O_NOFOLLOW so nothing pre-planted is reused.
pub(super) fn create_temp(dir: &Path, fence: i64) -> Result<(PathBuf, File), MirrorError> {
    let mut attempt = 0;
    loop {
        let path = dir.join(format!("{TEMP_PREFIX}{fence:06}-{}", unique_suffix()));
        match new_file(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < TEMP_ATTEMPTS => {
                attempt += 1;
            }
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
}

impl Mirror {
    /// Writes generation `fence` of `job_id` durably and atomically, never replacing an existing
    /// generation. On error no temp file is left and no new generation file is visible.
    pub fn write(&self, job_id: i64, fence: i64, bytes: &[u8]) -> Result<Written, MirrorError> {
        let rel_path = Self::generation_rel_path(job_id, fence)?;
        let dir = self.doc_dir(job_id)?;
        // Held (shared) until return: cleanup, which takes it exclusive, can then never delete
        // our temp file nor observe the directory between our rename and its fsync.
        let _lock = lock_doc(&dir, LockMode::Shared, true, WRITE_LOCK_WAIT)?;
        stop_point(StopPoint::WriteLockHeld);
        let final_path = self.root.join(&rel_path);
        let (tmp_path, file) = create_temp(&dir, fence)?;
        let staged = self
            .fill_temp(file, &tmp_path, bytes)
            .and_then(|()| rename_noreplace(&tmp_path, &final_path));
        if let Err(e) = staged {
            let _ = fs::remove_file(&tmp_path);
            return Err(e);
        }
        crash_point(CrashPoint::AfterRename);
        if let Err(e) = self.sync_dir(&dir) {
            // Not retried (a failed fsync may have dropped dirty pages); withdraw the file so
            // an error always means "nothing new is visible".
            let _ = fs::remove_file(&final_path);
            return Err(e);
        }
        crash_point(CrashPoint::AfterDirFsync);
        Ok(Written {
            rel_path,
            sha256: format!("{:x}", Sha256::digest(bytes)),
            len: bytes.len() as u64,
        })
    }

    fn fill_temp(&self, mut file: File, path: &Path, bytes: &[u8]) -> Result<(), MirrorError> {
        if self.fault == Some(Fault::DiskFullOnWrite) {
            return Err(io_err(path)(io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        file.write_all(bytes).map_err(io_err(path))?;
        crash_point(CrashPoint::AfterTempWrite);
        if self.fault == Some(Fault::FailFsync) {
            return Err(io_err(path)(io::Error::from_raw_os_error(libc::EIO)));
        }
        file.sync_all().map_err(io_err(path))?;
        crash_point(CrashPoint::AfterFsync);
        Ok(())
    }

    /// Makes the rename durable; without it a crash could lose an accepted generation.
    fn sync_dir(&self, dir: &Path) -> Result<(), MirrorError> {
        if self.fault == Some(Fault::FailDirFsync) {
            return Err(io_err(dir)(io::Error::from_raw_os_error(libc::EIO)));
        }
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
    }
}
