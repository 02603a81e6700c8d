//! Whole-archive operations: compress batches into a new archive, append a batch
//! to an existing one. Both end with the one tail writer.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use crate::engine::{Batch, Changed, Engine, InputFile};
use crate::error::{Error, Result};
use crate::meta::{MetaTable, Metadata};
use crate::package::{Packages, Plugins};
use crate::props::ArchiveProps;
use crate::reader::Archive;
use crate::row::SliceRow;
use crate::tail::{write_tail, Tail, TailInfo};
use crate::undo::{self, Recovery};

/// What a compress or append did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Files read from the input.
    pub files: u64,
    /// Input bytes.
    pub bytes_in: u64,
    /// Slices deduplicated against earlier identical ones.
    pub deduped_slices: u64,
    /// Files in the archive afterwards.
    pub archive_files: u64,
    /// Length of the archive afterwards.
    pub archive_len: u64,
    /// Rows of the package sections afterwards.
    pub package_rows: u64,
    /// The files that changed while they were read (stored as read).
    pub changed: Vec<Changed>,
}

impl Summary {
    fn add(&mut self, batch: &mut Batch) {
        let s = batch.stats;
        self.files += s.files;
        self.bytes_in += s.bytes_in;
        self.deduped_slices += s.deduped_slices;
        self.changed.append(&mut batch.changed);
    }
}

/// Folds a new batch's rows into the live set: a path of the batch replaces every
/// earlier row of that path. `chunk_seq` is renumbered densely in write order, so
/// the result is what compressing the live batches in one go would number.
/// Returns whether any earlier row was dropped.
pub fn merge_batch(live: &mut Vec<SliceRow>, batch: Vec<SliceRow>) -> bool {
    let replaced: HashSet<&str> = batch.iter().map(|r| r.relative_path.as_str()).collect();
    let before = live.len();
    live.retain(|r| !replaced.contains(r.relative_path.as_str()));
    let dropped = live.len() != before;
    live.extend(batch);
    for (i, r) in live.iter_mut().enumerate() {
        r.chunk_seq = i as u64;
    }
    dropped
}

/// [`merge_batch`] of a whole [`Batch`]: its package rows replace those of
/// the paths it wrote, as its slices replace theirs.
fn merge(live: &mut Vec<SliceRow>, packages: &mut Packages, batch: Batch) -> Result<bool> {
    let written: HashSet<&str> = batch
        .rows
        .iter()
        .map(|r| r.relative_path.as_str())
        .collect();
    packages.merge(&written, batch.packages)?;
    Ok(merge_batch(live, batch.rows))
}

fn count_files(rows: &[SliceRow]) -> u64 {
    rows.iter().filter(|r| r.fdata_offset == 0).count() as u64
}

