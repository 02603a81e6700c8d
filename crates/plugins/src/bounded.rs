//! The caps every read of a package keeps, whatever its headers claim.

use std::io::{self, Read};

/// Most bytes of one member (a `pom.properties`, a `PKG-INFO`) read.
pub const MAX_MEMBER: u64 = 1 << 20;
/// Most bytes a decompressor may produce while a plugin looks for its
/// members: what a compression bomb costs at most. Room for real sdists
/// that keep `PKG-INFO` last: numpy 2.1.3's decodes 68 MB before it.
pub const MAX_DECODED: u64 = 256 << 20;

/// Reads `r` to its end, refusing more than [`MAX_MEMBER`] bytes.
pub(crate) fn read_member(r: impl Read, what: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    r.take(MAX_MEMBER + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("reading {what}: {e}"))?;
    if out.len() as u64 > MAX_MEMBER {
        return Err(format!("{what} is larger than {} KiB", MAX_MEMBER >> 10));
    }
    Ok(out)
}

/// A reader that fails once it has given [`MAX_DECODED`] bytes.
pub(crate) struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R> Capped<R> {
    pub(crate) fn new(inner: R) -> Self {
        Capped {
            inner,
            left: MAX_DECODED,
        }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other(format!(
                "more than {} MiB decoded before the metadata was found",
                MAX_DECODED >> 20
            )));
        }
        let want = buf.len().min(self.left as usize);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// `bytes` as UTF-8 text, or why not.
pub(crate) fn text(bytes: Vec<u8>, what: &str) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))
}
