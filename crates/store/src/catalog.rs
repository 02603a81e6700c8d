//! `RedbCatalog`: an Iceberg catalog whose pointers live in one redb file.
//!
//! The catalog keeps three maps in `catalog.redb`: namespaces (with properties),
//! tables (with the location of their current metadata file), and the marks
//! of tables a clean close found holding only files their snapshots name
//! (`swept.rs`). Table metadata, manifests and data files live in the
//! warehouse directory, as in any Iceberg catalog. A commit writes the next
//! metadata file, makes it and everything the new snapshot added durable
//! (fsync), then swaps the table's pointer in one redb write transaction,
//! comparing it with the pointer the commit started from. A commit that lost
//! that race gets iceberg's retryable `CatalogCommitConflicts`,
//! so `Transaction::commit` rebuilds it on the new state and tries again.
//!
//! After every swap the table's metadata directory is laid out for engines
//! that find a table by its path, with no catalog (Spark's HadoopCatalog,
//! pyiceberg's `StaticTable`, DuckDB's `iceberg_scan('<table dir>')`): they
//! read `metadata/version-hint.text` holding `N` and open
//! `metadata/vN.metadata.json`. iceberg-rust's commits parse the current name
//! as `NNNNN-<uuid>.metadata.json`, so that stays the file the pointer names
//! and `vN.metadata.json` is a hard link to it.
//!
//! A metadata file never changes once written and its name is unique, so the
//! catalog keeps each table's current metadata parsed, and the `Table` built
//! on it, keyed by its location: loading a table reads the pointer from redb
//! every time, and parses the file and builds the table only when the
//! pointer has moved to one it has not seen (a commit through this catalog
//! hands its metadata over as it swaps).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::io::{FileIO, FileIOBuilder};
use iceberg::spec::{
    Manifest, ManifestFile, Snapshot, TableMetadata, TableMetadataBuilder, TableMetadataRef,
};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent,
};
use redb::{Database, ReadableTable, TableDefinition};
use znippy_format::durable::{sync_dir, sync_parents};

use crate::db_file::DbFile;
use crate::storage::{self, DurableFsFactory};
use crate::swept::{Opened, SWEPT};
use crate::tables;

/// Snapshot-summary key holding the end of an archive's committed blob region.
pub const BLOB_END_KEY: &str = "znippy.blob-end";

const NAMESPACES: TableDefinition<&str, &str> = TableDefinition::new("namespaces");
const TABLES: TableDefinition<&str, &str> = TableDefinition::new("tables");
/// Separates namespace levels, and a namespace from a table name, in redb keys.
const SEP: char = '\u{1f}';

fn ns_key(ns: &NamespaceIdent) -> String {
    ns.iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(&SEP.to_string())
}

pub(crate) fn table_key(t: &TableIdent) -> String {
    format!("{}{SEP}{SEP}{}", ns_key(t.namespace()), t.name())
}

/// Manifests [`RedbCatalog::manifest`] keeps at most, and manifest lists
/// [`RedbCatalog::manifest_list`]. Every live one of a table is a few
/// dozen: more than this many means the expiry that would have evicted
/// them failed, or many archives are busy.
const MANIFESTS_CACHED: usize = 1024;

/// The caches hold copies of immutable files: a panic elsewhere cannot leave
/// one wrong, only stale, and every use checks what it asks for.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps `value` in `cache` under `path`, and returns it.
fn keep<T: ?Sized>(cache: &Mutex<HashMap<String, Arc<T>>>, path: &str, value: Arc<T>) -> Arc<T> {
    let mut cache = lock(cache);
    if cache.len() >= MANIFESTS_CACHED {
        cache.clear();
    }
    cache.insert(path.to_string(), Arc::clone(&value));
    value
}

fn db_err(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unexpected, format!("catalog database: {e}"))
}

/// The location of `table`'s metadata file. iceberg's own
/// `metadata_location_result` builds its error before it looks, so with
/// `RUST_BACKTRACE` set every commit would capture a backtrace for nothing.
pub(crate) fn metadata_location_of(table: &Table) -> Result<&str> {
    table.metadata_location().ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("table {} has no metadata location", table.identifier()),
        )
    })
}

