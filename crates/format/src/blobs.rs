//! Reading one slice out of a blob region, checked before and after.
//!
//! Used by the archive reader and by the live store, whose sidecar file is a
//! blob region without a tail: one implementation of "give me these bytes, and
//! prove they are the ones that were written".

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use memmap2::MmapMut;
use zstd::zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer, ResetDirective};

use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::ipc::read_at;
use crate::kind::{Kind, MAX_LINK_TARGET};
use crate::pages;
use crate::row::SliceRow;

/// The bounds every row of a blob region must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobRegion {
    /// The archive's chunk size: no blob decodes to more.
    pub chunk_size: u64,
    /// End of the blob region.
    pub end: u64,
}

/// Reusable buffers (and a zstd context) for reading slices.
#[derive(Default)]
pub struct BlobScratch {
    blob: Vec<u8>,
    decoded: Option<MmapMut>,
    dctx: Option<DCtx<'static>>,
}

impl std::fmt::Debug for BlobScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobScratch").finish_non_exhaustive()
    }
}

/// How much compressed input the decoder is handed per call. Given more, it
/// decodes every whole block in it: a 128 KiB piece of text holds about 600 KiB
/// of output, most of it past the slice. Fed this little, it stops at the end of
/// the block (at most 128 KiB of output) that holds the slice's end, unless the
/// next blocks compress so well that they end within the same feed.
const FEED: usize = 8 << 10;

/// A huge page costs about as much to clear as this many bytes cost in 4 KiB
/// faults (measured here: ~0.1 ms against ~2.5 µs a fault), so a decode that
/// needs less stays on small pages.
const HUGE_PAGE_WORTH: usize = 256 << 10;

/// Most bytes of slices a whole-file read on several threads holds in its
/// buffers ([`BlobRegion::write_file_on`]), two a thread (each thread also
/// holds the compressed blob it reads, at most half as much again): ten
/// pieces of the default 1.5 MiB; chunks of 8 MiB or more are read on one
/// thread.
const IN_FLIGHT: u64 = 16 << 20;

/// Largest stored size of a blob of at most `chunk_size` raw bytes.
pub(crate) fn max_blob_size(chunk_size: u64) -> u64 {
    zstd::zstd_safe::compress_bound(chunk_size as usize) as u64
}

impl BlobRegion {
    /// Checks a row's numbers before anything is sized by them.
    pub fn check(&self, row: &SliceRow) -> Result<()> {
        let bad = |m: &str| Err(Error::corrupt(format!("row of {}: {m}", row.relative_path)));
        let inner_end = row.blob_inner_offset.checked_add(row.uncompressed_size);
        let blob_end = row.blob_offset.checked_add(row.blob_size);
        if blob_end.is_none_or(|e| e > self.end) {
            return bad("blob lies past the blob region");
        }
        if inner_end.is_none_or(|e| e > self.chunk_size) {
            return bad("slice lies past chunk_size");
        }
        if row.blob_size > max_blob_size(self.chunk_size) {
            return bad("blob larger than a chunk can compress to");
        }
        if !row.compressed && inner_end.is_none_or(|e| e > row.blob_size) {
            return bad("slice lies past its raw blob");
        }
        Ok(())
    }

