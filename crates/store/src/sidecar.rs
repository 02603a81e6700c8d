//! The sidecar: a live archive's blob region, in a file of its own.
//!
//! Blobs are appended at the committed `blob_end` and fsynced before the Iceberg
//! commit that makes them reachable. Bytes past the committed end belong to an
//! append that never committed; opening the sidecar cuts them off.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use znippy_format::durable;

use crate::error::{Result, StoreError};

/// An open sidecar file.
#[derive(Debug)]
pub struct Sidecar {
    file: File,
    path: PathBuf,
    /// `(dev, ino)` of the file opened: what `path` must still name.
    id: (u64, u64),
    /// Bytes read from it so far: what a read touched, for tests and
    /// operators alike.
    read: AtomicU64,
}

fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

impl Sidecar {
    /// Opens (creating if needed) the sidecar and truncates it to `committed_end`.
    pub fn open(path: &Path, committed_end: u64) -> Result<Self> {
        let what = || format!("opening sidecar {}", path.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StoreError::io(what(), e))?;
        let meta = file.metadata().map_err(|e| StoreError::io(what(), e))?;
        let len = meta.len();
        if len < committed_end {
            return Err(StoreError::SidecarShort {
                path: path.to_path_buf(),
                len,
                committed: committed_end,
            });
        }
        if len > committed_end {
            file.set_len(committed_end)
                .and_then(|_| durable::sync_all(&file, path))
                .map_err(|e| StoreError::io(what(), e))?;
        }
        // The file may be new: its name must survive a crash as its blobs do.
        durable::sync_dir(path.parent().unwrap_or(Path::new(".")))
            .map_err(|e| StoreError::io(what(), e))?;
        Ok(Sidecar {
            file,
            path: path.to_path_buf(),
            id: identity(&meta),
            read: AtomicU64::new(0),
        })
    }

    /// Opens a sealed archive's sidecar as it is.
    pub fn open_existing(path: &Path) -> Result<Self> {
        let what = || format!("opening {}", path.display());
        let file = File::open(path).map_err(|e| StoreError::io(what(), e))?;
        let meta = file.metadata().map_err(|e| StoreError::io(what(), e))?;
        Ok(Sidecar {
            file,
            path: path.to_path_buf(),
            id: identity(&meta),
            read: AtomicU64::new(0),
        })
    }

    /// Checks that the sidecar's path still names the file that was opened.
    /// Blobs written to a file someone removed or replaced would be
    /// acknowledged and then lost, so an append checks before it commits.
    pub fn check_in_place(&self) -> Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(m) if identity(&m) == self.id => Ok(()),
            _ => Err(StoreError::SidecarGone(self.path.clone())),
        }
    }

    /// A writer that appends at `offset` (the current blob end).
    pub fn writer_at(&self, offset: u64) -> SidecarWriter<'_> {
        SidecarWriter {
            file: &self.file,
            offset,
        }
    }

    /// Makes everything written so far durable.
    pub fn sync(&self) -> Result<()> {
        durable::sync_data(&self.file, &self.path)
            .map_err(|e| StoreError::io("fsync of the sidecar", e))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read from the file since it was opened.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Cuts the file back to `end` (after an append that failed before commit).
    pub fn truncate(&self, end: u64) -> Result<()> {
        self.file
            .set_len(end)
            .map_err(|e| StoreError::io("truncating the sidecar", e))
    }
}

impl znippy_format::ReadAt for Sidecar {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)?;
        self.read.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

/// Positioned writes into the sidecar.
pub struct SidecarWriter<'a> {
    file: &'a File,
    offset: u64,
}

impl Write for SidecarWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
