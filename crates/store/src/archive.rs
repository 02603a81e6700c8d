//! One live archive: its derived in-memory state and its append protocol.
//!
//! The Iceberg tables are the one source of truth. Everything in [`LiveArchive`] is
//! derived from them when the archive opens and updated after each commit: the
//! lookup of live files (latest append wins, a tombstone deletes), the metadata
//! table, the committed blob end and the engine's dedupe map.
//!
//! An append, in order (acknowledged means durable):
//! 1. the engine writes the batch's blobs at the committed blob end;
//! 2. the blobs are synced while the `files` rows (and `meta` rows) go to new
//!    parquet files, synced too;
//! 3. one `files` snapshot commits, its summary holding the new blob end, the
//!    append number and, if there are meta rows, their data files (as JSON);
//! 4. the `meta` snapshot commits those meta data files.
//!
//! Step 3 is the commit point. A crash before it leaves sidecar bytes past the
//! committed end, cut off on the next open. A crash between 3 and 4 is rolled
//! forward on open: the meta data files named in the `files` summary are
//! committed to `meta`.
//!
//! Appends commit in groups. Step 1 runs one append at a time (the engine
//! and the sidecar's end are one per archive); an append whose blobs are
//! synced joins the archive's queue ([`LiveArchive::enqueue`]) and lets the
//! next one start writing. Steps 2 to 4 run for the whole queue at once, by
//! whichever queued append takes the commit lock first ([`Group`]): one data
//! file per table and one snapshot for every append that was waiting, each
//! keeping its own append number (what a seal's batches follow). Each is
//! acknowledged once the group is committed and its rows are readable.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;

use iceberg::spec::{deserialize_data_file_from_json, serialize_data_file_to_json, DataFile};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{NamespaceIdent, TableIdent};
use znippy_format::{
    check_file_rows, check_nesting, check_twins, failpoint, nfc, Archive, ArchiveProps, BatchStats,
    BlobRegion, BlobScratch, Engine, Entry, InputFile, Kind, MetaRow, MetaTable, Metadata,
    Packages, Plugin, Plugins, ReadAt, SliceRow, TailInfo,
};

use crate::backend::Backend;
use crate::blobs::Blobs;
use crate::catalog::BLOB_END_KEY;
use crate::error::{Result, StoreError};
use crate::file::{FileReader, ScratchPool};
use crate::history::{self, Change, APPEND_SEQ_KEY};
use crate::live_files::{LiveFile, LiveFiles};
use crate::maintenance;
use crate::packages::{self, LogRows};
use crate::pinned::Pinned;
use crate::sealed::{SealedAt, SealedFile, SealedWriter, SEALED_KEY, SEALED_LEN_KEY};
use crate::segments::Segment;
use crate::storage;
use crate::tables::{self, FileRow, MetaLogRow, FILES, META};

const PENDING_META_KEY: &str = "znippy.pending-meta";
/// The package tables' data files a `files` snapshot committed, as a JSON
/// object from table name to data files, for their step to commit.
const PENDING_PACKAGES_KEY: &str = "znippy.pending-packages";
/// The longest a commit waits for appends to join it: on a REST catalog
/// a commit takes tens of milliseconds, and no append should wait that long
/// for others.
pub(crate) const MAX_GATHER: Duration = Duration::from_millis(5);

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendReceipt {
    /// Files in the batch.
    pub files: u64,
    /// Input bytes of the batch.
    pub bytes: u64,
    /// The append's number (1, 2, ...).
    pub append_seq: u64,
    /// The `files` snapshot that committed it.
    pub snapshot_id: i64,
    /// The committed blob end afterwards.
    pub blob_end: u64,
    /// How long the Iceberg commit took (blobs were durable before it).
    pub commit_time: Duration,
}

/// An append between its first and last step.
pub(crate) struct PendingBlobs {
    engine: Engine,
    blobs: Arc<Blobs>,
    start: u64,
}

/// What the middle of an append wrote.
pub(crate) struct Written {
    rows: Vec<SliceRow>,
    packages: Packages,
    stats: BatchStats,
    /// Where its blobs start.
    start: u64,
    /// Its segment, on object storage (none if it wrote no blobs).
    segment: Option<Segment>,
}

/// The middle of an append: streams `files` through the engine into the
/// blob region past the committed end and makes them durable. Holds no lock on the
/// archive's state: nothing it writes is reachable before the commit.
pub(crate) async fn write_blobs<I>(
    pending: PendingBlobs,
    files: I,
) -> Result<(Engine, Result<Written>)>
where
    I: IntoIterator<Item = znippy_format::Result<InputFile>> + Send + 'static,
    I::IntoIter: Send,
{
    let PendingBlobs {
        mut engine,
        blobs,
        start,
    } = pending;
    tokio::task::spawn_blocking(move || {
        let r = blobs.write_at(start, |out| {
            let r = engine.write_batch(files, out, &mut |_| {});
            failpoint("store.blobs-written");
            Ok(r?)
        });
        let r = r.map(|(batch, segment)| Written {
            rows: batch.rows,
            packages: batch.packages,
            stats: batch.stats,
            start,
            segment,
        });
        (engine, r)
    })
    .await
    .map_err(|e| StoreError::Task(format!("compression: {e}")))
}

/// [`LiveArchive::gather_for`] of a queue of `queued` appends, after a
/// group commit that took `took` with `in_flight` appends in flight.
fn gather_wait(queued: usize, in_flight: usize, took: Duration) -> Option<Duration> {
    (queued > 0 && queued < in_flight).then(|| (took / 2).min(MAX_GATHER))
}

/// Everything a seal needs, taken under the archive's lock.
#[derive(Debug)]
pub struct SealPlan {
    /// The archive id.
    pub id: String,
    /// Archive properties.
    pub props: ArchiveProps,
    /// Committed end of the sidecar's blob region.
    pub blob_end: u64,
    /// Live rows, one list per append that still has live files, in append
    /// order, each in write order.
    pub batches: Vec<Vec<SliceRow>>,
    /// The live metadata.
    pub meta: Metadata,
    /// No dead rows: the sidecar is exactly a one-shot compress's blob region.
    pub in_place: bool,
    /// Every committed row, dead ones included, when the seal must re-pack
    /// (`in_place` false); empty otherwise.
    pub committed: Vec<SliceRow>,
    blobs: Arc<Blobs>,
    /// The sidecar's path, in a data directory.
    sidecar_path: Option<PathBuf>,
    /// Where a copied sealed archive goes, in a data directory.
    sealed_dir: Option<PathBuf>,
    /// The `files` snapshot the plan was made on, which the seal commits
    /// after, and the archive's last append number.
    base: Option<i64>,
    append_seq: u64,
    /// Set when the archive is sealed already.
    pub already: Option<SealedFile>,
    /// The package rows of the live files, which the tail's package
    /// sections hold.
    pub packages: Packages,
}

impl SealPlan {
    /// The committed blob region, for a re-pack to copy from.
    pub fn blobs(&self) -> &dyn ReadAt {
        &*self.blobs
    }

    /// Whether `sealed` is the archive's own blob file with the tail written
    /// after its blobs (rather than a re-packed copy).
    pub fn is_in_place(&self, sealed: &SealedFile) -> bool {
        is_sidecar(sealed, self.sidecar_path.as_deref())
    }

    /// Starts the sealed archive of a seal that is not in place: a new
    /// file in the data directory, or a new object (`sealed.rs`).
    pub fn create_sealed(&self) -> Result<SealedWriter> {
        match (&*self.blobs, &self.sealed_dir) {
            (Blobs::Segments(segments), _) => Ok(SealedWriter::object(segments.sealed_writer())),
            (Blobs::Sidecar(_), Some(dir)) => SealedWriter::file(dir, &self.id),
            (Blobs::Sidecar(_), None) => Err(StoreError::Unsupported(
                "a sidecar outside a data directory",
            )),
        }
    }

    /// Seals in place: `write` gets a writer at `blob_end` in the blob file
    /// itself and writes the tail. A longer partial tail that an earlier
    /// attempt left is cut off, and the file is synced before this returns
    /// the sealed file (for [`crate::Store::finish_seal`]) and the tail's
    /// summary.
    pub fn seal_in_place<E: From<StoreError>>(
        &self,
        write: impl FnOnce(&mut dyn Write) -> std::result::Result<TailInfo, E>,
    ) -> std::result::Result<(SealedFile, TailInfo), E> {
        let (Some(sidecar), Some(path)) = (self.blobs.sidecar(), &self.sidecar_path) else {
            return Err(StoreError::Unsupported("sealing an archive on object storage").into());
        };
        let mut out = BufWriter::new(sidecar.writer_at(self.blob_end));
        let tail = write(&mut out)?;
        let len = tail.archive_len;
        out.flush()
            .map_err(|e| StoreError::io("writing the tail", e))?;
        drop(out);
        failpoint("seal.tail-written");
        sidecar.truncate(len)?;
        sidecar.sync()?;
        let sealed = SealedFile {
            at: SealedAt::File(path.clone()),
            len,
        };
        Ok((sealed, tail))
    }
}