/// A local path for a `file://` or plain location.
pub fn local_path(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap_or(location))
}

/// An Iceberg catalog on redb, with a local warehouse.
#[derive(Debug, Clone)]
pub struct RedbCatalog {
    db: Arc<Database>,
    warehouse: PathBuf,
    file_io: FileIO,
    /// Per table key: the table at the metadata location last seen, parsed
    /// and built once. Every append and read loads its table, and building
    /// one makes (and dropping it frees) a metadata cache that the catalog's
    /// own caches below make redundant: with one build per commit instead of
    /// per load, about 30 µs of a small PUT (docs/benchmarks.md).
    tables: Arc<Mutex<HashMap<String, Table>>>,
    /// Manifests this catalog wrote or read, by path (as immutable as
    /// metadata files): a rewrite reads the manifests it replaces, and the
    /// expiry that later deletes them reads them again (`snapshot.rs`).
    manifests: Arc<Mutex<HashMap<String, Arc<Manifest>>>>,
    /// Manifest lists the same way: each append carries its parent's, and
    /// each expiry reads every snapshot's.
    lists: Arc<Mutex<HashMap<String, Arc<[ManifestFile]>>>>,
    /// Held while a table's path layout is rewritten, so two commits that
    /// finish together cannot leave the older one's hint last.
    hints: Arc<Mutex<()>>,
    /// The header of each table's manifests (`manifest.rs`), by table uuid,
    /// schema id and partition spec id.
    headers: Arc<Mutex<HashMap<HeaderKey, Arc<[u8]>>>>,
    /// Files expiries made unreachable, each batch with when: deleted once
    /// kept for `maintenance::RETIRED_FOR`, for the readers still on the
    /// snapshots that named them.
    retired: Arc<Mutex<Retired>>,
    /// The tables opened in this process, each with a digest of the names
    /// below it once it was clean (`swept.rs`).
    opened: Arc<Mutex<Opened>>,
}

/// Batches of retired files, oldest first, each with when it was retired.
type Retired = VecDeque<(Instant, Vec<PathBuf>)>;

/// Which manifests share a header: a table's (by uuid), under one schema and
/// one partition spec.
pub(crate) type HeaderKey = (uuid::Uuid, i32, i32);

impl RedbCatalog {
    /// Opens (or creates) the catalog at `db_path`, with tables below `warehouse`.
    pub async fn open(db_path: &Path, warehouse: &Path) -> Result<Self> {
        std::fs::create_dir_all(warehouse)
            .map_err(|e| db_err(format!("creating {}: {e}", warehouse.display())))?;
        let db_path = db_path.to_path_buf();
        let db = blocking(move || {
            let db = Database::builder()
                .create_with_backend(DbFile::open(&db_path).map_err(db_err)?)
                .map_err(db_err)?;
            // The file may be new: its name must survive a crash as its bytes do.
            sync_dir(db_path.parent().unwrap_or(Path::new("."))).map_err(db_err)?;
            let tx = db.begin_write().map_err(db_err)?;
            tx.open_table(NAMESPACES).map_err(db_err)?;
            tx.open_table(TABLES).map_err(db_err)?;
            tx.open_table(SWEPT).map_err(db_err)?;
            tx.commit().map_err(db_err)?;
            Ok(db)
        })
        .await?;
        Ok(RedbCatalog {
            db: Arc::new(db),
            warehouse: std::fs::canonicalize(warehouse).map_err(db_err)?,
            file_io: FileIOBuilder::new(Arc::new(DurableFsFactory)).build(),
            tables: Arc::default(),
            manifests: Arc::default(),
            lists: Arc::default(),
            hints: Arc::default(),
            headers: Arc::default(),
            retired: Arc::default(),
            opened: Arc::default(),
        })
    }

