//! An append's undo file: the archive's old tail, made durable before the
//! append changes a byte, so that a crash at any point has a way back.
//!
//! An append writes its blobs at the old `blob_end`, over the old tail, so that
//! the result is byte for byte what compressing the batches in one go gives.
//! That overwrite is the one moment the archive is at risk. So `append` first
//! writes `<archive>.undo`, fsyncs it and its directory, and only then touches
//! the archive; it removes the file (and fsyncs the directory) once the new tail
//! is durable. A file left behind means the append did not finish, and
//! [`recover`] puts the old tail back: the archive is then exactly what it was
//! before that append. Nothing before `blob_end` is ever written by an append,
//! so the old tail is all it takes.
//!
//! Layout, integers little endian:
//!
//! ```text
//! "ZNPYUNDO" | old_len u64 | blob_end u64 | anchor [32] | check [32] | old tail
//! ```
//!
//! `anchor` is the blake3 of the last (up to) 4 KiB before `blob_end`, which an
//! append never writes: an undo file that does not belong to the archive beside
//! it is refused instead of replayed. `check` is the blake3 of everything before
//! it and of the tail: a torn undo file (the crash came while it was being
//! written, before the archive was touched) fails it and is simply removed. A
//! file there that does not start with the magic (or a piece of it) is not
//! ours, and is left alone.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{Error, Result};
use crate::ipc::read_at;

const MAGIC: &[u8; 8] = b"ZNPYUNDO";
const HEADER: usize = 8 + 8 + 8 + 32 + 32;
const ANCHOR_SPAN: u64 = 4096;

/// The undo file of the archive at `archive`: the same path with `.undo` added.
pub fn undo_path(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".undo");
    PathBuf::from(name)
}

/// What [`recover`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// No undo file: the last append finished (or none ran).
    Clean,
    /// An append was interrupted; the archive is back as it was before it.
    RolledBack,
    /// The undo file was torn, so the crash came before the archive was
    /// touched; the file was removed.
    DiscardedTorn,
}

fn anchor(archive: &File, blob_end: u64) -> Result<[u8; 32]> {
    let span = blob_end.min(ANCHOR_SPAN);
    let mut buf = vec![0u8; span as usize];
    read_at(archive, &mut buf, blob_end - span, "archive blobs")?;
    Ok(*blake3::hash(&buf).as_bytes())
}

fn check(head: &[u8], tail: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(head);
    h.update(tail);
    *h.finalize().as_bytes()
}

fn sync_dir_of(path: &Path) -> io::Result<()> {
    durable::sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes and syncs the undo file for an append to `archive` (open at `path`)
/// whose old tail `tail` starts at `blob_end`.
pub(crate) fn save(path: &Path, archive: &File, blob_end: u64, tail: &[u8]) -> Result<()> {
    let undo = undo_path(path);
    let what = || format!("writing {}", undo.display());
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&(blob_end + tail.len() as u64).to_le_bytes());
    head.extend_from_slice(&blob_end.to_le_bytes());
    head.extend_from_slice(&anchor(archive, blob_end)?);
    let sum = check(&head, tail);
    head.extend_from_slice(&sum);
    // A new file, never an existing one or a planted symlink (which would have
    // the append overwrite whatever it points at): recovery has just removed
    // any undo file of ours.
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&undo)
        .map_err(|e| Error::io(what(), e))?;
    f.write_all(&head)
        .and_then(|_| f.write_all(tail))
        .and_then(|_| durable::sync_all(&f, &undo))
        .and_then(|_| sync_dir_of(&undo))
        .map_err(|e| Error::io(what(), e))
}

/// Removes the undo file of `path` once the append it guarded is durable (or
/// was undone), and makes the removal durable too: a crash after an append
/// has reported success must not bring the file back and undo the append.
pub(crate) fn discard(path: &Path) -> io::Result<()> {
    let undo = undo_path(path);
    match fs::remove_file(&undo) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        removed => removed.and_then(|_| sync_dir_of(&undo)),
    }
}

/// Finishes what an interrupted append left behind at `path`: puts the old
/// tail back from the undo file, or removes a torn undo file. The caller holds
/// the archive's append lock ([`crate::append`] and [`crate::recover`] do).
pub(crate) fn recover_locked(path: &Path, archive: &File) -> Result<Recovery> {
    let undo = undo_path(path);
    let reading = |e| Error::io(format!("reading {}", undo.display()), e);
    // Not through a symlink, and not blocking on a FIFO: only a regular file
    // can be an undo file.
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&undo)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Recovery::Clean),
        Err(e) => return Err(reading(e)),
    };
    if !f.metadata().map_err(reading)?.is_file() {
        return Err(Error::corrupt(format!(
            "{} is not a regular file; remove it",
            undo.display()
        )));
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(reading)?;
    let ours = bytes.starts_with(MAGIC) || MAGIC.starts_with(&bytes);
    if !ours {
        return Err(Error::corrupt(format!(
            "{} is not an undo file of znippy; move it away",
            undo.display()
        )));
    }
    let torn = bytes.len() < HEADER
        || check(&bytes[..HEADER - 32], &bytes[HEADER..]) != bytes[HEADER - 32..HEADER];
    let removing = |e| Error::io(format!("removing {}", undo.display()), e);
    if torn {
        discard(path).map_err(removing)?;
        return Ok(Recovery::DiscardedTorn);
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (old_len, blob_end) = (word(8), word(16));
    let tail = &bytes[HEADER..];
    let refuse = |why: &str| {
        Err(Error::corrupt(format!(
            "{} does not fit {} ({why}); if the archive opens and verifies, remove the undo file",
            undo.display(),
            path.display()
        )))
    };
    let archive_len = archive
        .metadata()
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
        .len();
    if blob_end.checked_add(tail.len() as u64) != Some(old_len) {
        return refuse("its lengths disagree");
    }
    if archive_len < blob_end {
        return refuse("the archive is shorter than its old blob region");
    }
    if anchor(archive, blob_end)? != bytes[24..56] {
        return refuse("the blobs before the old tail differ");
    }
    let what = || format!("restoring {} from {}", path.display(), undo.display());
    put_back(path, archive, blob_end, tail).map_err(|e| Error::io(what(), e))?;
    discard(path).map_err(removing)?;
    Ok(Recovery::RolledBack)
}

/// Writes the old tail back at `blob_end` and cuts the archive to its old
/// length, durably: the archive is then as it was before the append.
pub(crate) fn put_back(path: &Path, archive: &File, blob_end: u64, tail: &[u8]) -> io::Result<()> {
    archive
        .write_all_at(tail, blob_end)
        .and_then(|_| archive.set_len(blob_end + tail.len() as u64))
        .and_then(|_| durable::sync_all(archive, path))
}
