//! Re-packing a blob region around its dead slices.
//!
//! A live archive whose files were replaced or deleted still holds their
//! blobs, often inside packs shared with live files. Its sealed form is what
//! compressing the live files alone gives, batch by batch, and must not carry a
//! byte of the dead ones. [`repack`] plans that layout from the rows alone,
//! through the same [`Layout`] the engine uses, and writes each planned blob:
//!
//! * **verbatim**, when the old region holds a blob whose decoded content is
//!   exactly the planned one (the same slices at the same offsets, nothing else)
//!   and that was encoded under the same rule: the codec is deterministic, so
//!   those are the bytes compress would write;
//! * **re-encoded** otherwise (a pack that lost or gained a member, a piece
//!   that had deduplicated into a dead slice): its live slices are read and
//!   checked against their blake3, laid end to end and handed to the codec,
//!   which runs for these blobs and for no other.
//!
//! Memory is one planned blob, one decoded old blob and the rows.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use crate::blobs::{BlobRegion, WholeBlob};
use crate::engine::encode;
use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::ipc::read_at;
use crate::layout::{already_compressed, Blob, BlobLoc, Closed, Layout, Piece, SliceLoc, Small};
use crate::props::ArchiveProps;
use crate::row::SliceRow;

/// What a re-pack wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepackStats {
    /// Blobs copied byte for byte from the old region.
    pub blobs_copied: u64,
    /// Their bytes.
    pub bytes_copied: u64,
    /// Blobs rebuilt from their live slices.
    pub blobs_rebuilt: u64,
    /// Of those, the ones handed to the codec (the others are stored raw).
    pub codec_runs: u64,
    /// End of the new blob region.
    pub blob_end: u64,
}

/// One slice of a blob's decoded content: where it lies, its size and blake3.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Member {
    inner: u64,
    size: u64,
    checksum: [u8; 32],
}

#[derive(Debug, Default)]
struct Planned {
    members: Vec<Member>,
    /// Old rows holding each member's bytes.
    sources: Vec<SliceRow>,
    try_compress: bool,
}

/// A blob of the old region, and whether it was handed to the codec when
/// written (any of its files not of a stored-as-is type).
#[derive(Debug)]
struct OldBlob {
    loc: BlobLoc,
    try_compress: bool,
}

/// Writes the blobs of the live files `batches` (each batch's rows in
/// chunk_seq order, a batch per append) to `out`, laid out as compress lays
/// out those files, and returns their rows renumbered from 0.
///
/// `src` holds the old blob region, `[0, blob_end)`; `committed` is every row
/// ever committed to it, dead ones included: it tells what each old blob holds.
pub fn repack(
    src: &dyn ReadAt,
    props: ArchiveProps,
    blob_end: u64,
    committed: &[SliceRow],
    batches: &[Vec<SliceRow>],
    out: &mut dyn Write,
) -> Result<(Vec<SliceRow>, RepackStats)> {
    props.validate()?;
    let region = BlobRegion {
        chunk_size: props.chunk_size,
        end: blob_end,
    };
    let old = old_blobs(committed, &region)?;
    let mut w = Writer {
        src,
        region,
        out,
        stats: RepackStats::default(),
        whole: WholeBlob::new()?,
        input: Vec::new(),
        output: vec![0u8; props.chunk_size as usize],
        zstd: zstd::bulk::Compressor::new(props.level)
            .map_err(|e| Error::io("starting the compressor", e))?,
    };
    let mut layout = Layout::new(props.pack_size);
    let mut rows = Vec::new();
    for batch in batches {
        layout.start_batch();
        let (jobs, placed) = plan_batch(&mut layout, props, batch)?;
        let mut blobs = Vec::with_capacity(jobs.len());
        for job in &jobs {
            blobs.push(w.emit(job, &old)?);
        }
        for (r, loc) in placed {
            let b = Layout::resolve(loc, &blobs)?;
            rows.push(SliceRow {
                chunk_seq: rows.len() as u64,
                blob_offset: b.offset,
                blob_size: b.size,
                blob_inner_offset: loc.inner,
                compressed: b.compressed,
                ..r.clone()
            });
        }
        layout.finish_batch(&blobs)?;
    }
    w.out.flush().map_err(|e| Error::io("writing blobs", e))?;
    Ok((rows, w.stats))
}