/// The state of a live archive, derived from its tables.
pub struct LiveArchive {
    pub(crate) id: String,
    pub(crate) props: ArchiveProps,
    pub(crate) files_ident: TableIdent,
    pub(crate) meta_ident: TableIdent,
    pub(crate) blobs: Arc<Blobs>,
    /// The sidecar's path, in a data directory.
    pub(crate) sidecar_path: Option<PathBuf>,
    pub(crate) blob_end: u64,
    pub(crate) append_seq: u64,
    pub(crate) snapshot_id: Option<i64>,
    /// The `meta` snapshot the metadata was derived from.
    meta_snapshot_id: Option<i64>,
    pub(crate) live: LiveFiles,
    pub(crate) meta: Metadata,
    /// Once sealed: the sealed file, which `blobs` then reads, tail and all.
    pub(crate) sealed: Option<SealedFile>,
    /// The sealed file opened as an archive (index read), on first read.
    sealed_archive: OnceLock<Archive<Arc<dyn ReadAt>>>,
    /// Whether any committed row is dead (replaced or deleted): then the sidecar
    /// holds blobs a one-shot compress of the live files would not.
    pub(crate) dead: bool,
    /// Set when the archive is dropped, for changes that were waiting on it.
    pub(crate) dropped: bool,
    /// The engine, carried from one append to the next: while appends are
    /// queued its dedupe map and blob end run ahead of the committed state.
    engine: Option<Engine>,
    /// Whether the engine may dedupe into slices that died (a replaced path):
    /// rebuilt from the live slices once nothing is queued.
    engine_stale: bool,
    /// Appends whose blobs are synced, waiting for their group commit.
    queue: Vec<Queued>,
    /// How many appends were in flight when the last group committed (its
    /// own and those queued behind it), and how long its commit took: what
    /// the next commit waits for ([`LiveArchive::gather_for`]).
    last_group: (usize, Duration),
    /// A group taken from the queue is committing: its blobs, like the
    /// queue's, lie past `blob_end`, so the engine must not be rebuilt from
    /// the committed state nor the sidecar cut back until it is applied.
    committing: bool,
    /// A group commit failed: the blobs past the committed end (and the
    /// engine that wrote them) are to be dropped before the next append.
    broken: bool,
    /// A change's `files` snapshot committed but its `meta` step failed:
    /// [`LiveArchive::finish_meta`] completes it before the next change,
    /// whose snapshot would no longer name the meta data files to commit.
    meta_behind: bool,
    /// Where the first of the appends now pending (queued, committing or
    /// writing) started: every committed blob lies below it.
    pending_floor: u64,
    threads: usize,
    /// The plugins its appends run, and the repo their rows are filed under.
    plugins: Plugins,
    /// Each plugin's package table.
    pub(crate) package_tables: Vec<(Arc<dyn Plugin>, TableIdent)>,
    /// Every package table the archive has, those of plugins this build
    /// lacks included.
    pub(crate) package_names: Vec<String>,
    /// A plugin the archive runs that this build lacks.
    missing_plugin: Option<String>,
}

/// An append whose blobs are written and synced, waiting to be committed.
pub(crate) struct Queued {
    rows: Vec<SliceRow>,
    packages: Packages,
    stats: BatchStats,
    meta: Option<MetaTable>,
    /// Where its blobs start.
    start: u64,
    /// The blob end after its blobs.
    end: u64,
    /// Its segment, on object storage.
    segment: Option<Segment>,
    done: oneshot::Sender<Result<AppendReceipt>>,
}

/// The queue of appends taken for one commit (steps 2 to 4), with the rows
/// it writes. Built under the state lock, committed without it
/// ([`Group::commit`]), then applied under it again.
pub(crate) struct Group {
    /// The appends that passed their checks, each with its append number.
    appends: Vec<(Queued, u64)>,
    file_rows: Vec<FileRow>,
    meta_rows: Vec<MetaLogRow>,
    /// The package rows, by the table they go to.
    package_rows: Vec<PackageLog>,
    end: u64,
    files_ident: TableIdent,
    meta_ident: TableIdent,
    /// The archive had no metadata section before this group's facts.
    first_meta: bool,
    started: std::time::Instant,
    /// The `files` snapshot the group was built on, which the commit must
    /// find current.
    base: Option<i64>,
    /// Where the group's blobs are, synced once for all of its appends.
    blobs: Arc<Blobs>,
}

/// Rows for one package table: its plugin (whose columns lay them out),
/// the table, and each append's rows.
pub(crate) type PackageLog = (Arc<dyn Plugin>, TableIdent, Vec<LogRows>);

impl std::fmt::Debug for LiveArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveArchive")
            .field("id", &self.id)
            .field("blob_end", &self.blob_end)
            .field("append_seq", &self.append_seq)
            .field("files", &self.live.len())
            .finish_non_exhaustive()
    }
}

fn summary(table: &Table, key: &str) -> Option<String> {
    table
        .metadata()
        .current_snapshot()?
        .summary()
        .additional_properties
        .get(key)
        .cloned()
}

/// The sealed file a `files` table's current snapshot names, if it sealed
/// the archive (or came after the seal, which no change but a rewrite of
/// the embedded catalog's does: and a rewrite keeps the summary).
pub(crate) fn sealed_of(catalog: &Backend, table: &Table) -> Result<Option<SealedFile>> {
    let Some(at) = summary(table, SEALED_KEY) else {
        return Ok(None);
    };
    Ok(Some(SealedFile {
        at: catalog.sealed_at(&at)?,
        len: summary_u64(table, SEALED_LEN_KEY)?,
    }))
}

fn summary_u64(table: &Table, key: &str) -> Result<u64> {
    match summary(table, key) {
        None => Ok(0),
        // These keys are counts and offsets that rows hold as Iceberg longs,
        // so a larger value is damage (and the next append's number must
        // not overflow).
        Some(value) => match value.parse::<u64>() {
            Ok(n) if i64::try_from(n).is_ok() => Ok(n),
            _ => Err(StoreError::BadSummary {
                key: key.to_string(),
                value,
            }),
        },
    }
}

/// One item of a folded listing ([`crate::Store::list_folded`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Listed {
    /// A live file directly in the listed directory.
    File(Entry),
    /// A subdirectory holding live files, as its path with a trailing `/`.
    Dir(String),
}

impl Listed {
    /// The path of the file, or of the directory with its trailing `/`.
    pub fn path(&self) -> &str {
        match self {
            Listed::File(e) => &e.path,
            Listed::Dir(d) => d,
        }
    }
}

/// Where a listing resumes after `item`: past the file, or past every path
/// under the directory `d/`. An archive path has no empty component, so a
/// trailing `/` names a directory, and `'0'` is the character after `'/'`:
/// every path starting with `d/` sorts before `d0`.
fn past(item: &str) -> std::ops::Bound<String> {
    use std::ops::Bound;
    match item.strip_suffix('/') {
        Some(dir) => Bound::Included(format!("{dir}0")),
        None => Bound::Excluded(item.to_string()),
    }
}

/// Latest append wins per path; a tombstone there deletes it.
fn live_files(rows: Vec<FileRow>) -> Result<BTreeMap<String, LiveFile>> {
    let mut latest: HashMap<String, (u64, bool, Vec<SliceRow>)> = HashMap::new();
    for r in rows {
        let e = latest.entry(r.slice.relative_path.clone()).or_insert((
            r.append_seq,
            r.tombstone,
            Vec::new(),
        ));
        if r.append_seq > e.0 {
            *e = (r.append_seq, r.tombstone, Vec::new());
        }
        if r.append_seq == e.0 {
            e.1 |= r.tombstone;
            if !r.tombstone {
                e.2.push(r.slice);
            }
        }
    }
    let mut out = BTreeMap::new();
    for (path, (append_seq, tomb, mut rows)) in latest {
        if tomb {
            continue;
        }
        rows.sort_by_key(|r| r.fdata_offset);
        check_file_rows(&path, &rows)?;
        out.insert(path, LiveFile { append_seq, rows });
    }
    Ok(out)
}

/// Latest append wins per `(key, path)`; a tombstone removes the key.
fn live_meta(rows: Vec<MetaLogRow>, has_section: bool) -> Result<Metadata> {
    if !has_section && rows.is_empty() {
        return Ok(Metadata::Absent);
    }
    let mut latest: HashMap<(String, Option<String>), MetaLogRow> = HashMap::new();
    for r in rows {
        let k = (r.key.clone(), r.path.clone());
        if latest
            .get(&k)
            .is_none_or(|old| r.append_seq >= old.append_seq)
        {
            latest.insert(k, r);
        }
    }
    let mut t = MetaTable::new();
    for r in latest.into_values().filter(|r| !r.tombstone) {
        t.set(r.path.as_deref(), &r.key, r.value)?;
    }
    Ok(Metadata::Present(t))
}

