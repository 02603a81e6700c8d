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
    /// A file to leave out, by device and inode number: the archive being
    /// written, when it lies in the tree (tar's "file is the archive; not
    /// dumped"). It is listed as skipped.
    pub exclude: Option<(u64, u64)>,
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
            (Kind::File, _) => Source::Path {
                path: self.disk_path.clone(),
                size: self.size,
            },
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

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "skipped {}: {}", self.disk_path.display(), self.reason)
    }
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

/// What a walk finds, in the order it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The next entry of the batch, in byte order of archive paths.
    Entry(ScannedFile),
    /// An entry left out.
    Skipped(Skipped),
}

/// Lists the entries below `root`, in byte order of their archive paths.
pub fn scan_dir(root: &Path, opts: ScanOptions) -> Result<Scan> {
    let mut scan = Scan::default();
    walk(root, opts, &mut |found| {
        match found {
            Found::Entry(f) => scan.files.push(f),
            Found::Skipped(s) => scan.skipped.push(s),
        }
        Ok(())
    })?;
    Ok(scan)
}

/// Walks `root` and hands each entry to `found` as soon as its place in the
/// batch is certain, in byte order of archive paths: a compress can start on
/// the first files while the walk goes on (on another thread). An error from
/// `found` ends the walk with that error.
///
/// Each directory is listed once and its entries sorted by name, a directory
/// as `name/`, since that is where its contents sort; one that records
/// nothing sorts as `name` instead, and only matters when a sibling such as
/// `name.rs` lies between the two. Only then is it looked into ahead of its
/// turn, up to its first entry that is kept.
///
/// The walk recurses once per level of the tree, and a tree can be as deep
/// as a path of 4,096 bytes allows (2,048 levels of one-letter names): run
/// it on a thread with [`WALK_STACK`] of stack, not a spawned thread's
/// default 2 MiB, which such a tree overflows in an unoptimized build.
pub fn walk(
    root: &Path,
    opts: ScanOptions,
    found: &mut dyn FnMut(Found) -> Result<()>,
) -> Result<()> {
    let meta =
        fs::metadata(root).map_err(|e| Error::io(format!("opening {}", root.display()), e))?;
    if !meta.is_dir() {
        return Err(input_err(root, "not a directory"));
    }
    let mut walk = Walk {
        opts,
        found,
        ancestors: HashSet::from([(meta.dev(), meta.ino())]),
    };
    walk.dir(root, "")?;
    Ok(())
}

/// Stack enough for [`walk`] on the deepest tree a path can name, with room
/// to spare in an unoptimized build. Only the pages a walk reaches are ever
/// touched.
pub const WALK_STACK: usize = 32 << 20;

struct Walk<'a> {
    opts: ScanOptions,
    found: &'a mut dyn FnMut(Found) -> Result<()>,
    /// `(dev, ino)` of the directories being walked, to refuse a loop of
    /// dereferenced links.
    ancestors: HashSet<(u64, u64)>,
}

/// One entry of a directory being walked.
struct Child {
    /// Where it sorts among its siblings: its name, and a directory's
    /// trailing `/` when its contents stand for it.
    key: String,
    disk: PathBuf,
    what: What,
}

enum What {
    /// Recorded as it is.
    Leaf {
        kind: Kind,
        perms: u32,
        size: u64,
        target: Option<Vec<u8>>,
    },
    /// Walked; recorded itself when it holds nothing.
    Dir { perms: u32, id: (u64, u64) },
}

impl Child {
    fn name(&self) -> &str {
        match self.what {
            What::Dir { .. } => self.key.strip_suffix('/').unwrap_or(&self.key),
            What::Leaf { .. } => &self.key,
        }
    }
}