    /// The tables opened in this process, for their close (`swept.rs`).
    pub(crate) fn opened(&self) -> std::sync::MutexGuard<'_, Opened> {
        lock(&self.opened)
    }

    /// The digest a clean close recorded for the table `key`.
    pub(crate) async fn swept_mark(&self, key: &str) -> Result<Option<[u8; 32]>> {
        let (db, key) = (Arc::clone(&self.db), key.to_string());
        blocking(move || {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(SWEPT).map_err(db_err)?;
            Ok(t.get(key.as_str()).map_err(db_err)?.map(|v| *v.value()))
        })
        .await
    }

    /// Records `marks` (a table key, the digest of its names) from a clean
    /// close, for the tables the catalog still has.
    pub(crate) async fn mark_swept(&self, marks: Vec<(String, [u8; 32])>) -> Result<()> {
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_write().map_err(db_err)?;
            {
                let tables = tx.open_table(TABLES).map_err(db_err)?;
                let mut swept = tx.open_table(SWEPT).map_err(db_err)?;
                for (key, names) in &marks {
                    if tables.get(key.as_str()).map_err(db_err)?.is_some() {
                        swept.insert(key.as_str(), names).map_err(db_err)?;
                    }
                }
            }
            tx.commit().map_err(db_err)
        })
        .await
    }

    /// Keeps `files`, which no snapshot of the table names any more, until
    /// [`RedbCatalog::remove_retired`] deletes them.
    pub(crate) fn retire(&self, files: Vec<PathBuf>) {
        lock(&self.retired).push_back((Instant::now(), files));
    }

    /// Deletes the retired files that have been kept at least `kept`.
    pub async fn remove_retired(&self, kept: Duration) -> Result<()> {
        let due: Vec<PathBuf> = {
            let mut retired = lock(&self.retired);
            let mut due = Vec::new();
            while let Some((_, files)) = retired.pop_front_if(|(at, _)| at.elapsed() >= kept) {
                due.extend(files);
            }
            due
        };
        // Every maintenance pass asks; most find nothing due.
        if due.is_empty() {
            return Ok(());
        }
        storage::remove(due).await
    }

    /// The manifest `m` names, parsed once while it is in use.
    pub(crate) async fn manifest(&self, m: &ManifestFile) -> Result<Arc<Manifest>> {
        let cached = lock(&self.manifests).get(&m.manifest_path).cloned();
        if let Some(manifest) = cached {
            return Ok(manifest);
        }
        let manifest = m.load_manifest(&self.file_io).await?;
        Ok(self.keep_manifest(&m.manifest_path, manifest))
    }

    /// Keeps `manifest`, the one at `path`.
    pub(crate) fn keep_manifest(&self, path: &str, manifest: Manifest) -> Arc<Manifest> {
        keep(&self.manifests, path, Arc::new(manifest))
    }

    /// The manifests `snap`'s list names, parsed once while it is in use.
    pub(crate) async fn manifest_list(
        &self,
        metadata: &TableMetadata,
        snap: &Snapshot,
    ) -> Result<Arc<[ManifestFile]>> {
        let cached = lock(&self.lists).get(snap.manifest_list()).cloned();
        if let Some(list) = cached {
            return Ok(list);
        }
        let list = tables::manifest_list(&self.file_io, metadata, snap).await?;
        Ok(self.keep_manifest_list(
            snap.manifest_list(),
            list.consume_entries().into_iter().collect(),
        ))
    }

    /// Keeps `manifests`, what the list at `path` names.
    pub(crate) fn keep_manifest_list(
        &self,
        path: &str,
        manifests: Vec<ManifestFile>,
    ) -> Arc<[ManifestFile]> {
        keep(&self.lists, path, manifests.into())
    }

    /// The header of the manifests `key` names, once one was written.
    pub(crate) fn manifest_header(&self, key: &HeaderKey) -> Option<Arc<[u8]>> {
        lock(&self.headers).get(key).cloned()
    }

    /// Keeps `header` for the manifests `key` names.
    pub(crate) fn keep_manifest_header(&self, key: HeaderKey, header: &[u8]) {
        lock(&self.headers).insert(key, header.into());
    }

    /// Forgets manifests and manifest lists that were deleted.
    pub(crate) fn forget<'a>(&self, paths: impl Iterator<Item = &'a String>) {
        let (mut manifests, mut lists) = (lock(&self.manifests), lock(&self.lists));
        for p in paths {
            manifests.remove(p);
            lists.remove(p);
        }
    }

    /// The table whose metadata file is at `location`, read and built once
    /// per location.
    async fn table_at(&self, ident: &TableIdent, location: &str) -> Result<Table> {
        if let Some(t) = lock(&self.tables).get(&table_key(ident)) {
            if t.metadata_location() == Some(location) {
                return Ok(t.clone());
            }
        }
        let metadata = TableMetadata::read_from(&self.file_io, location).await?;
        let table = self.table(ident.clone(), metadata, location.to_string())?;
        self.remember(&table);
        Ok(table)
    }

    /// Records that `table`'s pointer now names its metadata location.
    fn remember(&self, table: &Table) {
        lock(&self.tables).insert(table_key(table.identifier()), table.clone());
    }

    /// The FileIO tables of this catalog use.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// The current metadata location of a table.
    ///
    /// Read on the caller's thread: one key of a small tree, in redb's page
    /// cache after the first read, costs microseconds, where a trip to the
    /// blocking pool and back cost a small PUT about 0.1 ms (every append
    /// loads its table).
    pub async fn metadata_location(&self, t: &TableIdent) -> Result<String> {
        let found = pointer(&self.db, &table_key(t))?;
        found.ok_or_else(|| Error::new(ErrorKind::TableNotFound, format!("no table {t}")))
    }

    async fn read_ns(&self, ns: &NamespaceIdent) -> Result<Option<HashMap<String, String>>> {
        let key = ns_key(ns);
        let db = Arc::clone(&self.db);
        let raw = blocking(move || {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(NAMESPACES).map_err(db_err)?;
            Ok(t.get(key.as_str())
                .map_err(db_err)?
                .map(|v| v.value().to_string()))
        })
        .await?;
        raw.map(|json| serde_json::from_str(&json).map_err(db_err))
            .transpose()
    }

    fn table(
        &self,
        ident: TableIdent,
        metadata: impl Into<TableMetadataRef>,
        location: String,
    ) -> Result<Table> {
        // Built once per commit and kept (`tables`), so iceberg's cache of
        // manifests would live as long as the table, up to 32 MiB each; the
        // catalog caches what it reads again itself.
        Table::builder()
            .file_io(self.file_io.clone())
            .metadata_location(location)
            .metadata(metadata)
            .identifier(ident)
            .runtime(iceberg::Runtime::current())
            .disable_cache()
            .build()
    }

    /// Lays out the metadata directory of the table whose pointer names
    /// `location` for path-based readers (see the module doc). Called with
    /// `hints` held, for the pointer as it stands then, so that of two
    /// commits that finish together the later one's version is the one left.
    ///
    /// Nothing here is synced: the pointer is the truth and these files are
    /// derived from it. A power cut can leave them one commit behind, naming
    /// a version the metadata log still keeps, until the next commit or the
    /// archive's next open lays them out again.
    fn lay_out_at(location: &str) -> Result<()> {
        let location = local_path(location);
        let Some((link, version)) = version_link(&location) else {
            return Ok(());
        };
        let io = |e: std::io::Error| db_err(format!("{}: {e}", link.display()));
        let dir = link.parent().unwrap_or(Path::new("."));
        // A version's link is made once, unless an open lays out the version
        // a commit already did: then it is replaced through a temporary name,
        // as a reader must never miss it, unless it is that version's link
        // already (a rename between two names of one file does nothing, and
        // would leave the temporary name behind at every open).
        match std::fs::hard_link(&location, &link) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if same_file(&location, &link) {
                    return Self::write_hint(dir, version).map_err(io);
                }
                let tmp = dir.join(format!(".v{version}.{}.tmp", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                std::fs::hard_link(&location, &tmp).map_err(io)?;
                std::fs::rename(&tmp, &link).map_err(io)?;
            }
            linked => linked.map_err(io)?,
        }
        Self::write_hint(dir, version).map_err(io)
    }

    /// Points `dir`'s `version-hint.text` at `version`, through a
    /// temporary name.
    fn write_hint(dir: &Path, version: u64) -> std::io::Result<()> {
        let tmp = dir.join(format!(".version-hint.{}.tmp", std::process::id()));
        std::fs::write(&tmp, version.to_string())?;
        std::fs::rename(&tmp, dir.join("version-hint.text"))
    }

    /// Makes the names of the new metadata file and of the manifest list and
    /// manifests the new snapshot added durable before the pointer moves to
    /// it, and waits for their bytes' syncs, started as they were written
    /// (`storage.rs`).
    /// iceberg-rust writes all three into the table's `metadata/`.
    async fn sync_commit(&self, metadata: &TableMetadata, location: &str) -> Result<()> {
        let list = metadata.current_snapshot().map(|s| s.manifest_list());
        storage::sync_new_names([location].into_iter().chain(list)).await?;
        storage::settle().await
    }

    /// Writes `built` as the metadata version after `table`'s, makes it and
    /// `written` (the new files it names) durable, and moves the pointer to
    /// it: the commit of what the catalog builds by hand (appends,
    /// rewrites, expiry). Returns the table as committed.
    pub(crate) async fn publish(
        &self,
        table: &Table,
        built: TableMetadataRef,
        written: Vec<String>,
    ) -> Result<Table> {
        let old = metadata_location_of(table)?;
        let next = MetadataLocation::from_str(old)?
            .with_next_version()
            .with_new_metadata(&built);
        built.write_to(&self.file_io, &next).await?;
        let next = next.to_string();
        storage::sync_new_names(written.iter().map(String::as_str).chain([next.as_str()])).await?;
        storage::settle().await?;
        let blob_end = blob_end_of(table.metadata()).zip(blob_end_of(&built));
        let committed = self
            .swap(table.identifier(), old, (&next, built), blob_end)
            .await;
        if matches!(&committed, Err(e) if refused(e)) {
            // The pointer did not move, so nothing names these files.
            self.forget(written.iter());
            let unnamed: Vec<PathBuf> = written
                .iter()
                .chain([&next])
                .map(|p| local_path(p))
                .collect();
            let _ = storage::remove(unnamed).await;
        }
        committed
    }

    /// Moves a table's pointer from `old` to `new` (whose file holds
    /// `metadata`) if it still is `old`, and lays the table out for paths.
    /// `blob_end` (old, new) refuses a commit that would move the blob end
    /// back. Returns the table as committed.
    async fn swap(
        &self,
        ident: &TableIdent,
        old: &str,
        (new, metadata): (&str, TableMetadataRef),
        blob_end: Option<(u64, u64)>,
    ) -> Result<Table> {
        // Every commit's next metadata file is written and synced by now.
        znippy_format::failpoint("catalog.metadata-written");
        if let Some((before, after)) = blob_end {
            if after < before {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "{ident}: snapshot would move {BLOB_END_KEY} back from {before} to {after}"
                    ),
                ));
            }
        }
        // Built before the swap, so that nothing after it can fail.
        let table = self.table(ident.clone(), metadata, new.to_string())?;
        let (key, old, new_owned) = (table_key(ident), old.to_string(), new.to_string());
        let (db, hints) = (Arc::clone(&self.db), Arc::clone(&self.hints));
        let ident_s = ident.to_string();
        // The layout follows the swap in the same task: one trip to the
        // blocking pool for both (each trip cost a small PUT about 0.1 ms).
        blocking(move || {
            let _in_commit_order = lock(&hints);
            let tx = db.begin_write().map_err(db_err)?;
            {
                let mut t = tx.open_table(TABLES).map_err(db_err)?;
                let cur = t
                    .get(key.as_str())
                    .map_err(db_err)?
                    .map(|v| v.value().to_string());
                match cur {
                    None => {
                        return Err(Error::new(
                            ErrorKind::TableNotFound,
                            format!("no table {ident_s}"),
                        ))
                    }
                    Some(c) if c != old => {
                        return Err(Error::new(
                            ErrorKind::CatalogCommitConflicts,
                            format!("{ident_s} was changed by a concurrent commit"),
                        )
                        .with_retryable(true))
                    }
                    Some(_) => {}
                }
                t.insert(key.as_str(), new_owned.as_str()).map_err(db_err)?;
            }
            tx.commit().map_err(db_err)?;
            if let Err(e) = Self::lay_out_at(&new_owned) {
                tracing::warn!(table = %ident_s, "version hint not written: {e}");
            }
            Ok(())
        })
        .await?;
        self.remember(&table);
        Ok(table)
    }
}