impl LiveArchive {
    /// Loads an archive from its tables, truncating the sidecar to the committed
    /// end, rolling a half-finished meta commit forward, laying out the
    /// tables' path view again (a power cut can leave it a commit behind),
    /// and retiring the files a crash left in the tables' directories
    /// (unless the last close left them clean, `swept.rs`).
    pub(crate) async fn open(
        catalog: &Backend,
        id: &str,
        ns: &NamespaceIdent,
        threads: usize,
        plugins: &[Arc<dyn Plugin>],
    ) -> Result<Self> {
        let sidecar_path = catalog.sidecar_path(id);
        let props = crate::namespace_props(catalog, ns).await?;
        // A plugin this build lacks leaves the archive readable; its appends
        // and its seal, which need the plugin's rows, are refused.
        let mut package_tables = Vec::new();
        let mut missing_plugin = None;
        for name in &props.plugins {
            let ident = TableIdent::new(ns.clone(), packages::table_name(name));
            match plugins.iter().find(|p| p.name() == name) {
                Some(plugin) => package_tables.push((Arc::clone(plugin), ident)),
                None => missing_plugin = Some(name.clone()),
            }
        }
        let archive_plugins = package_tables.iter().map(|(p, _)| Arc::clone(p)).collect();
        let archive_plugins = Plugins::new(archive_plugins, &props.repo)?;
        let files_ident = TableIdent::new(ns.clone(), FILES.into());
        let meta_ident = TableIdent::new(ns.clone(), META.into());
        let files = tables::upgrade_files(catalog, catalog.load_table(&files_ident).await?).await?;
        let meta = catalog.load_table(&meta_ident).await?;
        if let Some(redb) = catalog.redb() {
            for ident in [&files_ident, &meta_ident] {
                redb.lay_out(ident).await;
            }
        }
        let append_seq = summary_u64(&files, APPEND_SEQ_KEY)?;
        let meta = roll_forward(catalog, &files, meta).await?;
        roll_forward_packages(catalog, &files, &package_tables).await?;
        if let Some(redb) = catalog.redb() {
            // After the roll-forwards: what a crash left pending is committed
            // by now, so what no snapshot names is an orphan.
            let idents = package_tables.iter().map(|(_, ident)| ident);
            for ident in [&files_ident, &meta_ident].into_iter().chain(idents) {
                if let Err(e) = redb.sweep_unless_clean(ident).await {
                    tracing::warn!("sweeping {ident} of what a crash left: {e}");
                }
            }
        }
        let blob_end = summary_u64(&files, BLOB_END_KEY)?;
        let meta_snapshot_id = meta.metadata().current_snapshot_id();
        let all_rows = tables::file_rows(&tables::scan_all(&files).await?)?;
        let segments: Vec<_> = all_rows.iter().filter_map(|r| r.segment.clone()).collect();
        let row_count = all_rows.len();
        let live = live_files(all_rows)?;
        let dead = row_count != live.values().map(|f| f.rows.len()).sum::<usize>();
        let meta_rows = tables::meta_rows(&tables::scan_all(&meta).await?)?;
        // Facts committed say the archive has metadata, whatever the
        // namespace (which a REST catalog's client cannot update) says.
        let with_meta = props.with_meta || meta.metadata().current_snapshot_id().is_some();
        let meta = live_meta(meta_rows, with_meta)?;
        // Archives sealed before seals committed a snapshot have only the
        // namespace's word for it.
        let sealed = match sealed_of(catalog, &files)? {
            Some(sealed) => {
                if props.sealed.as_ref() != Some(&sealed) {
                    // A crash between the seal's commit and its mirror.
                    crate::mirror_seal(catalog, ns, &sealed).await?;
                }
                Some(sealed)
            }
            None => props.sealed,
        };
        let blobs = match &sealed {
            // A sealed archive's blobs (and tail) are immutable: never truncate.
            Some(sealed) => {
                // A crash after the seal committed and before the re-packed
                // archive's old sidecar went: its dead bytes go now.
                remove_dead_sidecar(sidecar_path.as_deref(), sealed);
                catalog.open_sealed(id, sealed)?
            }
            None => catalog.open_blobs(id, blob_end, segments)?,
        };
        let mut archive = LiveArchive {
            id: id.to_string(),
            props: props.archive,
            files_ident,
            meta_ident,
            blobs: Arc::new(blobs),
            sidecar_path,
            blob_end,
            append_seq,
            snapshot_id: files.metadata().current_snapshot_id(),
            meta_snapshot_id,
            live: LiveFiles::new(live),
            meta,
            sealed,
            sealed_archive: OnceLock::new(),
            dead,
            dropped: false,
            engine: None,
            engine_stale: false,
            queue: Vec::new(),
            last_group: (0, Duration::ZERO),
            committing: false,
            broken: false,
            meta_behind: false,
            pending_floor: 0,
            threads,
            plugins: archive_plugins,
            package_tables,
            package_names: props
                .plugins
                .iter()
                .map(|n| packages::table_name(n))
                .collect(),
            missing_plugin,
        };
        archive.engine = Some(archive.fresh_engine()?);
        Ok(archive)
    }

    /// An engine whose dedupe map holds exactly the committed live slices.
    fn fresh_engine(&self) -> Result<Engine> {
        let engine = Engine::resume(self.props, self.threads, &self.live_rows(), self.blob_end)?;
        Ok(engine.with_plugins(self.plugins.clone()))
    }

    /// The committed live slices, in chunk order.
    fn live_rows(&self) -> Vec<SliceRow> {
        let mut rows: Vec<SliceRow> = self
            .live
            .values()
            .flat_map(|f| f.rows.iter().cloned())
            .collect();
        rows.sort_by_key(|r| r.chunk_seq);
        rows
    }

    /// The archive's live files, in path order, starting with `prefix`.
    pub fn entries(&self, prefix: &str) -> Vec<Entry> {
        self.entries_page(prefix, None, usize::MAX)
    }

    /// Up to `limit` of [`LiveArchive::entries`] that sort after `after`.
    pub fn entries_page(&self, prefix: &str, after: Option<&str>, limit: usize) -> Vec<Entry> {
        use std::ops::Bound;
        let from = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        self.live
            .range((from, Bound::Unbounded))
            .take_while(|(p, _)| p.starts_with(prefix))
            .take(limit)
            .map(|(p, f)| f.entry(p))
            .collect()
    }

    /// Up to `limit` entries of the folded listing of the directory `prefix`
    /// (which ends with `/`, or is empty for the root) that sort after
    /// `after`: its live files, and each subdirectory once, as
    /// [`Listed::Dir`] (`prefix` + name + `/`). A subdirectory costs one seek
    /// past its files, never a walk of them, so a page of the root of a
    /// million-file archive costs what a page of a small one does.
    pub fn folded_page(&self, prefix: &str, after: Option<&str>, limit: usize) -> Vec<Listed> {
        use std::ops::Bound;
        let mut from = match after {
            Some(a) if a >= prefix => past(a),
            _ => Bound::Included(prefix.to_string()),
        };
        let mut out = Vec::new();
        while out.len() < limit {
            let Some((path, file)) = self.live.range((from, Bound::Unbounded)).next() else {
                break;
            };
            let Some(rest) = path.strip_prefix(prefix) else {
                break;
            };
            let item = match rest.find('/') {
                Some(i) => Listed::Dir(path[..prefix.len() + i + 1].to_string()),
                None => Listed::File(file.entry(path)),
            };
            from = past(item.path());
            out.push(item);
        }
        out
    }

    /// One live file's entry.
    pub fn stat(&self, path: &str) -> Result<Entry> {
        self.live
            .get(path)
            .map(|f| f.entry(path))
            .ok_or_else(|| StoreError::NotFound(path.to_string()))
    }

    /// Opens `path` for reading: its rows come from the derived lookup (or the
    /// sealed archive's tail), and reads touch only its blobs; no Iceberg file is
    /// read.
    pub fn open_file(&self, path: &str, scratches: Arc<ScratchPool>) -> Result<FileReader> {
        if self.sealed.is_some() {
            let archive = self.sealed_archive()?;
            let rows = match archive.slices(path) {
                Err(znippy_format::Error::NotFound(p)) => return Err(StoreError::NotFound(p)),
                r => r?,
            };
            let src: Arc<dyn ReadAt> = archive.source().clone();
            return FileReader::new(path, rows, archive.region(), src, scratches);
        }
        let file = self
            .live
            .get(path)
            .ok_or_else(|| StoreError::NotFound(path.to_string()))?;
        let region = BlobRegion {
            chunk_size: self.props.chunk_size,
            end: self.blob_end,
        };
        let src: Arc<dyn ReadAt> = self.blobs.clone();
        FileReader::new(path, file.rows.clone(), region, src, scratches)
    }

    /// The sealed file, opened as an archive once: its footer, manifest
    /// and lookup footer are read on the first read, not on each.
    fn sealed_archive(&self) -> Result<&Archive<Arc<dyn ReadAt>>> {
        if let Some(archive) = self.sealed_archive.get() {
            return Ok(archive);
        }
        let src: Arc<dyn ReadAt> = self.blobs.clone();
        let archive = Archive::open(src)?;
        Ok(self.sealed_archive.get_or_init(|| archive))
    }

    /// Whether nothing is queued or committing: then the committed state is
    /// the whole state, and the engine can be rebuilt from it.
    fn settled(&self) -> bool {
        self.queue.is_empty() && !self.committing
    }

    /// Each live file's path and the append that wrote it: the package rows
    /// that are current are those of these appends.
    pub(crate) fn live_seqs(&self) -> HashMap<String, u64> {
        self.live
            .iter()
            .map(|(p, f)| (p.clone(), f.append_seq))
            .collect()
    }

    /// Refuses a change that needs a plugin this build lacks.
    pub(crate) fn check_plugins(&self) -> Result<()> {
        match &self.missing_plugin {
            Some(name) => Err(StoreError::MissingPlugin(name.clone())),
            None => Ok(()),
        }
    }

    /// The first step of an append: what writing its blobs needs. The caller
    /// holds the archive's writer lock from here to [`LiveArchive::enqueue`],
    /// but the state lock only for this call, so reads go on meanwhile.
    pub(crate) fn begin_append(&mut self) -> Result<PendingBlobs> {
        if self.dropped {
            return Err(StoreError::NoArchive(self.id.clone()));
        }
        if self.sealed.is_some() {
            return Err(StoreError::Sealed(self.id.clone()));
        }
        self.check_plugins()?;
        // A failed commit fails the queue with it, and the engine is missing
        // only while an append holds it or right after one was abandoned.
        if (self.broken || self.engine.is_none()) && !self.settled() {
            // Rebuilding now would write over the blobs still to commit.
            return Err(StoreError::Task(
                "an append began on an unsettled archive".into(),
            ));
        }
        if self.broken {
            self.abandon_append();
        }
        let engine = match self.engine.take() {
            // A stale engine goes on while appends are queued or committing:
            // its blob end and chunk numbers run ahead of the committed state.
            Some(mut e) if !(self.engine_stale && self.settled()) => {
                if self.blobs.is_segments() && !self.settled() {
                    // On a shared catalog the pending appends may lose a
                    // commit race and move, with every offset from the
                    // first one's start on (another node's blobs may be
                    // committed there by then). So an append that starts
                    // behind them dedupes only into blobs below that
                    // start, which never move.
                    let floor = self.pending_floor;
                    let below: Vec<SliceRow> = self
                        .live_rows()
                        .into_iter()
                        .filter(|r| r.blob_offset + r.blob_size <= floor)
                        .collect();
                    e.forget_all_but(&below);
                }
                e
            }
            // Settled, checked above when the engine is missing.
            _ => {
                self.engine_stale = false;
                self.fresh_engine()?
            }
        };
        let start = engine.blob_end();
        if self.settled() {
            self.pending_floor = start;
        }
        Ok(PendingBlobs {
            engine,
            blobs: Arc::clone(&self.blobs),
            start,
        })
    }

