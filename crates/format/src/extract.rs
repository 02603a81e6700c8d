//! Extraction of a whole archive into a directory, in parallel, verified.
//!
//! Blobs are decoded once each, on `threads` threads, and every slice is written
//! straight to its place in its file with a positioned write. Paths are checked
//! with the same validator the writer uses, so nothing lands outside the target,
//! and the last component of a path is never followed if it is a symlink.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions, Permissions};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::{Error, Result};
use crate::io::ReadAt;
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

fn open_for_write(p: &Path, truncate: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(truncate)
        // Never write through a symlink planted at the file's own name.
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
}

/// Extracts every file of `archive` below `dest`, creating it if needed.
/// `progress` is told the size of each slice as it is written.
pub fn extract_all<R: ReadAt>(
    archive: &Archive<R>,
    dest: &Path,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExtractStats> {
    let rows = archive.data_rows()?;
    let mut by_file: HashMap<&str, Vec<&SliceRow>> = HashMap::new();
    for r in &rows {
        path::validate(&r.relative_path)?;
        by_file.entry(&r.relative_path).or_default().push(r);
    }
    // (size, mode, slices) of every file, whose slices must tile it exactly: no
    // hole, no overlap, so no crafted offset can make a sparse giant.
    let mut files: HashMap<&str, (u64, Option<u32>, u64)> = HashMap::new();
    for (p, mut slices) in by_file {
        slices.sort_by_key(|r| r.fdata_offset);
        let size = check_file_rows(p, slices.iter().copied())?;
        files.insert(p, (size, slices[0].mode, slices.len() as u64));
    }
    fs::create_dir_all(dest).map_err(|e| Error::io(format!("creating {}", dest.display()), e))?;
    let mut dirs: Vec<&str> = files
        .keys()
        .filter_map(|p| p.rsplit_once('/').map(|(d, _)| d))
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        let p = dest.join(d);
        fs::create_dir_all(&p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
    }
    // Files of several slices are created (at full size) before the workers write
    // into them at their offsets; single-slice files are created by the worker.
    for (p, (size, _, slices)) in &files {
        if *slices > 1 {
            let full = dest.join(p);
            let f = open_for_write(&full, true)
                .map_err(|e| Error::io(format!("creating {}", full.display()), e))?;
            f.set_len(*size)
                .map_err(|e| Error::io(format!("sizing {}", full.display()), e))?;
        }
    }
    let write = |r: &SliceRow, bytes: &[u8]| -> Result<()> {
        let full = dest.join(&r.relative_path);
        let what = || format!("writing {}", full.display());
        let single = files
            .get(r.relative_path.as_str())
            .is_some_and(|f| f.2 == 1);
        let f = open_for_write(&full, single).map_err(|e| Error::io(what(), e))?;
        f.write_all_at(bytes, r.fdata_offset)
            .map_err(|e| Error::io(what(), e))?;
        if single {
            if let Some(mode) = r.mode {
                f.set_permissions(Permissions::from_mode(mode & 0o7777))
                    .map_err(|e| Error::io(what(), e))?;
            }
        }
        progress(bytes.len() as u64);
        Ok(())
    };
    for_each_blob(archive, &rows, threads, &write)?;
    let mut stats = ExtractStats::default();
    for (p, (size, mode, slices)) in &files {
        stats.files += 1;
        stats.bytes += size;
        if let (true, Some(mode)) = (*slices > 1, mode) {
            let full = dest.join(p);
            fs::set_permissions(&full, Permissions::from_mode(mode & 0o7777))
                .map_err(|e| Error::io(format!("setting mode of {}", full.display()), e))?;
        }
    }
    Ok(stats)
}