    /// Reads the slice `row` from `src`, checks its blake3, and returns its bytes
    /// (borrowed from `scratch`). A compressed blob is read and decoded only as
    /// far as the slice reaches.
    pub fn read_slice<'s>(
        &self,
        src: &dyn ReadAt,
        row: &SliceRow,
        scratch: &'s mut BlobScratch,
    ) -> Result<&'s [u8]> {
        self.check(row)?;
        let end = (row.blob_inner_offset + row.uncompressed_size) as usize;
        let start = row.blob_inner_offset as usize;
        let bytes = if row.compressed {
            &decode_prefix(src, row, end, self.chunk_size, scratch)?[start..end]
        } else {
            scratch.blob.resize(end - start, 0);
            read_at(
                src,
                &mut scratch.blob,
                row.blob_offset + start as u64,
                "blob",
            )?;
            &scratch.blob[..]
        };
        checked(row, bytes)
    }

    /// The target of the symbolic link `path`, whose slices are `rows` (in
    /// file order). The rows are checked before any blob is read: a link
    /// they say is longer than [`MAX_LINK_TARGET`] is corrupt, not a target
    /// to buffer.
    pub fn read_link(
        &self,
        src: &dyn ReadAt,
        path: &str,
        rows: &[SliceRow],
        scratch: &mut BlobScratch,
    ) -> Result<Vec<u8>> {
        if Kind::of(rows.first().and_then(|r| r.mode))? != Kind::Symlink {
            return Err(Error::corrupt(format!("{path}: not a symbolic link")));
        }
        let size = rows
            .iter()
            .fold(0u64, |n, r| n.saturating_add(r.uncompressed_size));
        if size > MAX_LINK_TARGET as u64 {
            return Err(Error::corrupt(format!(
                "{path}: a link target of {size} bytes"
            )));
        }
        let mut target = Vec::with_capacity(size as usize);
        self.write_range(src, rows, 0..u64::MAX, &mut target, scratch)?;
        Ok(target)
    }

    /// Writes bytes `range` of the file whose slices are `rows` (in file order,
    /// checked by [`crate::check_file_rows`]) to `out`. Only the slices the range
    /// touches are read, and each is verified whole before any of it is written.
    pub fn write_range(
        &self,
        src: &dyn ReadAt,
        rows: &[SliceRow],
        range: Range<u64>,
        out: &mut dyn Write,
        scratch: &mut BlobScratch,
    ) -> Result<u64> {
        let mut written = 0;
        for row in rows {
            if row.uncompressed_size == 0 {
                // Nothing to write, but an empty slice is checked like any
                // other: a size flipped to 0 must not read as an empty file.
                self.read_slice(src, row, scratch)?;
                continue;
            }
            let start = row.fdata_offset;
            let end = start.saturating_add(row.uncompressed_size);
            if end <= range.start {
                continue;
            }
            if start >= range.end {
                break;
            }
            let bytes = self.read_slice(src, row, scratch)?;
            let from = (range.start.max(start) - start) as usize;
            let to = (range.end.min(end) - start) as usize;
            out.write_all(&bytes[from..to])
                .map_err(|e| Error::io(format!("writing {}", row.relative_path), e))?;
            written += (to - from) as u64;
        }
        Ok(written)
    }

    /// [`BlobRegion::write_range`] of the whole file, its slices read,
    /// decoded and checked on up to `threads` threads while this one writes
    /// them in order: a large file's pieces decode side by side, where one
    /// thread would decode and hash them one after the other. A slice is
    /// written only once it is checked, and a thread takes a slice only with
    /// a buffer to put it in, so the slices waiting fit in [`IN_FLIGHT`]. A
    /// file of one slice is read on this thread; `threads` 0 is as many as
    /// the machine has.
    pub fn write_file_on(
        &self,
        src: &dyn ReadAt,
        rows: &[SliceRow],
        out: &mut dyn Write,
        threads: usize,
    ) -> Result<u64> {
        let workers = match rows.len() {
            0 | 1 => 1,
            n => {
                // Asked only here: the machine's count costs a one-file get
                // some tenths of a millisecond (cgroup files are read).
                let threads = match threads {
                    0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                    t => t,
                };
                threads
                    .min(n)
                    .min((IN_FLIGHT / self.chunk_size.max(1)) as usize / 2)
            }
        };
        if workers < 2 {
            return self.write_range(src, rows, 0..u64::MAX, out, &mut BlobScratch::default());
        }
        let buffers = 2 * workers;
        for r in rows {
            self.check(r)?;
        }
        let next = AtomicUsize::new(0);
        let (pool, free) = mpsc::channel::<MmapMut>();
        for _ in 0..buffers {
            let map = pages::map(self.chunk_size as usize, true)
                .map_err(|e| Error::io("mapping a decode buffer", e))?;
            // The receiver is right here: a send cannot fail.
            let _ = pool.send(map);
        }
        let free = Mutex::new(free);
        type Done = (usize, Result<(MmapMut, Range<usize>)>);
        let (done, finished) = mpsc::channel::<Done>();
        let worker = |done: mpsc::Sender<Done>| {
            let mut dctx = match zstd::bulk::Decompressor::new() {
                Ok(d) => d,
                Err(e) => {
                    let _ = done.send((0, Err(Error::io("starting zstd", e))));
                    return;
                }
            };
            let mut raw = Vec::new();
            loop {
                // A buffer before a slice: every slice taken can then be
                // finished, so the writer never waits on one that cannot.
                let buf = match free.lock() {
                    Ok(free) => free.recv(),
                    Err(_) => return,
                };
                let Ok(mut buf) = buf else { return };
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(row) = rows.get(i) else { return };
                let read = catch_unwind(AssertUnwindSafe(|| {
                    let at = self.read_whole(src, row, &mut raw, &mut dctx, &mut buf)?;
                    Ok((buf, at))
                }));
                let read = read.unwrap_or_else(|_| {
                    Err(Error::io(
                        "reading blobs",
                        std::io::Error::other("a reader panicked"),
                    ))
                });
                if done.send((i, read)).is_err() {
                    return;
                }
            }
        };
        let worker = &worker;
        std::thread::scope(|s| {
            for _ in 0..workers {
                let done = done.clone();
                s.spawn(move || worker(done));
            }
            drop(done);
            // Dropped on any return, which ends the workers waiting for a
            // buffer before the scope waits for them.
            let pool = pool;
            let mut early = BTreeMap::new();
            let mut written = 0u64;
            for (i, row) in rows.iter().enumerate() {
                let (buf, at) = loop {
                    if let Some(b) = early.remove(&i) {
                        break b;
                    }
                    let (j, read) = finished.recv().map_err(|_| {
                        Error::io(
                            "reading blobs",
                            std::io::Error::other("the readers ended early"),
                        )
                    })?;
                    early.insert(j, read?);
                };
                out.write_all(&buf[at.clone()])
                    .map_err(|e| Error::io(format!("writing {}", row.relative_path), e))?;
                written += at.len() as u64;
                let _ = pool.send(buf);
            }
            Ok(written)
        })
    }

    /// Reads the blob of `row` whole into `out` (at least `chunk_size`
    /// bytes), decoded, and returns where in `out` the slice lies, checked
    /// against its BLAKE3. The caller has checked `row`
    /// ([`BlobRegion::check`]), every row of the file before any is read.
    fn read_whole(
        &self,
        src: &dyn ReadAt,
        row: &SliceRow,
        raw: &mut Vec<u8>,
        dctx: &mut zstd::bulk::Decompressor<'static>,
        out: &mut [u8],
    ) -> Result<Range<usize>> {
        let at = slice_range(row);
        if !row.compressed {
            let got = &mut out[..at.len()];
            read_at(src, got, row.blob_offset + at.start as u64, "blob")?;
            checked(row, got)?;
            return Ok(0..at.len());
        }
        raw.resize(row.blob_size as usize, 0);
        read_at(src, raw, row.blob_offset, "blob")?;
        let size = content_size(raw, row, self.chunk_size)?;
        let n = dctx
            .decompress_to_buffer(raw.as_slice(), &mut out[..size])
            .map_err(|e| Error::corrupt(format!("blob at {}: {e}", row.blob_offset)))?;
        slice_of(row, &out[..n])?;
        Ok(at)
    }
}

