//! Seal: turn a live archive into an immutable `.znippy`.
//!
//! The sealed file is canonical: exactly what [`znippy_format::compress`] makes
//! of the archive's live files, batch by batch in append order (each batch in
//! the order its files arrived), which is `znippy compress` of the first batch
//! then `znippy append` of each later one. Nothing a user deleted or replaced
//! is published, raw or inside a zstd frame.
//!
//! * **In place.** When no committed row is dead, the sidecar already holds
//!   exactly that blob region. Seal writes only the tail after `blob_end`,
//!   through the format's one tail writer: O(index), whatever the payload.
//! * **Re-pack.** Otherwise [`znippy_format::repack`] plans the canonical
//!   layout from the rows, copies every blob the plan keeps unchanged and
//!   re-encodes only the packs whose members changed, into a new file that
//!   replaces the sidecar once it is durable.
//!
//! The receipt's identity is the blake3 of the tail ([`znippy_format::Archive::identity`]),
//! hashed as the tail is written: no seal reads the payload back.
//!
//! Seal survives a crash at any point: the tail or the new file is written and
//! fsynced before the catalog records the archive as sealed, and a live
//! archive's sidecar is cut back to its committed `blob_end` on open, so sealing
//! again writes the same bytes. Sealing a sealed archive returns the same result.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use znippy_format::{durable, repack, Archive, RepackStats, SliceRow, Tail, TailInfo};
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
    /// Its identity: blake3 of the tail (bytes from `blob_end` on).
    pub identity: [u8; 32],
    /// Whether the tail was written after the existing blobs (no re-pack).
    pub in_place: bool,
    /// What the re-pack did (all zero in place).
    pub repack: RepackStats,
    /// Tail bytes written.
    pub tail_bytes: u64,
}

/// Seals archive `id` of `store`. Appends and deletes wait while it runs and are
/// refused afterwards.
pub async fn seal(store: &Store, id: &str) -> Result<SealReceipt, SealError> {
    let (guard, plan) = store.begin_seal(id).await?;
    if let Some(done) = plan.already.clone() {
        return tokio::task::spawn_blocking(move || sealed_receipt(&plan, done))
            .await
            .map_err(|e| StoreError::Task(format!("seal: {e}")))?;
    }
    let receipt = tokio::task::spawn_blocking(move || write_sealed(plan))
        .await
        .map_err(|e| StoreError::Task(format!("seal: {e}")))??;
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

/// The receipt of an archive sealed earlier, read from its tail.
fn sealed_receipt(plan: &SealPlan, done: SealedFile) -> Result<SealReceipt, SealError> {
    let file = File::open(&done.path).map_err(io(format!("opening {}", done.path.display())))?;
    let archive = Archive::open(file)?;
    Ok(SealReceipt {
        identity: archive.identity()?,
        in_place: plan.is_in_place(&done),
        repack: RepackStats::default(),
        tail_bytes: done.len - archive.blob_end(),
        size: done.len,
        path: done.path,
    })
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
    if plan.in_place {
        let rows = one_shot_rows(&plan);
        let (done, info) =
            plan.seal_in_place(|out| write_tail(out, &plan, plan.blob_end, &rows))?;
        return Ok(SealReceipt {
            size: done.len,
            path: done.path,
            identity: info.identity,
            in_place: true,
            repack: RepackStats::default(),
            tail_bytes: done.len - plan.blob_end,
        });
    }
    std::fs::create_dir_all(&plan.sealed_dir).map_err(io("creating the sealed directory"))?;
    let path = plan.sealed_dir.join(format!("{}.znippy", plan.id));
    let tmp = plan.sealed_dir.join(format!("{}.znippy.partial", plan.id));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io(format!("creating {}", tmp.display())))?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    let (rows, stats) = repack(
        plan.blobs(),
        plan.props,
        plan.blob_end,
        &plan.committed,
        &plan.batches,
        &mut out,
    )?;
    let info = write_tail(&mut out, &plan, stats.blob_end, &rows)?;
    drop(out);
    durable::sync_all(&file, &tmp).map_err(io("fsync of the sealed archive"))?;
    znippy_format::failpoint("seal.copy-synced");
    std::fs::rename(&tmp, &path).map_err(io("publishing the sealed archive"))?;
    durable::sync_dir(&plan.sealed_dir).map_err(io("fsync of the sealed directory"))?;
    znippy_format::failpoint("seal.renamed");
    Ok(SealReceipt {
        path,
        size: info.archive_len,
        identity: info.identity,
        in_place: false,
        repack: stats,
        tail_bytes: info.archive_len - stats.blob_end,
    })
}

fn write_tail(
    out: &mut dyn Write,
    plan: &SealPlan,
    blob_end: u64,
    rows: &[SliceRow],
) -> Result<TailInfo, SealError> {
    let info = znippy_format::write_tail(
        out,
        Tail {
            props: plan.props,
            blob_end,
            rows,
            meta: &plan.meta,
        },
    )?;
    out.flush().map_err(io("writing the tail"))?;
    Ok(info)
}
