//! A sealed archive's `.znippy`: where it is, and how a seal writes it.
//!
//! In a data directory a seal either finishes the sidecar in place (the tail
//! written after the blobs, `SealPlan::seal_in_place`) or writes a re-packed
//! copy to `DIR/sealed/<id>.znippy`, through a `.partial` file renamed once
//! it is synced. On object storage the sealed archive is always a new
//! object, `PREFIX/<id>/sealed-<uuid>.znippy`, written like a segment (one
//! conditional PUT, or a multipart upload of bounded memory) and never
//! rewritten.
//!
//! Either way the file is whole and durable before the seal commits, and
//! the commit is the one fact that says the archive is sealed: a `files`
//! snapshot whose summary names the file ([`SEALED_KEY`],
//! [`SEALED_LEN_KEY`]). On a shared catalog that commit is pinned to the
//! snapshot the seal was planned on (`pinned.rs`), which makes it the
//! conditional write that publishes the archive: an append another node
//! commits first sends the seal back to plan again; a seal committed
//! first fails every later append, on every node, as they catch up; and of
//! two nodes sealing at once, one publishes and the other returns the
//! published file, removing its own (canonical bytes: the two are equal).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use object_store::path::Path as ObjectPath;
use znippy_format::{durable, failpoint};

use crate::error::{Result, StoreError};
use crate::segments::SegmentWriter;

/// Summary key of the `files` snapshot that seals an archive: where its
/// sealed file is (a path in a data directory, an object key in the
/// bucket).
pub(crate) const SEALED_KEY: &str = "znippy.sealed";
/// Summary key: the sealed file's length.
pub(crate) const SEALED_LEN_KEY: &str = "znippy.sealed-len";

/// Where a sealed archive's `.znippy` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealedAt {
    /// A file in the data directory.
    File(PathBuf),
    /// An object in the warehouse's bucket.
    Object(ObjectPath),
}

impl SealedAt {
    /// The file, in a data directory.
    pub fn file(&self) -> Option<&Path> {
        match self {
            SealedAt::File(path) => Some(path),
            SealedAt::Object(_) => None,
        }
    }
}

impl fmt::Display for SealedAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SealedAt::File(path) => write!(f, "{}", path.display()),
            SealedAt::Object(key) => write!(f, "{key}"),
        }
    }
}

/// A sealed archive's `.znippy`: where it is, and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedFile {
    /// Where it is.
    pub at: SealedAt,
    /// Its length.
    pub len: u64,
}

/// A sealed archive being written (not in place): see the module doc.
pub struct SealedWriter {
    inner: Inner,
    written: u64,
}

enum Inner {
    File {
        out: BufWriter<File>,
        tmp: PathBuf,
        path: PathBuf,
        dir: PathBuf,
    },
    Object(SegmentWriter),
}

impl fmt::Debug for SealedWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = match &self.inner {
            Inner::File { path, .. } => path.display().to_string(),
            Inner::Object(w) => format!("{w:?}"),
        };
        f.debug_struct("SealedWriter")
            .field("to", &to)
            .field("written", &self.written)
            .finish()
    }
}

impl SealedWriter {
    /// `dir/<id>.znippy`, written through `dir/<id>.znippy.partial`.
    pub(crate) fn file(dir: &Path, id: &str) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::io(format!("creating {}", dir.display()), e))?;
        let path = dir.join(format!("{id}.znippy"));
        let tmp = dir.join(format!("{id}.znippy.partial"));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| StoreError::io(format!("creating {}", tmp.display()), e))?;
        Ok(SealedWriter {
            inner: Inner::File {
                out: BufWriter::with_capacity(1 << 20, file),
                tmp,
                path,
                dir: dir.to_path_buf(),
            },
            written: 0,
        })
    }

    /// A new object, written by `segment`.
    pub(crate) fn object(segment: SegmentWriter) -> Self {
        SealedWriter {
            inner: Inner::Object(segment),
            written: 0,
        }
    }

    /// Makes the sealed file durable and whole where it will be published.
    /// Until the seal commits, nothing names it.
    pub fn finish(self) -> Result<SealedFile> {
        let len = self.written;
        let at = match self.inner {
            Inner::File {
                out,
                tmp,
                path,
                dir,
            } => {
                let what = |e: io::Error| StoreError::io(format!("writing {}", tmp.display()), e);
                let file = out.into_inner().map_err(|e| what(e.into_error()))?;
                durable::sync_all(&file, &tmp).map_err(what)?;
                failpoint("seal.copy-synced");
                std::fs::rename(&tmp, &path)
                    .map_err(|e| StoreError::io(format!("renaming {}", tmp.display()), e))?;
                durable::sync_dir(&dir)
                    .map_err(|e| StoreError::io(format!("fsync of {}", dir.display()), e))?;
                failpoint("seal.renamed");
                SealedAt::File(path)
            }
            Inner::Object(segment) => SealedAt::Object(segment.finish()?.key),
        };
        Ok(SealedFile { at, len })
    }
}

impl Write for SealedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.inner {
            Inner::File { out, .. } => out.write(buf)?,
            Inner::Object(segment) => segment.write(buf)?,
        };
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::File { out, .. } => out.flush(),
            Inner::Object(segment) => segment.flush(),
        }
    }
}