impl RedbCatalog {
    /// Lays out `ident`'s metadata directory for path-based readers, after a
    /// commit and when an archive opens. A failure is logged, not returned:
    /// the commit stands, and only outside readers that go by path see the
    /// previous version until the next commit or open.
    pub(crate) async fn lay_out(&self, ident: &TableIdent) {
        let (db, hints, key) = (
            Arc::clone(&self.db),
            Arc::clone(&self.hints),
            table_key(ident),
        );
        let laid = blocking(move || {
            let _in_commit_order = lock(&hints);
            match pointer(&db, &key)? {
                Some(location) => Self::lay_out_at(&location),
                None => Ok(()),
            }
        });
        if let Err(e) = laid.await {
            tracing::warn!(table = %ident, "version hint not written: {e}");
        }
    }

    /// Writes `key -> value` into `table` in one write transaction, if the key's
    /// presence is what the caller expects; otherwise returns `refused`.
    async fn put(
        &self,
        table: TableDefinition<'static, &'static str, &'static str>,
        key: String,
        value: String,
        must_exist: bool,
        refused: Error,
    ) -> Result<()> {
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_write().map_err(db_err)?;
            {
                let mut t = tx.open_table(table).map_err(db_err)?;
                if t.get(key.as_str()).map_err(db_err)?.is_some() != must_exist {
                    return Err(refused);
                }
                t.insert(key.as_str(), value.as_str()).map_err(db_err)?;
            }
            tx.commit().map_err(db_err)
        })
        .await
    }
}