/// The decoded size a compressed blob's frame states: a chunk is the most
/// any may hold, and a buffer is sized by it before decoding.
fn content_size(raw: &[u8], row: &SliceRow, chunk_size: u64) -> Result<usize> {
    match zstd::zstd_safe::get_frame_content_size(raw) {
        Ok(Some(n)) if n <= chunk_size => Ok(n as usize),
        _ => Err(Error::corrupt(format!(
            "blob at {}: no frame header with a valid content size",
            row.blob_offset
        ))),
    }
}

/// `bytes`, if they are the slice `row` names: its BLAKE3 matches.
fn checked<'b>(row: &SliceRow, bytes: &'b [u8]) -> Result<&'b [u8]> {
    if blake3::hash(bytes).as_bytes() != &row.checksum {
        return Err(Error::Checksum(format!(
            "{} at offset {}",
            row.relative_path, row.fdata_offset
        )));
    }
    Ok(bytes)
}

/// Whole blobs, read and decoded once for every slice in them: what a pass
/// over many slices (`verify`, extraction, a seal's re-pack) reads, where a
/// `get` decodes only as far as its slice ([`BlobRegion::read_slice`]). The
/// blob read last is kept, with the buffers and the decoder.
pub(crate) struct WholeBlob {
    /// `(blob_offset, blob_size, compressed)` of the blob held.
    held: Option<(u64, u64, bool)>,
    raw: Vec<u8>,
    decoded: Vec<u8>,
    dctx: zstd::bulk::Decompressor<'static>,
}

