//! Live znippy archives: rows in Apache Iceberg tables, blobs beside them.
//!
//! A [`Store`] is, by default, a data directory:
//!
//! ```text
//! DIR/catalog.redb             the Iceberg catalog (namespaces, table pointers)
//! DIR/warehouse/znippy/<id>/   the archive's tables: files/ and meta/ (Iceberg)
//! DIR/blobs/<id>.znippy        the archive's blob region (the sidecar)
//! ```
//!
//! Each archive `<id>` is the Iceberg namespace `znippy.<id>`, whose properties
//! hold the archive properties (chunk size, pack threshold, level), whether it
//! has metadata, and whether it is sealed. Its `files` table holds one row per
//! slice, its `meta` table one row per metadata fact; both are append logs where
//! the latest append of a path wins and a tombstone deletes (see `tables.rs`).
//! Any Iceberg reader (DuckDB, Spark, pyiceberg) sees them live.
//!
//! Scaled out ([`Store::open_remote`]), the same tables are in an Iceberg
//! REST catalog with their files on S3, and each append's blobs are a new
//! immutable segment object in a bucket (`segments.rs`).
//!
//! Appends go through the container's engine (the same workers, packing and
//! dedupe as `znippy compress`) and commit in groups, one snapshot for the
//! appends that queued while the previous one committed; reads go through
//! an in-memory lookup derived from the tables and touch only the sidecar. The
//! commit protocol and its recovery are in `archive.rs`.
//!
//! Everything outside the crate goes through [`Store`]: the service's Iceberg
//! REST facade loads a table by [`TableKind`] ([`Store::table`]), and a seal
//! takes a [`SealPlan`] whose blobs it reads and whose tail it writes in place
//! through the plan, or whose re-packed copy it writes to a file or object
//! the plan makes ([`SealPlan::blobs`], [`SealPlan::seal_in_place`],
//! [`SealPlan::create_sealed`]), and commits it with [`Store::finish_seal`]. The
//! catalog, the tables' row codecs and the sidecar stay private, so another
//! backend (a REST catalog, object storage) changes this crate alone.
//!
//! Modules:
//!
//! - `archive.rs`: one live archive's derived state, and the append and delete
//!   protocol with its recovery.
//! - `backend.rs`: where a store keeps its archives (the catalog, and the
//!   home of the blobs); `remote.rs`: connecting to a REST catalog and S3.
//! - `blobs.rs`: an archive's blob region, a sidecar or segments.
//! - `maintenance.rs`: rewrites and expiry, which keep the tables small off
//!   the appends' path, and the sweep of what a crash left; `swept.rs`: the
//!   tables a clean close marked, which their next open need not sweep.
//! - `tables.rs`: the `files` and `meta` tables: schemas, rows to Arrow and back,
//!   writing data files.
//! - `catalog.rs`: [`RedbCatalog`], an Iceberg catalog whose table pointers live
//!   in one redb file, with the commit that swaps them; `db_file.rs`: that
//!   file, as redb's storage backend.
//! - `snapshot.rs`: the snapshots that catalog writes itself (appends,
//!   rewrites); `manifest.rs`: their manifests, encoded under a header
//!   iceberg-rust wrote.
//! - `storage.rs`: the local storage of the tables' files, whose writes are
//!   durable as they complete; `object_storage.rs`: the same on object
//!   storage (S3), through `object_store`.
//! - `segments.rs`: the blob region on object storage, as immutable segment
//!   objects, one per append, and the map that reads across them.
//! - `sealed.rs`: a sealed archive's file or object, how a seal writes it,
//!   and the snapshot that publishes it.
//! - `sidecar.rs`: the blob file: positioned writes at the committed end, fsync,
//!   and the check that it is still the file the store opened.
//! - `file.rs`: one file opened for reading, verified slice by slice.
//! - `live_files.rs`: an archive's live files by path, with their total size
//!   and un-normalized names kept beside.
//! - `history.rs`: what each `files` snapshot's summary says it committed,
//!   and the history read back from them.
//! - `budget.rs`: the engine-memory budget every append takes its share of.
//! - `error.rs`: [`StoreError`].

mod archive;
mod backend;
mod blobs;
mod budget;
mod catalog;
mod db_file;
mod error;
mod file;
mod history;
mod live_files;
mod maintenance;
mod manifest;
mod object_storage;
mod packages;
mod pinned;
mod remote;
mod sealed;
mod segments;
mod sidecar;
mod snapshot;
mod storage;
mod swept;
mod tables;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use iceberg::spec::SortOrder;
use iceberg::table::Table;
use iceberg::{ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use tokio::sync::{Mutex, Notify, OnceCell, OwnedMutexGuard};
use tokio_util::task::TaskTracker;
use znippy_format::{
    ArchiveProps, Entry, InputFile, MetaCursor, MetaQuery, MetaSearch, MetaTable, Metadata,
    Packages, PageLimit, Plugin, Plugins,
};

use archive::LiveArchive;
pub use archive::{AppendReceipt, Listed, SealPlan};
use backend::Backend;
pub use catalog::{RedbCatalog, BLOB_END_KEY};
pub use error::{Abandoned, Result, RowProblem, StoreError};
pub use file::FileReader;
pub use history::{ChangeKind, HistoryEntry};
pub use object_storage::{ObjectStorage, ObjectStorageFactory};
pub use remote::{Remote, RemoteConfig};
pub use sealed::{SealedAt, SealedFile, SealedWriter};
pub use tables::TableKind;

/// Root namespace of all archives.
pub const ROOT_NAMESPACE: &str = "znippy";

const P_CHUNK: &str = "znippy.chunk_size";
const P_PACK: &str = "znippy.pack_threshold";
const P_PACK_SIZE: &str = "znippy.pack_size";
const P_LEVEL: &str = "znippy.level";
const P_META: &str = "znippy.has_meta";
const P_STATE: &str = "znippy.state";
const P_SEALED_PATH: &str = "znippy.sealed_path";
const P_SEALED_LEN: &str = "znippy.sealed_len";
const P_PLUGINS: &str = "znippy.plugins";
const P_REPO: &str = "znippy.repo";

/// How long a change keeps committing again after it first lost a commit
/// race to another node, before it gives up with the conflict. A count of
/// races was not enough: a node that must catch up before each try can lose
/// dozens in a row to one that commits back to back (docs/benchmarks.md,
/// "Scaled out").
const COMMIT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The nice value of the maintenance thread: the kernel gives it about a
/// tenth of the CPU a request's thread gets when both want it.
const MAINTENANCE_NICE: i32 = 10;

/// The commit races one change has lost to other nodes.
struct Races {
    lost: u32,
    first: Option<std::time::Instant>,
    patience: std::time::Duration,
}

impl Races {
    fn new(patience: std::time::Duration) -> Races {
        Races {
            lost: 0,
            first: None,
            patience,
        }
    }

    /// Counts a lost race. Returns how long to pause before committing
    /// again, or `None` once `patience` has passed since the first loss.
    /// The pause after the `n`th loss is a random time up to 2^n ms, at most
    /// 8 ms: a longer one only lets the node that keeps winning commit again.
    fn lost(&mut self) -> Option<std::time::Duration> {
        let first = *self.first.get_or_insert_with(std::time::Instant::now);
        if first.elapsed() >= self.patience {
            return None;
        }
        self.lost += 1;
        // The random bits of a UUID v7, which the store makes anyway.
        let random = uuid::Uuid::now_v7().as_u128() as u64;
        let cap = 1u64 << self.lost.min(3);
        Some(std::time::Duration::from_micros(random % (cap * 1000)))
    }
}

/// Previous metadata files a table's log names (and expiry keeps on disk).
const METADATA_VERSIONS_KEPT: usize = 20;

/// How long [`Store::gc`] leaves an unnamed segment by default: far longer
/// than an append takes from its upload to its commit.
pub const GC_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What [`Store::gc`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Objects removed.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// How to create an archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Chunking, packing and codec settings.
    pub props: ArchiveProps,
    /// Whether the archive has a metadata section from the start (possibly empty).
    pub with_meta: bool,
    /// Whether the store's plugins read the packages appended to it: then
    /// it has a `packages_<plugin>` table per plugin, and its seal has
    /// package sections, as `znippy compress` without `--no-plugins` makes.
    pub plugins: bool,
    /// The repo its package rows are filed under.
    pub repo: String,
}

/// Whether an archive still takes appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Appends and deletes are accepted.
    Live,
    /// Immutable.
    Sealed,
}