    /// Queues an append whose blobs `engine` wrote and synced, once its names
    /// fit the live files and the appends queued before it; the receiver gets
    /// its receipt once a group commit has made it durable and readable. On
    /// an error the caller cuts its blobs off (`abandon_append`).
    pub(crate) fn enqueue(
        &mut self,
        engine: Engine,
        written: Written,
        meta: Option<MetaTable>,
    ) -> Result<oneshot::Receiver<Result<AppendReceipt>>> {
        let Written {
            rows,
            packages,
            stats,
            start,
            segment,
        } = written;
        if self.dropped {
            return Err(StoreError::NoArchive(self.id.clone()));
        }
        if self.broken {
            return Err(StoreError::QueueFailed);
        }
        let earlier: BTreeMap<String, bool> = self
            .queue
            .iter()
            .flat_map(|q| &q.rows)
            .map(|r| (r.relative_path.clone(), is_dir(r.mode)))
            .collect();
        self.check_names(&rows, &earlier)?;
        let (done, receipt) = oneshot::channel();
        self.queue.push(Queued {
            rows,
            packages,
            stats,
            meta,
            start,
            end: engine.blob_end(),
            segment,
            done,
        });
        self.engine = Some(engine);
        Ok(receipt)
    }

    /// How long a commit about to start should wait for more appends: while
    /// fewer are queued than were in flight when the last group committed,
    /// up to half the last commit's time (at most [`MAX_GATHER`]). `None`
    /// when it should start.
    ///
    /// Clients that each wait for their answer before they send again
    /// arrive together just after a commit answers them, while the next
    /// commit has already started with whoever queued during the last one.
    /// Left alone, such clients split into two cohorts that take turns, each
    /// commit carrying half of them. Waiting a fraction of a commit for the
    /// rest carries them all in one, so each commit's fixed cost (its files,
    /// its syncs, the pointer) is shared twice as widely. A lone client never
    /// waits: nothing was in flight beside it. When clients leave, the wait
    /// ends at its bound once, and the next one expects fewer.
    pub(crate) fn gather_for(&self) -> Option<Duration> {
        let (in_flight, took) = self.last_group;
        gather_wait(self.queue.len(), in_flight, took)
    }

    /// Takes the queue for one commit and builds its rows (an append whose
    /// links cannot be read back hears why, and its blobs stay behind as dead
    /// bytes). `None` when nothing is queued.
    pub(crate) fn take_group(&mut self) -> Option<Group> {
        let mut queue = std::mem::take(&mut self.queue);
        let moved = self.blobs.is_segments() && self.move_to_end(&mut queue);
        let end = queue.last()?.end;
        let started = std::time::Instant::now();
        if let Err(e) = self.blobs.check_in_place() {
            let e = Arc::new(e);
            for q in queue {
                let _ = q.done.send(Err(StoreError::Commit(Arc::clone(&e))));
            }
            self.broken = true;
            return None;
        }
        let (mut appends, mut file_rows, mut meta_rows) = (Vec::new(), Vec::new(), Vec::new());
        let mut package_logs: Vec<Vec<LogRows>> = vec![Vec::new(); self.package_tables.len()];
        let segments: Vec<Segment> = queue.iter().filter_map(|q| q.segment.clone()).collect();
        let mut seq = self.append_seq;
        let mut earlier = BTreeMap::new();
        for q in queue {
            // Moved past another node's commit, its names must fit that too.
            let fits = if moved {
                self.check_names(&q.rows, &earlier)
            } else {
                Ok(())
            };
            match fits.and_then(|()| self.file_rows(&q.rows, seq + 1, end, &segments)) {
                Ok(rows) => {
                    earlier.extend(
                        q.rows
                            .iter()
                            .map(|r| (r.relative_path.clone(), is_dir(r.mode))),
                    );
                    seq += 1;
                    file_rows.extend(rows);
                    meta_rows.extend(meta_log_rows(
                        q.meta.iter().flat_map(|t| t.rows()),
                        seq,
                        false,
                    ));
                    for ((pkg_type, repo), table) in &q.packages.tables {
                        let log = LogRows {
                            pkg_type: *pkg_type,
                            repo: repo.clone(),
                            rows: table.rows.clone(),
                            append_seq: seq,
                        };
                        let at = self
                            .package_tables
                            .iter()
                            .position(|(p, _)| p.pkg_type() == *pkg_type);
                        if let Some(at) = at {
                            package_logs[at].push(log);
                        }
                    }
                    appends.push((q, seq));
                }
                Err(e) => {
                    // Its blobs sit inside the region the group commits:
                    // the sidecar is no longer what a one-shot compress gives.
                    self.dead = true;
                    let _ = q.done.send(Err(e));
                }
            }
        }
        if appends.is_empty() {
            return None;
        }
        self.committing = true;
        let package_rows = self
            .package_tables
            .iter()
            .zip(package_logs)
            .filter(|(_, logs)| !logs.is_empty())
            .map(|((p, t), logs)| (Arc::clone(p), t.clone(), logs))
            .collect();
        Some(Group {
            appends,
            file_rows,
            meta_rows,
            package_rows,
            end,
            base: self.snapshot_id,
            files_ident: self.files_ident.clone(),
            meta_ident: self.meta_ident.clone(),
            first_meta: matches!(self.meta, Metadata::Absent),
            started,
            blobs: Arc::clone(&self.blobs),
        })
    }

    /// Folds a committed group into the state and acknowledges its appends;
    /// or, if the commit failed, fails them and marks the blobs past the
    /// committed end for dropping.
    /// `folded`: the rows are in the state already (on a shared catalog, a
    /// read caught up with the commit before it was applied).
    pub(crate) fn apply_group(
        &mut self,
        group: Group,
        committed: Result<(Committed, Result<()>)>,
        folded: bool,
    ) {
        self.committing = false;
        let (Committed { snapshot_id, .. }, meta_committed) = match committed {
            Ok(c) => c,
            Err(e) => {
                self.broken = true;
                let e = Arc::new(e);
                for (q, _) in group.appends {
                    let _ = q.done.send(Err(StoreError::Commit(Arc::clone(&e))));
                }
                // Their blobs follow the group's and may dedupe into them.
                for q in self.queue.drain(..) {
                    let _ = q.done.send(Err(StoreError::QueueFailed));
                }
                return;
            }
        };
        let meta_committed = meta_committed.map_err(Arc::new);
        self.meta_behind |= meta_committed.is_err();
        let commit_time = group.started.elapsed();
        self.last_group = (group.appends.len() + self.queue.len(), commit_time);
        if !folded {
            let segments = group.file_rows.iter().filter_map(|r| r.segment.clone());
            if let Err(e) = self.blobs.commit_segments(segments, group.end) {
                tracing::warn!("{}: the segments of a commit: {e}", self.id);
            }
            self.blob_end = group.end;
            self.snapshot_id = Some(snapshot_id);
        }
        for (q, seq) in group.appends {
            let answer = match &meta_committed {
                Ok(()) => Ok(q.receipt(seq, snapshot_id, group.end, commit_time)),
                Err(e) => Err(StoreError::Commit(Arc::clone(e))),
            };
            if !folded {
                if self.apply_rows(seq, q.rows) {
                    self.dead = true;
                    self.engine_stale = true;
                }
                self.append_seq = seq;
                // Facts that wrote no rows leave the archive as it was.
                let set = q.meta.filter(|t| t.rows().next().is_some());
                if let (Ok(()), Some(set)) = (&meta_committed, set) {
                    match &mut self.meta {
                        Metadata::Present(t) => t.merge(set),
                        Metadata::Absent => self.meta = Metadata::Present(set),
                    }
                }
            }
            let _ = q.done.send(answer);
        }
    }

    /// Whether the state moved past the snapshot `group` was built on: a
    /// read that caught up after the group's commit landed has folded it in.
    pub(crate) fn moved_past(&self, group: &Group) -> bool {
        self.snapshot_id != group.base
    }

    /// Refuses a batch that would put a path below a live file or link, or a
    /// file above live paths (`x` and `x/y` cannot both be extracted), or a
    /// name that is a live one in NFC.
    /// `earlier` holds the paths (and whether each is a directory) of the
    /// appends queued before this one, which will be live when it is.
    fn check_names(&self, rows: &[SliceRow], earlier: &BTreeMap<String, bool>) -> Result<()> {
        let mut batch: BTreeMap<&str, bool> = BTreeMap::new();
        for r in rows {
            batch.entry(&r.relative_path).or_insert(is_dir(r.mode));
        }
        let below = |p: &str| {
            let dir = format!("{p}/");
            let in_batch = batch
                .range(dir.as_str()..)
                .next()
                .map(|(q, _)| q.to_string());
            let live = self
                .live
                .range(dir.clone()..)
                .next()
                .map(|(q, _)| q.clone());
            let queued = earlier.range(dir.clone()..).next().map(|(q, _)| q.clone());
            [in_batch, live, queued]
                .into_iter()
                .flatten()
                .find(|q| q.starts_with(&dir))
        };
        check_nesting(
            batch.iter().map(|(p, d)| (*p, *d)),
            |p| {
                batch
                    .get(p)
                    .or_else(|| earlier.get(p))
                    .copied()
                    .or_else(|| {
                        self.live
                            .get(p)
                            .map(|f| is_dir(f.rows.first().and_then(|r| r.mode)))
                    })
            },
            below,
        )?;
        let unnormalized = self.live.unnormalized().iter().map(String::as_str);
        let queued = earlier
            .keys()
            .map(String::as_str)
            .filter(|p| matches!(nfc(p), Cow::Owned(_)));
        Ok(check_twins(
            unnormalized.chain(queued).chain(batch.keys().copied()),
            |p| batch.contains_key(p) || earlier.contains_key(p) || self.live.contains_key(p),
        )?)
    }

