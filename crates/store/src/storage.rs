//! `DurableFs`: the local file storage of the tables' files, which makes
//! every file it writes durable as the write completes.
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
//! does not hold up the requests that share its worker thread. Reads,
//! listings and deletes are iceberg's local storage unchanged.

use std::fs::{self, File};
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

/// Creates `path` (and its missing directories) for writing.
fn create(path: &Path) -> Result<File> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_error("creating directory", dir))?;
    }
    File::create(path).map_err(io_error("creating", path))
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
pub(crate) async fn sync_new_names<'a>(
    locations: impl IntoIterator<Item = &'a str>,
) -> crate::Result<()> {
    let local: Vec<PathBuf> = locations
        .into_iter()
        .filter(|l| l.starts_with("file://") || !l.contains("://"))
        .map(local_path)
        .collect();
    if local.is_empty() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || {
        durable::sync_parents(&local)
            .map_err(|e| crate::StoreError::io("fsync of new table files", e))
    })
    .await
    .map_err(|e| crate::StoreError::Task(format!("fsync: {e}")))?
}

/// `fsync`s a written file through `durable`, on the blocking pool.
async fn sync(file: File, path: PathBuf) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        durable::sync_all(&file, &path).map_err(io_error("syncing", &path))
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Unexpected, format!("sync task failed: {e}")))?
}
