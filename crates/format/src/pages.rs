//! Large scratch buffers on anonymous maps, backed by huge pages where the
//! kernel allows.
//!
//! The engine's pooled buffers and the reader's decode buffer are a few MiB each.
//! On 4 KiB pages every first touch is a fault (about 2.5 µs here), which made
//! up a tenth of compressing 49 MB of already-compressed files; a 2 MiB huge
//! page is one fault and a clear of about 0.1 ms, with a rare stall of a few ms
//! while the kernel compacts memory. So a buffer that is going to be filled is a
//! map rounded up to whole huge pages and advised `MADV_HUGEPAGE`, and one that
//! may hold a few KiB stays on small pages (the callers know which is which).
//! Where huge pages are off, the advice is ignored and the map works as is.

use std::io::{self, Read};

use memmap2::{MmapMut, MmapOptions};

/// The x86-64 and aarch64 huge page size: maps are rounded up to it, so the
/// kernel can back them with huge pages.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A zeroed anonymous map of at least `len` bytes, advised to use huge pages
/// if `huge`. `len` must come from the archive's properties or the engine's
/// bounds, never from an untrusted field.
pub(crate) fn map(len: usize, huge: bool) -> io::Result<MmapMut> {
    let map = MmapOptions::new()
        .len(PageBuf::capacity_for(len))
        .map_anon()?;
    #[cfg(target_os = "linux")]
    if huge {
        // Only advice: where it is refused the map works as is.
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = huge;
    Ok(map)
}

/// A byte buffer of fixed capacity on a huge-page map: the engine's job buffers.
pub(crate) struct PageBuf {
    map: MmapMut,
    len: usize,
    /// The most bytes it has held: the pages touched, bar what a writer
    /// filled through [`PageBuf::spare_mut`] and did not commit.
    high: usize,
}

impl PageBuf {
    /// An empty buffer that holds at least `capacity` bytes, on huge pages if
    /// `huge`.
    pub(crate) fn new(capacity: usize, huge: bool) -> io::Result<Self> {
        Ok(PageBuf {
            map: map(capacity, huge)?,
            len: 0,
            high: 0,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The capacity of a buffer made for `len` bytes: whole huge pages.
    pub(crate) fn capacity_for(len: usize) -> usize {
        len.div_ceil(HUGE_PAGE).max(1) * HUGE_PAGE
    }

    /// The bytes it can hold: its map's length.
    pub(crate) fn capacity(&self) -> usize {
        self.map.len()
    }

    /// The most bytes it has held since it was made.
    pub(crate) fn high_water(&self) -> usize {
        self.high
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `bytes`; the caller keeps within the capacity it asked for.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        self.map[self.len..end].copy_from_slice(bytes);
        self.len = end;
        self.high = self.high.max(end);
    }

    /// The unused part, for writers that report how much they filled.
    pub(crate) fn spare_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.len..]
    }

    /// Marks `n` more bytes of [`PageBuf::spare_mut`] as filled.
    pub(crate) fn commit(&mut self, n: usize) {
        self.len = (self.len + n).min(self.map.len());
        self.high = self.high.max(self.len);
    }

    /// Appends up to `limit` bytes from `r`, stopping early only at its end.
    pub(crate) fn fill_from(&mut self, r: &mut dyn Read, limit: usize) -> io::Result<usize> {
        let end = self.len + limit;
        let start = self.len;
        while self.len < end {
            match r.read(&mut self.map[self.len..end]) {
                Ok(0) => break,
                Ok(n) => {
                    self.len += n;
                    self.high = self.high.max(self.len);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.len - start)
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_stops_at_the_limit_or_the_end_of_the_reader() {
        let mut buf = PageBuf::new(100, false).unwrap();
        buf.extend_from_slice(b"ab");
        let mut r: &[u8] = b"cdefgh";
        assert_eq!(buf.fill_from(&mut r, 3).unwrap(), 3);
        assert_eq!(&buf[..], b"abcde");
        assert_eq!(buf.fill_from(&mut r, 10).unwrap(), 3);
        assert_eq!(&buf[..], b"abcdefgh");
        assert_eq!(buf.fill_from(&mut r, 10).unwrap(), 0);
        buf.truncate(2);
        assert_eq!(&buf[..], b"ab");
        assert_eq!(buf.high_water(), 8, "a truncated buffer keeps its pages");
    }

    #[test]
    fn maps_are_whole_huge_pages() {
        assert_eq!(map(1, true).unwrap().len(), HUGE_PAGE);
        assert_eq!(map(HUGE_PAGE + 1, false).unwrap().len(), 2 * HUGE_PAGE);
    }
}