    /// Ends an append that committed nothing: cuts the blobs it wrote back off
    /// the sidecar and forgets them. The append's own error is what its caller
    /// needs to hear, so a failure here is logged, not returned: bytes past
    /// `blob_end` are never read, the next append overwrites them, and the next
    /// open cuts them off.
    /// The caller holds the writer lock and nothing is queued.
    pub(crate) fn abandon_append(&mut self) {
        if let Err(e) = self.blobs.truncate(self.blob_end) {
            tracing::warn!("{}: rolling the blobs back failed: {e}", self.id);
        }
        self.broken = false;
        self.engine_stale = false;
        // Rebuilt on the next append if this fails too.
        self.engine = self.fresh_engine().ok();
    }

    /// Moves the queued appends to the committed end, where another node's
    /// commit may have put it since they were written, each right after the
    /// one before it (an append written while an earlier one was moved
    /// follows where that one was): its rows' blob offsets from its start on
    /// and its segment's start shift by the same amount (a segment's bytes
    /// do not depend on where it starts, and a row that deduplicates into a
    /// committed blob points below every pending append, see
    /// `begin_append`), and its chunk numbers follow the ones before. The
    /// engine that wrote them knew the old end, so the next append gets a
    /// fresh one. Returns whether any moved.
    fn move_to_end(&mut self, queue: &mut [Queued]) -> bool {
        let mut at = self.blob_end;
        let mut chunk_at = self
            .live
            .values()
            .flat_map(|f| &f.rows)
            .map(|r| r.chunk_seq + 1)
            .max()
            .unwrap_or(0);
        let mut any = false;
        for q in queue.iter_mut() {
            let (from, to) = (q.start, at);
            let chunks_from = q.rows.iter().map(|r| r.chunk_seq).min().unwrap_or(chunk_at);
            let chunks_to = chunk_at.max(chunks_from);
            if from != to || chunks_from != chunks_to {
                any = true;
                let moved = |offset: u64| {
                    if offset >= from {
                        offset - from + to
                    } else {
                        offset
                    }
                };
                q.start = to;
                q.end = moved(q.end);
                if let Some(s) = &mut q.segment {
                    s.start = moved(s.start);
                }
                for r in &mut q.rows {
                    r.blob_offset = moved(r.blob_offset);
                    r.chunk_seq = r.chunk_seq - chunks_from + chunks_to;
                }
            }
            at = q.end;
            chunk_at = q
                .rows
                .iter()
                .map(|r| r.chunk_seq + 1)
                .max()
                .unwrap_or(chunk_at);
        }
        self.engine_stale |= any;
        any
    }

    /// Puts a group whose commit lost a race back at the head of the queue,
    /// to be moved and committed again once the state has caught up.
    pub(crate) fn requeue(&mut self, group: Group) {
        self.committing = false;
        let mut queue: Vec<Queued> = group.appends.into_iter().map(|(q, _)| q).collect();
        queue.append(&mut self.queue);
        self.queue = queue;
    }

    /// Catches up with what other nodes committed to the tables since the
    /// state was derived: their rows (and ours, when a read catches up
    /// before our commit is folded in) in append order, their segments
    /// added to the map.
    /// A no-op in a data directory, where this store is the only writer.
    pub(crate) async fn refresh(&mut self, catalog: &Backend) -> Result<()> {
        if self.others_may_change() {
            self.catch_up_meta(catalog).await?;
        }
        self.refresh_files(catalog).await
    }

    /// [`LiveArchive::refresh`] of the `files` table alone: what reads of
    /// files need (one catalog round trip, not two).
    pub(crate) async fn refresh_files(&mut self, catalog: &Backend) -> Result<()> {
        self.finish_meta(catalog).await?;
        if !self.others_may_change() {
            return Ok(());
        }
        let files = catalog.load_table(&self.files_ident).await?;
        let now = files.metadata().current_snapshot_id();
        if now != self.snapshot_id {
            let rows = tables::file_rows(&tables::rows_since(&files, self.snapshot_id).await?)?;
            let blob_end = summary_u64(&files, BLOB_END_KEY)?;
            let segments = rows.iter().filter_map(|r| r.segment.clone());
            self.blobs.commit_segments(segments, blob_end)?;
            self.fold_files(rows)?;
            self.blob_end = self.blob_end.max(blob_end);
            self.append_seq = self.append_seq.max(summary_u64(&files, APPEND_SEQ_KEY)?);
            self.snapshot_id = now;
            self.engine_stale = true;
            if let Some(sealed) = sealed_of(catalog, &files)? {
                // Another node sealed it: its rows above still list the
                // files, whose bytes are read from the sealed file now, and
                // its facts are final, so they are caught up with too.
                self.catch_up_meta(catalog).await?;
                self.sealed_by(catalog, sealed)?;
            }
        }
        Ok(())
    }

    /// Completes a `meta` step that failed after its `files` snapshot
    /// committed, as an open would (the roll forward of docs/store.md), and
    /// folds its facts in. Called before every change, since the change's
    /// own snapshot replaces the summary that names the step's data files.
    pub(crate) async fn finish_meta(&mut self, catalog: &Backend) -> Result<()> {
        if !self.meta_behind {
            return Ok(());
        }
        let files = catalog.load_table(&self.files_ident).await?;
        let meta = catalog.load_table(&self.meta_ident).await?;
        roll_forward(catalog, &files, meta).await?;
        roll_forward_packages(catalog, &files, &self.package_tables).await?;
        self.catch_up_meta(catalog).await?;
        self.meta_behind = false;
        Ok(())
    }

    /// Whether other nodes may change the tables under the state: on a
    /// shared catalog, until the archive is sealed or dropped.
    fn others_may_change(&self) -> bool {
        self.blobs.is_segments() && self.sealed.is_none() && !self.dropped
    }

    /// Folds in the `meta` rows committed since the state's `meta` snapshot.
    async fn catch_up_meta(&mut self, catalog: &Backend) -> Result<()> {
        let meta = catalog.load_table(&self.meta_ident).await?;
        let now = meta.metadata().current_snapshot_id();
        if now != self.meta_snapshot_id {
            let rows = tables::meta_rows(&tables::rows_since(&meta, self.meta_snapshot_id).await?)?;
            self.fold_meta(rows)?;
            self.meta_snapshot_id = now;
        }
        Ok(())
    }

    /// Folds `files` rows into the lookup, in append order.
    fn fold_files(&mut self, mut rows: Vec<FileRow>) -> Result<()> {
        rows.sort_by_key(|r| r.append_seq);
        let mut rest = rows.as_slice();
        while let Some(first) = rest.first() {
            let n = rest.partition_point(|r| r.append_seq == first.append_seq);
            let (append, later) = rest.split_at(n);
            rest = later;
            let seq = first.append_seq;
            let (tombs, slices): (Vec<&FileRow>, Vec<&FileRow>) =
                append.iter().partition(|r| r.tombstone);
            for t in tombs {
                let path = &t.slice.relative_path;
                if self.live.get(path).is_some_and(|f| f.append_seq <= seq) {
                    self.live.remove(path);
                    self.dead = true;
                }
            }
            // Rows from the tables are checked as an open checks them.
            let files = live_files(slices.into_iter().cloned().collect())?;
            self.dead |= self.apply_files(files);
        }
        Ok(())
    }

    /// Folds `meta` rows into the metadata, in append order.
    fn fold_meta(&mut self, mut rows: Vec<MetaLogRow>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        rows.sort_by_key(|r| r.append_seq);
        let t = match &mut self.meta {
            Metadata::Present(t) => t,
            Metadata::Absent => {
                self.meta = Metadata::Present(MetaTable::new());
                match &mut self.meta {
                    Metadata::Present(t) => t,
                    Metadata::Absent => unreachable!("just set"),
                }
            }
        };
        for r in rows {
            if r.tombstone {
                t.remove(r.path.as_deref(), &r.key);
            } else {
                t.set(r.path.as_deref(), &r.key, r.value)?;
            }
        }
        Ok(())
    }

    /// The `files` rows of an append's slices, with each link's target for
    /// the `link_target` column read back from the blob just written
    /// (verified by its checksum).
    fn file_rows(
        &self,
        rows: &[SliceRow],
        seq: u64,
        blob_end: u64,
        pending: &[Segment],
    ) -> Result<Vec<FileRow>> {
        let blobs = self.blobs.with_pending(pending);
        let region = BlobRegion {
            chunk_size: self.props.chunk_size,
            end: blob_end,
        };
        let mut scratch = BlobScratch::default();
        rows.iter()
            .map(|s| {
                let link_target = match Kind::of(s.mode)? {
                    Kind::Symlink => {
                        let target = region.read_slice(&blobs, s, &mut scratch)?;
                        Some(String::from_utf8_lossy(target).into_owned())
                    }
                    Kind::File | Kind::Dir => None,
                };
                Ok(FileRow {
                    slice: s.clone(),
                    append_seq: seq,
                    tombstone: false,
                    link_target,
                    segment: (s.blob_size > 0)
                        .then(|| {
                            let mine = pending.iter().find(|p| p.holds(s.blob_offset));
                            mine.map(Segment::named)
                                .or_else(|| self.blobs.segment_of(s.blob_offset))
                        })
                        .flatten(),
                })
            })
            .collect()
    }

    /// What sealing needs: the live files batch by batch in append order, the
    /// metadata, and whether the sidecar already has the one-shot layout.
    pub(crate) fn seal_plan(&self, sealed_dir: Option<PathBuf>) -> SealPlan {
        let mut files: Vec<(&String, &LiveFile)> = self.live.iter().collect();
        files.sort_by_key(|(_, f)| (f.append_seq, f.rows.first().map_or(0, |r| r.chunk_seq)));
        let mut batches: Vec<Vec<SliceRow>> = Vec::new();
        let mut last = None;
        for (_, f) in files {
            if last != Some(f.append_seq) {
                batches.push(Vec::new());
                last = Some(f.append_seq);
            }
            if let Some(b) = batches.last_mut() {
                b.extend(f.rows.iter().cloned());
            }
        }
        for b in &mut batches {
            b.sort_by_key(|r| r.chunk_seq);
        }
        SealPlan {
            id: self.id.clone(),
            props: self.props,
            blob_end: self.blob_end,
            batches,
            meta: self.meta.clone(),
            // Segments cannot take a tail, and a segment moved past another
            // node's commit may hold blobs a one-shot compress would have
            // deduplicated: on object storage the re-pack always runs,
            // copying every blob that is already canonical.
            in_place: !self.dead && !self.blobs.is_segments(),
            committed: Vec::new(),
            blobs: Arc::clone(&self.blobs),
            sidecar_path: self.sidecar_path.clone(),
            sealed_dir,
            base: self.snapshot_id,
            append_seq: self.append_seq,
            already: self.sealed.clone(),
            packages: Packages::default(),
        }
    }

