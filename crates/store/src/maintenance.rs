//! Keeping a live archive's tables small: rewrites and expiry.
//!
//! Every group commit adds a data file, a manifest and a snapshot to a table.
//! Left alone, each commit would write a manifest list naming every manifest
//! so far and a metadata file naming every snapshot, and each scan would open
//! every data file. Two jobs bound that, on a thread of their own (see
//! `Slot::maintain`):
//!
//! - **Rewrite**, once a table holds more than [`REWRITE_AT`] data files: the
//!   small data files of the current snapshot are read and written again as
//!   one, and a `replace` snapshot names that file, the data files left as
//!   they were, and every manifest committed since the choice was made.
//!   Small is size-tiered: a file stays when it holds more than [`TIER`]
//!   times the rows of all smaller files together, so the files that stay
//!   grow geometrically, a table keeps O(log rows) of them, and a row is
//!   rewritten O(log rows) times over the archive's life, not once per
//!   [`REWRITE_AT`] appends.
//! - **Expiry**, once a table holds more than [`EXPIRE_AT`] snapshots: every
//!   snapshot but the newest [`KEEP_SNAPSHOTS`] is dropped, and the files only
//!   they reached are deleted [`RETIRED_FOR`] later. Under a stream of
//!   appends an expiry runs every few hundred milliseconds, and a reader
//!   (DuckDB planning a scan, Spark's executors reading what its driver
//!   planned) may still be on a snapshot it dropped: deleting at once failed
//!   such a scan with a missing data file.
//!
//! Reading and writing rows happen without the archive's commit lock; only
//! the final commit of each job (a manifest list, a metadata file, a pointer
//! swap) takes it, so an append waits for one small commit at most, never
//! for a rewrite. The rows never change, so readers see the same table
//! throughout, and a crash leaves the table as it was plus orphan files,
//! which the archive's next open retires ([`RedbCatalog::sweep`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use iceberg::spec::{
    DataFile, ManifestContentType, ManifestEntry, ManifestFile, Operation, TableMetadata,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, Error, ErrorKind, TableIdent};
use tokio::sync::Mutex;

use crate::catalog::{local_path, metadata_location_of, version_link, RedbCatalog};
use crate::error::Result;
use crate::snapshot::NewSnapshot;
use crate::storage;
use crate::tables;

/// Data files a table may gather (one per group commit) before a rewrite.
pub(crate) const REWRITE_AT: u64 = 32;
/// How much larger than everything smaller a data file must be to stay.
const TIER: u64 = 4;
/// Snapshots kept after an expiry.
pub(crate) const KEEP_SNAPSHOTS: usize = 16;
/// Snapshots that trigger an expiry.
pub(crate) const EXPIRE_AT: usize = 2 * KEEP_SNAPSHOTS;
/// How long the files an expiry unlinks stay on disk: how long a reader has
/// between loading a table and reading the files its snapshot names.
pub(crate) const RETIRED_FOR: Duration = Duration::from_secs(60);

