//! A model of what survives a power cut, for the crash tests (feature
//! `failpoints`).
//!
//! A process killed with SIGKILL or `abort` loses nothing it wrote: the
//! kernel's page cache outlives it. A machine that loses power keeps only
//! what was synced. This module lets a test see the difference. Run with
//! `ZNIPPY_POWERLOSS=DIR`, every sync in `durable.rs` records in `DIR`:
//!
//! - `content/<dev>-<inode>`: a file's bytes as its last `fsync` left them.
//!   Keyed by inode, not name: the bytes belong to the inode, and a file
//!   synced and then renamed keeps them under its new name.
//! - `names/<blake3 of the directory's path>`: the names a directory held at
//!   its last `fsync`, each with the inode it named.
//!
//! [`power_cut`] then rewrites a directory tree as the machine would find it
//! when it came back: a file keeps its name only if its directory was synced
//! since the name appeared (a removal or a rename is undone likewise), and it
//! holds the bytes it was last synced with, or none if it never was. This is
//! the POSIX rule, stricter than what ext4 or XFS usually do. Directories
//! themselves are kept: their creation is not modelled.
//!
//! Losing every unsynced write is one outcome; the disk may also have written
//! some back before the power went. The test names the files whose unsynced
//! bytes reached the disk (`kept`): an archive whose new blobs landed while
//! the undo file that guards them did not is the case a missing sync, or a
//! sync in the wrong order, gets wrong.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Where this process records its syncs (`ZNIPPY_POWERLOSS`), if anywhere.
fn shadow() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os("ZNIPPY_POWERLOSS").map(PathBuf::from))
        .as_deref()
}

/// Whether a sync of `path` is to be left out (`ZNIPPY_UNSYNCED`).
pub(crate) fn unsynced(path: &Path) -> bool {
    static TEXT: OnceLock<Option<String>> = OnceLock::new();
    TEXT.get_or_init(|| std::env::var("ZNIPPY_UNSYNCED").ok())
        .as_deref()
        .is_some_and(|t| path.to_string_lossy().contains(t))
}

/// Records syncs one at a time: two threads syncing at once must not
/// interleave their writes to the same record.
static RECORDING: Mutex<()> = Mutex::new(());

pub(crate) fn record_file(path: &Path) -> io::Result<()> {
    recording(|shadow| keep_content(shadow, path))
}

pub(crate) fn record_dir(path: &Path) -> io::Result<()> {
    recording(|shadow| keep_names(shadow, path))
}

/// Runs `record` on this process's record, one at a time; nothing without
/// `ZNIPPY_POWERLOSS`.
fn recording(record: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    match shadow() {
        Some(dir) => {
            let _one = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
            record(dir)
        }
        None => Ok(()),
    }
}

/// Records every file below `root` as synced, names and bytes, as if the
/// whole tree had been flushed (what `sync` would do): the starting state of a
/// test that made it by means that do not sync.
pub fn settle(shadow: &Path, root: &Path) -> io::Result<()> {
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            settle(shadow, &entry.path())?;
        } else if kind.is_file() {
            keep_content(shadow, &entry.path())?;
        }
    }
    keep_names(shadow, root)
}

/// Puts the tree below `root` into the state a power cut leaves it in, given
/// the syncs recorded in `shadow` (see the module doc). Files for which
/// `kept` is true keep the bytes they hold now, if they keep their name.
pub fn power_cut(shadow: &Path, root: &Path, kept: &dyn Fn(&Path) -> bool) -> io::Result<()> {
    let durable = read_names(shadow, root)?;
    let mut on_disk = BTreeMap::new();
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            power_cut(shadow, &entry.path(), kept)?;
        } else if kind.is_file() || kind.is_symlink() {
            let name = entry.file_name().as_bytes().to_vec();
            on_disk.insert(name, inode(&entry.metadata()?));
        }
    }
    for name in on_disk.keys() {
        if !durable.contains_key(name) {
            fs::remove_file(root.join(std::ffi::OsStr::from_bytes(name)))?;
        }
    }
    for (name, inode) in durable {
        let path = root.join(std::ffi::OsStr::from_bytes(&name));
        if on_disk.get(&name) == Some(&inode) && kept(&path) {
            continue;
        }
        let bytes = match fs::read(shadow.join("content").join(&inode)) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink()) {
            fs::remove_file(&path)?;
        }
        fs::write(path, bytes)?;
    }
    Ok(())
}

fn inode(m: &fs::Metadata) -> String {
    format!("{}-{}", m.dev(), m.ino())
}

fn keep_content(shadow: &Path, path: &Path) -> io::Result<()> {
    let mut file = File::open(path)?;
    let dir = shadow.join("content");
    fs::create_dir_all(&dir)?;
    let key = inode(&file.metadata()?);
    let tmp = dir.join(format!("{key}.tmp"));
    io::copy(&mut file, &mut File::create(&tmp)?)?;
    fs::rename(tmp, dir.join(key))
}

fn names_file(shadow: &Path, dir: &Path) -> io::Result<PathBuf> {
    let dir = fs::canonicalize(dir)?;
    let key = blake3::hash(dir.as_os_str().as_bytes()).to_hex();
    Ok(shadow.join("names").join(key.as_str()))
}

fn keep_names(shadow: &Path, dir: &Path) -> io::Result<()> {
    let mut record = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_file() {
            writeln!(
                record,
                "{} {}",
                hex(entry.file_name().as_bytes()),
                inode(&meta)
            )?;
        }
    }
    let path = names_file(shadow, dir)?;
    fs::create_dir_all(shadow.join("names"))?;
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, record)?;
    fs::rename(tmp, path)
}

/// The names `dir` held at its last recorded sync, each with its inode; none
/// if it was never synced.
fn read_names(shadow: &Path, dir: &Path) -> io::Result<BTreeMap<Vec<u8>, String>> {
    let record = match fs::read_to_string(names_file(shadow, dir)?) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a torn power-loss record");
    record
        .lines()
        .map(|line| {
            let (name, inode) = line.split_once(' ').ok_or_else(bad)?;
            Ok((unhex(name).ok_or_else(bad)?, inode.to_string()))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