/// Compresses `batches` (each an ordered list of files) into a new archive written
/// to `out`, with `meta` as its metadata section and no plugin.
pub fn compress<B, I>(
    out: &mut (dyn Write + Send),
    batches: B,
    props: ArchiveProps,
    threads: usize,
    meta: &Metadata,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary>
where
    B: IntoIterator<Item = I>,
    I: IntoIterator<Item = Result<InputFile>>,
{
    compress_with(
        out,
        batches,
        props,
        threads,
        meta,
        &Plugins::none(),
        progress,
    )
}

/// [`compress`], running `plugins` on the files they claim: their rows make
/// the archive's package sections.
pub fn compress_with<B, I>(
    out: &mut (dyn Write + Send),
    batches: B,
    props: ArchiveProps,
    threads: usize,
    meta: &Metadata,
    plugins: &Plugins,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary>
where
    B: IntoIterator<Item = I>,
    I: IntoIterator<Item = Result<InputFile>>,
{
    let mut engine = Engine::new(props, threads)?.with_plugins(plugins.clone());
    let mut live = Vec::new();
    let mut packages = Packages::default();
    let mut summary = Summary::default();
    for batch in batches {
        let mut batch = engine.write_batch(batch, out, progress)?;
        summary.add(&mut batch);
        if merge(&mut live, &mut packages, batch)? {
            // Dedupe sees live slices only, as an append reopening the archive
            // would: so batches in one go and batch-by-batch appends agree.
            engine.forget_all_but(&live);
        }
    }
    let info = write_tail(
        out,
        Tail {
            props,
            blob_end: engine.blob_end(),
            rows: &live,
            meta,
            packages: &packages,
        },
    )?;
    out.flush()
        .map_err(|e| Error::io("writing the archive", e))?;
    summary.archive_files = count_files(&live);
    summary.archive_len = info.archive_len;
    summary.package_rows = packages.rows().count() as u64;
    Ok(summary)
}

/// Metadata changes that come with an append.
#[derive(Debug, Clone, Default)]
pub struct MetaUpdate {
    /// Rows to set; `None` leaves the metadata exactly as it was (carried forward).
    pub set: Option<MetaTable>,
}

/// Appends one batch to the archive at `path`: new blobs go after the existing
/// ones, replacing paths already present, and the tail is rewritten. Metadata is
/// carried forward and `update` applied on top.
///
/// The old tail is saved to an undo file (`<archive>.undo`) and synced before
/// the archive is touched. An error (an input that cannot be read, a full disk)
/// writes it back at once; after a crash, the next append, or [`recover`],
/// does. Either way the archive is as it was before the append. One append or
/// recover runs on an archive at a time: another finds it locked and fails.
pub fn append<I>(
    path: &Path,
    batch: I,
    update: MetaUpdate,
    threads: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary>
where
    I: IntoIterator<Item = Result<InputFile>>,
{
    append_with(path, batch, update, threads, &Plugins::none(), progress)
}

/// [`append`], running `plugins` on the files they claim. The archive's
/// package rows are carried forward, but for those of the paths the batch
/// writes again.
pub fn append_with<I>(
    path: &Path,
    batch: I,
    update: MetaUpdate,
    threads: usize,
    plugins: &Plugins,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary>
where
    I: IntoIterator<Item = Result<InputFile>>,
{
    let file = open_locked(path)?;
    undo::recover_locked(path, &file)?;
    let archive = Archive::open(&file)?;
    let live = archive.data_rows()?;
    let meta = archive.metadata()?;
    let packages = archive.packages()?;
    let props = archive.props();
    let blob_end = archive.blob_end();
    let old_len = archive.archive_len();
    let mut old_tail = vec![0u8; (old_len - blob_end) as usize];
    crate::ipc::read_at(&file, &mut old_tail, blob_end, "archive tail")?;
    drop(archive);

    let old = Old {
        live,
        meta,
        packages,
        props,
        blob_end,
    };
    with_undo(path, &file, "append", blob_end, &old_tail, || {
        append_after(path, &file, old, batch, update, threads, plugins, progress)
    })
}

/// Runs `work`, an `op` that writes over the old tail `old_tail` of the
/// archive at `path` (from `blob_end`), with the undo file that takes it
/// back: saved and synced first, written back if `work` fails, removed once
/// it has succeeded.
fn with_undo<T>(
    path: &Path,
    file: &File,
    op: &str,
    blob_end: u64,
    old_tail: &[u8],
    work: impl FnOnce() -> Result<T>,
) -> Result<T> {
    undo::save(path, file, blob_end, old_tail)?;
    crate::failpoint(&format!("{op}.undo-written"));
    let result = work();
    if result.is_err() {
        if let Err(e) = undo::put_back(path, file, blob_end, old_tail) {
            return Err(Error::io(
                format!(
                    "restoring {} after a failed {op} (`znippy recover` retries from {})",
                    path.display(),
                    undo::undo_path(path).display()
                ),
                e,
            ));
        }
        // A leftover undo file would only write the same old tail back again.
        let _ = undo::discard(path);
        return result;
    }
    undo::discard(path).map_err(|e| {
        let undo = undo::undo_path(path);
        let what = format!(
            "the {op} of {} is complete, but {} could not be removed: remove it by \
             hand, or the next append or recover will undo this {op}",
            path.display(),
            undo.display()
        );
        Error::io(what, e)
    })?;
    crate::failpoint(&format!("{op}.undo-removed"));
    result
}

/// Adds `signature`, a signature over [`crate::signed_content`] of
/// `identity`, to the archive at `path`, after the signatures it has
/// (docs/format.md, 6.6). Returns how many it has then.
///
/// Only what follows the signed part is written, and it is written as an
/// append is: under the archive's lock, with the undo file that puts it back
/// if the process dies midway. An archive whose identity is no longer
/// `identity` (an append came between) is refused with [`Error::Changed`].
pub fn add_signature(path: &Path, identity: &[u8; 32], signature: Vec<u8>) -> Result<usize> {
    let file = open_locked(path)?;
    undo::recover_locked(path, &file)?;
    let archive = Archive::open(&file)?;
    if archive.identity()? != *identity {
        return Err(Error::Changed(path.display().to_string()));
    }
    let mut signatures = archive.signatures()?;
    signatures.push(signature);
    let suffix = archive.signature_suffix(&signatures)?;
    let (blob_end, signed_len, old_len) = (
        archive.blob_end(),
        archive.signed_len(),
        archive.archive_len(),
    );
    let old_tail = crate::ipc::read_vec(&file, blob_end, old_len - blob_end, "archive tail")?;
    drop(archive);
    with_undo(path, &file, "sign", blob_end, &old_tail, || {
        use std::os::unix::fs::FileExt;
        file.write_all_at(&suffix, signed_len)
            .map_err(|e| Error::io("writing the signature", e))?;
        crate::failpoint("sign.written");
        file.set_len(signed_len + suffix.len() as u64)
            .and_then(|_| crate::durable::sync_all(&file, path))
            .map_err(|e| Error::io("finishing the archive", e))?;
        crate::failpoint("sign.synced");
        Ok(signatures.len())
    })
}

/// Puts an archive back as it was before an append that did not finish (the
/// process or the machine died in the middle), from the undo file the append
/// left beside it. Safe to call at any time: with no undo file it does nothing.
pub fn recover(path: &Path) -> Result<Recovery> {
    let file = open_locked(path)?;
    undo::recover_locked(path, &file)
}

/// Opens the archive for an append or recover and takes its lock, an advisory
/// `flock` held until the file is closed.
fn open_locked(path: &Path) -> Result<File> {
    let what = || format!("opening {}", path.display());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(what(), e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::io(
            what(),
            io::Error::new(
                io::ErrorKind::WouldBlock,
                "another append or recover is running on this archive",
            ),
        )),
        Err(TryLockError::Error(e)) => Err(Error::io(what(), e)),
    }
}

/// What an append starts from: the archive as it was.
struct Old {
    live: Vec<SliceRow>,
    meta: Metadata,
    packages: Packages,
    props: ArchiveProps,
    blob_end: u64,
}

#[allow(clippy::too_many_arguments)]
fn append_after<I>(
    path: &Path,
    file: &File,
    old: Old,
    batch: I,
    update: MetaUpdate,
    threads: usize,
    plugins: &Plugins,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary>
where
    I: IntoIterator<Item = Result<InputFile>>,
{
    let Old {
        mut live,
        mut meta,
        mut packages,
        props,
        blob_end,
    } = old;
    let mut engine = Engine::resume(props, threads, &live, blob_end)?.with_plugins(plugins.clone());
    let mut out = BufWriter::new(file);
    out.seek(SeekFrom::Start(blob_end))
        .map_err(|e| Error::io("seeking in the archive", e))?;
    let mut batch = engine.write_batch(batch, &mut out, progress)?;
    let mut summary = Summary::default();
    summary.add(&mut batch);
    if cfg!(feature = "failpoints") {
        // The new blobs over the old tail, no new tail yet: the archive is
        // unreadable here but for its undo file.
        out.flush()
            .map_err(|e| Error::io("writing the archive", e))?;
        crate::failpoint("append.blobs-written");
    }
    merge(&mut live, &mut packages, batch)?;
    if let Some(set) = update.set {
        match &mut meta {
            Metadata::Present(t) => t.merge(set),
            Metadata::Absent => meta = Metadata::Present(set),
        }
    }
    let TailInfo { archive_len, .. } = write_tail(
        &mut out,
        Tail {
            props,
            blob_end: engine.blob_end(),
            rows: &live,
            meta: &meta,
            packages: &packages,
        },
    )?;
    out.flush()
        .map_err(|e| Error::io("writing the archive", e))?;
    drop(out);
    crate::failpoint("append.tail-written");
    file.set_len(archive_len)
        .and_then(|_| crate::durable::sync_all(file, path))
        .map_err(|e| Error::io("finishing the archive", e))?;
    crate::failpoint("append.synced");
    summary.archive_files = count_files(&live);
    summary.archive_len = archive_len;
    summary.package_rows = packages.rows().count() as u64;
    Ok(summary)
}