/// What `inspect` reports about an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// The archive id.
    pub id: String,
    /// Live or sealed.
    pub state: State,
    /// Its properties.
    pub props: ArchiveProps,
    /// Whether it has a metadata section.
    pub with_meta: bool,
    /// Live files.
    pub files: u64,
    /// Sum of the live files' sizes.
    pub bytes_in: u64,
    /// Committed bytes of the blob region.
    pub bytes_stored: u64,
    /// Bytes read from the blob region (or the sealed file) since this store
    /// opened it: reads touch only the slices they return.
    pub bytes_read: u64,
    /// The current `files` snapshot.
    pub snapshot_id: Option<i64>,
    /// Appends (and deletes) committed.
    pub appends: u64,
}

pub(crate) struct NsProps {
    pub archive: ArchiveProps,
    pub with_meta: bool,
    pub sealed: Option<SealedFile>,
    /// The plugins whose package tables the archive has.
    pub plugins: Vec<String>,
    pub repo: String,
}

/// A sealed archive's `.znippy`, open for reading.
pub struct OpenSealed {
    /// Its bytes: a file, or ranged GETs of an object.
    pub source: Arc<dyn znippy_format::ReadAt>,
    /// Its length.
    pub len: u64,
    /// The `files` snapshot that sealed it.
    pub snapshot_id: Option<i64>,
}

impl std::fmt::Debug for OpenSealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenSealed")
            .field("len", &self.len)
            .field("snapshot_id", &self.snapshot_id)
            .finish_non_exhaustive()
    }
}

pub(crate) async fn namespace_props(catalog: &Backend, ns: &NamespaceIdent) -> Result<NsProps> {
    let p = catalog.get_namespace(ns).await?.properties().clone();
    let bad = |key: &str| StoreError::BadNamespaceProperty {
        key: key.to_string(),
        value: p.get(key).cloned(),
    };
    let num =
        |k: &str| -> Result<u64> { p.get(k).and_then(|v| v.parse().ok()).ok_or_else(|| bad(k)) };
    let chunk_size = num(P_CHUNK)?;
    let archive = ArchiveProps {
        chunk_size,
        pack_threshold: num(P_PACK)?,
        // An archive created before pack_size packed up to chunk_size, and
        // keeps doing so: its seal is what compress made of it then.
        pack_size: match p.contains_key(P_PACK_SIZE) {
            true => num(P_PACK_SIZE)?,
            false => chunk_size,
        },
        level: p
            .get(P_LEVEL)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(P_LEVEL))?,
    };
    archive.validate()?;
    Ok(NsProps {
        archive,
        with_meta: p.get(P_META).is_some_and(|v| v == "true"),
        sealed: match p.get(P_STATE).map(String::as_str) {
            Some("sealed") => Some(SealedFile {
                at: SealedAt::File(
                    p.get(P_SEALED_PATH)
                        .map(PathBuf::from)
                        .ok_or_else(|| bad(P_SEALED_PATH))?,
                ),
                len: num(P_SEALED_LEN)?,
            }),
            _ => None,
        },
        plugins: p
            .get(P_PLUGINS)
            .map(|v| {
                v.split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        repo: p.get(P_REPO).cloned().unwrap_or_default(),
    })
}

async fn set_ns_props(
    catalog: &Backend,
    ns: &NamespaceIdent,
    props: &[(&str, String)],
) -> Result<()> {
    let mut p = catalog.get_namespace(ns).await?.properties().clone();
    p.extend(props.iter().map(|(k, v)| (k.to_string(), v.clone())));
    Ok(catalog.update_namespace(ns, p).await?)
}

/// Mirrors a seal in the namespace's properties, for catalog browsers (the
/// `files` snapshot that sealed the archive is the fact; this is derived,
/// and written again on open if a crash left it behind). Only on the
/// embedded catalog: iceberg-rust's REST client cannot update a
/// namespace's properties.
pub(crate) async fn mirror_seal(
    catalog: &Backend,
    ns: &NamespaceIdent,
    file: &SealedFile,
) -> Result<()> {
    if catalog.redb().is_none() {
        return Ok(());
    }
    let props = [
        (P_STATE, "sealed".to_string()),
        (P_SEALED_PATH, file.at.to_string()),
        (P_SEALED_LEN, file.len.to_string()),
    ];
    set_ns_props(catalog, ns, &props).await
}

/// Records that the archive has a metadata section, on the embedded catalog.
/// On a REST catalog, whose namespaces iceberg-rust cannot update, the
/// `meta` table's first snapshot says it (see `LiveArchive::open`).
pub(crate) async fn set_has_meta(catalog: &Backend, ns: &NamespaceIdent) -> Result<()> {
    if catalog.redb().is_none() {
        return Ok(());
    }
    set_ns_props(catalog, ns, &[(P_META, "true".to_string())]).await
}

fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadId(id.chars().take(80).collect()))
    }
}

