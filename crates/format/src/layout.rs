//! Where each slice goes: the packing and dedupe rules, apart from the bytes.
//!
//! docs/format.md §3 decides the blob region from the ordered input alone: a
//! small file joins the open pack (which closes when the next file would push it
//! past `pack_size`), a large file closes the pack and becomes one blob per
//! `chunk_size` piece, and a slice identical to an earlier one is not written
//! again. This module is those rules and nothing else, as a state machine that
//! is told each slice's size and blake3 and answers with its place.
//!
//! Two callers ask it: the [`crate::Engine`], which has the bytes, and
//! [`crate::repack`], which has only the rows of a live archive and must lay its
//! live files out exactly as the engine would. One implementation of the rules
//! means the two cannot drift apart.

use std::collections::HashMap;
use std::io;

use crate::error::{Error, Result};
use crate::row::SliceRow;

/// Extensions of formats that are already compressed: stored without trying zstd.
const STORED_EXTENSIONS: &[&str] = &[
    "7z", "apk", "avif", "br", "bz2", "crate", "deb", "docx", "epub", "gif", "gz", "heic", "jar",
    "jpeg", "jpg", "lz4", "lzma", "mkv", "mov", "mp3", "mp4", "odt", "ogg", "parquet", "png",
    "pptx", "rar", "rpm", "tbz2", "tgz", "txz", "webm", "webp", "whl", "woff2", "xlsx", "xz",
    "zip", "zst",
];

pub(crate) fn already_compressed(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => STORED_EXTENSIONS
            .iter()
            .any(|e| e.eq_ignore_ascii_case(ext)),
        _ => false,
    }
}

/// Where a blob landed in the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlobLoc {
    pub offset: u64,
    pub size: u64,
    pub compressed: bool,
}

impl BlobLoc {
    pub fn of(row: &SliceRow) -> Self {
        BlobLoc {
            offset: row.blob_offset,
            size: row.blob_size,
            compressed: row.compressed,
        }
    }
}

/// A blob that is written already, or the job (numbered within the batch) that
/// will write it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Blob {
    Written(BlobLoc),
    Job(u64),
}

/// A slice's place: its blob and its offset inside the decoded blob.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SliceLoc {
    pub blob: Blob,
    pub inner: u64,
}

impl SliceLoc {
    pub fn job(id: u64, inner: u64) -> Self {
        SliceLoc {
            blob: Blob::Job(id),
            inner,
        }
    }
}

/// A blob that is ready to go out: job `id`, handed to the codec if
/// `try_compress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed {
    pub id: u64,
    pub try_compress: bool,
}

/// Where a small file went.
pub(crate) enum Small {
    /// An identical slice is already placed: the file points at it.
    Known(SliceLoc),
    /// Into the open pack at `loc`; `closed` is the pack it overflowed, if any,
    /// which goes out before it.
    Packed {
        loc: SliceLoc,
        closed: Option<Closed>,
    },
}

/// Where a piece of a large file went.
pub(crate) enum Piece {
    /// An identical slice is already placed.
    Known(SliceLoc),
    /// Its own blob, at inner offset 0.
    New(Closed),
}

#[derive(Debug, Default)]
struct OpenPack {
    /// Given when the first file goes in: an empty pack is no job.
    id: Option<u64>,
    len: u64,
    all_stored: bool,
}

/// The rules' state across batches: the dedupe map, the open pack and the
/// batch's job numbers.
#[derive(Debug)]
pub(crate) struct Layout {
    pack_size: u64,
    /// Slices written by earlier batches.
    known: HashMap<[u8; 32], SliceLoc>,
    /// Slices of this batch, by job.
    batch_new: HashMap<[u8; 32], SliceLoc>,
    open: OpenPack,
    next_job: u64,
}

impl Layout {
    pub fn new(pack_size: u64) -> Self {
        Layout {
            pack_size,
            known: HashMap::new(),
            batch_new: HashMap::new(),
            open: OpenPack::default(),
            next_job: 0,
        }
    }

