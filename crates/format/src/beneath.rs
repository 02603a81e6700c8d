//! Opening and creating paths below a directory without ever following a
//! symbolic link on the way.
//!
//! Extraction writes where an untrusted archive says. A path is opened one
//! component at a time from a handle on the target directory, each with
//! `O_NOFOLLOW`: a link on the way, whether the archive made it or it was on
//! disk before, stops the walk with an error instead of leading elsewhere.
//! Archive paths were validated (no `..`, no leading `/`), so the walk can only
//! go down.

use std::fs::File;
use std::io;
use std::path::Path;

use rustix::fs::{fchmod, mkdirat, openat, symlinkat, unlinkat, AtFlags, Mode, OFlags};

/// A directory that paths are resolved below.
#[derive(Debug)]
pub(crate) struct Beneath {
    root: File,
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn followed_link(e: rustix::io::Errno, what: &str) -> io::Error {
    if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
        io::Error::other(format!(
            "{what} is a symbolic link or a file on disk, not a directory: not followed"
        ))
    } else {
        e.into()
    }
}

impl Beneath {
    /// A handle on `dir` (which the caller chose, and which may be reached
    /// through links).
    pub fn open(dir: &Path) -> io::Result<Self> {
        let root = rustix::fs::open(dir, dir_flags() & !OFlags::NOFOLLOW, Mode::empty())?;
        Ok(Beneath { root: root.into() })
    }

    /// The directory `rel` ("" for the root), made if missing, component by
    /// component.
    pub fn dir(&self, rel: &str) -> io::Result<File> {
        let mut cur = self.root.try_clone()?;
        for (i, comp) in rel.split('/').filter(|c| !c.is_empty()).enumerate() {
            let what = || rel.split('/').take(i + 1).collect::<Vec<_>>().join("/");
            let fd = match openat(&cur, comp, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) => {
                    match mkdirat(&cur, comp, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    openat(&cur, comp, dir_flags(), Mode::empty())
                        .map_err(|e| followed_link(e, &what()))?
                }
                Err(e) => return Err(followed_link(e, &what())),
            };
            cur = fd.into();
        }
        Ok(cur)
    }

    fn parent<'p>(&self, rel: &'p str) -> io::Result<(File, &'p str)> {
        match rel.rsplit_once('/') {
            Some((dir, name)) => Ok((self.dir(dir)?, name)),
            None => Ok((self.root.try_clone()?, rel)),
        }
    }

    /// Opens the regular file `rel` for writing, creating it; a link at its
    /// name is refused, not followed.
    pub fn create(&self, rel: &str, truncate: bool) -> io::Result<File> {
        let (dir, name) = self.parent(rel)?;
        let mut flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if truncate {
            flags |= OFlags::TRUNC;
        }
        let fd = openat(&dir, name, flags, Mode::from_raw_mode(0o644)).map_err(|e| {
            if e == rustix::io::Errno::LOOP {
                io::Error::other(format!("{rel} is a symbolic link on disk: not followed"))
            } else {
                e.into()
            }
        })?;
        Ok(fd.into())
    }

    /// Makes `rel` a symbolic link to `target`, replacing a file or link there.
    pub fn symlink(&self, rel: &str, target: &[u8]) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        match symlinkat(target, &dir, name) {
            Err(rustix::io::Errno::EXIST) => {
                unlinkat(&dir, name, AtFlags::empty())?;
                symlinkat(target, &dir, name)?;
                Ok(())
            }
            r => Ok(r?),
        }
    }

    /// Removes the file `rel`, if it is there.
    pub fn remove(&self, rel: &str) -> io::Result<()> {
        let (dir, name) = self.parent(rel)?;
        match unlinkat(&dir, name, AtFlags::empty()) {
            Err(rustix::io::Errno::NOENT) => Ok(()),
            r => Ok(r?),
        }
    }

    /// Sets the permission bits of the directory `rel`.
    pub fn chmod_dir(&self, rel: &str, mode: u32) -> io::Result<()> {
        let dir = self.dir(rel)?;
        fchmod(&dir, Mode::from_raw_mode(mode & 0o7777))?;
        Ok(())
    }
}
