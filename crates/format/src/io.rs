//! Positioned reads: the reader's only door to the archive bytes.
//!
//! Every byte the reader looks at goes through [`ReadAt`], so wrapping a source in
//! [`CountingReader`] shows exactly what an operation touched. Tests use that to
//! prove structural claims ("`get` reads no other file's blobs") without timing.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a reader that may stop early asks for at once from a local source:
/// a slice early in a pack needs only the first blocks of its frame, so the
/// rest of the blob is never read.
pub const READ_PIECE: usize = 128 << 10;

/// A byte source that supports reads at an offset, shared between threads.
pub trait ReadAt: Send + Sync {
    /// Fills `buf` from `offset`, or fails with `UnexpectedEof` past the end.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Total length of the source in bytes.
    fn size(&self) -> io::Result<u64>;
    /// How many bytes to ask for at once when reading a blob that may be
    /// needed only in part: [`READ_PIECE`] where a read is cheap, all of it
    /// (`usize::MAX`) where each read is a round trip to a server.
    fn read_piece(&self) -> usize {
        READ_PIECE
    }
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

impl ReadAt for Vec<u8> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.as_slice().read_exact_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(buf.len());
        match end.and_then(|end| self.get(start..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

/// Wraps a [`ReadAt`] and counts the calls and bytes that pass through it.
#[derive(Debug, Default)]
pub struct CountingReader<R> {
    inner: R,
    bytes: AtomicU64,
    reads: AtomicU64,
}

impl<R> CountingReader<R> {
    /// Wraps `inner` with both counters at zero.
    pub fn new(inner: R) -> Self {
        CountingReader {
            inner,
            bytes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }
    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// Read calls so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
    /// Sets both counters back to zero.
    pub fn reset(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.reads.store(0, Ordering::Relaxed);
    }
}

impl<R: ReadAt> ReadAt for CountingReader<R> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_exact_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn read_piece(&self) -> usize {
        self.inner.read_piece()
    }
}

impl<R: ReadAt + ?Sized> ReadAt for std::sync::Arc<R> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }
    fn read_piece(&self) -> usize {
        (**self).read_piece()
    }
}

impl<R: ReadAt + ?Sized> ReadAt for &R {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }
    fn read_piece(&self) -> usize {
        (**self).read_piece()
    }
}
