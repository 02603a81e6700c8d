//! Turning a directory into one ordered batch.
//!
//! A directory is one batch, its entries in byte order of their relative
//! paths, so the archive does not depend on the order the file system lists
//! them in. What a tree holds is archived the way tar and squashfs archive it:
//!
//! * regular files, with their permission bits; hard links are read once per
//!   name (dedupe stores their bytes once) and come back as copies;
//! * symbolic links as links: the target string as written (relative,
//!   absolute, dangling, to a directory), never followed, unless
//!   [`ScanOptions::dereference`] stores what they point to instead, with loops
//!   refused;
//! * directories that hold no entry, with their permission bits (the others
//!   come back as the parents of what they hold);
//! * FIFOs, sockets and devices are skipped and reported in [`Scan::skipped`],
//!   or refused under [`ScanOptions::strict`].

use std::collections::HashSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::engine::{InputFile, Source};
use crate::error::{Error, Result};
use crate::kind::Kind;
use crate::path;

/// How a directory is walked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanOptions {
    /// Store what symbolic links point to instead of the links (tar's `-h`).
    pub dereference: bool,
    /// Refuse special files (FIFOs, sockets, devices) instead of skipping them.
    pub strict: bool,
    /// Skip files and directories that cannot be read instead of failing.
    pub skip_unreadable: bool,
}

/// One entry found under a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedFile {
    /// Archive path, relative to the scanned root.
    pub path: String,
    /// Where it is on disk.
    pub disk_path: PathBuf,
    /// Size at scan time (a link: its target's length; a directory: 0).
    pub size: u64,
    /// The mode recorded: permission bits, and the type bits of a link or a
    /// directory ([`Kind::mode`]).
    pub mode: u32,
    /// A symbolic link's target.
    pub target: Option<Vec<u8>>,
}

impl ScannedFile {
    /// What the entry is.
    pub fn kind(&self) -> Kind {
        Kind::of(Some(self.mode)).unwrap_or(Kind::File)
    }

    /// The engine input for this entry.
    pub fn input(&self) -> InputFile {
        let source = match (self.kind(), &self.target) {
            (Kind::File, _) => Source::Path(self.disk_path.clone()),
            (_, target) => {
                let bytes = target.clone().unwrap_or_default();
                Source::Reader(Box::new(std::io::Cursor::new(bytes)))
            }
        };
        InputFile {
            path: self.path.clone(),
            mode: Some(self.mode),
            source,
        }
    }
}

/// An entry left out of the batch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Where it is on disk.
    pub disk_path: PathBuf,
    /// Why it was left out.
    pub reason: String,
}

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The entries, in byte order of their archive paths.
    pub files: Vec<ScannedFile>,
    /// Special files (and, with `skip_unreadable`, unreadable ones) left out.
    pub skipped: Vec<Skipped>,
}

fn input_err(p: &Path, reason: impl Into<String>) -> Error {
    Error::Input {
        path: p.display().to_string(),
        reason: reason.into(),
    }
}

fn special(ft: &fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

/// Lists the entries below `root`, in byte order of their archive paths.
pub fn scan_dir(root: &Path, opts: ScanOptions) -> Result<Scan> {
    let meta =
        fs::metadata(root).map_err(|e| Error::io(format!("opening {}", root.display()), e))?;
    if !meta.is_dir() {
        return Err(input_err(root, "not a directory"));
    }
    let mut walk = Walk {
        opts,
        scan: Scan::default(),
        ancestors: HashSet::from([(meta.dev(), meta.ino())]),
    };
    walk.dir(root, "")?;
    walk.scan.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(walk.scan)
}

struct Walk {
    opts: ScanOptions,
    scan: Scan,
    /// `(dev, ino)` of the directories being walked, to refuse a loop of
    /// dereferenced links.
    ancestors: HashSet<(u64, u64)>,
}

impl Walk {
    /// Walks `dir`; returns how many entries it recorded below it, or `None`
    /// when it was skipped as unreadable.
    fn dir(&mut self, dir: &Path, rel: &str) -> Result<Option<usize>> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if self.unreadable(dir, &e) => return Ok(None),
            Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
        };
        let mut recorded = 0;
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
            // lstat relative to the directory being read (statx on its fd):
            // the kernel does not walk the whole path again for every entry,
            // a sixth of the scan of a source tree.
            let lmeta = entry
                .metadata()
                .map_err(|e| Error::io(format!("reading {}", disk.display()), e))?;
            let meta = match (lmeta.file_type().is_symlink(), self.opts.dereference) {
                (true, false) => {
                    let target = fs::read_link(&disk)
                        .map_err(|e| Error::io(format!("reading {}", disk.display()), e))?;
                    let target = target.as_os_str().as_bytes().to_vec();
                    let len = target.len() as u64;
                    self.record(&disk, rel_path, Kind::Symlink, 0o777, len, Some(target))?;
                    recorded += 1;
                    continue;
                }
                (true, true) => fs::metadata(&disk).map_err(|e| {
                    input_err(&disk, format!("cannot follow the symbolic link: {e}"))
                })?,
                (false, _) => lmeta,
            };
            let perms = meta.permissions().mode() & 0o7777;
            let ft = meta.file_type();
            if ft.is_dir() {
                let id = (meta.dev(), meta.ino());
                if !self.ancestors.insert(id) {
                    return Err(input_err(&disk, "symbolic links make a loop here"));
                }
                let below = self.dir(&disk, &rel_path);
                self.ancestors.remove(&id);
                match below? {
                    Some(0) => {
                        self.record(&disk, rel_path, Kind::Dir, perms, 0, None)?;
                        recorded += 1;
                    }
                    Some(n) => recorded += n,
                    None => {}
                }
            } else if ft.is_file() {
                if self.opts.skip_unreadable {
                    if let Err(e) = fs::File::open(&disk) {
                        if self.unreadable(&disk, &e) {
                            continue;
                        }
                    }
                }
                self.record(&disk, rel_path, Kind::File, perms, meta.len(), None)?;
                recorded += 1;
            } else if self.opts.strict {
                return Err(input_err(&disk, format!("{} (--strict)", special(&ft))));
            } else {
                self.scan.skipped.push(Skipped {
                    disk_path: disk,
                    reason: special(&ft).to_string(),
                });
            }
        }
        Ok(Some(recorded))
    }

    /// Whether `e` makes `path` a skip under `skip_unreadable` (and notes it).
    fn unreadable(&mut self, path: &Path, e: &std::io::Error) -> bool {
        let skip = self.opts.skip_unreadable && e.kind() == std::io::ErrorKind::PermissionDenied;
        if skip {
            self.scan.skipped.push(Skipped {
                disk_path: path.to_path_buf(),
                reason: "unreadable (permission denied)".into(),
            });
        }
        skip
    }

    fn record(
        &mut self,
        disk: &Path,
        path: String,
        kind: Kind,
        perms: u32,
        size: u64,
        target: Option<Vec<u8>>,
    ) -> Result<()> {
        path::validate(&path)?;
        self.scan.files.push(ScannedFile {
            path,
            disk_path: disk.to_path_buf(),
            size,
            mode: kind.mode(perms),
            target,
        });
        Ok(())
    }
}