impl Walk<'_> {
    /// Walks `dir`; returns how many entries it recorded below it, or `None`
    /// when it was skipped as unreadable.
    fn dir(&mut self, dir: &Path, rel: &str) -> Result<Option<usize>> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if self.skips(&e) => {
                self.skip(dir, "unreadable (permission denied)")?;
                return Ok(None);
            }
            Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
        };
        let mut children = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            match self.child(&entry)? {
                Ok(child) => children.push(child),
                Err((disk, reason)) => self.skip(&disk, reason)?,
            }
        }
        children.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        for i in 0..children.len() {
            let ambiguous = matches!(children[i].what, What::Dir { .. })
                && children
                    .get(i + 1)
                    .is_some_and(|next| sorts_between(children[i].name(), next.name()));
            if ambiguous && !self.holds_any(&children[i].disk)? {
                children[i].key.pop();
            }
        }
        children.sort_unstable_by(|a, b| a.key.cmp(&b.key));

        let mut recorded = 0;
        for child in children {
            let rel_path = if rel.is_empty() {
                child.name().to_string()
            } else {
                format!("{rel}/{}", child.name())
            };
            match child.what {
                What::Leaf {
                    kind,
                    perms,
                    size,
                    target,
                } => {
                    self.record(&child.disk, rel_path, kind, perms, size, target)?;
                    recorded += 1;
                }
                What::Dir { perms, id } => {
                    if !self.ancestors.insert(id) {
                        return Err(input_err(&child.disk, "symbolic links make a loop here"));
                    }
                    let below = self.dir(&child.disk, &rel_path);
                    self.ancestors.remove(&id);
                    match below? {
                        Some(0) => {
                            self.record(&child.disk, rel_path, Kind::Dir, perms, 0, None)?;
                            recorded += 1;
                        }
                        Some(n) => recorded += n,
                        None => {}
                    }
                }
            }
        }
        Ok(Some(recorded))
    }

    /// Reads one directory entry: what it is, or where and why it is skipped.
    fn child(
        &self,
        entry: &fs::DirEntry,
    ) -> Result<std::result::Result<Child, (PathBuf, &'static str)>> {
        let disk = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| input_err(&disk, "file name is not UTF-8"))?;
        // lstat relative to the directory being read (statx on its fd): the
        // kernel does not walk the whole path again for every entry, a sixth
        // of the scan of a source tree.
        let lmeta = entry
            .metadata()
            .map_err(|e| Error::io(format!("reading {}", disk.display()), e))?;
        let meta = match (lmeta.file_type().is_symlink(), self.opts.dereference) {
            (true, false) => {
                let target = fs::read_link(&disk)
                    .map_err(|e| Error::io(format!("reading {}", disk.display()), e))?;
                let target = target.as_os_str().as_bytes().to_vec();
                let what = What::Leaf {
                    kind: Kind::Symlink,
                    perms: 0o777,
                    size: target.len() as u64,
                    target: Some(target),
                };
                return Ok(Ok(Child {
                    key: name,
                    disk,
                    what,
                }));
            }
            (true, true) => fs::metadata(&disk)
                .map_err(|e| input_err(&disk, format!("cannot follow the symbolic link: {e}")))?,
            (false, _) => lmeta,
        };
        let perms = meta.permissions().mode() & 0o7777;
        let ft = meta.file_type();
        let (key, what) = if ft.is_dir() {
            let id = (meta.dev(), meta.ino());
            (name + "/", What::Dir { perms, id })
        } else if ft.is_file() {
            if self.opts.exclude == Some((meta.dev(), meta.ino())) {
                return Ok(Err((disk, "the archive being written")));
            }
            if self.opts.skip_unreadable {
                if let Err(e) = fs::File::open(&disk) {
                    if self.skips(&e) {
                        return Ok(Err((disk, "unreadable (permission denied)")));
                    }
                }
            }
            let what = What::Leaf {
                kind: Kind::File,
                perms,
                size: meta.len(),
                target: None,
            };
            (name, what)
        } else if self.opts.strict {
            return Err(input_err(&disk, format!("{} (--strict)", special(&ft))));
        } else {
            return Ok(Err((disk, special(&ft))));
        };
        Ok(Ok(Child { key, disk, what }))
    }

    /// Whether walking `dir` would record anything, read up to its first
    /// entry that is kept. Where it errs, or is skipped whole, its place
    /// does not matter: the walk stops, or records nothing for it.
    fn holds_any(&self, dir: &Path) -> Result<bool> {
        let Ok(entries) = fs::read_dir(dir) else {
            return Ok(true);
        };
        for entry in entries {
            let Ok(entry) = entry else {
                return Ok(true);
            };
            let Ok(Ok(child)) = self.child(&entry) else {
                continue;
            };
            let skipped = matches!(child.what, What::Dir { .. })
                && fs::read_dir(&child.disk).is_err_and(|e| self.skips(&e));
            if !skipped {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether `e` makes what it is about a skip under `skip_unreadable`.
    fn skips(&self, e: &std::io::Error) -> bool {
        self.opts.skip_unreadable && e.kind() == std::io::ErrorKind::PermissionDenied
    }

    fn skip(&mut self, path: &Path, reason: &str) -> Result<()> {
        (self.found)(Found::Skipped(Skipped {
            disk_path: path.to_path_buf(),
            reason: reason.to_string(),
        }))
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
        (self.found)(Found::Entry(ScannedFile {
            path,
            disk_path: disk.to_path_buf(),
            size,
            mode: kind.mode(perms),
            target,
        }))
    }
}

/// Whether a sibling named `next` sorts between a directory named `name`
/// holding nothing (`name`) and one holding something (`name/...`).
fn sorts_between(name: &str, next: &str) -> bool {
    next.strip_prefix(name)
        .and_then(|rest| rest.bytes().next())
        .is_some_and(|b| b < b'/')
}
