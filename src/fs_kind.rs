//! What kind of file system a path lives on (statfs magic numbers from
//! linux/magic.h): `doctor` warns when the database or mirror sits on a
//! network file system, and `watch` rescans instead of waiting for change
//! notifications that such file systems never send.

use std::path::Path;

#[cfg(target_os = "linux")]
pub fn fs_magic(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `buf` is a plain C struct statfs fills in; `c` outlives the call.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut buf) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // f_type is signed on some targets; the magic numbers are 32-bit patterns.
    Ok(buf.f_type as u64 & 0xffff_ffff)
}

#[cfg(not(target_os = "linux"))]
pub fn fs_magic(_path: &Path) -> std::io::Result<u64> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "only checked on Linux",
    ))
}

/// The remote (or possibly remote) file systems, by statfs magic (linux/magic.h).
pub fn remote_fs(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "NFS",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x517B => "SMB",
        0x6573_5546 => "FUSE (possibly a network file system)",
        0x0102_1997 => "9P",
        0x5346_414F => "AFS",
        0x00C3_6400 => "Ceph",
        0x0BD0_0BD0 => "Lustre",
        0x7375_7245 => "Coda",
        0x564C => "NCP",
        0x0116_1970 => "GFS2",
        0x7461_636F => "OCFS2",
        _ => return None,
    })
}

pub fn fs_name(magic: u64) -> &'static str {
    if let Some(remote) = remote_fs(magic) {
        return remote;
    }
    match magic {
        0xEF53 => "ext2/ext3/ext4",
        0x0102_1994 => "tmpfs",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        _ => "local",
    }
}

/// The local file systems whose directory times a rerun may trust to say
/// that no name in a directory changed (`mirror/shard_stamp.rs`): kept by
/// the kernel itself, never from another machine's cache. Any other (a
/// network or FUSE file system, a VM's shared folder) is not trusted.
pub fn keeps_directory_times(magic: u64) -> bool {
    matches!(
        magic,
        0xEF53 // ext2/ext3/ext4
            | 0x5846_5342 // xfs
            | 0x9123_683E // btrfs
            | 0x0102_1994 // tmpfs
            | 0x2FC1_2FC1 // zfs
            | 0xF2F5_2010 // f2fs
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_file_systems_are_named() {
        assert_eq!(remote_fs(0x6969), Some("NFS"));
        assert_eq!(remote_fs(0xFF53_4D42), Some("CIFS"));
        assert_eq!(remote_fs(0xFE53_4D42), Some("SMB2"));
        assert_eq!(remote_fs(0x0102_1997), Some("9P"));
        assert!(remote_fs(0x6573_5546).unwrap().starts_with("FUSE"));
        assert_eq!(remote_fs(0xEF53), None);
        assert_eq!(remote_fs(0x0102_1994), None);
    }

    #[test]
    fn only_known_local_file_systems_are_trusted_with_directory_times() {
        assert!(keeps_directory_times(0xEF53));
        assert!(keeps_directory_times(0x5846_5342));
        for untrusted in [0x6969, 0x6573_5546, 0x0102_1997, 0x794C_7630, 0x1234] {
            assert!(!keeps_directory_times(untrusted), "{untrusted:x}");
        }
    }
}
