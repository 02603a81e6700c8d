//! Reading one slice out of a blob region, checked before and after.
//!
//! Used by the archive reader and by the live store, whose sidecar file is a
//! blob region without a tail: one implementation of "give me these bytes, and
//! prove they are the ones that were written".

use std::io::{Read, Write};
use std::ops::Range;

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

/// Reusable buffers for reading slices.
#[derive(Debug, Default)]
pub struct BlobScratch {
    blob: Vec<u8>,
    decoded: Vec<u8>,
}

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
    /// (borrowed from `scratch`). A compressed blob is decoded only as far as the
    /// slice reaches.
    pub fn read_slice<'s>(
        &self,
        src: &dyn ReadAt,
        row: &SliceRow,
        scratch: &'s mut BlobScratch,
    ) -> Result<&'s [u8]> {
        self.check(row)?;
        let end = (row.blob_inner_offset + row.uncompressed_size) as usize;
        let start = row.blob_inner_offset as usize;
        scratch.blob.resize(row.blob_size as usize, 0);
        read_at(src, &mut scratch.blob, row.blob_offset, "blob")?;
        let bytes = if row.compressed {
            // Decode only as far as this slice reaches, into one allocation of
            // exactly that size (growing by doubling would copy).
            scratch.decoded.clear();
            scratch.decoded.reserve_exact(end);
            let mut dec = zstd::stream::read::Decoder::with_buffer(&scratch.blob[..])
                .map_err(|e| Error::io("starting zstd", e))?;
            let got = (&mut dec)
                .take(end as u64)
                .read_to_end(&mut scratch.decoded)
                .map_err(|e| Error::corrupt(format!("blob at {}: {e}", row.blob_offset)))?;
            if got < end {
                return Err(Error::corrupt(format!(
                    "blob at {} decodes short",
                    row.blob_offset
                )));
            }
            &scratch.decoded[start..end]
        } else {
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
