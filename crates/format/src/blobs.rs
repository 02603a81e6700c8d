//! Reading one slice out of a blob region, checked before and after.
//!
//! Used by the archive reader and by the live store, whose sidecar file is a
//! blob region without a tail: one implementation of "give me these bytes, and
//! prove they are the ones that were written".

use std::io::Write;
use std::ops::Range;

use zstd::zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer, ResetDirective};

use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::ipc::read_at;
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
    decoded: Vec<u8>,
    dctx: Option<DCtx<'static>>,
}

impl std::fmt::Debug for BlobScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobScratch").finish_non_exhaustive()
    }
}

/// How much of a compressed blob is read at a time. A slice early in a pack
/// needs only the first blocks of its frame, so the rest is never read.
const READ_PIECE: usize = 128 << 10;

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
            decode_prefix(src, row, end, self.chunk_size, scratch)?;
            &scratch.decoded[start..end]
        } else {
            scratch.blob.resize(row.blob_size as usize, 0);
            read_at(src, &mut scratch.blob, row.blob_offset, "blob")?;
            &scratch.blob[start..end]
        };
        if blake3::hash(bytes).as_bytes() != &row.checksum {
            return Err(Error::Checksum(format!(
                "{} at offset {}",
                row.relative_path, row.fdata_offset
            )));
        }
        Ok(bytes)
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
}

/// Decodes the frame of `row`'s blob into `scratch.decoded` until it holds at
/// least `end` bytes, reading the blob a piece at a time.
///
/// The decoder writes straight into `decoded` (zstd's stable output buffer), so
/// no second, window-sized buffer is filled and copied: on a one-file `get` the
/// pages touched are most of the cost. `decoded` reserves the frame's whole
/// content size, as that mode requires, but only the part written is touched.
fn decode_prefix(
    src: &dyn ReadAt,
    row: &SliceRow,
    end: usize,
    chunk_size: u64,
    scratch: &mut BlobScratch,
) -> Result<()> {
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
        let n = READ_PIECE.min((blob_end - pos) as usize);
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
    decoded.clear();
    decoded.reserve_exact(content);
    let mut out = OutBuffer::around(decoded);
    'frame: while out.pos() < end {
        let mut input = InBuffer::around(blob);
        while input.pos() < input.src.len() {
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
        if !next_piece(blob)? {
            break;
        }
    }
    if out.pos() < end {
        return Err(corrupt(&"decodes short"));
    }
    Ok(())
}

fn new_dctx() -> std::result::Result<DCtx<'static>, &'static str> {
    let mut d = DCtx::try_create().ok_or("cannot allocate a zstd context")?;
    d.set_parameter(DParameter::StableOutBuffer(true))
        .map_err(zstd::zstd_safe::get_error_name)?;
    Ok(d)
}