    /// Commits `plan`'s seal in `sealed` (whole and durable): a `files`
    /// snapshot that adds no rows and names the sealed file, committed on
    /// the snapshot the plan was made on (see `sealed.rs`).
    pub(crate) async fn commit_seal(
        &mut self,
        catalog: &Backend,
        plan: &SealPlan,
        sealed: &SealedFile,
    ) -> Result<()> {
        let mut summary = history::summary(plan.append_seq, plan.blob_end, Change::Seal);
        summary.insert(SEALED_KEY.to_string(), sealed.at.to_string());
        summary.insert(SEALED_LEN_KEY.to_string(), sealed.len.to_string());
        let idents = (&self.files_ident, &self.meta_ident);
        let (committed, _) =
            commit_change(catalog, idents, plan.base, None, &[], &[], &[], summary).await?;
        self.snapshot_id = Some(committed.snapshot_id);
        // The blobs now live in the sealed file; the sidecar is dead weight.
        remove_dead_sidecar(self.sidecar_path.as_deref(), sealed);
        self.sealed_by(catalog, sealed.clone())
    }

    /// From now on the archive is `sealed`: reads go to the sealed file.
    fn sealed_by(&mut self, catalog: &Backend, sealed: SealedFile) -> Result<()> {
        self.blobs = Arc::new(catalog.open_sealed(&self.id, &sealed)?);
        self.sealed = Some(sealed);
        Ok(())
    }

    /// Folds committed rows into the lookup; returns whether a path was
    /// replaced. A path whose live version is of a later append keeps it.
    fn apply_rows(&mut self, seq: u64, rows: Vec<SliceRow>) -> bool {
        let mut by_path: BTreeMap<String, LiveFile> = BTreeMap::new();
        for r in rows {
            by_path
                .entry(r.relative_path.clone())
                .or_insert_with(|| LiveFile {
                    append_seq: seq,
                    rows: Vec::new(),
                })
                .rows
                .push(r);
        }
        for file in by_path.values_mut() {
            file.rows.sort_by_key(|r| r.fdata_offset);
        }
        self.apply_files(by_path)
    }

    /// [`LiveArchive::apply_rows`] of files already grouped, each sorted.
    fn apply_files(&mut self, files: BTreeMap<String, LiveFile>) -> bool {
        let mut replaced = false;
        for (path, file) in files {
            if self
                .live
                .get(&path)
                .is_some_and(|f| f.append_seq > file.append_seq)
            {
                continue;
            }
            replaced |= self.live.insert(path, file).is_some();
        }
        replaced
    }

    /// Deletes `path` with a tombstone row, as one commit, and says what it left.
    pub(crate) async fn delete(&mut self, catalog: &Backend, path: &str) -> Result<Committed> {
        if self.dropped {
            return Err(StoreError::NoArchive(self.id.clone()));
        }
        if self.sealed.is_some() {
            return Err(StoreError::Sealed(self.id.clone()));
        }
        if !self.live.contains_key(path) {
            return Err(StoreError::NotFound(path.to_string()));
        }
        let seq = self.append_seq + 1;
        let tomb = FileRow {
            slice: SliceRow {
                relative_path: path.to_string(),
                chunk_seq: 0,
                fdata_offset: 0,
                uncompressed_size: 0,
                blob_offset: 0,
                blob_size: 0,
                blob_inner_offset: 0,
                compressed: false,
                checksum: [0; 32],
                mode: None,
            },
            append_seq: seq,
            tombstone: true,
            link_target: None,
            segment: None,
        };
        // The file's facts go with it, so a path added again later starts bare.
        let facts: Vec<MetaRow> = match &self.meta {
            Metadata::Present(t) => t
                .rows()
                .filter(|r| r.path.as_deref() == Some(path))
                .collect(),
            Metadata::Absent => Vec::new(),
        };
        let meta_tombs = meta_log_rows(facts, seq, true);
        let idents = (&self.files_ident, &self.meta_ident);
        let base = self.snapshot_id;
        let (mut committed, Pending { meta: pending, .. }) = commit_change(
            catalog,
            idents,
            base,
            None,
            &[tomb],
            &meta_tombs,
            &[],
            history::summary(seq, self.blob_end, Change::Delete),
        )
        .await?;
        let snapshot_id = committed.snapshot_id;
        self.live.remove(path);
        self.dead = true;
        self.engine = Some(self.fresh_engine()?);
        self.append_seq = seq;
        self.snapshot_id = Some(snapshot_id);
        if !pending.is_empty() {
            let due = commit_pending_meta(catalog, &self.meta_ident, pending, seq).await;
            self.meta_behind |= due.is_err();
            committed.maintenance_due |= due?;
            if let Metadata::Present(t) = &mut self.meta {
                t.remove_path(path);
            }
        }
        Ok(committed)
    }
}

impl Group {
    /// Steps 2 to 4 for the whole group: the `files` snapshot id, and how
    /// the metadata step went (the appends are committed either way once the
    /// snapshot is; a failed metadata step is rolled forward on open).
    pub(crate) async fn commit(&self, catalog: &Backend) -> Result<(Committed, Result<()>)> {
        let seq = self.appends.last().map_or(0, |(_, s)| *s);
        let change = Change::Append {
            appends: self.appends.len() as u64,
            files: self.appends.iter().map(|(q, _)| q.stats.files).sum(),
            bytes: self.appends.iter().map(|(q, _)| q.stats.bytes_in).sum(),
        };
        let idents = (&self.files_ident, &self.meta_ident);
        let (mut committed, pending) = commit_change(
            catalog,
            idents,
            self.base,
            Some(&self.blobs),
            &self.file_rows,
            &self.meta_rows,
            &self.package_rows,
            history::summary(seq, self.end, change),
        )
        .await?;
        let Pending { meta, packages } = pending;
        if meta.is_empty() && packages.is_empty() {
            return Ok((committed, Ok(())));
        }
        let meta = async {
            let mut due = false;
            if !meta.is_empty() {
                due = commit_pending_meta(catalog, &self.meta_ident, meta, seq).await?;
                if self.first_meta {
                    crate::set_has_meta(catalog, self.files_ident.namespace()).await?;
                }
            }
            for (ident, files) in packages {
                let table = catalog.load_table(&ident).await?;
                // Another node's open may have rolled these forward already.
                if summary_u64(&table, APPEND_SEQ_KEY)? < seq {
                    storage::deferring(commit_side(catalog, &table, files, seq)).await?;
                }
            }
            Ok(due)
        };
        Ok(match meta.await {
            Ok(due) => {
                committed.maintenance_due |= due;
                (committed, Ok(()))
            }
            Err(e) => (committed, Err(e)),
        })
    }
}

/// The error of a commit that found `ident` moved since its change was built.
fn moved(ident: &TableIdent) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::CatalogCommitConflicts,
        format!("{ident} moved since the change was built"),
    )
}

impl Queued {
    fn receipt(
        &self,
        seq: u64,
        snapshot_id: i64,
        blob_end: u64,
        commit_time: Duration,
    ) -> AppendReceipt {
        AppendReceipt {
            files: self.stats.files,
            bytes: self.stats.bytes_in,
            append_seq: seq,
            snapshot_id,
            blob_end,
            commit_time,
        }
    }
}

/// The data files a `files` snapshot named, for step 4 to commit.
#[derive(Default)]
struct Pending {
    meta: Vec<DataFile>,
    packages: Vec<(TableIdent, Vec<DataFile>)>,
}

/// Steps 2 and 3 of a change to `tables` (`files`, `meta`, the package
/// tables): returns the `files` snapshot id and the meta and package data
/// files still to commit (step 4). `props` is the snapshot's summary
/// ([`history::summary`], and what else the change records).
#[allow(clippy::too_many_arguments)]
async fn commit_change(
    catalog: &Backend,
    idents: (&TableIdent, &TableIdent),
    base: Option<i64>,
    blobs: Option<&Arc<Blobs>>,
    file_rows: &[FileRow],
    meta_rows: &[MetaLogRow],
    package_rows: &[PackageLog],
    props: HashMap<String, String>,
) -> Result<(Committed, Pending)> {
    // The blobs and every file the change writes sync while the next one is
    // written; the commit waits for them all before its pointer moves.
    storage::deferring(async {
        if let Some(blobs) = blobs {
            let blobs = Arc::clone(blobs);
            let sync = move || {
                blobs.sync().map_err(|e| {
                    iceberg::Error::new(iceberg::ErrorKind::Unexpected, "syncing the blobs")
                        .with_source(e)
                })
            };
            storage::start_sync(sync).await?;
        }
        change(
            catalog,
            idents,
            base,
            file_rows,
            meta_rows,
            package_rows,
            props,
        )
        .await
    })
    .await
}