/// The data files a table's current snapshot holds (from its summary).
pub(crate) fn data_files(metadata: &TableMetadata) -> u64 {
    metadata
        .current_snapshot()
        .and_then(|s| s.summary().additional_properties.get("total-data-files"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether a table is due for a rewrite or an expiry; on a shared catalog
/// (`embedded` false), where the store only expires, for an expiry.
pub(crate) fn due(metadata: &TableMetadata, embedded: bool) -> bool {
    let rewrite = embedded && data_files(metadata) > REWRITE_AT;
    rewrite || metadata.snapshots().count() > EXPIRE_AT
}

/// Expires all but the newest [`KEEP_SNAPSHOTS`] snapshots of `ident` on a
/// shared catalog, once it holds more than [`EXPIRE_AT`], through
/// iceberg-rust's own expiry: a metadata change only, which keeps each
/// `loadTable` (that every read and append of every node makes) small. The
/// files only the expired snapshots reached (their manifest lists) stay,
/// for the catalog owner's orphan-file cleanup; no data file is among them,
/// as every append's snapshot names all the files before it.
pub(crate) async fn expire_shared(catalog: &dyn Catalog, ident: &TableIdent) -> Result<()> {
    let table = catalog.load_table(ident).await?;
    if table.metadata().snapshots().count() <= EXPIRE_AT {
        return Ok(());
    }
    let tx = Transaction::new(&table);
    let action = tx
        .expire_snapshots()
        .expire_older_than_ms(i64::MAX)
        .retain_last(KEEP_SNAPSHOTS);
    action.apply(tx)?.commit(catalog).await?;
    Ok(())
}

/// Runs what is due on `ident`; returns whether anything was. `commit` is
/// the archive's commit lock, held only for each job's final commit.
pub(crate) async fn maintain(
    catalog: &RedbCatalog,
    ident: &TableIdent,
    commit: &Arc<Mutex<()>>,
) -> Result<bool> {
    catalog.remove_retired(RETIRED_FOR).await?;
    let mut done = false;
    let table = catalog.load_table(ident).await?;
    if data_files(table.metadata()) > REWRITE_AT {
        if let Some(rewrite) = catalog.plan_rewrite(&table).await? {
            let rows = rewrite.read(&table).await?;
            let merged = tables::write_batches(&table, rows).await?;
            let written: Vec<PathBuf> = merged.iter().map(|f| local_path(f.file_path())).collect();
            let (c, id) = (catalog.clone(), ident.clone());
            let committed = under_lock(commit, async move {
                let current = c.load_table(&id).await?;
                storage::deferring(c.commit_rewrite(&current, rewrite, merged)).await
            })
            .await;
            if let Err(e) = committed {
                // Nothing names the merged files: they would only take space.
                let _ = storage::remove(written).await;
                return Err(e);
            }
            done = true;
        }
    }
    let table = catalog.load_table(ident).await?;
    if table.metadata().snapshots().count() > EXPIRE_AT {
        if let Some(expiry) = catalog.plan_expiry(&table, KEEP_SNAPSHOTS).await? {
            let (c, id) = (catalog.clone(), ident.clone());
            let unlinked = under_lock(commit, async move {
                let current = c.load_table(&id).await?;
                Ok(storage::deferring(c.commit_expiry(&current, expiry)).await?)
            })
            .await?;
            storage::remove(unlinked.metadata).await?;
            catalog.retire(unlinked.files);
            done = true;
        }
    }
    Ok(done)
}

/// Runs a job's final commit under the archive's commit lock, on the
/// runtime's workers: the maintenance thread runs below the requests
/// (lib.rs), and at that priority the appends waiting for the lock would
/// wait that much longer.
async fn under_lock<T: Send + 'static>(
    commit: &Arc<Mutex<()>>,
    job: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let commit = Arc::clone(commit);
    tokio::spawn(async move {
        let _commit = commit.lock().await;
        job.await
    })
    .await
    .map_err(|e| crate::StoreError::Task(format!("a maintenance commit failed: {e}")))?
}

/// Which of the files with these row counts a rewrite merges: all but the
/// largest ones that each hold more than [`TIER`] times the rows of every
/// smaller file together. Nothing when fewer than two would merge.
fn choose(rows: &[u64]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(rows[i]));
    let mut smaller: u64 = rows.iter().fold(0, |n, &r| n.saturating_add(r));
    let mut merge = vec![true; rows.len()];
    for &i in &order {
        smaller = smaller.saturating_sub(rows[i]);
        if rows[i] <= TIER.saturating_mul(smaller) {
            break;
        }
        merge[i] = false;
    }
    if merge.iter().filter(|&&m| m).count() < 2 {
        merge.fill(false);
    }
    merge
}

/// A rewrite chosen on one snapshot and committed on whatever the table has
/// become since, as long as that still holds the snapshot's manifests.
pub(crate) struct Rewrite {
    /// The manifests of the snapshot it was chosen on, which it replaces.
    replaced: HashSet<String>,
    /// Data files that stay, listed again as existing entries.
    keep: Vec<ManifestEntry>,
    /// Data files whose rows are merged into new ones.
    merge: Vec<DataFile>,
}

impl Rewrite {
    /// The rows of the files to merge, in the table's current schema.
    pub(crate) async fn read(&self, table: &Table) -> Result<Vec<RecordBatch>> {
        tables::read_data_files(table, &self.merge).await
    }
}

impl RedbCatalog {
    /// Chooses what a rewrite of `table`'s current snapshot merges, if
    /// anything.
    pub(crate) async fn plan_rewrite(&self, table: &Table) -> Result<Option<Rewrite>> {
        let metadata = table.metadata();
        let Some(snap) = metadata.current_snapshot() else {
            return Ok(None);
        };
        let list = self.manifest_list(metadata, snap).await?;
        let mut entries = Vec::new();
        for m in list.iter() {
            if m.content != ManifestContentType::Data {
                // The tables never hold delete files; a table that does is
                // someone else's to rewrite.
                return Ok(None);
            }
            for e in self.manifest(m).await?.entries() {
                if e.is_alive() {
                    entries.push(existing(e, m));
                }
            }
        }
        let rows: Vec<u64> = entries.iter().map(|e| e.data_file.record_count()).collect();
        let chosen = choose(&rows);
        if !chosen.contains(&true) {
            return Ok(None);
        }
        let (merge, keep): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .zip(chosen)
            .partition(|(_, merged)| *merged);
        Ok(Some(Rewrite {
            replaced: list.iter().map(|m| m.manifest_path.clone()).collect(),
            keep: keep.into_iter().map(|(e, _)| e).collect(),
            merge: merge.into_iter().map(|(e, _)| e.data_file).collect(),
        }))
    }

    /// Commits `rewrite` on `table` (its current state, read under the commit
    /// lock): one manifest names `merged` and the kept files, followed by
    /// the manifests committed since the rewrite was planned.
    pub(crate) async fn commit_rewrite(
        &self,
        table: &Table,
        rewrite: Rewrite,
        merged: Vec<DataFile>,
    ) -> Result<()> {
        let metadata = table.metadata();
        let Some(current) = metadata.current_snapshot() else {
            return Ok(());
        };
        let list = self.manifest_list(metadata, current).await?;
        let present = list
            .iter()
            .filter(|m| rewrite.replaced.contains(&m.manifest_path))
            .count();
        if present != rewrite.replaced.len() {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!(
                    "{}: the snapshot a rewrite was planned on was replaced",
                    table.identifier()
                ),
            )
            .into());
        }
        let carried: Vec<ManifestFile> = list
            .iter()
            .filter(|m| !rewrite.replaced.contains(&m.manifest_path))
            .cloned()
            .collect();
        // The store's own keys stay as the rewritten snapshot has them;
        // iceberg's counts are this snapshot's.
        let props = current
            .summary()
            .additional_properties
            .iter()
            .filter(|(k, _)| k.starts_with("znippy."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let new = NewSnapshot {
            operation: Operation::Replace,
            added: merged,
            existing: rewrite.keep,
            removed: rewrite.merge,
            carried,
            props,
        };
        self.commit_snapshot(table, new).await?;
        Ok(())
    }

    /// Drops every snapshot but the newest `keep`, then deletes the files only
    /// the dropped snapshots reached (manifest lists; manifests and data
    /// files a rewrite replaced). Keeps the metadata file, and the table's
    /// directory, from growing with every append.
    pub async fn expire_snapshots(&self, ident: &TableIdent, keep: usize) -> iceberg::Result<()> {
        let table = self.load_table(ident).await?;
        match self.plan_expiry(&table, keep).await? {
            Some(expiry) => {
                let unlinked = self.commit_expiry(&table, expiry).await?;
                storage::remove([unlinked.files, unlinked.metadata].concat()).await
            }
            None => Ok(()),
        }
    }

    /// Chooses the snapshots an expiry drops and the files it then deletes:
    /// what only those snapshots reach. Commits that come later add
    /// snapshots reaching the current manifests and their own, never one of
    /// these files, so the choice holds for the table they leave.
    pub(crate) async fn plan_expiry(
        &self,
        table: &Table,
        keep: usize,
    ) -> iceberg::Result<Option<Expiry>> {
        let metadata = table.metadata();
        let current = metadata.current_snapshot_id();
        let mut snaps: Vec<_> = metadata.snapshots().collect();
        snaps.sort_by_key(|s| s.sequence_number());
        let (mut drop, mut kept) = (Vec::new(), Vec::new());
        for (i, s) in snaps.iter().rev().enumerate() {
            let id = s.snapshot_id();
            if i >= keep.max(1) && Some(id) != current {
                drop.push(id);
            } else {
                kept.push(id);
            }
        }
        if drop.is_empty() {
            return Ok(None);
        }
        let (gone, live) = (
            self.reach(metadata, &drop).await?,
            self.reach(metadata, &kept).await?,
        );
        let mut doomed: HashSet<&String> = gone.lists.difference(&live.lists).collect();
        let dead: Vec<&ManifestFile> = gone
            .manifests
            .iter()
            .filter(|(path, _)| !live.manifests.contains_key(*path))
            .map(|(_, m)| m)
            .collect();
        // Only a rewrite leaves manifests no kept snapshot reaches, and only
        // then can data files have fallen out of the table: read manifests
        // for that case alone. A data file is in two manifests only when a
        // rewrite kept it, listing it as existing, so of the live manifests
        // only those with existing files matter.
        let (gone_data, live_data) = if dead.is_empty() {
            Default::default()
        } else {
            let rewritten = live
                .manifests
                .values()
                .filter(|m| m.existing_files_count.unwrap_or(1) > 0);
            (
                self.data_files_of(dead.iter().copied()).await?,
                self.data_files_of(rewritten).await?,
            )
        };
        doomed.extend(dead.iter().map(|m| &m.manifest_path));
        self.forget(doomed.iter().copied());
        doomed.extend(gone_data.difference(&live_data));
        let root = format!("{}/", metadata.location());
        let doomed = doomed
            .into_iter()
            .filter(|p| p.starts_with(&root))
            .map(|p| local_path(p))
            .collect();
        Ok(Some(Expiry { drop, doomed }))
    }

    /// Commits `expiry` on `table` (its current state, read under the
    /// commit lock). Returns what it unlinked, to delete once the commit
    /// lock is released.
    pub(crate) async fn commit_expiry(
        &self,
        table: &Table,
        expiry: Expiry,
    ) -> iceberg::Result<Unlinked> {
        let metadata = table.metadata();
        let old = metadata_location_of(table)?.to_string();
        let built = metadata
            .clone()
            .into_builder(Some(old))
            .remove_snapshots(&expiry.drop)
            .build()?
            .metadata;
        let published = self.publish(table, built.into(), Vec::new()).await?;
        Ok(Unlinked {
            files: expiry.doomed,
            metadata: unlogged_metadata(&published)?,
        })
    }

    /// Retires what a crash left in `table`'s directory, which no snapshot
    /// of the table names: the files of a commit whose pointer never moved,
    /// those of a rewrite cut short, and those an expiry was keeping for
    /// readers (a reader that planned before the crash may still be reading
    /// them, hence retired, not deleted); and deletes the metadata files its
    /// log no longer names, and the temporary names of a path layout cut
    /// short. Returns how many files it retired.
    ///
    /// For an archive's open, before any change to it and any maintenance
    /// of it can start: every file a change writes is named by its commit,
    /// but not before, so a listing taken while one runs would take its
    /// files for orphans. Only names iceberg-rust writes are looked at
    /// (`*.parquet` below `data/`, `*.avro` in `metadata/`).
    pub(crate) async fn sweep(&self, table: &Table) -> iceberg::Result<usize> {
        let metadata = table.metadata();
        let ids: Vec<i64> = metadata.snapshots().map(|s| s.snapshot_id()).collect();
        let reach = self.reach(metadata, &ids).await?;
        let data = self.data_files_of(reach.manifests.values()).await?;
        let named: HashSet<PathBuf> = reach
            .lists
            .iter()
            .chain(reach.manifests.keys())
            .chain(&data)
            .map(|p| local_path(p))
            .collect();
        let root = local_path(metadata.location());
        let orphans: Vec<PathBuf> = files_named(&root.join("data"), ".parquet")
            .into_iter()
            .chain(files_named(&root.join("metadata"), ".avro"))
            .filter(|p| !named.contains(p))
            .collect();
        let swept = orphans.len();
        if swept > 0 {
            self.retire(orphans);
        }
        let mut gone = unlogged_metadata(table)?;
        gone.extend(layout_leftovers(&root.join("metadata")));
        storage::remove(gone).await?;
        Ok(swept)
    }

    /// The manifest lists and manifests the snapshots `ids` reach.
    async fn reach(&self, metadata: &TableMetadata, ids: &[i64]) -> iceberg::Result<Reach> {
        let mut reach = Reach::default();
        for id in ids {
            let Some(snap) = metadata.snapshot_by_id(*id) else {
                continue;
            };
            if reach.lists.insert(snap.manifest_list().to_string()) {
                let list = self.manifest_list(metadata, snap).await?;
                reach
                    .manifests
                    .extend(list.iter().map(|m| (m.manifest_path.clone(), m.clone())));
            }
        }
        Ok(reach)
    }

    /// The data files `manifests` list.
    async fn data_files_of(
        &self,
        manifests: impl Iterator<Item = &ManifestFile>,
    ) -> iceberg::Result<HashSet<String>> {
        let mut files = HashSet::new();
        for m in manifests {
            let manifest = self.manifest(m).await?;
            files.extend(
                manifest
                    .entries()
                    .iter()
                    .map(|e| e.data_file().file_path().to_string()),
            );
        }
        Ok(files)
    }
}

/// The metadata files in `table`'s `metadata/` that its log no longer names.
/// The log keeps the last `write.metadata.previous-versions-max`, each with
/// its `vN` link for path-based readers.
fn unlogged_metadata(table: &Table) -> iceberg::Result<Vec<PathBuf>> {
    let current = local_path(metadata_location_of(table)?);
    let logged: HashSet<PathBuf> = table
        .metadata()
        .metadata_log()
        .iter()
        .map(|m| local_path(&m.metadata_file))
        .chain([current.clone()])
        .flat_map(|p| [version_link(&p).map(|(link, _)| link), Some(p)])
        .flatten()
        .collect();
    let dir = current.parent().unwrap_or(Path::new("."));
    Ok(files_named(dir, ".metadata.json")
        .into_iter()
        .filter(|p| !logged.contains(p))
        .collect())
}

/// The temporary names `RedbCatalog::lay_out_at` makes in a table's
/// `metadata/` (`.vN.PID.tmp`, `.version-hint.PID.tmp`), which a crash in
/// the middle of one leaves, and which a layout of a version already laid
/// out left at every open before it checked for that.
fn layout_leftovers(dir: &Path) -> Vec<PathBuf> {
    files_named(dir, ".tmp")
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".v"))
        })
        .collect()
}