impl WholeBlob {
    pub(crate) fn new() -> Result<Self> {
        Ok(WholeBlob {
            held: None,
            raw: Vec::new(),
            decoded: Vec::new(),
            dctx: zstd::bulk::Decompressor::new().map_err(|e| Error::io("starting zstd", e))?,
        })
    }

    /// The slice `row`, checked against its BLAKE3, out of its blob: read
    /// from `src`, and decoded, unless it is the blob held.
    pub(crate) fn slice(
        &mut self,
        region: &BlobRegion,
        src: &dyn ReadAt,
        row: &SliceRow,
    ) -> Result<&[u8]> {
        region.check(row)?;
        let blob = (row.blob_offset, row.blob_size, row.compressed);
        if self.held != Some(blob) {
            self.held = None;
            self.raw.resize(row.blob_size as usize, 0);
            read_at(src, &mut self.raw, row.blob_offset, "blob")?;
            if row.compressed {
                let size = content_size(&self.raw, row, region.chunk_size)?;
                self.decoded.clear();
                self.decoded.reserve_exact(size);
                self.dctx
                    .decompress_to_buffer(&self.raw, &mut self.decoded)
                    .map_err(|e| Error::corrupt(format!("blob at {}: {e}", row.blob_offset)))?;
            }
            self.held = Some(blob);
        }
        let data = if row.compressed {
            &self.decoded
        } else {
            &self.raw
        };
        slice_of(row, data)
    }
}

/// Where the slice `row` lies in its decoded blob; [`BlobRegion::check`]
/// bounded its end by the chunk size, so this cannot overflow.
fn slice_range(row: &SliceRow) -> Range<usize> {
    row.blob_inner_offset as usize..(row.blob_inner_offset + row.uncompressed_size) as usize
}

/// The slice `row` out of its whole decoded blob `data`, checked against
/// its BLAKE3.
fn slice_of<'d>(row: &SliceRow, data: &'d [u8]) -> Result<&'d [u8]> {
    let bytes = data.get(slice_range(row)).ok_or_else(|| {
        Error::corrupt(format!("{}: slice lies past its blob", row.relative_path))
    })?;
    checked(row, bytes)
}