    /// Makes exactly `live` (in chunk_seq order) the dedupe targets: the first
    /// row of each checksum is where that slice was written.
    pub fn forget_all_but(&mut self, live: &[SliceRow]) {
        self.known.clear();
        for r in live {
            let loc = SliceLoc {
                blob: Blob::Written(BlobLoc::of(r)),
                inner: r.blob_inner_offset,
            };
            self.known.entry(r.checksum).or_insert(loc);
        }
    }

    fn lookup(&self, hash: &[u8; 32]) -> Option<SliceLoc> {
        self.batch_new
            .get(hash)
            .or_else(|| self.known.get(hash))
            .copied()
    }

    fn new_job(&mut self) -> u64 {
        let id = self.next_job;
        self.next_job += 1;
        id
    }

    /// Places a file of `len` bytes, at most `pack_threshold`.
    pub fn small(&mut self, hash: [u8; 32], len: u64, path: &str) -> Small {
        if let Some(loc) = self.lookup(&hash) {
            return Small::Known(loc);
        }
        // Only a pack that holds bytes can overflow, so `closed` is never empty.
        let closed = if self.open.len + len > self.pack_size {
            self.close()
        } else {
            None
        };
        let id = match self.open.id {
            Some(id) => id,
            None => {
                let id = self.new_job();
                self.open = OpenPack {
                    id: Some(id),
                    len: 0,
                    all_stored: true,
                };
                id
            }
        };
        let loc = SliceLoc::job(id, self.open.len);
        self.open.len += len;
        self.open.all_stored &= already_compressed(path);
        self.batch_new.insert(hash, loc);
        Small::Packed { loc, closed }
    }

    /// A large file begins: the open pack goes out before its first piece, so
    /// blobs stay in chunk_seq order.
    pub fn large(&mut self) -> Option<Closed> {
        self.close()
    }

    /// Places one piece of a large file.
    pub fn piece(&mut self, hash: [u8; 32], path: &str) -> Piece {
        if let Some(loc) = self.lookup(&hash) {
            return Piece::Known(loc);
        }
        let id = self.new_job();
        self.batch_new.insert(hash, SliceLoc::job(id, 0));
        Piece::New(Closed {
            id,
            try_compress: !already_compressed(path),
        })
    }

    /// Closes the open pack, if it holds a file.
    pub fn close(&mut self) -> Option<Closed> {
        let pack = std::mem::take(&mut self.open);
        pack.id.map(|id| Closed {
            id,
            try_compress: !pack.all_stored,
        })
    }

    /// Where a slice placed in this batch landed, once the batch's blobs are
    /// written (`blobs[id]` is job `id`'s).
    pub fn resolve(loc: SliceLoc, blobs: &[BlobLoc]) -> Result<BlobLoc> {
        match loc.blob {
            Blob::Written(b) => Ok(b),
            Blob::Job(id) => blobs.get(id as usize).copied().ok_or_else(|| {
                Error::io("blob writer", io::Error::other("a blob was never written"))
            }),
        }
    }

    /// Starts a batch, dropping whatever a failed one left: its slices were
    /// never written, so nothing may point at them.
    pub fn start_batch(&mut self) {
        self.batch_new.clear();
        self.open = OpenPack::default();
        self.next_job = 0;
    }

    /// Ends the batch: its slices become dedupe targets at their written places.
    /// The open pack must have been closed.
    pub fn finish_batch(&mut self, blobs: &[BlobLoc]) -> Result<()> {
        for (hash, loc) in std::mem::take(&mut self.batch_new) {
            let blob = Blob::Written(Self::resolve(loc, blobs)?);
            self.known.insert(
                hash,
                SliceLoc {
                    blob,
                    inner: loc.inner,
                },
            );
        }
        self.open = OpenPack::default();
        self.next_job = 0;
        Ok(())
    }
}