async fn change(
    catalog: &Backend,
    idents: (&TableIdent, &TableIdent),
    base: Option<i64>,
    file_rows: &[FileRow],
    meta_rows: &[MetaLogRow],
    package_rows: &[PackageLog],
    mut props: HashMap<String, String>,
) -> Result<(Committed, Pending)> {
    let mut files = catalog.load_table(idents.0).await?;
    let shared = catalog.redb().is_none();
    let mut pending_packages = Vec::new();
    let mut named = serde_json::Map::new();
    for (plugin, ident, logs) in package_rows {
        let table = catalog.load_table(ident).await?;
        let batch = packages::batch(&table, &plugin.columns(), logs)?;
        let written = tables::write_data_file(&table, batch).await?;
        named.insert(
            ident.name().to_string(),
            serde_json::Value::String(encode_data_files(&table, &written)?),
        );
        pending_packages.push((ident.clone(), written));
    }
    if !named.is_empty() {
        let json = serde_json::Value::Object(named).to_string();
        props.insert(PENDING_PACKAGES_KEY.into(), json);
    }
    let pending = if meta_rows.is_empty() {
        Vec::new()
    } else {
        let meta_table = catalog.load_table(idents.1).await?;
        let pending =
            tables::write_data_file(&meta_table, tables::meta_batch(&meta_table, meta_rows)?)
                .await?;
        props.insert(
            PENDING_META_KEY.into(),
            encode_data_files(&meta_table, &pending)?,
        );
        failpoint("store.meta-file-written");
        pending
    };
    let data = if file_rows.is_empty() {
        Vec::new()
    } else {
        tables::write_data_file(&files, tables::files_batch(&files, file_rows)?).await?
    };
    failpoint("store.files-file-written");
    if shared {
        // Another node may have committed since the change was built (the
        // embedded catalog has no other writer; its own rewrites commit
        // under the same lock, and move the snapshot on purpose). The table
        // the commit is pinned to is loaded last, after the data files are
        // written, so that the window another node's commit can fall into
        // is one round trip, not the whole write.
        files = catalog.load_table(idents.0).await?;
        if files.metadata().current_snapshot_id() != base {
            return Err(StoreError::Iceberg(moved(idents.0)));
        }
    }
    let committed = commit_files(catalog, &files, data, props).await?;
    failpoint("store.files-committed");
    let pending = Pending {
        meta: pending,
        packages: pending_packages,
    };
    Ok((committed, pending))
}

/// Step 4 of a change: the meta rows the `files` snapshot named as pending.
/// That snapshot is committed already; if this fails, the next open rolls
/// the rows forward. Returns whether `meta` is due for maintenance.
async fn commit_pending_meta(
    catalog: &Backend,
    meta_ident: &TableIdent,
    pending: Vec<DataFile>,
    seq: u64,
) -> Result<bool> {
    let meta_table = catalog.load_table(meta_ident).await?;
    let committed = storage::deferring(commit_side(catalog, &meta_table, pending, seq)).await?;
    failpoint("store.meta-committed");
    Ok(maintenance::due(
        committed.metadata(),
        catalog.redb().is_some(),
    ))
}

fn is_dir(mode: Option<u32>) -> bool {
    Kind::of(mode).is_ok_and(|k| k == Kind::Dir)
}

fn meta_log_rows(
    rows: impl IntoIterator<Item = MetaRow>,
    append_seq: u64,
    tombstone: bool,
) -> Vec<MetaLogRow> {
    rows.into_iter()
        .map(|r| MetaLogRow {
            path: r.path,
            key: r.key,
            value: r.value,
            append_seq,
            tombstone,
        })
        .collect()
}

fn encode_data_files(table: &Table, files: &[DataFile]) -> Result<String> {
    let md = table.metadata();
    let mut out = Vec::new();
    for f in files {
        out.push(serialize_data_file_to_json(
            f.clone(),
            md.default_partition_type(),
            md.format_version(),
        )?);
    }
    serde_json::to_string(&out).map_err(StoreError::PendingMeta)
}

/// One `files` snapshot: the commit point of an append or a delete.
async fn commit_files(
    catalog: &Backend,
    files: &Table,
    data: Vec<DataFile>,
    props: HashMap<String, String>,
) -> Result<Committed> {
    let committed = match catalog.redb() {
        Some(redb) => redb.append(files, data, props).await?,
        None => {
            storage::settle().await?;
            let pinned = Pinned::new(catalog.catalog(), files);
            fast_append(&pinned, files, data, props).await?
        }
    };
    let snapshot = committed.metadata().current_snapshot().ok_or_else(|| {
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, "a commit left no snapshot")
    })?;
    Ok(Committed {
        snapshot_id: snapshot.snapshot_id(),
        maintenance_due: maintenance::due(committed.metadata(), catalog.redb().is_some()),
    })
}

/// What a `files` commit left: its snapshot, and whether the table is due
/// for a rewrite or an expiry (`maintenance.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Committed {
    pub snapshot_id: i64,
    pub maintenance_due: bool,
}

/// Step 4 of a change, for one table beside `files` (`meta`, a package
/// table): its data files, in a snapshot whose summary names the append.
async fn commit_side(
    catalog: &Backend,
    meta: &Table,
    files: Vec<DataFile>,
    seq: u64,
) -> Result<Table> {
    let props = HashMap::from([(APPEND_SEQ_KEY.to_string(), seq.to_string())]);
    Ok(match catalog.redb() {
        Some(redb) => redb.append(meta, files, props).await?,
        None => {
            storage::settle().await?;
            fast_append(catalog.catalog(), meta, files, props).await?
        }
    })
}

/// An append to a shared catalog's `table`, through iceberg-rust's
/// transaction (the embedded catalog writes its own, `snapshot.rs`).
async fn fast_append(
    catalog: &dyn iceberg::Catalog,
    table: &Table,
    files: Vec<DataFile>,
    props: HashMap<String, String>,
) -> Result<Table> {
    let tx = Transaction::new(table);
    let action = tx
        .fast_append()
        .with_check_duplicate(false)
        .add_data_files(files)
        .set_snapshot_properties(props);
    Ok(action.apply(tx)?.commit(catalog).await?)
}

/// `meta` as it must be after `files`'s current snapshot: with the meta
/// data files that snapshot names committed, if the step that commits them
/// did not (a crash or a failure between the two).
async fn roll_forward(catalog: &Backend, files: &Table, meta: Table) -> Result<Table> {
    let seq = summary_u64(files, APPEND_SEQ_KEY)?;
    if summary_u64(&meta, APPEND_SEQ_KEY)? >= seq {
        return Ok(meta);
    }
    let Some(pending) = summary(files, PENDING_META_KEY) else {
        return Ok(meta);
    };
    let data_files = decode_data_files(&meta, &pending)?;
    commit_side(catalog, &meta, data_files, seq).await
}

/// The data files `encode_data_files` wrote for `table`.
fn decode_data_files(table: &Table, json: &str) -> Result<Vec<DataFile>> {
    let jsons: Vec<String> = serde_json::from_str(json).map_err(StoreError::PendingMeta)?;
    let md = table.metadata();
    let mut data_files = Vec::new();
    for j in jsons {
        data_files.push(deserialize_data_file_from_json(
            &j,
            md.default_partition_spec_id(),
            md.default_partition_type(),
            md.current_schema(),
        )?);
    }
    Ok(data_files)
}

/// The package tables as they must be after `files`'s current snapshot:
/// with the data files that snapshot names for each committed, if the step
/// that commits them did not.
async fn roll_forward_packages(
    catalog: &Backend,
    files: &Table,
    tables: &[(Arc<dyn Plugin>, TableIdent)],
) -> Result<()> {
    let Some(pending) = summary(files, PENDING_PACKAGES_KEY) else {
        return Ok(());
    };
    let seq = summary_u64(files, APPEND_SEQ_KEY)?;
    let pending: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&pending).map_err(StoreError::PendingMeta)?;
    for (_, ident) in tables {
        let Some(json) = pending.get(ident.name()).and_then(|v| v.as_str()) else {
            continue;
        };
        let table = catalog.load_table(ident).await?;
        if summary_u64(&table, APPEND_SEQ_KEY)? >= seq {
            continue;
        }
        let data_files = decode_data_files(&table, json)?;
        commit_side(catalog, &table, data_files, seq).await?;
    }
    Ok(())
}

/// The current package rows of an archive whose live files are `live`
/// (path to the append that wrote it): each package table scanned once.
pub(crate) async fn current_packages(
    catalog: &Backend,
    tables: &[(Arc<dyn Plugin>, TableIdent)],
    live: &HashMap<String, u64>,
) -> Result<Packages> {
    let live: HashMap<&str, u64> = live.iter().map(|(p, s)| (p.as_str(), *s)).collect();
    let mut out = Packages::default();
    for (plugin, ident) in tables {
        let table = catalog.load_table(ident).await?;
        let mut scanned = packages::Scanned::new();
        packages::rows(
            &tables::scan_all(&table).await?,
            &plugin.columns(),
            &mut scanned,
        )?;
        packages::current(plugin.as_ref(), scanned, &live, &mut out);
    }
    Ok(out)
}

/// Whether `sealed` is the sidecar itself, sealed in place.
fn is_sidecar(sealed: &SealedFile, sidecar: Option<&Path>) -> bool {
    matches!(&sealed.at, SealedAt::File(p) if sidecar == Some(p.as_path()))
}

