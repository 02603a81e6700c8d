//! `DurableFs`: the local file storage of the tables' files, which makes
//! every file it writes durable as the write completes (inside a commit:
//! before the commit's pointer moves, see [`deferring`]).
//!
//! iceberg-rust's own local storage fsyncs a file written through a writer
//! (parquet data files, manifests, manifest lists) but not one written whole
//! (a metadata file), and its fsync bypasses `znippy_format::durable`, the
//! one door the crash tests watch. So the catalog used to sync every file a
//! commit added a second time, after reading the new manifest list back to
//! learn which files those were. Here each file is synced once, through that
//! door, when it is closed; what is left for a commit is to sync the
//! directories that gained names (`data/`, `metadata/`), once each.
//!
//! The syncs run on tokio's blocking pool, so a commit waiting for the disk
//! does not hold up the requests that share its worker thread. Inside
//! [`deferring`] (a commit) they are not even waited for where they start:
//! each runs in the background while the commit goes on writing, and the
//! commit waits for all of them at once ([`settle`]) before its pointer
//! moves. A commit writes a parquet file, a manifest, a manifest list and a
//! metadata file, and gives two directories new names: synced one after the
//! other, those syncs were half of a small PUT's time (each about 0.2-0.4 ms
//! on this machine's disk, docs/benchmarks.md). Reads, listings and deletes
//! are iceberg's local storage unchanged.

use std::cell::RefCell;
use std::fs::{self, File};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use znippy_format::durable;

use crate::catalog::local_path;

tokio::task_local! {
    /// The syncs the running [`deferring`] scope has started.
    static STARTED: RefCell<Vec<tokio::task::JoinHandle<Result<()>>>>;
}

/// Runs `commit` with the syncs it starts deferred (see the module doc):
/// nothing it writes may be named by a pointer until [`settle`] returns.
pub(crate) async fn deferring<F: Future>(commit: F) -> F::Output {
    STARTED.scope(RefCell::new(Vec::new()), commit).await
}

/// Waits for every sync the running [`deferring`] scope has started so far,
/// and fails if one did. Outside a scope every sync was waited for already.
pub(crate) async fn settle() -> Result<()> {
    let started = STARTED
        .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
        .unwrap_or_default();
    let mut outcome = Ok(());
    for sync in started {
        let done = sync
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("sync task failed: {e}")))
            .and_then(|r| r);
        if outcome.is_ok() {
            outcome = done;
        }
    }
    outcome
}

/// Runs `sync` on the blocking pool: in the background inside a
/// [`deferring`] scope, waited for here outside one.
pub(crate) async fn start_sync(sync: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    let handle = tokio::task::spawn_blocking(sync);
    if STARTED.try_with(|_| ()).is_ok() {
        STARTED.with(|s| s.borrow_mut().push(handle));
        return Ok(());
    }
    handle
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("sync task failed: {e}")))?
}

/// Removes the files at `paths` that are there, on the blocking pool: what
/// only the snapshots an expiry dropped reached, or what a change wrote that
/// nothing names (a failed commit's). Only once no pointer names them: until
/// its swap, an expiry's old snapshots may still be read. A file a crash
/// leaves behind costs space, never correctness.
pub(crate) async fn remove(paths: Vec<PathBuf>) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        for p in paths {
            match fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_error("removing", &p)(e));
                }
                _ => {}
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("removing files: task failed: {e}"),
        )
    })?
}

/// Local storage whose writes are durable once they return (see the module
/// doc); the names they add need their directory synced.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct DurableFs;

/// Builds [`DurableFs`] for a `FileIO`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct DurableFsFactory;

#[typetag::serde]
impl StorageFactory for DurableFsFactory {
    fn build(&self, _: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(DurableFs))
    }
}

/// The I/O error stays the source, so a full disk is still told apart
/// (`ENOSPC` in the chain) from other failures above the store.
fn io_error<'a>(what: &'a str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::new(ErrorKind::Unexpected, format!("{what} {}", path.display())).with_source(e)
}

/// Creates `path` (and its missing directories) for writing. The
/// directories exist for all but a table's first files, so they are only
/// made when the create says they are missing: asking first cost every file
/// a `mkdir` and a `stat`.
fn create(path: &Path) -> Result<File> {
    match (File::create(path), path.parent()) {
        (Err(e), Some(dir)) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(io_error("creating directory", dir))?;
            File::create(path).map_err(io_error("creating", path))
        }
        (created, _) => created.map_err(io_error("creating", path)),
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for DurableFs {
    async fn exists(&self, path: &str) -> Result<bool> {
        LocalFsStorage.exists(path).await
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        LocalFsStorage.metadata(path).await
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        LocalFsStorage.read(path).await
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        LocalFsStorage.reader(path).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let path = local_path(path);
        let mut file = create(&path)?;
        file.write_all(&bs).map_err(io_error("writing", &path))?;
        sync(file, path).await
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let path = local_path(path);
        let file = create(&path)?;
        Ok(Box::new(DurableWrite {
            file: Some(file),
            path,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        LocalFsStorage.delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        LocalFsStorage.delete_prefix(path).await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        LocalFsStorage.delete_stream(paths).await
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(DurableFs), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(DurableFs), path.to_string()))
    }
}

/// A file being written; durable once closed.
struct DurableWrite {
    /// `None` once closed.
    file: Option<File>,
    path: PathBuf,
}

#[async_trait]
impl FileWrite for DurableWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "write to a closed file"))?;
        file.write_all(&bs).map_err(io_error("writing", &self.path))
    }

    async fn close(&mut self) -> Result<()> {
        let file = self
            .file
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "file closed twice"))?;
        sync(file, self.path.clone()).await
    }
}

/// Makes the names of new table files durable, once their files are
/// closed. A local file is synced as it closes, but its name lives in its
/// directory: each directory is synced once. An object's name is durable
/// when its upload completes, so object-storage locations (any scheme but
/// `file://`) need nothing.
pub(crate) async fn sync_new_names<'a>(locations: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for location in locations {
        if location.starts_with("file://") || !location.contains("://") {
            let dir = local_path(location)
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    for dir in dirs {
        start_sync(move || durable::sync_dir(&dir).map_err(io_error("syncing directory", &dir)))
            .await?;
    }
    Ok(())
}

/// `fsync`s a written file through `durable`.
async fn sync(file: File, path: PathBuf) -> Result<()> {
    start_sync(move || durable::sync_all(&file, &path).map_err(io_error("syncing", &path))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inside a commit a sync runs in the background, and `settle` returns
    /// only once it is done: the order every commit's swap relies on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settle_waits_for_the_syncs_started() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = Arc::new(AtomicBool::new(false));
        deferring(async {
            let flag = Arc::clone(&done);
            start_sync(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                flag.store(true, Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap();
            settle().await.unwrap();
            assert!(
                done.load(Ordering::SeqCst),
                "settle returned before the sync"
            );
        })
        .await;
    }

    /// A sync that fails inside a commit fails the commit where it settles,
    /// not where it started; outside one it fails where it starts.
    #[tokio::test]
    async fn a_deferred_sync_fails_at_settle() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join("gone/file");
        let gone = gone.to_str().unwrap();
        assert!(sync_new_names([gone]).await.is_err());
        deferring(async {
            sync_new_names([gone]).await.unwrap();
            let err = settle().await.unwrap_err();
            assert!(err.to_string().contains("syncing directory"), "{err}");
            // Settled syncs are gone: the next commit starts clean.
            settle().await.unwrap();
        })
        .await;
    }
}