/// How a [`Store`] runs its appends.
#[derive(Clone)]
pub struct StoreOptions {
    /// Compression workers per append.
    pub threads: usize,
    /// Bytes of engine memory that all appends in flight share (see
    /// [`znippy_format::Engine::memory_bound`]): an append waits until its
    /// bound fits, and an archive whose bound exceeds it cannot be created.
    pub engine_memory: u64,
    /// The package plugins archives created with [`CreateOptions::plugins`]
    /// run (none by default; the service passes the built-in ones).
    pub plugins: Vec<Arc<dyn Plugin>>,
    /// How long an append waits for its share of [`Self::engine_memory`]
    /// before it is refused with [`StoreError::MemoryBusy`] (30 s by
    /// default; the service passes its `--body-timeout`).
    pub budget_wait: std::time::Duration,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("threads", &self.threads)
            .field("engine_memory", &self.engine_memory)
            .field("budget_wait", &self.budget_wait)
            .field(
                "plugins",
                &self.plugins.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl StoreOptions {
    /// `threads` workers, and a budget of 1 GiB or of eight appends with the
    /// default properties, whichever is more.
    pub fn new(threads: usize) -> Self {
        let default_append = znippy_format::Engine::memory_bound(ArchiveProps::default(), threads);
        StoreOptions {
            threads,
            engine_memory: (1 << 30).max(8 * default_append),
            plugins: Vec::new(),
            budget_wait: std::time::Duration::from_secs(30),
        }
    }
}

/// One open archive.
///
/// Four locks, so that reads never wait for an upload and uploads do not
/// wait for each other's commits: `writer` is held while an append streams
/// its upload into blobs, and for a whole delete or seal; `commit` while a
/// group of queued appends commits (see `archive.rs`), and for the final
/// commit of a rewrite or an expiry; `state` only while the derived state is
/// read or updated, never across I/O of an append. `maintenance` is held by
/// the one task that keeps the tables small (`maintenance.rs`), and by a
/// drop, which must not remove the tables under it. Order: `writer`, then
/// `maintenance`, then `commit`, then `state`; an append lets go of `writer`
/// before it takes `commit`.
pub(crate) struct Slot {
    writer: Arc<Mutex<()>>,
    maintenance: Arc<Mutex<()>>,
    /// Set by a change that found the tables due while the maintenance
    /// task held `maintenance`: the task looks at it before it ends.
    again: AtomicBool,
    commit: Arc<Mutex<()>>,
    state: Arc<Mutex<LiveArchive>>,
    /// Told each time an append queues, for a commit that waits to gather
    /// more ([`LiveArchive::gather_for`]).
    queued: Notify,
    /// What one append to it may hold ([`znippy_format::Engine::memory_bound`]
    /// of its properties, which never change): taken from the budget.
    engine_bound: u64,
}

impl Slot {
    /// Queues an append ([`LiveArchive::enqueue`]) and wakes a commit that
    /// waits to gather it.
    async fn enqueue(
        &self,
        engine: znippy_format::Engine,
        written: archive::Written,
        meta: Option<MetaTable>,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<AppendReceipt>>> {
        let queued = self.state.lock().await.enqueue(engine, written, meta);
        self.queued.notify_waiters();
        queued
    }

    /// Waits while the commit about to start should gather more appends
    /// ([`LiveArchive::gather_for`]): until the queue holds as many appends
    /// as were in flight when the last group committed, or the time it
    /// allows has passed. A delete's or a seal's flush does not wait.
    async fn gather(&self) {
        let Some(wait) = self.state.lock().await.gather_for() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Enabled before the queue is looked at, so that an append that
            // queues in between is not missed.
            let queued = self.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            if self.state.lock().await.gather_for().is_none() {
                return;
            }
            if tokio::time::timeout_at(deadline, queued).await.is_err() {
                return;
            }
        }
    }

    /// Commits the appends queued on the archive, if any, as one group. The
    /// caller holds the commit lock. Returns whether the tables are due for
    /// maintenance.
    ///
    /// On a shared catalog a group that loses the commit race to another
    /// node is put back, the state catches up with the winner, and the
    /// group is moved past it and committed again, for [`COMMIT_PATIENCE`]
    /// after its first loss; then it fails with the conflict. A group that
    /// commits directly follows the snapshot it was built on, which is the
    /// state's, so what it acknowledges is readable once it is folded in.
    async fn commit_queued(&self, catalog: &Backend) -> bool {
        let shared = catalog.redb().is_none();
        let mut races = Races::new(COMMIT_PATIENCE);
        loop {
            let group = {
                let mut state = self.state.lock().await;
                let finished = state.finish_meta(catalog).await;
                let Some(group) = state.take_group() else {
                    return false;
                };
                if let Err(e) = finished {
                    // Its snapshot would replace the one naming the facts
                    // still to commit: the queue fails, as with any commit.
                    state.apply_group(group, Err(e), false);
                    return false;
                }
                group
            };
            let committed = group.commit(catalog).await;
            let mut state = self.state.lock().await;
            if !shared {
                let due = matches!(&committed, Ok((c, _)) if c.maintenance_due);
                state.apply_group(group, committed, false);
                return due;
            }
            let pause = match &committed {
                Err(StoreError::Iceberg(e)) if pinned::is_conflict(e) => races.lost(),
                _ => None,
            };
            match (committed, pause) {
                (Err(_), Some(pause)) => {
                    state.requeue(group);
                    drop(state);
                    // Nodes that lose in lockstep would lose again together.
                    tokio::time::sleep(pause).await;
                    let mut state = self.state.lock().await;
                    if let Err(e) = state.refresh(catalog).await {
                        // The queue fails with it, as with any failed commit.
                        let Some(group) = state.take_group() else {
                            return false;
                        };
                        state.apply_group(group, Err(e), false);
                        return false;
                    }
                }
                (committed, _) => {
                    // A commit pinned to the state's snapshot follows it
                    // directly, so the group is folded in by hand; unless
                    // the state moved meanwhile, which only a read that
                    // caught up with this very commit can have done.
                    let folded = committed.is_ok() && state.moved_past(&group);
                    let due = matches!(&committed, Ok((c, _)) if c.maintenance_due);
                    state.apply_group(group, committed, folded);
                    return due;
                }
            }
        }
    }

    /// Waits until no append is queued: what a change that is not an append
    /// (a delete, a seal, a drop) does first, under the writer lock.
    async fn flush(&self, catalog: &Backend) {
        let _commit = self.commit.lock().await;
        self.commit_queued(catalog).await;
    }

    /// Starts keeping the archive's tables small (on a thread of its own
    /// on the embedded catalog, a task elsewhere; `changes` tracks both),
    /// unless that is running already. The change before it is
    /// committed, so a failure there is not its failure: a later change
    /// starts it again.
    fn maintain(self: &Arc<Self>, catalog: &Backend, changes: &TaskTracker) {
        let Ok(running) = Arc::clone(&self.maintenance).try_lock_owned() else {
            // The running task takes this change's work too (`until_settled`).
            self.again.store(true, Ordering::SeqCst);
            return;
        };
        let (slot, catalog) = (Arc::clone(self), catalog.clone());
        if catalog.redb().is_none() {
            changes.spawn(async move { slot.until_settled(running, &catalog).await });
            return;
        }
        // A rewrite decodes and encodes parquet for milliseconds at a time
        // without yielding: on one of the runtime's workers it held up the
        // requests queued behind it (every 32nd small PUT took 4x the
        // median). It runs on a thread of its own, below the requests'
        // threads in the kernel's scheduler (on Linux a nice value is a
        // thread's), its syncs on the blocking pool as every other's.
        let job = async move { slot.until_settled(running, &catalog).await };
        let runtime = tokio::runtime::Handle::current();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        // `Store::close` waits for the thread through `changes`; if the
        // thread cannot start, `done` is dropped with it.
        changes.spawn(async move {
            let _ = finished.await;
        });
        let thread = std::thread::Builder::new()
            .name("znippy-maintain".into())
            .spawn(move || {
                let me = rustix::thread::gettid();
                if let Err(e) = rustix::process::setpriority_process(Some(me), MAINTENANCE_NICE) {
                    tracing::debug!("maintenance runs at the requests' priority: {e}");
                }
                runtime.block_on(job);
                drop(done);
            });
        if let Err(e) = thread {
            tracing::warn!("maintenance not started (retried after a later change): {e}");
        }
    }

    /// Keeps the tables small under `running` until a round does nothing
    /// and no change found them due meanwhile. Such a change could not take
    /// the lock this task holds and left its work here: the task looks for
    /// one before it lets go of the lock, and once more after, so an
    /// archive that stops changing is left small too. It never ends under a
    /// stream of appends that keeps the tables due; a drop takes the writer
    /// lock first, which ends the stream.
    async fn until_settled(self: &Arc<Self>, mut running: OwnedMutexGuard<()>, catalog: &Backend) {
        let idents = {
            let s = self.state.lock().await;
            if s.dropped {
                return;
            }
            [s.files_ident.clone(), s.meta_ident.clone()]
        };
        loop {
            while self.round(catalog, &idents).await {}
            if self.again.swap(false, Ordering::SeqCst) {
                continue;
            }
            drop(running);
            if !self.again.load(Ordering::SeqCst) {
                return;
            }
            match Arc::clone(&self.maintenance).try_lock_owned() {
                Ok(guard) => running = guard,
                // Another task has it, or a drop.
                Err(_) => return,
            }
        }
    }

    /// One pass on each table, so that a stream of appends to one does not
    /// hold up the other; whether any pass did something. A shared
    /// catalog's rewrites are its owner's to run: there the store only
    /// expires snapshots, which keeps the metadata every node loads small.
    async fn round(&self, catalog: &Backend, idents: &[TableIdent; 2]) -> bool {
        let mut worked = false;
        for ident in idents {
            let pass = match catalog.redb() {
                Some(redb) => maintenance::maintain(redb, ident, &self.commit).await,
                None => maintenance::expire_shared(catalog.catalog(), ident)
                    .await
                    .map(|()| false),
            };
            match pass {
                Ok(done) => worked |= done,
                Err(e) => {
                    tracing::warn!("maintaining {ident} failed (retried after a later change): {e}")
                }
            }
        }
        worked
    }
}

/// An archive held for sealing: no other change can start until
/// [`Store::finish_seal`] (or until this is dropped).
pub struct SealGuard {
    slot: Arc<Slot>,
    _writer: OwnedMutexGuard<()>,
}

impl std::fmt::Debug for SealGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealGuard").finish_non_exhaustive()
    }
}