/// Removes the sidecar of an archive sealed into a re-packed copy: its
/// blobs live in the sealed file. A sidecar sealed in place is the file.
fn remove_dead_sidecar(sidecar: Option<&Path>, sealed: &SealedFile) {
    if let Some(path) = sidecar.filter(|_| !is_sidecar(sealed, sidecar)) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::oneshot;
    use znippy_format::{ArchiveProps, InputFile};

    use crate::{AppendReceipt, CreateOptions, Result, Slot, Store, StoreError};

    fn file(path: &str, body: &[u8]) -> InputFile {
        InputFile::from_bytes(path, body.to_vec(), None)
    }

    /// A store with archive `a` holding `x` = "one", and the archive's slot.
    async fn archive(dir: &std::path::Path) -> (Store, Arc<Slot>) {
        let store = Store::open(dir, 1).await.unwrap();
        let opts = CreateOptions {
            props: ArchiveProps {
                chunk_size: 64 << 10,
                pack_threshold: 16 << 10,
                pack_size: 64 << 10,
                level: 3,
            },
            with_meta: false,
            ..Default::default()
        };
        store.create("a", opts).await.unwrap();
        store
            .append("a", vec![file("x", b"one")], None)
            .await
            .unwrap();
        let slot = store.slot("a").await.unwrap();
        (store, slot)
    }

    /// Step 1 of an append, by hand: its blobs written, then queued.
    async fn queue(slot: &Slot, f: InputFile) -> Result<oneshot::Receiver<Result<AppendReceipt>>> {
        let pending = slot.state.lock().await.begin_append()?;
        let (engine, written) = super::write_blobs(pending, [Ok(f)]).await?;
        slot.enqueue(engine, written?, None).await
    }

    async fn read(store: &Store, path: &str) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        store.read_file("a", path, &mut out).await?;
        Ok(out)
    }

    /// An append that begins while a group commits writes past that group's
    /// blobs, even when the group before made the engine stale (it replaced
    /// a path): rebuilding the engine from the committed state then would
    /// write over the group in flight.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_during_a_commit_writes_past_the_group_in_flight() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, slot) = archive(tmp.path()).await;
        let replacing = queue(&slot, file("x", b"two")).await.unwrap();
        let first = slot.state.lock().await.take_group().unwrap();
        let second = queue(&slot, file("y", b"three")).await.unwrap();
        let committed = first.commit(&store.catalog).await;
        let mut state = slot.state.lock().await;
        state.apply_group(first, committed, false);
        assert_eq!(replacing.await.unwrap().unwrap().append_seq, 2);
        assert!(state.engine_stale);

        let in_flight = state.take_group().unwrap();
        assert!(in_flight.end > state.blob_end);
        let next = state.begin_append().unwrap();
        assert_eq!(
            next.start, in_flight.end,
            "the next append writes past the group"
        );
        state.engine = Some(next.engine);
        let committed = in_flight.commit(&store.catalog).await;
        state.apply_group(in_flight, committed, false);
        assert_eq!(second.await.unwrap().unwrap().append_seq, 3);
        drop(state);
        assert_eq!(read(&store, "x").await.unwrap(), b"two");
        assert_eq!(read(&store, "y").await.unwrap(), b"three");
        store.close().await;
    }

    /// A group whose commit fails takes the appends queued behind it along
    /// (their blobs follow its blobs): they hear `QueueFailed`, the next
    /// append starts at the committed end, and none of them is readable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_commit_fails_the_queue_behind_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, slot) = archive(tmp.path()).await;
        let mut failing = queue(&slot, file("y", b"lost")).await.unwrap();
        let group = slot.state.lock().await.take_group().unwrap();
        let mut behind = queue(&slot, file("z", b"lost too")).await.unwrap();
        let committed_end = slot.state.lock().await.blob_end;
        let cause = StoreError::Task("the disk went away".into());
        slot.state
            .lock()
            .await
            .apply_group(group, Err(cause), false);
        // Answered at once, not left waiting for a commit.
        let answers = (failing.try_recv(), behind.try_recv());
        assert!(matches!(answers.0, Ok(Err(StoreError::Commit(_)))));
        assert!(matches!(answers.1, Ok(Err(StoreError::QueueFailed))));
        let next = slot.state.lock().await.begin_append().unwrap();
        assert_eq!(next.start, committed_end, "the failed blobs are cut off");
        slot.state.lock().await.engine = Some(next.engine);

        let r = store.append("a", vec![file("v", b"after")], None).await;
        assert_eq!(r.unwrap().append_seq, 2);
        assert_eq!(read(&store, "v").await.unwrap(), b"after");
        for gone in ["y", "z"] {
            assert!(matches!(
                read(&store, gone).await,
                Err(StoreError::NotFound(_))
            ));
        }
        store.close().await;
    }

    /// A queued append with blobs `[start, end)` (one row per blob of 10
    /// bytes from `start`, chunk numbers from `chunk`) and one row that
    /// deduplicates into the committed blob at 0.
    fn queued(start: u64, end: u64, chunk: u64) -> super::Queued {
        let row = |offset: u64, chunk_seq: u64| znippy_format::SliceRow {
            relative_path: format!("f{offset}"),
            chunk_seq,
            fdata_offset: 0,
            uncompressed_size: 10,
            blob_offset: offset,
            blob_size: 10,
            blob_inner_offset: 0,
            compressed: false,
            checksum: [0; 32],
            mode: None,
        };
        let mut rows = vec![row(0, chunk)];
        rows.extend(
            (start..end)
                .step_by(10)
                .zip(chunk + 1..)
                .map(|(o, c)| row(o, c)),
        );
        super::Queued {
            rows,
            packages: znippy_format::Packages::default(),
            stats: znippy_format::BatchStats::default(),
            meta: None,
            start,
            end,
            segment: None,
            done: oneshot::channel().0,
        }
    }

    /// Appends move to the committed end one after another: one written
    /// while the append ahead of it was moved (so it starts where that one
    /// used to end) follows where that one is now, and rows that
    /// deduplicate into committed blobs stay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_appends_follow_each_other_to_the_committed_end() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, slot) = archive(tmp.path()).await;
        let mut state = slot.state.lock().await;
        let committed_chunks = state.live_rows().len() as u64;
        // Another node committed up to 100; `ahead` was moved there already,
        // `behind` was written before that, after where `ahead` was.
        state.blob_end = 100;
        let mut queue = [queued(100, 130, committed_chunks), queued(60, 80, 2)];
        assert!(state.move_to_end(&mut queue));
        let [ahead, behind] = &queue;
        assert_eq!((ahead.start, ahead.end), (100, 130));
        assert_eq!((behind.start, behind.end), (130, 150));
        let offsets = |q: &super::Queued| q.rows.iter().map(|r| r.blob_offset).collect::<Vec<_>>();
        assert_eq!(offsets(behind), [0, 130, 140]);
        let chunks: Vec<u64> = queue
            .iter()
            .flat_map(|q| &q.rows)
            .map(|r| r.chunk_seq)
            .collect();
        let expected: Vec<u64> = (committed_chunks..committed_chunks + 7).collect();
        assert_eq!(chunks, expected, "chunk numbers follow on");
        // Numbers already past the committed ones stay as they are.
        let mut later = [queued(150, 160, committed_chunks + 50)];
        state.blob_end = 150;
        state.move_to_end(&mut later);
        assert_eq!(later[0].rows[0].chunk_seq, committed_chunks + 50);
        // In place already: nothing moves.
        state.blob_end = 100;
        let mut again = [queued(100, 120, committed_chunks)];
        assert!(!state.move_to_end(&mut again));
        drop(state);
        store.close().await;
    }

    /// A commit waits while fewer appends are queued than were in flight
    /// after the last group, for at most half that group's commit and never
    /// past the bound; with nothing queued, or as many as were in flight, it
    /// starts at once.
    #[test]
    fn a_commit_waits_only_for_appends_that_were_in_flight() {
        use std::time::Duration;

        use super::{gather_wait, MAX_GATHER};
        let ms = Duration::from_millis;
        assert_eq!(gather_wait(3, 8, ms(4)), Some(ms(2)));
        assert_eq!(gather_wait(7, 8, ms(1_000)), Some(MAX_GATHER));
        assert_eq!(gather_wait(8, 8, ms(4)), None, "all of them are here");
        assert_eq!(gather_wait(9, 8, ms(4)), None);
        assert_eq!(gather_wait(1, 1, ms(4)), None, "a lone client never waits");
        assert_eq!(gather_wait(0, 8, ms(4)), None, "nothing to commit");
    }

    /// A commit that waits to gather wakes when the append it waits for
    /// queues, not at its bound. The clock is paused, so it could reach the
    /// bound only by jumping there once nothing else can run.
    #[tokio::test]
    async fn a_gathering_commit_wakes_when_the_append_it_waits_for_queues() {
        use std::time::Duration;

        let tmp = tempfile::tempdir().unwrap();
        let (store, slot) = archive(tmp.path()).await;
        let first = queue(&slot, file("y", b"two")).await.unwrap();
        // The second append's blobs are written before the clock stops.
        let pending = slot.state.lock().await.begin_append().unwrap();
        let (engine, written) = super::write_blobs(pending, [Ok(file("z", b"three"))])
            .await
            .unwrap();
        slot.state.lock().await.last_group = (2, Duration::from_secs(60));
        tokio::time::pause();
        let start = tokio::time::Instant::now();
        let gathering = tokio::spawn({
            let slot = Arc::clone(&slot);
            async move { slot.gather().await }
        });
        tokio::task::yield_now().await;
        assert!(!gathering.is_finished(), "one of two is queued: it waits");
        let second = slot.enqueue(engine, written.unwrap(), None).await.unwrap();
        gathering.await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO, "woken, not timed out");
        tokio::time::resume();
        let commit = slot.commit.lock().await;
        slot.commit_queued(&store.catalog).await;
        drop(commit);
        let (first, second) = (
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        );
        assert_eq!(first.snapshot_id, second.snapshot_id, "one commit for both");
        store.close().await;
    }

    /// After a group with eight appends in flight, a lone append waits for
    /// the other seven up to the bound and then commits alone, and the next
    /// commit expects it alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_append_after_a_busy_group_waits_its_bound_then_commits() {
        use std::time::{Duration, Instant};

        let tmp = tempfile::tempdir().unwrap();
        let (store, slot) = archive(tmp.path()).await;
        slot.state.lock().await.last_group = (8, Duration::from_secs(60));
        let lone = queue(&slot, file("y", b"two")).await.unwrap();
        let waited = Instant::now();
        slot.gather().await;
        assert!(waited.elapsed() >= super::MAX_GATHER);
        let commit = slot.commit.lock().await;
        slot.commit_queued(&store.catalog).await;
        assert_eq!(lone.await.unwrap().unwrap().append_seq, 2);
        assert_eq!(slot.state.lock().await.last_group.0, 1);
        let next = queue(&slot, file("z", b"three")).await.unwrap();
        assert_eq!(slot.state.lock().await.gather_for(), None);
        slot.commit_queued(&store.catalog).await;
        assert_eq!(next.await.unwrap().unwrap().append_seq, 3);
        drop(commit);
        store.close().await;
    }
}