/// Whether `a` and `b` name one file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// The `vN.metadata.json` beside the metadata file at `location`
/// (`NNNNN-<uuid>.metadata.json`), and `N`.
pub(crate) fn version_link(location: &Path) -> Option<(PathBuf, u64)> {
    let name = location.file_name()?.to_str()?;
    let version: u64 = name.split_once('-')?.0.parse().ok()?;
    Some((
        location.with_file_name(format!("v{version}.metadata.json")),
        version,
    ))
}

fn blob_end_of(metadata: &TableMetadata) -> Option<u64> {
    metadata
        .current_snapshot()?
        .summary()
        .additional_properties
        .get(BLOB_END_KEY)?
        .parse()
        .ok()
}

/// The metadata location `db` holds for the table `key`.
fn pointer(db: &Database, key: &str) -> Result<Option<String>> {
    let tx = db.begin_read().map_err(db_err)?;
    let tables = tx.open_table(TABLES).map_err(db_err)?;
    Ok(tables
        .get(key)
        .map_err(db_err)?
        .map(|v| v.value().to_string()))
}

/// Whether a failed [`RedbCatalog::swap`] certainly left the pointer where
/// it was: it lost the compare-and-swap, found no table, or refused to move
/// the blob end back. A failure of redb's own commit may have happened
/// after the new pointer reached the disk, so it is not one of these.
fn refused(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::CatalogCommitConflicts | ErrorKind::TableNotFound | ErrorKind::DataInvalid
    )
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("catalog task failed: {e}")))?
}