/// Decodes the frame of `row`'s blob until at least `end` bytes are out, reading
/// the blob a piece at a time, and returns the decoded prefix.
///
/// On a one-file `get` the fresh pages the output lands on cost as much as the
/// decoding itself (a 4 KiB fault each), so the output is laid out to touch
/// few of them: the decoder writes straight into the buffer (zstd's stable
/// output buffer, no window-sized copy), and the buffer is an anonymous map
/// advised to use huge pages, one fault per 2 MiB where the kernel allows.
/// The map holds the frame's whole content size, as the stable mode requires,
/// and is kept for the next blob.
fn decode_prefix<'s>(
    src: &dyn ReadAt,
    row: &SliceRow,
    end: usize,
    chunk_size: u64,
    scratch: &'s mut BlobScratch,
) -> Result<&'s [u8]> {
    let corrupt =
        |m: &dyn std::fmt::Display| Error::corrupt(format!("blob at {}: {m}", row.blob_offset));
    let BlobScratch {
        blob,
        decoded,
        dctx,
    } = scratch;
    let blob_end = row.blob_offset + row.blob_size;
    let mut pos = row.blob_offset;
    let mut next_piece = |blob: &mut Vec<u8>| -> Result<bool> {
        let n = src.read_piece().min((blob_end - pos) as usize);
        blob.resize(n, 0);
        read_at(src, blob, pos, "blob")?;
        pos += n as u64;
        Ok(n > 0)
    };
    next_piece(blob)?;
    // check() bounded end by chunk_size; the frame must hold it and no more.
    let content = match zstd::zstd_safe::get_frame_content_size(blob) {
        Ok(Some(n)) if n <= chunk_size && n >= end as u64 => n as usize,
        _ => return Err(corrupt(&"no frame header with a valid content size")),
    };
    let dctx = match dctx {
        Some(d) => d,
        None => dctx.insert(new_dctx().map_err(|e| corrupt(&e))?),
    };
    dctx.reset(ResetDirective::SessionOnly)
        .map_err(|c| corrupt(&zstd::zstd_safe::get_error_name(c)))?;
    let buf = match decoded.take() {
        Some(m) if m.len() >= content => decoded.insert(m),
        _ => decoded.insert(
            pages::map(content, end >= HUGE_PAGE_WORTH)
                .map_err(|e| Error::io("mapping a decode buffer", e))?,
        ),
    };
    let mut out = OutBuffer::around(&mut buf[..content]);
    'frame: while out.pos() < end {
        for feed in blob.chunks(FEED) {
            let mut input = InBuffer::around(feed);
            while input.pos() < feed.len() {
                let before = (input.pos(), out.pos());
                let hint = dctx
                    .decompress_stream(&mut out, &mut input)
                    .map_err(|c| corrupt(&zstd::zstd_safe::get_error_name(c)))?;
                if hint == 0 || out.pos() >= end {
                    break 'frame;
                }
                if before == (input.pos(), out.pos()) {
                    return Err(corrupt(&"the decoder made no progress"));
                }
            }
        }
        if !next_piece(blob)? {
            break;
        }
    }
    if out.pos() < end {
        return Err(corrupt(&"decodes short"));
    }
    Ok(&buf[..end])
}

fn new_dctx() -> std::result::Result<DCtx<'static>, &'static str> {
    let mut d = DCtx::try_create().ok_or("cannot allocate a zstd context")?;
    d.set_parameter(DParameter::StableOutBuffer(true))
        .map_err(zstd::zstd_safe::get_error_name)?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text of a few hundred words in random order: about 3:1 under zstd, so
    /// every 128 KiB block is far larger than a feed, and no byte is zero.
    fn words(len: usize) -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let w = x % 300;
            out.extend_from_slice(format!("w{w} ").as_bytes());
        }
        out.truncate(len);
        out
    }

    fn row_for(raw: &[u8], frame: &[u8], at: usize, len: usize) -> SliceRow {
        SliceRow {
            relative_path: "f".into(),
            chunk_seq: 0,
            fdata_offset: 0,
            uncompressed_size: len as u64,
            blob_offset: 0,
            blob_size: frame.len() as u64,
            blob_inner_offset: at as u64,
            compressed: true,
            checksum: *blake3::hash(&raw[at..at + len]).as_bytes(),
            mode: None,
        }
    }

    #[test]
    fn a_slice_decodes_only_to_the_end_of_its_block() {
        let raw = words(1 << 20);
        let frame = zstd::bulk::compress(&raw, 3).unwrap();
        let region = BlobRegion {
            chunk_size: 1 << 20,
            end: frame.len() as u64,
        };
        for at in [1_000, 300_000, (1 << 20) - 100] {
            let row = row_for(&raw, &frame, at, 100);
            let mut scratch = BlobScratch::default();
            let got = region
                .read_slice(&frame.as_slice(), &row, &mut scratch)
                .unwrap();
            assert_eq!(got, &raw[at..at + 100]);
            // The map starts zeroed and the text has no zero byte, so the last
            // non-zero byte shows how far the decoder wrote.
            let map = scratch.decoded.as_ref().unwrap();
            let written = map.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            assert!(
                (at + 100..=at + 100 + (128 << 10)).contains(&written),
                "slice at {at}: decoded {written} bytes"
            );
        }
    }
}
