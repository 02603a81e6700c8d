//! One file of an archive, opened for reading.
//!
//! Opening takes the file's rows under the archive's lock; reading happens
//! after the lock is gone. That is safe because committed blobs never move: an
//! append writes past `blob_end`, recovery cuts only uncommitted bytes, and a
//! seal or drop that removes the sidecar leaves open handles readable.

use std::io::Write;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use znippy_format::{BlobRegion, BlobScratch, Entry, ReadAt, SliceRow};

use crate::error::{Result, StoreError};

/// Decode buffers and zstd contexts kept between reads. A fresh scratch maps
/// its decode buffer and takes the page faults of whatever it decodes, which
/// costs more than reading a small file out of a warm one; a server reads many.
#[derive(Debug, Default)]
pub(crate) struct ScratchPool(Mutex<Vec<BlobScratch>>);

/// Scratches kept for reuse; reads beyond this many at once get fresh ones.
/// Each holds a decode buffer of up to chunk_size bytes.
const KEPT_SCRATCHES: usize = 8;

impl ScratchPool {
    fn take(&self) -> BlobScratch {
        self.0
            .lock()
            .ok()
            .and_then(|mut kept| kept.pop())
            .unwrap_or_default()
    }

    fn give_back(&self, scratch: BlobScratch) {
        if let Ok(mut kept) = self.0.lock() {
            if kept.len() < KEPT_SCRATCHES {
                kept.push(scratch);
            }
        }
    }
}

/// A file's rows and a handle on the bytes they point into.
pub struct FileReader {
    entry: Entry,
    rows: Vec<SliceRow>,
    region: BlobRegion,
    src: Arc<dyn ReadAt>,
    scratches: Arc<ScratchPool>,
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

impl FileReader {
    pub(crate) fn new(
        path: &str,
        rows: Vec<SliceRow>,
        region: BlobRegion,
        src: Arc<dyn ReadAt>,
        scratches: Arc<ScratchPool>,
    ) -> Result<Self> {
        let size = znippy_format::check_file_rows(path, &rows)?;
        let entry = Entry {
            path: path.to_string(),
            size,
            mode: rows.first().and_then(|r| r.mode),
            slices: rows.len() as u64,
        };
        Ok(FileReader {
            entry,
            rows,
            region,
            src,
            scratches,
        })
    }

    /// The file's path, size and mode.
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// A strong validator of the content: blake3 over the slices' checksums
    /// (which are blake3 of the bytes), so equal bytes in equal slices give
    /// equal tags across appends, archives and seal.
    pub fn etag(&self) -> String {
        let mut h = blake3::Hasher::new();
        for r in &self.rows {
            h.update(&r.checksum);
        }
        h.finalize().to_hex()[..32].to_string()
    }

    /// The target of the file, a symbolic link, read only if its rows say it
    /// is no longer than a link may be.
    pub fn read_link(&self) -> Result<Vec<u8>> {
        let mut scratch = self.scratches.take();
        let target = self.region.read_link(
            self.src.as_ref(),
            &self.entry.path,
            &self.rows,
            &mut scratch,
        );
        self.scratches.give_back(scratch);
        Ok(target?)
    }

    /// Writes bytes `range` of the file (clamped to its size) to `out`, reading
    /// and verifying only the slices the range touches.
    pub fn read_range(&self, range: Range<u64>, out: &mut dyn Write) -> Result<u64> {
        let mut scratch = self.scratches.take();
        let written =
            self.region
                .write_range(self.src.as_ref(), &self.rows, range, out, &mut scratch);
        self.scratches.give_back(scratch);
        written.map_err(|e| match e {
            znippy_format::Error::NotFound(p) => StoreError::NotFound(p),
            e => e.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(pool: &ScratchPool) -> usize {
        pool.0.lock().map_or(0, |k| k.len())
    }

    #[test]
    fn the_pool_keeps_what_comes_back_up_to_its_bound() {
        let pool = ScratchPool::default();
        let taken: Vec<BlobScratch> = (0..KEPT_SCRATCHES + 3).map(|_| pool.take()).collect();
        assert_eq!(kept(&pool), 0);
        for s in taken {
            pool.give_back(s);
        }
        assert_eq!(kept(&pool), KEPT_SCRATCHES);
        let _reused = pool.take();
        assert_eq!(kept(&pool), KEPT_SCRATCHES - 1);
    }

    #[test]
    fn a_read_returns_its_scratch_to_the_pool() {
        let bytes = b"hello, pool".to_vec();
        let row = SliceRow {
            relative_path: "f".into(),
            chunk_seq: 0,
            fdata_offset: 0,
            uncompressed_size: bytes.len() as u64,
            blob_offset: 0,
            blob_size: bytes.len() as u64,
            blob_inner_offset: 0,
            compressed: false,
            checksum: *blake3::hash(&bytes).as_bytes(),
            mode: None,
        };
        let region = BlobRegion {
            chunk_size: 1 << 20,
            end: bytes.len() as u64,
        };
        let pool = Arc::new(ScratchPool::default());
        let src: Arc<dyn ReadAt> = Arc::new(bytes.clone());
        let file = FileReader::new("f", vec![row], region, src, pool.clone()).unwrap();
        for _ in 0..3 {
            let mut out = Vec::new();
            file.read_range(0..u64::MAX, &mut out).unwrap();
            assert_eq!(out, bytes);
            assert_eq!(kept(&pool), 1, "one scratch, reused");
        }
    }
}