/// An archive's entry in the map of open archives: set once its open is done.
type Opening = Arc<OnceCell<Arc<Slot>>>;

/// Live archives: in a data directory, or on a catalog and object storage.
pub struct Store {
    catalog: Backend,
    /// The data directory, when there is one.
    dir: Option<PathBuf>,
    threads: usize,
    /// The archives opened, or being opened, in this process.
    open: Arc<Mutex<HashMap<String, Opening>>>,
    /// Held through every create and drop. Each is several catalog steps,
    /// and a create that met a drop halfway would take the namespace the
    /// drop was emptying for one a create left unfinished, and remake its
    /// tables under the drop (which then failed on a namespace not empty,
    /// with the old archive still open). Creates and drops are rare; one
    /// lock for all ids keeps them simple.
    lifecycle: Arc<Mutex<()>>,
    scratches: Arc<file::ScratchPool>,
    budget: budget::Budget,
    /// The changes running on tasks of their own (see [`Store::run_to_end`]).
    changes: TaskTracker,
    plugins: Vec<Arc<dyn Plugin>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the store in `dir`; appends use `threads` compression
    /// workers and the default [`StoreOptions::engine_memory`].
    pub async fn open(dir: &Path, threads: usize) -> Result<Self> {
        Self::open_with(dir, StoreOptions::new(threads)).await
    }

