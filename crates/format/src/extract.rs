//! Extraction of a whole archive into a directory, in parallel, verified.
//!
//! Blobs are decoded once each, on `threads` threads, and every slice is written
//! straight to its place in its file with a positioned write.
//!
//! An archive is untrusted, so nothing is ever written outside the target or
//! through a symbolic link: paths are checked with the writer's validator;
//! every path is opened one component at a time below a handle on the target,
//! never following a link ([`Beneath`]); an entry that lies below a link or a
//! file of the archive is refused before anything is written; and links are
//! made last, once every file is in place. Directory permissions are set last
//! too, so a read-only directory does not stop what goes in it. An extraction
//! that fails (a damaged slice) removes the files it left short, so that none
//! looks whole with a hole in it.

use std::collections::HashMap;
use std::fs::{self, Permissions};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::beneath::Beneath;
use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::kind::{Kind, MAX_LINK_TARGET};
use crate::path;
use crate::reader::{for_each_blob, Archive};
use crate::row::{check_file_rows, SliceRow};

/// What an extraction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtractStats {
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// How an extraction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractOptions {
    /// Threads decoding blobs.
    pub threads: usize,
    /// Keep the set-uid, set-gid and sticky bits an archive records (tar's
    /// `--same-permissions` as root). Off, they are cleared: an archive from
    /// elsewhere does not get to plant a set-uid program.
    pub same_permissions: bool,
}

