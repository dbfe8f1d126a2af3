//! Placeholder until the mirror lands.
#[derive(Debug, thiserror::Error)]
#[error("mirror")]
pub struct MirrorError;
impl MirrorError {
    pub fn is_disk_full(&self) -> bool {
        false
    }
}
