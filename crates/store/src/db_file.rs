//! The catalog's redb file, as a redb storage backend whose syncs go through
//! the format's `durable` door, like every other sync of the store.
//!
//! redb's own `FileBackend` does the same reads and writes; this one exists so
//! that the power-loss tests see the catalog's syncs too (see
//! `znippy_format::durable`).

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use redb::{DatabaseError, StorageBackend};

/// An open, locked `catalog.redb`.
#[derive(Debug)]
pub(crate) struct DbFile {
    file: File,
    path: PathBuf,
}

impl DbFile {
    /// Opens (creating if needed) the file at `path` and takes its lock: one
    /// process at a time may hold a catalog, as with redb's own backend.
    pub(crate) fn open(path: &Path) -> Result<Self, DatabaseError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(DbFile {
                file,
                path: path.to_path_buf(),
            }),
            Err(TryLockError::WouldBlock) => Err(DatabaseError::DatabaseAlreadyOpen),
            Err(TryLockError::Error(e)) => Err(e.into()),
        }
    }
}

impl StorageBackend for DbFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        // The length comes from the file's own pages, which a damaged file
        // can make anything: check it against the file before allocating.
        let size = self.len()?;
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: a read of {len} bytes at {offset} is past the file's end ({size} bytes); \
                     the catalog is damaged",
                    self.path.display()
                ),
            ));
        }
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        znippy_format::durable::sync_data(&self.file, &self.path)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
}
