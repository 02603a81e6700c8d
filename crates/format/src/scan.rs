//! Turning a directory into one ordered batch.
//!
//! A directory is one batch, its regular files in byte order of their relative
//! paths, so the archive does not depend on the order the file system lists
//! entries in. A symlink to a regular file inside the directory is archived as
//! that file's content; any other symlink (outside the directory, dangling, or to
//! a directory) and any special file is refused with an error naming it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::engine::{InputFile, Source};
use crate::error::{Error, Result};
use crate::path;

/// One regular file found under a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedFile {
    /// Archive path, relative to the scanned root.
    pub path: String,
    /// Where it is on disk.
    pub disk_path: PathBuf,
    /// Size at scan time.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
}

impl ScannedFile {
    /// The engine input for this file.
    pub fn input(&self) -> InputFile {
        InputFile {
            path: self.path.clone(),
            mode: Some(self.mode),
            source: Source::Path(self.disk_path.clone()),
        }
    }
}

fn input_err(p: &Path, reason: impl Into<String>) -> Error {
    Error::Input {
        path: p.display().to_string(),
        reason: reason.into(),
    }
}

/// Lists the regular files below `root`, in byte order of their archive paths.
pub fn scan_dir(root: &Path) -> Result<Vec<ScannedFile>> {
    let real_root =
        fs::canonicalize(root).map_err(|e| Error::io(format!("opening {}", root.display()), e))?;
    if !real_root.is_dir() {
        return Err(input_err(root, "not a directory"));
    }
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries =
            fs::read_dir(&dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            let disk = entry.path();
            let name = entry
                .file_name()
                .into_string()
                .map_err(|_| input_err(&disk, "file name is not UTF-8"))?;
            let rel_path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let lmeta = fs::symlink_metadata(&disk)
                .map_err(|e| Error::io(format!("reading {}", disk.display()), e))?;
            let ft = lmeta.file_type();
            let meta = if ft.is_symlink() {
                let target =
                    fs::canonicalize(&disk).map_err(|_| input_err(&disk, "symlink is dangling"))?;
                if !target.starts_with(&real_root) {
                    return Err(input_err(
                        &disk,
                        format!("symlink points outside {}", root.display()),
                    ));
                }
                let m = fs::metadata(&disk)
                    .map_err(|e| Error::io(format!("reading {}", disk.display()), e))?;
                if !m.is_file() {
                    return Err(input_err(
                        &disk,
                        "symlink to a directory or special file is not supported",
                    ));
                }
                m
            } else if ft.is_dir() {
                stack.push((disk, rel_path));
                continue;
            } else if ft.is_file() {
                lmeta
            } else {
                return Err(input_err(
                    &disk,
                    "special files (devices, sockets, fifos) are not supported",
                ));
            };
            path::validate(&rel_path)?;
            out.push(ScannedFile {
                path: rel_path,
                disk_path: disk,
                size: meta.len(),
                mode: meta.permissions().mode() & 0o7777,
            });
        }
    }
    out.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
