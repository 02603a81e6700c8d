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
//!   replaces the sidecar once it is durable. On object storage every seal
//!   re-packs, into a new object ([`znippy_store::SealedWriter`]): a
//!   segment cannot take a tail, and the copy is what publishing needs.
//!
//! The receipt's identity is the blake3 of the tail ([`znippy_format::Archive::identity`]),
//! hashed as the tail is written: no seal reads the payload back.
//!
//! Seal survives a crash at any point: the tail or the new file is written and
//! fsynced before the catalog records the archive as sealed, and a live
//! archive's sidecar is cut back to its committed `blob_end` on open, so sealing
//! again writes the same bytes. Sealing a sealed archive returns the same result.
//! On a shared catalog the seal commits only on the snapshot it planned
//! from: when another node's append or seal came first, the seal plans
//! again, and finds the archive grown or sealed.

use std::io::Write;
use std::sync::Arc;

use znippy_format::{repack, Archive, ReadAt, RepackStats, SliceRow, Tail, TailInfo};
use znippy_sign::Signer;
use znippy_store::{SealPlan, SealedAt, SealedFile, Store, StoreError};

/// Seals begun again after another node committed first, before giving up.
const SEAL_RACES: u32 = 8;

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
    pub at: SealedAt,
    /// Its length.
    pub size: u64,
    /// Its identity: blake3 of the tail (bytes from `blob_end` on).
    pub identity: [u8; 32],
    /// Whether the tail was written after the existing blobs (no re-pack).
    pub in_place: bool,
    /// What the re-pack did (all zero in place).
    pub repack: RepackStats,
    /// Tail bytes written (the signature's included).
    pub tail_bytes: u64,
    /// Who signed it (the first signature's signer), if it is signed.
    pub signer: Option<String>,
}

/// Seals archive `id` of `store`, signed by `signer` if given (a detached
/// CMS signature over its identity, docs/format.md 6.6, written after the
/// tail in the same pass). Appends and deletes wait while it runs and are
/// refused afterwards.
pub async fn seal(
    store: &Store,
    id: &str,
    signer: Option<Arc<Signer>>,
) -> Result<SealReceipt, SealError> {
    let mut lost = 0;
    loop {
        let (guard, plan) = store.begin_seal(id).await?;
        let signer = signer.clone();
        let (plan, written) = tokio::task::spawn_blocking(move || {
            let written = match plan.already.clone() {
                Some(done) => sealed_receipt(&plan, done).map(|r| (r, false)),
                None => write_sealed(&plan, signer.as_deref()).map(|r| (r, true)),
            };
            (plan, written)
        })
        .await
        .map_err(|e| StoreError::Task(format!("seal: {e}")))?;
        let (receipt, new) = written?;
        if !new {
            return Ok(receipt);
        }
        let sealed = SealedFile {
            at: receipt.at.clone(),
            len: receipt.size,
        };
        match store.finish_seal(guard, &plan, sealed).await {
            Err(e) if e.is_conflict() && lost < SEAL_RACES => lost += 1,
            r => return r.map(|()| receipt).map_err(SealError::from),
        }
    }
}

/// The receipt of an archive sealed earlier, read from its tail.
fn sealed_receipt(plan: &SealPlan, done: SealedFile) -> Result<SealReceipt, SealError> {
    let archive = Archive::open(plan.blobs())?;
    let identity = archive.identity()?;
    Ok(SealReceipt {
        signer: signer(&archive, &identity)?,
        identity,
        in_place: plan.is_in_place(&done),
        repack: RepackStats::default(),
        tail_bytes: done.len - archive.blob_end(),
        size: done.len,
        at: done.at,
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

/// Who signed `archive`, whose identity is `identity` (the caller's, as
/// hashing the tail is the one read that costs): the subjects of its
/// signatures' signers, each signature checked against its own certificate
/// and over this identity (not against a CA: that is `znippy verify
/// --ca`'s question); `None` when it has no signature.
pub fn signer<R: ReadAt>(
    archive: &Archive<R>,
    identity: &[u8; 32],
) -> Result<Option<String>, SealError> {
    let signatures = archive.signatures()?;
    if signatures.is_empty() {
        return Ok(None);
    }
    let content = znippy_format::signed_content(identity);
    let mut names = Vec::new();
    for der in &signatures {
        let signed = znippy_sign::verify(der, &content, None, std::time::SystemTime::now())
            .map_err(|e| znippy_format::Error::Signing(e.to_string()))?;
        names.extend(signed.into_iter().map(|s| s.signer));
    }
    Ok(Some(names.join(", ")))
}

fn write_sealed(plan: &SealPlan, signer: Option<&Signer>) -> Result<SealReceipt, SealError> {
    let name = signer.map(Signer::subject);
    if plan.in_place {
        let rows = one_shot_rows(plan);
        let (done, info) =
            plan.seal_in_place(|out| write_tail(out, plan, plan.blob_end, &rows, signer))?;
        return Ok(SealReceipt {
            signer: name,
            size: done.len,
            at: done.at,
            identity: info.identity,
            in_place: true,
            repack: RepackStats::default(),
            tail_bytes: done.len - plan.blob_end,
        });
    }
    let mut out = plan.create_sealed()?;
    let (rows, stats) = repack(
        plan.blobs(),
        plan.props,
        plan.blob_end,
        &plan.committed,
        &plan.batches,
        &mut out,
    )?;
    let info = write_tail(&mut out, plan, stats.blob_end, &rows, signer)?;
    let done = out.finish()?;
    Ok(SealReceipt {
        signer: name,
        at: done.at,
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
    signer: Option<&Signer>,
) -> Result<TailInfo, SealError> {
    let tail = Tail {
        props: plan.props,
        blob_end,
        rows,
        meta: &plan.meta,
        packages: &plan.packages,
    };
    let info = match signer {
        None => znippy_format::write_tail(out, tail)?,
        Some(signer) => znippy_format::write_signed_tail(out, tail, &|content| {
            signer
                .sign(content)
                .map_err(|e| znippy_format::Error::Signing(e.to_string()))
        })?,
    };
    out.flush().map_err(io("writing the tail"))?;
    Ok(info)
}