/// Every old blob by its content, as `(inner, size, checksum)` in inner order:
/// the distinct slices committed rows place in it.
fn old_blobs(
    committed: &[SliceRow],
    region: &BlobRegion,
) -> Result<HashMap<Vec<Member>, Vec<OldBlob>>> {
    let mut order: Vec<&SliceRow> = committed.iter().collect();
    order.sort_by_key(|r| r.chunk_seq);
    let mut blobs: HashMap<BlobLoc, (Vec<Member>, bool)> = HashMap::new();
    let mut seen: HashSet<(BlobLoc, [u8; 32])> = HashSet::new();
    for r in order {
        region.check(r)?;
        let loc = BlobLoc::of(r);
        // The first row of a checksum in a blob is the one that wrote it; the
        // rest deduplicated into it.
        if seen.insert((loc, r.checksum)) {
            let (members, all_stored) = blobs.entry(loc).or_insert((Vec::new(), true));
            members.push(Member {
                inner: r.blob_inner_offset,
                size: r.uncompressed_size,
                checksum: r.checksum,
            });
            *all_stored &= already_compressed(&r.relative_path);
        }
    }
    let mut by_content: HashMap<Vec<Member>, Vec<OldBlob>> = HashMap::new();
    for (loc, (mut members, all_stored)) in blobs {
        // Stable: an empty file and the file after it share an inner offset.
        members.sort_by_key(|m| m.inner);
        by_content.entry(members).or_default().push(OldBlob {
            loc,
            try_compress: !all_stored,
        });
    }
    for v in by_content.values_mut() {
        v.sort_by_key(|b| b.loc.offset);
    }
    Ok(by_content)
}

/// The batch's blobs in job order, and each live row with its new place.
type BatchPlan<'r> = (Vec<Planned>, Vec<(&'r SliceRow, SliceLoc)>);

fn plan_batch<'r>(
    layout: &mut Layout,
    props: ArchiveProps,
    batch: &'r [SliceRow],
) -> Result<BatchPlan<'r>> {
    let mut jobs: Vec<Planned> = Vec::new();
    let mut placed = Vec::with_capacity(batch.len());
    let close = |jobs: &mut Vec<Planned>, c: Option<Closed>| -> Result<()> {
        if let Some(c) = c {
            job(jobs, c.id)?.try_compress = c.try_compress;
        }
        Ok(())
    };
    for file in batch.chunk_by(|a, b| a.relative_path == b.relative_path) {
        let size: u64 = file.iter().map(|r| r.uncompressed_size).sum();
        let path = file[0].relative_path.as_str();
        if size <= props.pack_threshold {
            let [r] = file else {
                return Err(Error::corrupt(format!(
                    "small file {path} in several slices"
                )));
            };
            match layout.small(r.checksum, size, path) {
                Small::Known(loc) => placed.push((r, loc)),
                Small::Packed { loc, closed } => {
                    close(&mut jobs, closed)?;
                    let Blob::Job(id) = loc.blob else {
                        return Err(Error::corrupt("a packed slice with no job"));
                    };
                    if id as usize == jobs.len() {
                        jobs.push(Planned::default());
                    }
                    let j = job(&mut jobs, id)?;
                    j.members.push(Member {
                        inner: loc.inner,
                        size,
                        checksum: r.checksum,
                    });
                    j.sources.push(r.clone());
                    placed.push((r, loc));
                }
            }
            continue;
        }
        close(&mut jobs, layout.large())?;
        for (i, r) in file.iter().enumerate() {
            let last = i + 1 == file.len();
            let fits = if last {
                r.uncompressed_size > 0 && r.uncompressed_size <= props.chunk_size
            } else {
                r.uncompressed_size == props.chunk_size
            };
            if !fits {
                return Err(Error::corrupt(format!(
                    "{path}: slice at {} is not cut at chunk_size",
                    r.fdata_offset
                )));
            }
            match layout.piece(r.checksum, path) {
                Piece::Known(loc) => placed.push((r, loc)),
                Piece::New(c) => {
                    jobs.push(Planned {
                        members: vec![Member {
                            inner: 0,
                            size: r.uncompressed_size,
                            checksum: r.checksum,
                        }],
                        sources: vec![r.clone()],
                        try_compress: c.try_compress,
                    });
                    placed.push((r, SliceLoc::job(c.id, 0)));
                }
            }
        }
    }
    close(&mut jobs, layout.close())?;
    Ok((jobs, placed))
}

