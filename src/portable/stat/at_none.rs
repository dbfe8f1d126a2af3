//! Where `fstatat` is not used: no directory is opened, and every stat is by path.

pub(super) fn open_dir(_: &std::path::Path) -> Option<std::fs::File> {
    None
}

pub(super) fn stat_at(_: &std::fs::File, _: &std::ffi::OsStr, _: bool) -> Option<super::file_stat::FileStat> {
    None
}
