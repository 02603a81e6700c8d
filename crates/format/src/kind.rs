//! What an entry is: a regular file, a symbolic link or a directory.
//!
//! The kind rides in the file-type bits of `mode` (`st_mode & S_IFMT`), as tar
//! and squashfs keep it, so the index columns stay the ones every external
//! reader already knows. A regular file keeps no type bits at all. Kinds came
//! with format version 2: a version-1 reader refuses any later archive with
//! "upgrade znippy" instead of extracting a link as a file holding its target.
//!
//! * A **symbolic link**'s content is its target, as written (relative,
//!   absolute or dangling), 1 to 4096 bytes with no NUL; its mode is
//!   `S_IFLNK | 0o777`.
//! * A **directory** entry records a directory that holds no other entry (an
//!   empty one), with its permission bits; it has no content.

use crate::error::{Error, Result};

/// Mask of the file-type bits of a mode.
pub const S_IFMT: u32 = 0o170_000;
/// File-type bits of a regular file.
pub const S_IFREG: u32 = 0o100_000;
/// File-type bits of a symbolic link.
pub const S_IFLNK: u32 = 0o120_000;
/// File-type bits of a directory.
pub const S_IFDIR: u32 = 0o040_000;
/// Longest symbolic-link target stored (Linux's `PATH_MAX`).
pub const MAX_LINK_TARGET: usize = 4096;

/// The kinds of entry an archive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A symbolic link; the content is its target.
    Symlink,
    /// A directory with no entry below it.
    Dir,
}

impl Kind {
    /// The kind a row's `mode` records; unknown type bits are an error.
    pub fn of(mode: Option<u32>) -> Result<Kind> {
        match mode.unwrap_or(0) & S_IFMT {
            0 | S_IFREG => Ok(Kind::File),
            S_IFLNK => Ok(Kind::Symlink),
            S_IFDIR => Ok(Kind::Dir),
            t => Err(Error::corrupt(format!("an entry of file type {t:o}"))),
        }
    }

    /// The mode recorded for an entry of this kind with permission bits `perms`.
    pub fn mode(self, perms: u32) -> u32 {
        match self {
            Kind::File => perms & 0o7777,
            Kind::Symlink => S_IFLNK | 0o777,
            Kind::Dir => S_IFDIR | (perms & 0o7777),
        }
    }

    /// Its name in listings and in the live store's `files.kind` column.
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Symlink => "symlink",
            Kind::Dir => "dir",
        }
    }

    /// The character `ls -l` shows for it.
    pub fn letter(self) -> char {
        match self {
            Kind::File => '-',
            Kind::Symlink => 'l',
            Kind::Dir => 'd',
        }
    }

    /// Checks an entry's content against its kind: a link's target, a
    /// directory's emptiness.
    pub(crate) fn check_content(self, path: &str, content: &[u8]) -> Result<()> {
        let bad = |reason: &str| {
            Err(Error::Input {
                path: path.to_string(),
                reason: reason.to_string(),
            })
        };
        match self {
            Kind::File => Ok(()),
            Kind::Symlink if content.is_empty() => bad("a symbolic link with an empty target"),
            Kind::Symlink if content.len() > MAX_LINK_TARGET => {
                bad("a symbolic link whose target is longer than 4096 bytes")
            }
            Kind::Symlink if content.contains(&0) => bad("a symbolic link whose target holds NUL"),
            Kind::Symlink => Ok(()),
            Kind::Dir if !content.is_empty() => bad("a directory entry with content"),
            Kind::Dir => Ok(()),
        }
    }
}