/// The files below `dir` whose names end with `suffix`; none if it cannot
/// be read (a table without data files has no `data/`).
fn files_named(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = files_below(dir);
    found.retain(|p| p.to_string_lossy().ends_with(suffix));
    found
}

/// Every file below `dir`, in no order; none if it cannot be read.
pub(crate) fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(entry.path()),
                Ok(t) if t.is_file() => found.push(entry.path()),
                _ => {}
            }
        }
    }
    found
}

/// An expiry chosen on one state of a table: the snapshots it drops and the
/// files only they reach.
pub(crate) struct Expiry {
    drop: Vec<i64>,
    doomed: Vec<PathBuf>,
}

/// What an expiry unlinked from its table.
pub(crate) struct Unlinked {
    /// Manifest lists, manifests and data files that only the dropped
    /// snapshots named: a reader on one of those may still be reading them.
    files: Vec<PathBuf>,
    /// Metadata files the new version's log no longer names. A reader reads
    /// a metadata file whole when it loads the table, so none is still
    /// reading one; and kept, they would be listed again by every expiry.
    metadata: Vec<PathBuf>,
}

#[derive(Default)]
struct Reach {
    lists: HashSet<String>,
    manifests: HashMap<String, ManifestFile>,
}

/// `e` as an existing entry, with what it inherits from its manifest filled in.
fn existing(e: &ManifestEntry, m: &ManifestFile) -> ManifestEntry {
    let mut e = e.clone();
    e.snapshot_id = e.snapshot_id.or(Some(m.added_snapshot_id));
    e.sequence_number = e.sequence_number.or(Some(m.sequence_number));
    e.file_sequence_number = e.file_sequence_number.or(Some(m.sequence_number));
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Array, Int64Array};
    use iceberg::spec::Snapshot;
    use iceberg::transaction::{ApplyTransactionAction, Transaction};

    async fn append(c: &RedbCatalog, ident: &TableIdent, values: &[i64]) {
        let table = c.load_table(ident).await.unwrap();
        let batch =
            RecordBatch::try_from_iter([("n", Arc::new(Int64Array::from(values.to_vec())) as _)])
                .unwrap();
        let files = tables::write_data_file(&table, batch).await.unwrap();
        let tx = Transaction::new(&table);
        let action = tx.fast_append().add_data_files(files);
        action.apply(tx).unwrap().commit(c).await.unwrap();
    }

    /// Appends `1..=n`, one commit each, every one followed by maintenance
    /// until it finds nothing due: expiries and rewrites as under a stream
    /// of appends.
    async fn append_maintained(c: &RedbCatalog, ident: &TableIdent, n: i64) {
        let commit = Arc::new(Mutex::new(()));
        for i in 1..=n {
            append(c, ident, &[i]).await;
            while maintain(c, ident, &commit).await.unwrap() {}
        }
    }

    async fn values(c: &RedbCatalog, ident: &TableIdent) -> Vec<i64> {
        let table = c.load_table(ident).await.unwrap();
        let mut out: Vec<i64> = tables::scan_all(&table)
            .await
            .unwrap()
            .iter()
            .flat_map(|b| {
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..col.len()).map(|i| col.value(i)).collect::<Vec<_>>()
            })
            .collect();
        out.sort();
        out
    }

    async fn rewrite(c: &RedbCatalog, ident: &TableIdent) -> (Rewrite, Vec<DataFile>) {
        let table = c.load_table(ident).await.unwrap();
        let rewrite = c.plan_rewrite(&table).await.unwrap().unwrap();
        let rows = rewrite.read(&table).await.unwrap();
        (rewrite, tables::write_batches(&table, rows).await.unwrap())
    }

    /// Every file `table`'s current snapshot names: its manifest list,
    /// manifests and data files.
    async fn files_of(c: &RedbCatalog, table: &Table) -> Vec<PathBuf> {
        let snap = table.metadata().current_snapshot().unwrap();
        files_of_snapshot(c, table, snap).await
    }

    async fn files_of_snapshot(c: &RedbCatalog, table: &Table, snap: &Snapshot) -> Vec<PathBuf> {
        let mut out = vec![local_path(snap.manifest_list())];
        for m in c
            .manifest_list(table.metadata(), snap)
            .await
            .unwrap()
            .iter()
        {
            out.push(local_path(&m.manifest_path));
            for e in c.manifest(m).await.unwrap().entries() {
                out.push(local_path(e.data_file().file_path()));
            }
        }
        out
    }

    /// The data files, manifests and manifest lists in `table`'s directory
    /// that none of its snapshots names.
    async fn unnamed(c: &RedbCatalog, table: &Table) -> HashSet<PathBuf> {
        let mut named = HashSet::new();
        for snap in table.metadata().snapshots() {
            named.extend(files_of_snapshot(c, table, snap).await);
        }
        let root = local_path(table.metadata().location());
        let mut unnamed = HashSet::new();
        for (dir, ext) in [("data", "parquet"), ("metadata", "avro")] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == ext) && !named.contains(&p) {
                    unnamed.insert(p);
                }
            }
        }
        unnamed
    }

    /// A reader that loaded the table before its snapshot was expired (and
    /// its data files rewritten) still finds every file the snapshot names:
    /// the expiry retires them, and only `remove_retired` deletes them, once
    /// they have been kept for `RETIRED_FOR`. Metadata files are not kept:
    /// a reader reads its whole when it loads the table.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_expired_snapshots_files_outlive_it_for_its_readers() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let mut creation = tables::one_column("t");
        let log = 2;
        creation.properties.insert(
            "write.metadata.previous-versions-max".into(),
            log.to_string(),
        );
        c.create_table(&ns, creation).await.unwrap();
        let ident = TableIdent::new(ns, "t".into());
        append(&c, &ident, &[0]).await;
        let reader = c.load_table(&ident).await.unwrap();
        let named = files_of(&c, &reader).await;
        append_maintained(&c, &ident, 2 * EXPIRE_AT as i64).await;
        let now = c.load_table(&ident).await.unwrap();
        let reader_snap = reader.metadata().current_snapshot_id();
        assert!(
            now.metadata()
                .snapshots()
                .all(|s| Some(s.snapshot_id()) != reader_snap),
            "the reader's snapshot is expired"
        );
        assert!(
            !files_of(&c, &now).await.contains(&named[2]),
            "and its data file rewritten"
        );
        for p in &named {
            assert!(p.exists(), "{} was deleted under its reader", p.display());
        }
        // Kept, the metadata files of some 70 versions would all be here;
        // deleted at each expiry, the log's and those written since remain.
        let dir = local_path(now.metadata_location().unwrap());
        let metadata_files = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".metadata.json") && !n.starts_with('v'))
            .count();
        assert!(
            metadata_files <= log + 1 + EXPIRE_AT,
            "{metadata_files} metadata files"
        );
        c.remove_retired(RETIRED_FOR).await.unwrap();
        assert!(named.iter().all(|p| p.exists()), "kept for RETIRED_FOR");
        c.remove_retired(Duration::ZERO).await.unwrap();
        assert!(named.iter().all(|p| !p.exists()));
        let want: Vec<i64> = (0..=2 * EXPIRE_AT as i64).collect();
        assert_eq!(values(&c, &ident).await, want);
    }

    /// What a crash leaves in a table's directory (the files an expiry was
    /// keeping for readers, and a commit's data file whose pointer never
    /// moved) is retired by the sweep of the next open, and nothing a
    /// snapshot names, nor a file iceberg-rust did not write, goes with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sweep_retires_what_a_crash_left_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        c.create_table(&ns, tables::one_column("t")).await.unwrap();
        let ident = TableIdent::new(ns, "t".into());
        append(&c, &ident, &[0]).await;
        let expired = files_of(&c, &c.load_table(&ident).await.unwrap()).await;
        append_maintained(&c, &ident, 2 * EXPIRE_AT as i64).await;
        let table = c.load_table(&ident).await.unwrap();
        let batch =
            RecordBatch::try_from_iter([("n", Arc::new(Int64Array::from(vec![-1])) as _)]).unwrap();
        let uncommitted = tables::write_data_file(&table, batch).await.unwrap();
        let uncommitted = local_path(uncommitted[0].file_path());
        let foreign = uncommitted.with_file_name("notes.txt");
        std::fs::write(&foreign, "mine").unwrap();
        // A path layout cut short, before its rename.
        let current = local_path(table.metadata_location().unwrap());
        let leftovers =
            [".v9.4242.tmp", ".version-hint.4242.tmp"].map(|n| current.with_file_name(n));
        std::fs::hard_link(&current, &leftovers[0]).unwrap();
        std::fs::write(&leftovers[1], "9").unwrap();
        // The crash: the catalog goes without deleting what it retired.
        drop((c, table));
        let c = RedbCatalog::open(&tmp.path().join("c.redb"), &tmp.path().join("w"))
            .await
            .unwrap();
        let table = c.load_table(&ident).await.unwrap();
        let orphans: Vec<&PathBuf> = expired.iter().chain([&uncommitted]).collect();
        assert!(orphans.iter().all(|p| p.exists()));
        // Every expiry of the run retired files: those are orphans too.
        let left = unnamed(&c, &table).await;
        assert!(orphans.iter().all(|p| left.contains(*p)));
        assert_eq!(c.sweep(&table).await.unwrap(), left.len());
        assert!(orphans.iter().all(|p| p.exists()), "retired, not deleted");
        c.remove_retired(Duration::ZERO).await.unwrap();
        for p in orphans {
            assert!(!p.exists(), "{} is left", p.display());
        }
        assert!(unnamed(&c, &table).await.is_empty());
        assert!(leftovers.iter().all(|p| !p.exists()));
        assert!(foreign.exists());
        let want: Vec<i64> = (0..=2 * EXPIRE_AT as i64).collect();
        assert_eq!(values(&c, &ident).await, want);
    }

    /// A data file written into `ident`'s directory and never committed: what
    /// a change that failed, or a crash, leaves.
    async fn stray(c: &RedbCatalog, ident: &TableIdent) -> PathBuf {
        let table = c.load_table(ident).await.unwrap();
        let batch =
            RecordBatch::try_from_iter([("n", Arc::new(Int64Array::from(vec![-1])) as _)]).unwrap();
        let written = tables::write_data_file(&table, batch).await.unwrap();
        local_path(written[0].file_path())
    }

    /// A clean close marks each table it opened once it is clean, sweeping
    /// again one whose session left a file behind; an open skips the sweep
    /// only of a table whose names are still the ones its mark recorded, so
    /// a crash, or a writer that knows no marks, leaves it to the sweep.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_clean_close_spares_the_next_open_its_sweep_and_nothing_else_does() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let (db, warehouse) = (tmp.path().join("c.redb"), tmp.path().join("w"));
        let reopen = || RedbCatalog::open(&db, &warehouse);
        let (t, u) = (
            TableIdent::new(ns.clone(), "t".into()),
            TableIdent::new(ns.clone(), "u".into()),
        );
        for ident in [&t, &u] {
            c.create_table(&ns, tables::one_column(ident.name()))
                .await
                .unwrap();
            assert!(c.sweep_unless_clean(ident).await.unwrap(), "no mark yet");
            append(&c, ident, &[0]).await;
        }
        // Expiries retire files, and a change fails after its data file.
        append_maintained(&c, &t, 2 * EXPIRE_AT as i64).await;
        let failed = stray(&c, &t).await;
        c.close().await.unwrap();
        assert!(!failed.exists(), "the close swept what its session left");
        for ident in [&t, &u] {
            let table = c.load_table(ident).await.unwrap();
            assert!(unnamed(&c, &table).await.is_empty(), "{ident}");
        }
        drop(c);

        // Marked: the open skips the sweep, a close of a session that wrote
        // nothing marks the table again, and one it never opened keeps its
        // mark.
        let c = reopen().await.unwrap();
        assert!(!c.sweep_unless_clean(&t).await.unwrap());
        c.close().await.unwrap();
        drop(c);
        let c = reopen().await.unwrap();
        for ident in [&t, &u] {
            assert!(!c.sweep_unless_clean(ident).await.unwrap(), "{ident}");
        }

        // A crash after a change failed: the names differ, the open sweeps.
        let crashed = stray(&c, &t).await;
        drop(c);
        let c = reopen().await.unwrap();
        assert!(c.sweep_unless_clean(&t).await.unwrap());
        c.remove_retired(Duration::ZERO).await.unwrap();
        assert!(!crashed.exists(), "swept after a crash");
        // A file put there by what knows no marks (an older znippy).
        let foreign = stray(&c, &u).await;
        assert!(c.sweep_unless_clean(&u).await.unwrap());
        c.close().await.unwrap();
        assert!(!foreign.exists());
        drop(c);

        // A dropped table's mark goes with it.
        let c = reopen().await.unwrap();
        let key = crate::catalog::table_key(&u);
        assert!(c.swept_mark(&key).await.unwrap().is_some());
        c.drop_table(&u).await.unwrap();
        assert_eq!(c.swept_mark(&key).await.unwrap(), None);

        let want: Vec<i64> = (0..=2 * EXPIRE_AT as i64).collect();
        assert_eq!(values(&c, &t).await, want);
    }

    /// A rewrite reads and writes without the commit lock, so appends commit
    /// while it runs: its snapshot must keep them, and one planned on a
    /// state that another rewrite has replaced must be refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rewrite_keeps_the_commits_made_while_it_ran() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let creation = tables::one_column("t");
        c.create_table(&ns, creation).await.unwrap();
        let ident = TableIdent::new(ns, "t".into());
        for i in 0..6 {
            append(&c, &ident, &[i]).await;
        }
        let (planned, merged) = rewrite(&c, &ident).await;
        append(&c, &ident, &[100]).await;
        append(&c, &ident, &[101, 102]).await;
        let current = c.load_table(&ident).await.unwrap();
        c.commit_rewrite(&current, planned, merged).await.unwrap();

        let want = vec![0, 1, 2, 3, 4, 5, 100, 101, 102];
        assert_eq!(values(&c, &ident).await, want);
        let table = c.load_table(&ident).await.unwrap();
        assert_eq!(
            data_files(table.metadata()),
            3,
            "one merged file, two carried over"
        );
        let snap = table.metadata().current_snapshot().unwrap();
        let list = c.manifest_list(table.metadata(), snap).await.unwrap();
        assert_eq!(list.len(), 3);

        // Two rewrites planned on the same state: the second to commit lost.
        let (first, first_files) = rewrite(&c, &ident).await;
        let (second, second_files) = rewrite(&c, &ident).await;
        let current = c.load_table(&ident).await.unwrap();
        c.commit_rewrite(&current, first, first_files)
            .await
            .unwrap();
        let current = c.load_table(&ident).await.unwrap();
        let err = c
            .commit_rewrite(&current, second, second_files)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, crate::StoreError::Iceberg(e) if e.kind() == ErrorKind::CatalogCommitConflicts),
            "{err}"
        );
        assert_eq!(values(&c, &ident).await, want);

        // Expiry deletes the data files the rewrites replaced, and only those.
        c.expire_snapshots(&ident, 1).await.unwrap();
        assert_eq!(values(&c, &ident).await, want);
        let on_disk = std::fs::read_dir(tmp.path().join("w/a/t/data"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "parquet")
            })
            .count();
        // The live file, and the losing rewrite's orphan.
        assert_eq!(on_disk, 2);
    }

    fn merged(rows: &[u64]) -> Vec<u64> {
        rows.iter()
            .zip(choose(rows))
            .filter(|(_, m)| *m)
            .map(|(r, _)| *r)
            .collect()
    }

    #[test]
    fn equal_files_all_merge() {
        assert_eq!(merged(&[1; 33]).len(), 33);
    }

    #[test]
    fn a_file_much_larger_than_the_rest_stays() {
        let mut rows = vec![1u64; 32];
        rows.push(1000);
        assert_eq!(merged(&rows), vec![1; 32]);
        // Two tiers: each large file is more than four times all below it.
        let mut rows = vec![2u64; 20];
        rows.extend([200, 5000]);
        assert_eq!(merged(&rows), vec![2; 20]);
    }

    #[test]
    fn a_large_file_merges_once_the_small_ones_catch_up() {
        let mut rows = vec![1u64; 32];
        rows.push(100);
        assert_eq!(merged(&rows).len(), 33);
    }

    #[test]
    fn one_small_file_is_not_a_rewrite() {
        assert!(merged(&[1000, 1]).is_empty());
        assert!(merged(&[]).is_empty());
    }

    /// Over many rewrites the files that stay grow geometrically: the table
    /// keeps few files and rewrites each row a few times, not every time.
    #[test]
    fn rewrites_over_a_long_life_stay_logarithmic() {
        let (mut files, mut rewritten, mut total) = (Vec::<u64>::new(), 0u64, 0u64);
        for _ in 0..2000 {
            files.extend([1; 33]);
            total += 33;
            let chosen = choose(&files);
            let sum: u64 = files
                .iter()
                .zip(&chosen)
                .filter(|(_, m)| **m)
                .map(|(r, _)| r)
                .sum();
            rewritten += sum;
            files = files
                .iter()
                .zip(&chosen)
                .filter(|(_, m)| !**m)
                .map(|(r, _)| *r)
                .collect();
            files.push(sum);
            assert!(files.len() <= 12, "{} files", files.len());
        }
        // 66,000 rows: a full rewrite every time would copy ~66 M rows.
        assert!(
            rewritten < 20 * total,
            "{rewritten} rows rewritten for {total}"
        );
    }
}