#[async_trait]
impl Catalog for RedbCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        if let Some(p) = parent {
            if self.read_ns(p).await?.is_none() {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("no namespace {p:?}"),
                ));
            }
        }
        let depth = parent.map_or(1, |p| p.len() + 1);
        let prefix = parent.map(|p| format!("{}{SEP}", ns_key(p)));
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(NAMESPACES).map_err(db_err)?;
            let mut out = Vec::new();
            for entry in t.iter().map_err(db_err)? {
                let (k, _) = entry.map_err(db_err)?;
                let k = k.value();
                let parts: Vec<&str> = k.split(SEP).collect();
                if parts.len() == depth && prefix.as_ref().is_none_or(|p| k.starts_with(p.as_str()))
                {
                    out.push(NamespaceIdent::from_strs(parts)?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn create_namespace(
        &self,
        ns: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        if ns.iter().any(|p| p.is_empty() || p.contains(SEP)) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("bad namespace name {ns:?}"),
            ));
        }
        if let Some(parent) = ns.parent() {
            if self.read_ns(&parent).await?.is_none() {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("no parent namespace {parent:?}"),
                ));
            }
        }
        let json = serde_json::to_string(&properties).map_err(db_err)?;
        let taken = Error::new(
            ErrorKind::NamespaceAlreadyExists,
            format!("namespace {ns:?} exists"),
        );
        self.put(NAMESPACES, ns_key(ns), json, false, taken).await?;
        Ok(Namespace::with_properties(ns.clone(), properties))
    }

    async fn get_namespace(&self, ns: &NamespaceIdent) -> Result<Namespace> {
        match self.read_ns(ns).await? {
            Some(props) => Ok(Namespace::with_properties(ns.clone(), props)),
            None => Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {ns:?}"),
            )),
        }
    }

    async fn namespace_exists(&self, ns: &NamespaceIdent) -> Result<bool> {
        Ok(self.read_ns(ns).await?.is_some())
    }

    async fn update_namespace(
        &self,
        ns: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let json = serde_json::to_string(&properties).map_err(db_err)?;
        let missing = Error::new(ErrorKind::NamespaceNotFound, format!("no namespace {ns:?}"));
        self.put(NAMESPACES, ns_key(ns), json, true, missing).await
    }

    async fn drop_namespace(&self, ns: &NamespaceIdent) -> Result<()> {
        if !self.list_tables(ns).await?.is_empty()
            || !self.list_namespaces(Some(ns)).await?.is_empty()
        {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!("namespace {ns:?} is not empty"),
            ));
        }
        let key = ns_key(ns);
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_write().map_err(db_err)?;
            tx.open_table(NAMESPACES)
                .map_err(db_err)?
                .remove(key.as_str())
                .map_err(db_err)?;
            tx.commit().map_err(db_err)
        })
        .await
    }

    async fn list_tables(&self, ns: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        if self.read_ns(ns).await?.is_none() {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {ns:?}"),
            ));
        }
        let prefix = format!("{}{SEP}{SEP}", ns_key(ns));
        let db = Arc::clone(&self.db);
        let names = blocking(move || {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(TABLES).map_err(db_err)?;
            let mut out = Vec::new();
            for entry in t.range(prefix.as_str()..).map_err(db_err)? {
                let (k, _) = entry.map_err(db_err)?;
                match k.value().strip_prefix(prefix.as_str()) {
                    Some(name) => out.push(name.to_string()),
                    None => break,
                }
            }
            Ok(out)
        })
        .await?;
        Ok(names
            .into_iter()
            .map(|n| TableIdent::new(ns.clone(), n))
            .collect())
    }

    async fn create_table(&self, ns: &NamespaceIdent, creation: TableCreation) -> Result<Table> {
        let props = self.read_ns(ns).await?.ok_or_else(|| {
            Error::new(ErrorKind::NamespaceNotFound, format!("no namespace {ns:?}"))
        })?;
        let ident = TableIdent::new(ns.clone(), creation.name.clone());
        if self.table_exists(&ident).await? {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {ident} exists"),
            ));
        }
        let location = match (&creation.location, props.get("location")) {
            (Some(l), _) => l.clone(),
            (None, Some(base)) => format!("{base}/{}", creation.name),
            (None, None) => {
                let mut p = self.warehouse.clone();
                p.extend(ns.iter());
                p.push(&creation.name);
                p.to_string_lossy().into_owned()
            }
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let mloc = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &mloc).await?;
        let mloc = mloc.to_string();
        sync_parents(&[local_path(&mloc)]).map_err(db_err)?;
        let taken = Error::new(
            ErrorKind::TableAlreadyExists,
            format!("table {ident} exists"),
        );
        self.put(TABLES, table_key(&ident), mloc.clone(), false, taken)
            .await?;
        self.lay_out(&ident).await;
        self.table(ident, metadata, mloc)
    }

    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let location = self.metadata_location(ident).await?;
        self.table_at(ident, &location).await
    }

    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        lock(&self.tables).remove(&table_key(ident));
        let key = table_key(ident);
        let db = Arc::clone(&self.db);
        let name = ident.to_string();
        blocking(move || {
            let tx = db.begin_write().map_err(db_err)?;
            {
                let mut t = tx.open_table(TABLES).map_err(db_err)?;
                if t.remove(key.as_str()).map_err(db_err)?.is_none() {
                    return Err(Error::new(
                        ErrorKind::TableNotFound,
                        format!("no table {name}"),
                    ));
                }
                tx.open_table(SWEPT)
                    .map_err(db_err)?
                    .remove(key.as_str())
                    .map_err(db_err)?;
            }
            tx.commit().map_err(db_err)
        })
        .await
    }

    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        self.drop_table(ident).await?;
        iceberg::drop_table_data(&table).await
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        match self.metadata_location(ident).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        if self.read_ns(dest.namespace()).await?.is_none() {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {:?}", dest.namespace()),
            ));
        }
        let (from, to) = (table_key(src), table_key(dest));
        lock(&self.tables).remove(&from);
        let db = Arc::clone(&self.db);
        let (sname, dname) = (src.to_string(), dest.to_string());
        blocking(move || {
            let tx = db.begin_write().map_err(db_err)?;
            {
                let mut t = tx.open_table(TABLES).map_err(db_err)?;
                let loc = t
                    .get(from.as_str())
                    .map_err(db_err)?
                    .map(|v| v.value().to_string())
                    .ok_or_else(|| {
                        Error::new(ErrorKind::TableNotFound, format!("no table {sname}"))
                    })?;
                if t.get(to.as_str()).map_err(db_err)?.is_some() {
                    return Err(Error::new(
                        ErrorKind::TableAlreadyExists,
                        format!("table {dname} exists"),
                    ));
                }
                t.remove(from.as_str()).map_err(db_err)?;
                t.insert(to.as_str(), loc.as_str()).map_err(db_err)?;
                let mut swept = tx.open_table(SWEPT).map_err(db_err)?;
                swept.remove(from.as_str()).map_err(db_err)?;
                swept.remove(to.as_str()).map_err(db_err)?;
            }
            tx.commit().map_err(db_err)
        })
        .await
    }

    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> Result<Table> {
        if self.read_ns(ident.namespace()).await?.is_none() {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {:?}", ident.namespace()),
            ));
        }
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        let taken = Error::new(
            ErrorKind::TableAlreadyExists,
            format!("table {ident} exists"),
        );
        self.put(
            TABLES,
            table_key(ident),
            metadata_location.clone(),
            false,
            taken,
        )
        .await?;
        self.lay_out(ident).await;
        self.table(ident.clone(), metadata, metadata_location)
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let current = self.load_table(&ident).await?;
        let old = metadata_location_of(&current)?.to_string();
        let before = blob_end_of(current.metadata());
        let staged = commit.apply(current)?;
        let new = metadata_location_of(&staged)?.to_string();
        staged
            .metadata()
            .write_to(&self.file_io, &MetadataLocation::from_str(&new)?)
            .await?;
        self.sync_commit(staged.metadata(), &new).await?;
        let after = blob_end_of(staged.metadata());
        self.swap(
            &ident,
            &old,
            (&new, staged.metadata_ref()),
            before.zip(after),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Laying out a version already laid out (every open does, after the
    /// commit that did) leaves the directory as it was: no temporary name,
    /// whose new name would also cost the next open its skipped sweep.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn laying_out_a_version_twice_leaves_no_temporary_name() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let table = c.create_table(&ns, tables::one_column("t")).await.unwrap();
        let dir = local_path(metadata_location_of(&table).unwrap());
        let dir = dir.parent().unwrap();
        let names = || {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        let laid_out = names();
        assert!(laid_out.contains(&"v0.metadata.json".to_string()));
        for _ in 0..2 {
            c.lay_out(table.identifier()).await;
            assert_eq!(names(), laid_out);
        }
    }
}
