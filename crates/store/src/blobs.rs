//! A live archive's blob region, wherever it lives: one sidecar file that
//! appends extend in place (a local data directory, `sidecar.rs`), or
//! immutable segment objects, one per append (object storage,
//! `segments.rs`). Both hold the same bytes at the same offsets, so the
//! append protocol, the reads and the seal's re-pack see one region.

use std::io::Write;

use znippy_format::ReadAt;

use crate::error::{Result, StoreError};
use crate::segments::{Segment, SegmentRef, Segments};
use crate::sidecar::Sidecar;

/// Where an archive's blobs are.
#[derive(Debug)]
pub(crate) enum Blobs {
    /// One file, extended in place.
    Sidecar(Sidecar),
    /// One object per append.
    Segments(Segments),
}

impl Blobs {
    /// Writes an append's blobs from `start`, the end of what is there:
    /// `write` gets the sink. A segment (object storage) exists once this
    /// returns `Ok`, and is returned, to join the map when its append
    /// commits; a sidecar's bytes are durable after the next [`Blobs::sync`],
    /// which the group commit that takes the append runs once for all of
    /// its appends. On an error nothing past `start` is to be read.
    pub fn write_at<T>(
        &self,
        start: u64,
        write: impl FnOnce(&mut (dyn Write + Send)) -> Result<T>,
    ) -> Result<(T, Option<Segment>)> {
        match self {
            Blobs::Sidecar(sidecar) => {
                let written = write(&mut sidecar.writer_at(start))?;
                Ok((written, None))
            }
            Blobs::Segments(segments) => {
                let mut out = segments.writer(start);
                let written = write(&mut out)?;
                let segment = out.finish()?;
                Ok((written, (segment.len > 0).then_some(segment)))
            }
        }
    }

    /// Makes every byte written so far durable (a segment is, as written).
    pub fn sync(&self) -> Result<()> {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.sync(),
            Blobs::Segments(_) => Ok(()),
        }
    }

    /// Whether the blobs are segments, whose appends may be moved by
    /// another node's commit.
    pub fn is_segments(&self) -> bool {
        matches!(self, Blobs::Segments(_))
    }

    /// Forgets what lies past `end`, the committed end, after appends that
    /// committed nothing. (Their segments never joined the map; the objects
    /// stay, unnamed, for garbage collection.)
    pub fn truncate(&self, end: u64) -> Result<()> {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.truncate(end),
            Blobs::Segments(_) => Ok(()),
        }
    }

    /// Records committed segments (none in a sidecar), the region now
    /// ending at `end`.
    pub fn commit_segments(
        &self,
        refs: impl IntoIterator<Item = SegmentRef>,
        end: u64,
    ) -> Result<()> {
        match self {
            Blobs::Sidecar(_) => Ok(()),
            Blobs::Segments(segments) => segments.add(refs, end),
        }
    }

    /// Checks, before a commit, that the blobs just written are still where
    /// the commit will say they are (a sidecar can be removed under the
    /// store; a segment, once written, cannot).
    pub fn check_in_place(&self) -> Result<()> {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.check_in_place(),
            Blobs::Segments(_) => Ok(()),
        }
    }

    /// Bytes read since the archive was opened.
    pub fn bytes_read(&self) -> u64 {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.bytes_read(),
            Blobs::Segments(segments) => segments.bytes_read(),
        }
    }

    /// The committed segment holding byte `offset`; `None` in a sidecar,
    /// where rows name no segment.
    pub fn segment_of(&self, offset: u64) -> Option<SegmentRef> {
        match self {
            Blobs::Sidecar(_) => None,
            Blobs::Segments(segments) => segments.segment_of(offset),
        }
    }

    /// The region with `pending` segments (written, not yet committed)
    /// readable too, for what an append reads back before its commit.
    pub fn with_pending<'a>(&'a self, pending: &'a [Segment]) -> WithPending<'a> {
        WithPending {
            blobs: self,
            pending,
        }
    }

    /// The sidecar, which a seal can finish in place.
    pub fn sidecar(&self) -> Option<&Sidecar> {
        match self {
            Blobs::Sidecar(sidecar) => Some(sidecar),
            Blobs::Segments(_) => None,
        }
    }

    /// Removes the blobs (the archive is dropped). A sidecar already gone
    /// is removed.
    pub async fn remove(&self) -> Result<()> {
        match self {
            Blobs::Sidecar(sidecar) => match std::fs::remove_file(sidecar.path()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::io(
                    format!("removing {}", sidecar.path().display()),
                    e,
                )),
                _ => Ok(()),
            },
            Blobs::Segments(segments) => {
                let (store, prefix) = segments.store();
                crate::segments::delete_all(store, prefix)
                    .await
                    .map_err(|source| StoreError::ObjectStore {
                        context: format!("removing the segments under {prefix}"),
                        source,
                    })
            }
        }
    }
}

impl ReadAt for Blobs {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.read_exact_at(buf, offset),
            Blobs::Segments(segments) => segments.read_exact_at(buf, offset),
        }
    }

    fn size(&self) -> std::io::Result<u64> {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.size(),
            Blobs::Segments(segments) => segments.size(),
        }
    }

    fn read_piece(&self) -> usize {
        match self {
            Blobs::Sidecar(sidecar) => sidecar.read_piece(),
            Blobs::Segments(segments) => segments.read_piece(),
        }
    }
}

/// [`Blobs::with_pending`].
pub(crate) struct WithPending<'a> {
    blobs: &'a Blobs,
    pending: &'a [Segment],
}

impl ReadAt for WithPending<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        match (self.blobs, self.pending.iter().find(|s| s.holds(offset))) {
            (Blobs::Segments(segments), Some(s)) if end <= s.start + s.len => {
                segments.read_object(&s.key, buf, offset - s.start)
            }
            _ => self.blobs.read_exact_at(buf, offset),
        }
    }

    fn size(&self) -> std::io::Result<u64> {
        let pending = self.pending.iter().map(|s| s.start + s.len).max();
        Ok(self.blobs.size()?.max(pending.unwrap_or(0)))
    }

    fn read_piece(&self) -> usize {
        self.blobs.read_piece()
    }
}
