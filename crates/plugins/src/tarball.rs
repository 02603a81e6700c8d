//! Members of a tar stream, plain or under gzip, xz, zstd or bzip2, read
//! from its start until the one a plugin wants.

use std::io::Read;

use crate::bounded::{read_member, Capped};

/// The decompressor `head` (the stream's first bytes) starts with, by magic
/// number, over the stream `r`; plain tar otherwise.
fn decoder<'a>(head: &[u8], r: impl Read + 'a) -> Result<Box<dyn Read + 'a>, String> {
    Ok(match head {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::GzDecoder::new(r)),
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => Box::new(liblzma::read::XzDecoder::new(r)),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => {
            Box::new(zstd::stream::read::Decoder::new(r).map_err(|e| format!("zstd: {e}"))?)
        }
        [b'B', b'Z', b'h', ..] => Box::new(bzip2::read::BzDecoder::new(r)),
        _ => Box::new(r),
    })
}

/// The first member of the tar stream `r` (compressed or not; `head` is its
/// start) whose path passes `want`, with its path; `None` when the stream
/// ends without one. Decoding stops at the member: nothing after it is
/// inflated. A package's stream is `Window::reader`: all of a file of up to
/// twice `WINDOW_HALF`, and an error past its head for a larger one.
pub(crate) fn find<'a>(
    head: &[u8],
    r: impl Read + 'a,
    mut want: impl FnMut(&str) -> bool,
) -> Result<Option<(String, Vec<u8>)>, String> {
    let mut tar = tar::Archive::new(Capped::new(decoder(head, r)?));
    // Raw: long names and pax headers are entries to skip, not data the tar
    // crate reads whole at whatever size their header claims.
    let entries = tar
        .entries()
        .map(|e| e.raw(true))
        .map_err(|e| format!("not a readable tar: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("not a readable tar: {e}"))?;
        let path = entry.path_bytes();
        let path = String::from_utf8_lossy(&path);
        let path = path.strip_prefix("./").unwrap_or(&path).to_string();
        if entry.header().entry_type().is_file() && want(&path) {
            let bytes = read_member(entry, &path)?;
            return Ok(Some((path, bytes)));
        }
    }
    Ok(None)
}

/// Whether `path` is `name` one directory down (`pkg-1.0/PKG-INFO`).
pub(crate) fn one_down(path: &str, name: &str) -> bool {
    path.split_once('/')
        .is_some_and(|(dir, rest)| !dir.is_empty() && rest == name)
}