    /// Opens (or creates) the store in `dir` with `opts`.
    pub async fn open_with(dir: &Path, opts: StoreOptions) -> Result<Self> {
        let db = dir.join("catalog.redb");
        let fresh = std::fs::metadata(&db).map_or(true, |m| m.len() == 0);
        for sub in ["warehouse", "blobs"] {
            let sub = dir.join(sub);
            let mut entries = match std::fs::read_dir(&sub) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(&sub)
                        .map_err(|e| StoreError::io(format!("creating {}", sub.display()), e))?;
                    continue;
                }
                Err(e) => return Err(StoreError::io(format!("reading {}", sub.display()), e)),
            };
            // A new catalog would open on them as an empty store, and the
            // first create of an id would cut that id's sidecar to nothing.
            if fresh && entries.next().is_some() {
                return Err(StoreError::CatalogMissing {
                    catalog: db,
                    holding: sub,
                });
            }
        }
        let catalog = RedbCatalog::open(&db, &dir.join("warehouse")).await?;
        let backend = Backend::local(catalog, dir.join("blobs"));
        Self::open_on(backend, Some(dir.to_path_buf()), opts).await
    }

    /// Opens the archives of a scaled-out deployment ([`RemoteConfig::connect`]):
    /// the tables in its catalog, the blobs as segment objects in its bucket.
    /// Its object-storage requests run on the current runtime.
    pub async fn open_remote(remote: Remote, opts: StoreOptions) -> Result<Self> {
        let Remote {
            catalog,
            blobs,
            signer,
            prefix,
        } = remote;
        let runtime = tokio::runtime::Handle::current();
        let backend = Backend::remote(catalog, blobs, signer, prefix, runtime);
        Self::open_on(backend, None, opts).await
    }

    async fn open_on(catalog: Backend, dir: Option<PathBuf>, opts: StoreOptions) -> Result<Self> {
        let root = NamespaceIdent::new(ROOT_NAMESPACE.into());
        if !catalog.namespace_exists(&root).await? {
            match catalog.create_namespace(&root, HashMap::new()).await {
                // Another node made it first.
                Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {}
                r => {
                    r?;
                }
            }
        }
        let threads = opts.threads.max(1);
        Ok(Store {
            catalog,
            dir,
            threads,
            open: Arc::default(),
            lifecycle: Arc::default(),
            scratches: Arc::default(),
            budget: budget::Budget::new(opts.engine_memory, threads, opts.budget_wait),
            changes: TaskTracker::new(),
            plugins: opts.plugins,
        })
    }

    /// Closes the store once the changes still running have ended (an append
    /// whose caller went away ends as soon as its input fails). When this
    /// returns the data directory is free: another process, or another
    /// [`Store::open`], can take it. The files expiries unlinked, kept for
    /// readers a while (`maintenance::RETIRED_FOR`), are deleted now.
    pub async fn close(self) {
        self.changes.close();
        self.changes.wait().await;
        // What expiries unlinked is kept for the readers of this process's
        // tables; left behind, nothing would ever delete it. Then the tables
        // proven clean are marked, so that the next open need not sweep them.
        if let Some(redb) = self.catalog.redb() {
            if let Err(e) = redb.close().await {
                tracing::warn!("closing the catalog: {e}");
            }
        }
    }

    /// Runs a change to an archive on its own task, so that a caller that
    /// goes away (a client that disconnects) cannot stop it between its
    /// commit and the update of the derived state.
    async fn run_to_end<T: Send + 'static>(
        &self,
        change: impl std::future::Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        self.changes
            .spawn(change)
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    fn ns(id: &str) -> NamespaceIdent {
        NamespaceIdent::from_strs([ROOT_NAMESPACE, id]).expect("two non-empty parts")
    }

    /// Creates an empty live archive.
    pub async fn create(&self, id: &str, opts: CreateOptions) -> Result<ArchiveInfo> {
        check_id(id)?;
        opts.props.validate()?;
        // Properties the service could never append with are refused here,
        // as any other property out of range.
        let bound = self.budget.bound(opts.props).await?;
        if let Err(e @ StoreError::OverBudget { .. }) = self.budget.check(bound) {
            return Err(znippy_format::Error::Property(e.to_string()).into());
        }
        let _lifecycle = self.lifecycle.lock().await;
        let ns = Self::ns(id);
        let plugins: &[Arc<dyn Plugin>] = match opts.plugins {
            true => &self.plugins,
            false => &[],
        };
        // What the archive's appends will run, checked now.
        Plugins::new(plugins.to_vec(), &opts.repo)?;
        let mut props = HashMap::from([
            (P_CHUNK.to_string(), opts.props.chunk_size.to_string()),
            (P_PACK.to_string(), opts.props.pack_threshold.to_string()),
            (P_PACK_SIZE.to_string(), opts.props.pack_size.to_string()),
            (P_LEVEL.to_string(), opts.props.level.to_string()),
            (P_META.to_string(), opts.with_meta.to_string()),
            (P_STATE.to_string(), "live".to_string()),
        ]);
        if !plugins.is_empty() {
            let names: Vec<&str> = plugins.iter().map(|p| p.name()).collect();
            props.insert(P_PLUGINS.to_string(), names.join(","));
            props.insert(P_REPO.to_string(), opts.repo.clone());
        }
        // The namespace first, then its tables, `files` first: an archive is
        // whole once they all exist, and a namespace without `files` holds
        // none, which no read opens (`slot`). A create that died after
        // `files` is resumed as it was recorded. A namespace without `files`
        // is what a create left before it, or a drop after its first table
        // (`drop_archive`): what is left in it belongs to no archive, so it
        // is purged and the namespace made again with these properties.
        let resumed = match self.catalog.create_namespace(&ns, props.clone()).await {
            Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {
                let files = TableIdent::new(ns.clone(), tables::FILES.to_string());
                match self.catalog.table_exists(&files).await? {
                    true => true,
                    false => {
                        for t in self.catalog.list_tables(&ns).await? {
                            self.catalog.purge_table(&t).await?;
                        }
                        self.catalog.drop_namespace(&ns).await?;
                        self.catalog.create_namespace(&ns, props).await?;
                        false
                    }
                }
            }
            r => {
                r?;
                false
            }
        };
        znippy_format::failpoint("store.namespace-created");
        // The tables the namespace says the archive has: a create resumed
        // with other options makes what the first one recorded.
        let recorded = match resumed {
            true => namespace_props(&self.catalog, &ns).await?.plugins,
            false => plugins.iter().map(|p| p.name().to_string()).collect(),
        };
        let mut tables = vec![
            (tables::FILES.to_string(), tables::files_schema()),
            (tables::META.to_string(), tables::meta_schema()),
        ];
        for p in self
            .plugins
            .iter()
            .filter(|p| recorded.iter().any(|r| r == p.name()))
        {
            tables.push((
                packages::table_name(p.name()),
                packages::schema(&p.columns())?,
            ));
        }
        let mut created = false;
        for (name, schema) in tables {
            let ident = TableIdent::new(ns.clone(), name.clone());
            if resumed && self.catalog.table_exists(&ident).await? {
                continue;
            }
            let creation = TableCreation::builder()
                .name(name)
                .schema(schema)
                .sort_order(SortOrder::unsorted_order())
                // Old metadata files beyond the log are deleted by expiry;
                // a short log keeps the table directory small.
                .properties(HashMap::from([(
                    "write.metadata.previous-versions-max".to_string(),
                    METADATA_VERSIONS_KEPT.to_string(),
                )]))
                .build();
            match self.catalog.create_table(&ns, creation).await {
                // Another create of the same id made it first.
                Err(e) if e.kind() == ErrorKind::TableAlreadyExists => {
                    return Err(StoreError::Exists(id.to_string()))
                }
                r => r?,
            };
            created = true;
        }
        if !created {
            return Err(StoreError::Exists(id.to_string()));
        }
        self.info(id).await
    }

    /// Ids of all archives. An archive being created or dropped while this
    /// runs may be listed and then be no archive to the next call.
    pub async fn list(&self) -> Result<Vec<String>> {
        let root = NamespaceIdent::new(ROOT_NAMESPACE.into());
        let mut ids: Vec<String> = self
            .catalog
            .list_namespaces(Some(&root))
            .await?
            .into_iter()
            .filter_map(|ns| ns.inner().pop())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// What every archive holds, in id order. Archives not open yet are
    /// opened `threads` at a time: the first listing after a restart opens
    /// them all. One dropped, or not yet whole, while this runs is left out.
    pub async fn infos(&self) -> Result<Vec<ArchiveInfo>> {
        use futures::stream::{self, StreamExt, TryStreamExt};
        let infos: Vec<Option<ArchiveInfo>> = stream::iter(self.list().await?)
            .map(|id| async move {
                match self.info(&id).await {
                    Err(StoreError::NoArchive(_)) => Ok(None),
                    r => r.map(Some),
                }
            })
            .buffered(self.threads)
            .try_collect()
            .await?;
        Ok(infos.into_iter().flatten().collect())
    }

    /// The archive, opened (and recovered) on first use. Only the lookup
    /// of its entry holds the map of open archives: first uses of different
    /// archives (a listing after a restart) open them in parallel, and
    /// first uses of one archive wait for the one open.
    async fn slot(&self, id: &str) -> Result<Arc<Slot>> {
        check_id(id)?;
        let opening = {
            let mut open = self.open.lock().await;
            match open.get(id) {
                Some(opening) => Arc::clone(opening),
                // An id that is no archive makes no entry, so requests for
                // made-up ids cannot grow the map.
                None if !self.catalog.namespace_exists(&Self::ns(id)).await? => {
                    return Err(StoreError::NoArchive(id.to_string()))
                }
                None => Arc::clone(open.entry(id.to_string()).or_default()),
            }
        };
        opening
            .get_or_try_init(|| self.open_slot(id))
            .await
            .cloned()
    }

    async fn open_slot(&self, id: &str) -> Result<Arc<Slot>> {
        let ns = Self::ns(id);
        let a = match LiveArchive::open(&self.catalog, id, &ns, self.threads, &self.plugins).await {
            // A namespace whose create has not made its tables (yet), or
            // that a drop emptied since the entry was made.
            Err(StoreError::Iceberg(e))
                if matches!(
                    e.kind(),
                    ErrorKind::TableNotFound | ErrorKind::NamespaceNotFound
                ) =>
            {
                return Err(StoreError::NoArchive(id.to_string()))
            }
            r => r?,
        };
        let engine_bound = self.budget.bound(a.props).await?;
        Ok(Arc::new(Slot {
            writer: Arc::new(Mutex::new(())),
            maintenance: Arc::default(),
            again: AtomicBool::new(false),
            commit: Arc::default(),
            state: Arc::new(Mutex::new(a)),
            queued: Notify::new(),
            engine_bound,
        }))
    }

    /// The archive's state, locked, for a read: an archive dropped while the
    /// read waited for the lock is no archive, as it is to every read after.
    /// On a shared catalog the state first catches up with what other
    /// nodes committed, so a file another node acknowledged is readable:
    /// with the `meta` table too when the read is of metadata.
    async fn live(&self, id: &str, meta: bool) -> Result<OwnedMutexGuard<LiveArchive>> {
        let mut a = Arc::clone(&self.slot(id).await?.state).lock_owned().await;
        if a.dropped {
            return Err(StoreError::NoArchive(id.to_string()));
        }
        if meta {
            a.refresh(&self.catalog).await?;
        } else {
            a.refresh_files(&self.catalog).await?;
        }
        Ok(a)
    }

    /// What the archive holds.
    pub async fn info(&self, id: &str) -> Result<ArchiveInfo> {
        let a = self.live(id, true).await?;
        Ok(ArchiveInfo {
            id: id.to_string(),
            state: if a.sealed.is_some() {
                State::Sealed
            } else {
                State::Live
            },
            props: a.props,
            with_meta: matches!(a.meta, Metadata::Present(_)),
            files: a.live.len() as u64,
            bytes_in: a.live.bytes(),
            bytes_stored: a.blob_end,
            bytes_read: a.blobs.bytes_read(),
            snapshot_id: a.snapshot_id,
            appends: a.append_seq,
        })
    }

    /// Drops the archive: its tables, namespace and sidecar. Like a change,
    /// it runs to its end even if the returned future is dropped: stopped
    /// between two tables, it would leave an archive no read can open.
    pub async fn drop_archive(&self, id: &str) -> Result<()> {
        let lifecycle = Arc::clone(&self.lifecycle).lock_owned().await;
        let slot = self.slot(id).await?;
        let catalog = self.catalog.clone();
        let open = Arc::clone(&self.open);
        let id = id.to_string();
        self.run_to_end(async move {
            let _lifecycle = lifecycle;
            let _writer = slot.writer.lock().await;
            slot.flush(&catalog).await;
            let _maintenance = slot.maintenance.lock().await;
            let mut a = slot.state.lock().await;
            if a.dropped {
                return Err(StoreError::NoArchive(id));
            }
            let ns = Self::ns(&id);
            let packages = a
                .package_names
                .iter()
                .map(|n| TableIdent::new(ns.clone(), n.clone()));
            // `files` first: a namespace without it holds no archive, so a
            // drop that stops after it has dropped the archive, and a create
            // of the id clears what it left (see `create`).
            for t in [a.files_ident.clone(), a.meta_ident.clone()]
                .into_iter()
                .chain(packages)
            {
                catalog.purge_table(&t).await?;
                znippy_format::failpoint("store.drop-table-purged");
            }
            catalog.drop_namespace(&ns).await?;
            // The tables that named the blobs are gone: what a failure here
            // leaves is garbage, not a half-dropped archive.
            if let Err(e) = a.blobs.remove().await {
                tracing::warn!("{id}: removing the blobs of a dropped archive: {e}");
            }
            if let Some(SealedAt::File(path)) = a.sealed.as_ref().map(|s| &s.at) {
                let _ = std::fs::remove_file(path);
            }
            a.dropped = true;
            open.lock().await.remove(&id);
            Ok(())
        })
        .await
    }

    /// Appends one batch of files (and metadata). Appends to one archive write
    /// their blobs one after another and commit in groups: the appends that
    /// queue up while a commit runs share the next one. Different archives
    /// proceed in parallel.
    pub async fn append(
        &self,
        id: &str,
        files: Vec<InputFile>,
        meta: Option<MetaTable>,
    ) -> Result<AppendReceipt> {
        // A batch of facts alone compresses nothing: it takes no engine memory.
        let compresses = !files.is_empty();
        let files = files.into_iter().map(Ok);
        self.append_with(id, files, async { Ok(meta) }, compresses)
            .await
    }

    /// [`Store::append`] for batches that arrive as a stream: `files` is pulled
    /// on a blocking thread, one file read to its end before the next is asked
    /// for, and may block or fail (the batch then commits nothing). `meta` is
    /// awaited once every file has been read, so it may come after the files;
    /// it yields [`Abandoned`] when the caller's input failed, and the batch
    /// then commits nothing.
    ///
    /// The append runs to its end (commit or clean rollback) even if the
    /// returned future is dropped: an append abandoned halfway would leave its
    /// blobs still being written past `blob_end` while the next append starts
    /// writing there.
    pub async fn append_stream<I, M>(&self, id: &str, files: I, meta: M) -> Result<AppendReceipt>
    where
        I: IntoIterator<Item = znippy_format::Result<InputFile>> + Send + 'static,
        I::IntoIter: Send,
        M: std::future::Future<Output = Result<Option<MetaTable>, Abandoned>> + Send + 'static,
    {
        self.append_with(id, files, meta, true).await
    }

    /// [`Store::append_stream`], taking the archive's share of the engine
    /// memory if the batch `compresses` files.
    async fn append_with<I, M>(
        &self,
        id: &str,
        files: I,
        meta: M,
        compresses: bool,
    ) -> Result<AppendReceipt>
    where
        I: IntoIterator<Item = znippy_format::Result<InputFile>> + Send + 'static,
        I::IntoIter: Send,
        M: std::future::Future<Output = Result<Option<MetaTable>, Abandoned>> + Send + 'static,
    {
        let slot = self.slot(id).await?;
        let catalog = self.catalog.clone();
        let budget = self.budget.clone();
        let changes = self.changes.clone();
        self.run_to_end(async move {
            let queued = {
                let _writer = slot.writer.lock().await;
                let _memory = match compresses {
                    true => Some(budget.take(slot.engine_bound).await?),
                    false => None,
                };
                let pending = {
                    let mut state = slot.state.lock().await;
                    // On a shared catalog the append starts where the other
                    // nodes have left the `files` table (their facts are
                    // folded in by the next read of metadata).
                    state.refresh_files(&catalog).await?;
                    state.begin_append()?
                };
                let written = archive::write_blobs(pending, files).await;
                // Metadata may come after the files (a multipart upload can
                // carry it last); it is complete once they are.
                let queued = match written {
                    Ok((engine, Ok(written))) => match meta.await {
                        Ok(m) => slot.enqueue(engine, written, m).await,
                        Err(Abandoned) => Err(StoreError::Aborted),
                    },
                    Ok((_, Err(e))) | Err(e) => Err(e),
                };
                if queued.is_err() {
                    // The queue ahead commits first: the blobs to cut off
                    // are then this append's alone.
                    slot.flush(&catalog).await;
                    slot.state.lock().await.abandon_append();
                }
                queued
            }?;
            let receipt = {
                let _commit = slot.commit.lock().await;
                let mut queued = queued;
                match queued.try_recv() {
                    // An earlier append's commit took this one along.
                    Ok(r) => r,
                    Err(_) => {
                        slot.gather().await;
                        if slot.commit_queued(&catalog).await {
                            slot.maintain(&catalog, &changes);
                        }
                        queued
                            .await
                            .map_err(|_| StoreError::Task("the group commit was lost".into()))?
                    }
                }
            };
            receipt
        })
        .await
    }

    /// Deletes one file (a tombstone row).
    pub async fn delete_file(&self, id: &str, path: &str) -> Result<i64> {
        let slot = self.slot(id).await?;
        let catalog = self.catalog.clone();
        let changes = self.changes.clone();
        let path = path.to_string();
        self.run_to_end(async move {
            let _writer = slot.writer.lock().await;
            slot.flush(&catalog).await;
            // Under the commit lock, as a group of appends and a
            // maintenance commit are: a rewrite or an expiry that raced a
            // delete lost the pointer's swap to it and failed.
            let _commit = slot.commit.lock().await;
            let shared = catalog.redb().is_none();
            let mut races = Races::new(COMMIT_PATIENCE);
            let committed = loop {
                let mut state = slot.state.lock().await;
                state.refresh(&catalog).await?;
                match state.delete(&catalog, &path).await {
                    Err(StoreError::Iceberg(e)) if shared && pinned::is_conflict(&e) => {
                        let Some(pause) = races.lost() else {
                            return Err(StoreError::Iceberg(e));
                        };
                        drop(state);
                        tokio::time::sleep(pause).await;
                    }
                    r => break r?,
                }
            };
            if committed.maintenance_due {
                slot.maintain(&catalog, &changes);
            }
            Ok(committed.snapshot_id)
        })
        .await
    }

    /// Writes one file's bytes to `out`, verified.
    pub async fn read_file(
        &self,
        id: &str,
        path: &str,
        out: &mut (dyn Write + Send),
    ) -> Result<u64> {
        self.open_file(id, path).await?.read_range(0..u64::MAX, out)
    }

    /// Opens one file for reading. The archive's lock is held only to take the
    /// file's rows, so long reads do not hold up appends.
    pub async fn open_file(&self, id: &str, path: &str) -> Result<FileReader> {
        let a = self.live(id, false).await?;
        a.open_file(path, self.scratches.clone())
    }

    /// Live files whose paths start with `prefix`, in path order.
    pub async fn list_files(&self, id: &str, prefix: &str) -> Result<Vec<Entry>> {
        let a = self.live(id, false).await?;
        Ok(a.entries(prefix))
    }

    /// Up to `limit` live files whose paths start with `prefix` and sort after
    /// `after`, in path order: one page of a listing.
    pub async fn list_page(
        &self,
        id: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let a = self.live(id, false).await?;
        Ok(a.entries_page(prefix, after, limit))
    }

    /// Up to `limit` items of the folded listing of the directory `prefix`
    /// (ending with `/`, or empty for the root) that sort after `after`, in
    /// path order: the live files directly in it, and each subdirectory
    /// holding live files once, as [`Listed::Dir`]. Pass the last item's
    /// [`Listed::path`] as `after` for the next page.
    pub async fn list_folded(
        &self,
        id: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Listed>> {
        let a = self.live(id, false).await?;
        Ok(a.folded_page(prefix, after, limit))
    }

    /// The changes `id`'s `files` table keeps, newest first (see
    /// [`HistoryEntry`]); the oldest are expired as the table grows.
    pub async fn history(&self, id: &str) -> Result<Vec<HistoryEntry>> {
        let ident = self.live(id, false).await?.files_ident.clone();
        let table = self.catalog.load_table(&ident).await?;
        Ok(history::of(table.metadata()))
    }

    /// The sealed `.znippy` of `id`, open, once it is sealed. In a data
    /// directory the file was opened when the archive was, so a drop that
    /// follows cannot pull it from under the reader.
    pub async fn open_sealed(&self, id: &str) -> Result<Option<OpenSealed>> {
        let a = self.live(id, false).await?;
        let Some(sealed) = &a.sealed else {
            return Ok(None);
        };
        Ok(Some(OpenSealed {
            source: a.blobs.clone(),
            len: sealed.len,
            snapshot_id: a.snapshot_id,
        }))
    }

    /// A URL that fetches `id`'s sealed `.znippy` straight from object
    /// storage with `method` (GET or HEAD) for `expires`, without
    /// credentials; `None` while the archive is live, and in a data
    /// directory.
    pub async fn presigned_sealed(
        &self,
        id: &str,
        method: reqwest::Method,
        expires: std::time::Duration,
    ) -> Result<Option<String>> {
        let a = self.live(id, false).await?;
        let Some(SealedAt::Object(key)) = a.sealed.as_ref().map(|s| &s.at) else {
            return Ok(None);
        };
        self.catalog.presign(method, key, expires).await.map(Some)
    }

    /// One live file.
    pub async fn stat(&self, id: &str, path: &str) -> Result<Entry> {
        let a = self.live(id, false).await?;
        a.stat(path)
    }

    /// The Iceberg namespace properties of archive `id` (its archive
    /// properties and state, as `znippy.*` keys), as the catalog holds them.
    pub async fn namespace_properties(&self, id: &str) -> Result<HashMap<String, String>> {
        check_id(id)?;
        match self.catalog.get_namespace(&Self::ns(id)).await {
            Ok(ns) => Ok(ns.properties().clone()),
            Err(e) if e.kind() == ErrorKind::NamespaceNotFound => {
                Err(StoreError::NoArchive(id.to_string()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Table `kind` of archive `id` at its latest commit, as any Iceberg client
    /// loads it: the location of its current metadata file, that metadata, and
    /// the file I/O to scan it with. This is what outside readers are served;
    /// the store's own reads never scan the tables.
    pub async fn table(&self, id: &str, kind: TableKind) -> Result<Table> {
        check_id(id)?;
        let ident = TableIdent::new(Self::ns(id), kind.name().to_string());
        match self.catalog.load_table(&ident).await {
            Ok(t) => Ok(t),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::TableNotFound | ErrorKind::NamespaceNotFound
                ) =>
            {
                Err(StoreError::NoArchive(id.to_string()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The names of archive `id`'s tables: `files`, `meta`, and a
    /// `packages_<plugin>` per plugin it runs.
    pub async fn table_names(&self, id: &str) -> Result<Vec<String>> {
        let a = self.live(id, false).await?;
        let mut names = vec![tables::FILES.to_string(), tables::META.to_string()];
        names.extend(a.package_names.iter().cloned());
        Ok(names)
    }

    /// Table `name` of archive `id` (one of [`Store::table_names`]), as
    /// [`Store::table`] loads one.
    pub async fn table_named(&self, id: &str, name: &str) -> Result<Table> {
        if !self.table_names(id).await?.iter().any(|n| n == name) {
            return Err(StoreError::NotFound(format!("{id}.{name}")));
        }
        let ident = TableIdent::new(Self::ns(id), name.to_string());
        Ok(self.catalog.load_table(&ident).await?)
    }

    /// The current package rows of archive `id`: what its plugins read
    /// from its live files, by `(pkg_type, repo)`. Read from the package
    /// tables (one scan each), as a seal writes them.
    pub async fn packages(&self, id: &str) -> Result<Packages> {
        let (tables, live) = {
            let a = self.live(id, true).await?;
            a.check_plugins()?;
            let live: HashMap<String, u64> = a
                .live
                .iter()
                .map(|(p, f)| (p.clone(), f.append_seq))
                .collect();
            (a.package_tables.clone(), live)
        };
        archive::current_packages(&self.catalog, &tables, &live).await
    }

    /// The archive's metadata (absent, or a table).
    pub async fn metadata(&self, id: &str) -> Result<Metadata> {
        let a = self.live(id, true).await?;
        Ok(a.meta.clone())
    }

    /// Metadata rows by exact key.
    pub async fn meta_by_key(&self, id: &str, key: &str) -> Result<MetaSearch> {
        let query = MetaQuery::Key(key.into());
        Ok(self.meta_page(id, &query, None, &PageLimit::ALL).await?.0)
    }

    /// One page of a metadata search, and whether more follow: only the rows
    /// of the page are copied out of the archive's state.
    pub async fn meta_page(
        &self,
        id: &str,
        query: &MetaQuery,
        after: Option<&MetaCursor>,
        limit: &PageLimit,
    ) -> Result<(MetaSearch, bool)> {
        let a = self.live(id, true).await?;
        Ok(a.meta.page(query, after, limit))
    }

    /// Holds the archive for sealing and returns what a seal needs. Changes
    /// wait until [`Store::finish_seal`]; reads go on.
    pub async fn begin_seal(&self, id: &str) -> Result<(SealGuard, SealPlan)> {
        let slot = self.slot(id).await?;
        let writer = Arc::clone(&slot.writer).lock_owned().await;
        slot.flush(&self.catalog).await;
        // The live files whose package rows the seal writes are taken with
        // the plan, under one lock: the same state.
        let (mut plan, files, package_tables, live) = {
            let mut state = slot.state.lock().await;
            if state.dropped {
                return Err(StoreError::NoArchive(id.to_string()));
            }
            state.refresh(&self.catalog).await?;
            state.check_plugins()?;
            (
                state.seal_plan(self.dir.as_ref().map(|d| d.join("sealed"))),
                state.files_ident.clone(),
                state.package_tables.clone(),
                state.live_seqs(),
            )
        };
        if !plan.in_place && plan.already.is_none() {
            // What every old blob holds, dead slices included: the re-pack
            // copies a blob only when it holds exactly what the new one would.
            let table = self.catalog.load_table(&files).await?;
            plan.committed = tables::file_rows(&tables::scan_all(&table).await?)?
                .into_iter()
                .filter(|r| !r.tombstone)
                .map(|r| r.slice)
                .collect();
        }
        plan.packages = archive::current_packages(&self.catalog, &package_tables, &live).await?;
        let guard = SealGuard {
            slot,
            _writer: writer,
        };
        Ok((guard, plan))
    }

    /// Commits the seal of `plan` in `file` (made durable by the caller):
    /// from now on reads go to the sealed file and changes are refused. On
    /// a shared catalog this fails with a conflict
    /// ([`StoreError::is_conflict`]) if another node committed to the
    /// archive since the plan was made; `file` is then removed, and a seal
    /// begun again either plans anew or finds the archive sealed.
    pub async fn finish_seal(
        &self,
        guard: SealGuard,
        plan: &SealPlan,
        file: SealedFile,
    ) -> Result<()> {
        let _commit = guard.slot.commit.lock().await;
        let mut state = guard.slot.state.lock().await;
        if let Err(e) = state.commit_seal(&self.catalog, plan, &file).await {
            if let SealedAt::Object(key) = &file.at {
                if let Some((objects, _)) = self.catalog.objects() {
                    if let Err(e) = object_store::ObjectStoreExt::delete(&**objects, key).await {
                        tracing::warn!("removing {key}, a seal that did not commit: {e}");
                    }
                }
            }
            return Err(e);
        }
        if let Err(e) = mirror_seal(&self.catalog, &Self::ns(&state.id), &file).await {
            tracing::warn!("{}: mirroring the seal in the namespace: {e}", state.id);
        }
        Ok(())
    }

    /// Removes the blob segments that no committed row names (and nothing
    /// else under the prefix: only segments and sealed files), once they are
    /// older than `min_age`: what an append leaves when it fails between
    /// its upload and its commit (the catalog went away, or it lost more
    /// commit races than it may), and what a drop left when object storage
    /// failed under it, and a sealed archive's segments, whose bytes its
    /// sealed file holds. A segment is named from its append's commit on, and
    /// an append commits within moments of its upload, so `min_age` (an
    /// hour, say) keeps the segments of appends still in flight. Nothing
    /// to do in a data directory, where a failed append's bytes are cut
    /// off the sidecar.
    pub async fn gc(&self, min_age: std::time::Duration) -> Result<Collected> {
        use futures::TryStreamExt;
        use object_store::ObjectStoreExt;

        let Some((objects, prefix)) = self.catalog.objects() else {
            return Ok(Collected::default());
        };
        let listed: Vec<object_store::ObjectMeta> = objects
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(|source| StoreError::ObjectStore {
                context: format!("listing the segments under {prefix}"),
                source,
            })?;
        // An age past the epoch keeps everything.
        let cutoff = std::time::SystemTime::now()
            .checked_sub(min_age)
            .unwrap_or(std::time::UNIX_EPOCH);
        let mut named: HashMap<String, HashSet<String>> = HashMap::new();
        let mut garbage = Vec::new();
        for object in listed {
            if std::time::SystemTime::from(object.last_modified) > cutoff {
                continue;
            }
            // Only what the store writes there, a segment or a sealed file
            // directly under an archive's id: a catalog may keep its tables
            // under the same prefix.
            let Some(parts) = object.location.prefix_match(prefix) else {
                continue;
            };
            let parts: Vec<_> = parts.collect();
            let [id, name] = parts.as_slice() else {
                continue;
            };
            if !segments::is_ours(name.as_ref()) {
                continue;
            }
            let id = id.as_ref().to_string();
            if !named.contains_key(&id) {
                named.insert(id.clone(), self.named_segments(&id).await?);
            }
            if !named[&id].contains(object.location.as_ref()) {
                garbage.push(object);
            }
        }
        let mut collected = Collected::default();
        for object in garbage {
            match objects.delete(&object.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    collected.objects += 1;
                    collected.bytes += object.size;
                }
                Err(source) => {
                    return Err(StoreError::ObjectStore {
                        context: format!("removing {}", object.location),
                        source,
                    })
                }
            }
        }
        Ok(collected)
    }

    /// The objects archive `id` names: the segments its rows name, or once
    /// it is sealed its sealed file alone (the segments' bytes are in it);
    /// none if there is no such archive (it was dropped).
    async fn named_segments(&self, id: &str) -> Result<HashSet<String>> {
        let ident = TableIdent::new(Self::ns(id), tables::FILES.to_string());
        if check_id(id).is_err() || !self.catalog.table_exists(&ident).await? {
            return Ok(HashSet::new());
        }
        let table = self.catalog.load_table(&ident).await?;
        if let Some(sealed) = archive::sealed_of(&self.catalog, &table)? {
            return Ok(HashSet::from([sealed.at.to_string()]));
        }
        let rows = tables::file_rows(&tables::scan_all(&table).await?)?;
        Ok(rows
            .into_iter()
            .filter_map(|r| r.segment)
            .map(|s| s.key)
            .collect())
    }

    /// Metadata rows by key prefix.
    pub async fn meta_by_prefix(&self, id: &str, prefix: &str) -> Result<MetaSearch> {
        let query = MetaQuery::Prefix(prefix.into());
        Ok(self.meta_page(id, &query, None, &PageLimit::ALL).await?.0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Races;

    /// A change lost to other nodes pauses a few milliseconds between tries
    /// for as long as its patience lasts from the first loss, however many
    /// races that is, and then gives up.
    #[test]
    fn a_change_keeps_trying_for_its_patience_not_for_a_count() {
        let mut races = Races::new(Duration::from_millis(200));
        for _ in 0..100 {
            let pause = races.lost().expect("still patient");
            assert!(pause <= Duration::from_millis(8));
        }
        std::thread::sleep(Duration::from_millis(210));
        assert_eq!(races.lost(), None);
    }
}
