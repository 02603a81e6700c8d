//! The syncs that make written bytes durable: every fsync of the format, the
//! store (its sidecar, its Iceberg files, its redb catalog) and the seal goes
//! through these four functions.
//!
//! One door, so that a test can see what a power cut would keep. Built with
//! the `failpoints` feature and run with `ZNIPPY_POWERLOSS=DIR`, each sync also
//! tells `powerloss.rs` what it made durable, and the crash tests put a data
//! directory into the state a machine that lost power would come back with.
//! With `ZNIPPY_UNSYNCED=TEXT` as well, a sync of a path containing `TEXT`
//! does nothing at all, so a test can show that a missing sync is noticed.
//! Without the feature these are plain fsyncs.

use std::fs::File;
use std::io;
use std::path::Path;

/// `fsync`s `file` (open at `path`): its bytes and its size.
pub fn sync_all(file: &File, path: &Path) -> io::Result<()> {
    if skipped(path) {
        return Ok(());
    }
    file.sync_all()?;
    recorded_file(path)
}

/// `fdatasync`s `file` (open at `path`): its bytes, and its size if it grew.
pub fn sync_data(file: &File, path: &Path) -> io::Result<()> {
    if skipped(path) {
        return Ok(());
    }
    file.sync_data()?;
    recorded_file(path)
}

/// `fsync`s the directory `dir`, so the names in it (a new file, a rename, a
/// removal) survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if skipped(dir) {
        return Ok(());
    }
    File::open(dir)?.sync_all()?;
    recorded_dir(dir)
}

/// `fsync`s each directory of `paths` once: the names of new files whose
/// bytes were synced as they were written (a commit's manifest, manifest
/// list and metadata file share one directory).
pub fn sync_parents(paths: &[impl AsRef<Path>]) -> io::Result<()> {
    let mut dirs: Vec<&Path> = Vec::new();
    for path in paths {
        let dir = path.as_ref().parent().unwrap_or(Path::new("."));
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs.into_iter().try_for_each(sync_dir)
}

#[cfg(feature = "failpoints")]
fn skipped(path: &Path) -> bool {
    crate::powerloss::unsynced(path)
}

#[cfg(feature = "failpoints")]
fn recorded_file(path: &Path) -> io::Result<()> {
    crate::powerloss::record_file(path)
}

#[cfg(feature = "failpoints")]
fn recorded_dir(dir: &Path) -> io::Result<()> {
    crate::powerloss::record_dir(dir)
}

#[cfg(not(feature = "failpoints"))]
fn skipped(_: &Path) -> bool {
    false
}

#[cfg(not(feature = "failpoints"))]
fn recorded_file(_: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(not(feature = "failpoints"))]
fn recorded_dir(_: &Path) -> io::Result<()> {
    Ok(())
}