fn job(jobs: &mut [Planned], id: u64) -> Result<&mut Planned> {
    jobs.get_mut(id as usize)
        .ok_or_else(|| Error::corrupt("the layout named a job out of order"))
}

struct Writer<'a> {
    src: &'a dyn ReadAt,
    /// The old blob region.
    region: BlobRegion,
    out: &'a mut dyn Write,
    stats: RepackStats,
    /// The last old blob decoded whole: a rebuilt pack's members mostly come
    /// from one or two old packs, in order.
    whole: WholeBlob,
    input: Vec<u8>,
    output: Vec<u8>,
    zstd: zstd::bulk::Compressor<'static>,
}

impl Writer<'_> {
    fn emit(&mut self, job: &Planned, old: &HashMap<Vec<Member>, Vec<OldBlob>>) -> Result<BlobLoc> {
        let at = self.stats.blob_end;
        if let Some(from) = self.verbatim(job, old)? {
            self.copy(from)?;
            self.stats.blobs_copied += 1;
            self.stats.bytes_copied += from.size;
            return Ok(BlobLoc { offset: at, ..from });
        }
        let mut input = std::mem::take(&mut self.input);
        input.clear();
        for row in &job.sources {
            input.extend_from_slice(self.slice(row)?);
        }
        let frame = if job.try_compress && !input.is_empty() {
            self.stats.codec_runs += 1;
            encode(&mut self.zstd, &input, &mut self.output)
        } else {
            None
        };
        let bytes = match frame {
            Some(n) => &self.output[..n],
            None => &input[..],
        };
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io("writing blobs", e))?;
        let loc = BlobLoc {
            offset: at,
            size: bytes.len() as u64,
            compressed: frame.is_some(),
        };
        self.stats.blob_end += loc.size;
        self.stats.blobs_rebuilt += 1;
        self.input = input;
        Ok(loc)
    }

    /// An old blob that holds exactly the planned content, encoded as compress
    /// would encode it: under the same rule, or raw where the plan wants raw.
    fn verbatim(
        &self,
        job: &Planned,
        old: &HashMap<Vec<Member>, Vec<OldBlob>>,
    ) -> Result<Option<BlobLoc>> {
        let Some(candidates) = old.get(&job.members) else {
            return Ok(None);
        };
        let len: u64 = job.members.iter().map(|m| m.size).sum();
        for c in candidates {
            let same_rule = c.try_compress == job.try_compress;
            if !(same_rule || !job.try_compress && !c.loc.compressed) {
                continue;
            }
            // The rows say what the blob holds; its length says it holds
            // nothing else (a slice no row names would be a dead byte).
            if self.decoded_len(c.loc)? == len {
                return Ok(Some(c.loc));
            }
        }
        Ok(None)
    }

    fn decoded_len(&self, loc: BlobLoc) -> Result<u64> {
        if !loc.compressed {
            return Ok(loc.size);
        }
        let mut head = vec![0u8; loc.size.min(18) as usize];
        read_at(self.src, &mut head, loc.offset, "blob")?;
        match zstd::zstd_safe::get_frame_content_size(&head) {
            Ok(Some(n)) => Ok(n),
            _ => Err(Error::corrupt(format!(
                "blob at {}: no frame header with a content size",
                loc.offset
            ))),
        }
    }

    fn copy(&mut self, from: BlobLoc) -> Result<()> {
        let mut buf = std::mem::take(&mut self.input);
        let mut off = 0;
        while off < from.size {
            let n = (from.size - off).min(1 << 20) as usize;
            buf.resize(n, 0);
            read_at(self.src, &mut buf, from.offset + off, "blob")?;
            self.out
                .write_all(&buf)
                .map_err(|e| Error::io("writing blobs", e))?;
            off += n as u64;
        }
        self.stats.blob_end += from.size;
        self.input = buf;
        Ok(())
    }

    /// The bytes of one old slice, checked against its blake3.
    fn slice(&mut self, row: &SliceRow) -> Result<&[u8]> {
        self.whole.slice(&self.region, self.src, row)
    }
}
