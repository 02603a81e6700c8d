//! Seal: turn a live archive into an immutable `.znippy`.
//!
//! The sealed file is what [`znippy_format::compress`] makes of the archive's
//! live files, batch by batch in append order, and the ordinary reader opens it.
//! Blobs are never recompressed:
//!
//! * **In place.** When no committed row is dead (nothing replaced or deleted),
//!   the sidecar already holds exactly the blob region a one-shot compress would
//!   write. Seal then writes only the tail after `blob_end`, through the format's
//!   one tail writer: its cost is O(index), whatever the payload.
//! * **Copy.** Otherwise the live blobs are copied verbatim, in the order a
//!   one-shot compress would first write them, into a new file; rows are
//!   re-pointed and a slice identical to an earlier live one points at it, as
//!   compress's dedupe would. The result equals a one-shot compress whenever
//!   every pack block is wholly live or wholly dead; a pack block that mixes
//!   live and dead files is kept whole (its dead bytes included), since making it
//!   match would mean recompressing.
//!
//! Seal survives a crash at any point: the tail or the copy is written and
//! fsynced before the catalog records the archive as sealed, and a live
//! archive's sidecar is cut back to its committed `blob_end` on open, so sealing
//! again writes the same bytes. Sealing a sealed archive returns the same result.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use znippy_format::{write_tail, SliceRow, Tail};
use znippy_store::{SealPlan, SealedFile, Store, StoreError};

/// What went wrong while sealing.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The container layer refused or failed.
    #[error(transparent)]
    Format(#[from] znippy_format::Error),
    /// Local I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SealError {
    let context = context.into();
    move |source| SealError::Io { context, source }
}

/// What a seal produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealReceipt {
    /// The sealed `.znippy`.
    pub path: PathBuf,
    /// Its length.
    pub size: u64,
    /// Whether the tail was written after the existing blobs (no copy).
    pub in_place: bool,
    /// Blob bytes copied (0 in place).
    pub bytes_copied: u64,
    /// Tail bytes written.
    pub tail_bytes: u64,
}

/// Seals archive `id` of `store`. Appends and deletes wait while it runs and are
/// refused afterwards.
pub async fn seal(store: &Store, id: &str) -> Result<SealReceipt, SealError> {
    let (guard, plan) = store.begin_seal(id).await?;
    if let Some(done) = &plan.already {
        let blob_end = plan.blob_end;
        return Ok(SealReceipt {
            path: done.path.clone(),
            size: done.len,
            in_place: done.path == plan.sidecar_path,
            bytes_copied: 0,
            tail_bytes: done.len.saturating_sub(blob_end),
        });
    }
    let receipt = tokio::task::spawn_blocking(move || write_sealed(plan))
        .await
        .map_err(|e| io("seal task")(std::io::Error::other(e.to_string())))??;
    store
        .finish_seal(
            guard,
            SealedFile {
                path: receipt.path.clone(),
                len: receipt.size,
            },
        )
        .await?;
    Ok(receipt)
}

/// Live rows in one-shot order, `chunk_seq` renumbered as compress numbers them.
fn one_shot_rows(plan: &SealPlan) -> Vec<SliceRow> {
    let mut rows: Vec<SliceRow> = plan.batches.iter().flatten().cloned().collect();
    for (i, r) in rows.iter_mut().enumerate() {
        r.chunk_seq = i as u64;
    }
    rows
}

fn write_sealed(plan: SealPlan) -> Result<SealReceipt, SealError> {
    let rows = one_shot_rows(&plan);
    if plan.in_place {
        let mut out = BufWriter::new(plan.sidecar.writer_at(plan.blob_end));
        let info = write_tail(
            &mut out,
            Tail {
                props: plan.props,
                blob_end: plan.blob_end,
                rows: &rows,
                meta: &plan.meta,
            },
        )?;
        out.flush().map_err(io("writing the tail"))?;
        drop(out);
        // A retried seal after a crash may find a longer partial tail: cut it.
        plan.sidecar.truncate(info.archive_len)?;
        plan.sidecar.sync()?;
        return Ok(SealReceipt {
            path: plan.sidecar_path.clone(),
            size: info.archive_len,
            in_place: true,
            bytes_copied: 0,
            tail_bytes: info.archive_len - plan.blob_end,
        });
    }
    copy_sealed(&plan, rows)
}

/// The copy path: live blobs in first-use order, deduplicated by checksum.
fn copy_sealed(plan: &SealPlan, mut rows: Vec<SliceRow>) -> Result<SealReceipt, SealError> {
    std::fs::create_dir_all(&plan.sealed_dir).map_err(io("creating the sealed directory"))?;
    let path = plan.sealed_dir.join(format!("{}.znippy", plan.id));
    let tmp = plan.sealed_dir.join(format!("{}.znippy.partial", plan.id));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io(format!("creating {}", tmp.display())))?;
    let src: &File = plan.sidecar.file();
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    // old blob (offset, size, compressed) -> new offset; checksum -> new location.
    let mut moved: HashMap<(u64, u64, bool), u64> = HashMap::new();
    let mut by_sum: HashMap<[u8; 32], (u64, u64, bool, u64)> = HashMap::new();
    let mut end = 0u64;
    let mut buf = Vec::new();
    for r in &mut rows {
        if let Some(&(off, size, comp, inner)) = by_sum.get(&r.checksum) {
            (
                r.blob_offset,
                r.blob_size,
                r.compressed,
                r.blob_inner_offset,
            ) = (off, size, comp, inner);
            continue;
        }
        let key = (r.blob_offset, r.blob_size, r.compressed);
        let new_off = match moved.get(&key) {
            Some(&o) => o,
            None => {
                buf.resize(r.blob_size as usize, 0);
                src.read_exact_at(&mut buf, r.blob_offset)
                    .map_err(io("reading a blob from the sidecar"))?;
                out.write_all(&buf)
                    .map_err(io("writing the sealed archive"))?;
                let o = end;
                end += r.blob_size;
                moved.insert(key, o);
                o
            }
        };
        r.blob_offset = new_off;
        by_sum.insert(
            r.checksum,
            (
                r.blob_offset,
                r.blob_size,
                r.compressed,
                r.blob_inner_offset,
            ),
        );
    }
    let info = write_tail(
        &mut out,
        Tail {
            props: plan.props,
            blob_end: end,
            rows: &rows,
            meta: &plan.meta,
        },
    )?;
    out.flush().map_err(io("writing the sealed archive"))?;
    drop(out);
    file.sync_all().map_err(io("fsync of the sealed archive"))?;
    std::fs::rename(&tmp, &path).map_err(io("publishing the sealed archive"))?;
    File::open(&plan.sealed_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync of the sealed directory"))?;
    Ok(SealReceipt {
        path,
        size: info.archive_len,
        in_place: false,
        bytes_copied: end,
        tail_bytes: info.archive_len - end,
    })
}

/// blake3 of a sealed archive: reads the whole file (O(payload)), so it is kept
/// apart from the seal itself, whose cost is O(index).
pub fn file_blake3(path: &std::path::Path) -> Result<[u8; 32], SealError> {
    let f = File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let len = f.metadata().map_err(io("reading the archive size"))?.len();
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], off)
            .map_err(io("reading the archive"))?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(*h.finalize().as_bytes())
}
