//! The one error type of the crate.

use std::io;

/// Everything that can go wrong while writing or reading a `.znippy` archive.
///
/// Variants say what was wrong and, where it helps, what to do about it. A
/// malformed archive always surfaces as [`Error::Corrupt`], [`Error::Checksum`],
/// [`Error::NotAnArchive`] or [`Error::UnsupportedVersion`], never as a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What the crate was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The input does not end with the znippy footer.
    #[error("not a .znippy archive: {0}")]
    NotAnArchive(String),
    /// The archive was written by a newer, incompatible format version.
    #[error("archive format version {found} is newer than this reader (version {supported}); upgrade znippy")]
    UnsupportedVersion {
        /// The version string found in the archive.
        found: String,
        /// The version this crate reads.
        supported: u32,
    },
    /// The archive is structurally damaged.
    #[error("corrupt archive: {0}")]
    Corrupt(String),
    /// A checksum did not match: the bytes on disk are not the bytes written.
    #[error("checksum mismatch in {0}: the archive is damaged")]
    Checksum(String),
    /// A path that the format does not allow (docs/format.md, section 7).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The offending path, lossily converted for display.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A file or directory given as input cannot be archived.
    #[error("cannot archive {path}: {reason}")]
    Input {
        /// The input path.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// An archive property out of its allowed range.
    #[error("invalid archive property: {0}")]
    Property(String),
    /// A metadata argument or value that does not fit the meta table.
    #[error("invalid metadata: {0}")]
    Meta(String),
    /// Two paths that cannot both exist on a file system: `path` would lie
    /// below `other`, a file or a link, or `other` below the file `path`.
    #[error("{path} and {other} cannot both be in the archive: one would lie below the other, which is not a directory")]
    PathConflict {
        /// The path being added.
        path: String,
        /// The path already there (or added with it).
        other: String,
    },
    /// Two names that are one name in Unicode normalization form C: a file
    /// system that normalizes names would extract them onto one file.
    #[error("{path} and {other} cannot both be in the archive: they are one name in Unicode normalization form C, and would be one file where names are normalized (macOS)")]
    UnicodeTwin {
        /// The path being added.
        path: String,
        /// The path already there (or added with it).
        other: String,
    },
    /// The requested path is not in the archive.
    #[error("no such file in the archive: {0}")]
    NotFound(String),
    /// The archive is not the one a signature was made for: it changed
    /// between reading its identity and adding the signature.
    #[error("{0} changed while it was being signed: sign it again")]
    Changed(String),
    /// A signature could not be made (the signer's own error).
    #[error("signing: {0}")]
    Signing(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