/// Extracts every entry of `archive` below `dest`, creating it if needed, on
/// `threads` threads, set-uid, set-gid and sticky bits cleared.
/// `progress` is told the size of each slice as it is written.
pub fn extract_all<R: ReadAt>(
    archive: &Archive<R>,
    dest: &Path,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExtractStats> {
    let opts = ExtractOptions {
        threads,
        same_permissions: false,
    };
    extract_all_with(archive, dest, opts, progress)
}

/// [`extract_all`] with every option.
pub fn extract_all_with<R: ReadAt>(
    archive: &Archive<R>,
    dest: &Path,
    opts: ExtractOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExtractStats> {
    let perms = if opts.same_permissions { 0o7777 } else { 0o777 };
    let threads = opts.threads;
    let rows = archive.data_rows()?;
    let mut by_file: HashMap<&str, Vec<&SliceRow>> = HashMap::new();
    for r in &rows {
        path::validate(&r.relative_path)?;
        by_file.entry(&r.relative_path).or_default().push(r);
    }
    // (kind, size, mode, slices) of every entry, whose slices must tile it
    // exactly: no hole, no overlap, so no crafted offset can make a sparse giant.
    let mut entries: HashMap<&str, Extracted> = HashMap::new();
    for (p, mut slices) in by_file {
        slices.sort_by_key(|r| r.fdata_offset);
        let size = check_file_rows(p, slices.iter().copied())?;
        let mode = slices[0].mode;
        let kind = Kind::of(mode)?;
        let max = match kind {
            Kind::File => u64::MAX,
            Kind::Symlink => MAX_LINK_TARGET as u64,
            Kind::Dir => 0,
        };
        if size > max {
            return Err(Error::corrupt(format!(
                "{p}: a {kind:?} entry of {size} bytes"
            )));
        }
        let slices = slices.len() as u64;
        entries.insert(
            p,
            Extracted {
                kind,
                size,
                mode,
                slices,
            },
        );
    }
    // `a -> /etc` then `a/passwd` must not write through the link.
    let below = path::Below::new(entries.keys().copied().collect());
    let is_dir = |p: &str| entries.get(p).map(|e| e.kind == Kind::Dir);
    path::check_nesting(
        entries.iter().map(|(p, e)| (*p, e.kind == Kind::Dir)),
        is_dir,
        |p| below.first(p),
    )?;
    fs::create_dir_all(dest).map_err(|e| Error::io(format!("creating {}", dest.display()), e))?;
    let root =
        Beneath::open(dest).map_err(|e| Error::io(format!("opening {}", dest.display()), e))?;
    let in_dest = |p: &str| dest.join(p).display().to_string();
    let mut dirs: Vec<&str> = entries
        .iter()
        .filter_map(|(p, e)| match e.kind {
            Kind::Dir => Some(*p),
            _ => p.rsplit_once('/').map(|(d, _)| d),
        })
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    for d in &dirs {
        root.dir(d)
            .map_err(|e| Error::io(format!("creating {}", in_dest(d)), e))?;
    }
    // Files of several slices are created (at full size) before the workers write
    // into them at their offsets; single-slice files are created by the worker.
    for (p, e) in &entries {
        if e.kind == Kind::File && e.slices > 1 {
            let f = root
                .create(p, true)
                .map_err(|err| Error::io(format!("creating {}", in_dest(p)), err))?;
            f.set_len(e.size)
                .map_err(|err| Error::io(format!("sizing {}", in_dest(p)), err))?;
        }
    }
    let file_rows: Vec<SliceRow> = rows
        .iter()
        .filter(|r| {
            entries
                .get(r.relative_path.as_str())
                .is_some_and(|e| e.kind == Kind::File)
        })
        .cloned()
        .collect();
    // Slices written into each file of several, so that a failed extraction
    // removes the files it left with holes: made at full size, they would
    // look whole.
    let written: HashMap<&str, AtomicU64> = entries
        .iter()
        .filter(|(_, e)| e.kind == Kind::File && e.slices > 1)
        .map(|(p, _)| (*p, AtomicU64::new(0)))
        .collect();
    let write = |r: &SliceRow, bytes: &[u8]| -> Result<()> {
        let what = || format!("writing {}", in_dest(&r.relative_path));
        let single = entries
            .get(r.relative_path.as_str())
            .is_some_and(|f| f.slices == 1);
        let f = root
            .create(&r.relative_path, single)
            .map_err(|e| Error::io(what(), e))?;
        if let Err(e) = f.write_all_at(bytes, r.fdata_offset) {
            if single {
                let _ = root.remove(&r.relative_path);
            }
            return Err(Error::io(what(), e));
        }
        if let Some(n) = written.get(r.relative_path.as_str()) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        if single {
            if let Some(mode) = r.mode {
                f.set_permissions(Permissions::from_mode(mode & perms))
                    .map_err(|e| Error::io(what(), e))?;
            }
        }
        progress(bytes.len() as u64);
        Ok(())
    };
    if let Err(e) = for_each_blob(archive, &file_rows, threads, &write) {
        for (p, n) in &written {
            if entries
                .get(p)
                .is_some_and(|e| n.load(Ordering::Relaxed) < e.slices)
            {
                let _ = root.remove(p);
            }
        }
        return Err(e);
    }
    let mut stats = ExtractStats::default();
    for (p, e) in &entries {
        stats.files += 1;
        stats.bytes += e.size;
        if let (Kind::File, true, Some(mode)) = (e.kind, e.slices > 1, e.mode) {
            let f = root
                .create(p, false)
                .map_err(|err| Error::io(format!("opening {}", in_dest(p)), err))?;
            f.set_permissions(Permissions::from_mode(mode & perms))
                .map_err(|err| Error::io(format!("setting mode of {}", in_dest(p)), err))?;
        }
    }
    // Links last: nothing written above could have gone through one.
    for (p, e) in &entries {
        if e.kind == Kind::Symlink {
            let target = archive.read_link(p)?;
            root.symlink(p, &target)
                .map_err(|err| Error::io(format!("making the link {}", in_dest(p)), err))?;
        }
    }
    // Deepest first, so a directory closed to writes is closed after its children.
    let mut modes: Vec<(&str, u32)> = entries
        .iter()
        .filter(|(_, e)| e.kind == Kind::Dir)
        .filter_map(|(p, e)| e.mode.map(|m| (*p, m)))
        .collect();
    modes.sort_unstable_by(|a, b| b.0.cmp(a.0));
    for (p, mode) in modes {
        root.chmod_dir(p, mode & perms)
            .map_err(|e| Error::io(format!("setting mode of {}", in_dest(p)), e))?;
    }
    Ok(stats)
}

struct Extracted {
    kind: Kind,
    size: u64,
    mode: Option<u32>,
    slices: u64,
}
