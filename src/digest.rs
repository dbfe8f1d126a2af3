//! SHA-256 of a stream, as lower-case hex: the checksum a completion
//! records for its result and a scan records for a source, so a mirror file
//! or a source can be checked against its row.

/// The SHA-256 of everything `reader` yields, as lowercase hex, read in
/// blocks (sha2 0.11 hashers are not `io::Write`, so `io::copy` cannot feed
/// them).
pub(crate) fn sha256_hex(reader: &mut impl std::io::Read) -> std::io::Result<String> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut block = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut block) {
            Ok(0) => return Ok(hex::encode(hasher.finalize())),
            Ok(n) => hasher.update(&block[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
