//! Blob segments: a live archive's blob region on object storage, as
//! immutable objects.
//!
//! On a local disk the blob region is one sidecar file that appends extend in
//! place. An object cannot be extended, and two nodes appending to one archive
//! could not share one anyway, so on object storage each append writes its
//! blobs as a new object, a *segment*, under a fresh key (a UUID v7) that
//! nothing else will ever name. The blob region stays one logical address
//! space: a segment holds the bytes `[start, start + len)` of it, the rows
//! keep their offsets in that space exactly as in a sidecar, and a
//! [`Segments`] map turns an offset back into a segment and a ranged GET.
//! What the engine writes, the seal reads and the format's readers decode is
//! therefore the same on both backends.
//!
//! A segment is written by [`SegmentWriter`], the engine's sink: the first
//! [`PART`] bytes are held in memory, and a segment that ends within them
//! (most appends) is one PUT, conditional on the key being new. A larger one
//! becomes a multipart upload of `PART`-sized parts, at most
//! [`PARTS_IN_FLIGHT`] of them uploading while the next fills, so an append
//! of any size holds at most `(PARTS_IN_FLIGHT + 1) * PART` bytes (bounded
//! memory, rule 4 of docs/architecture.md). The object appears only when
//! the write completes, whole; a writer that fails or is dropped unfinished
//! aborts its upload, and what a crash leaves (an uncompleted upload, or a
//! segment no commit names) is garbage that no row points into.
//!
//! Both the writer and the map's reads block on the async object store
//! client (`ReadAt` and `Write` are blocking interfaces, as the format's
//! readers and the engine are): on the blocking threads the engine and the
//! long reads run on, or, for a short read, on a worker of a multi-threaded
//! runtime, which hands its other tasks over while it waits.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use object_store::path::Path;
use object_store::WriteMultipart;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tokio::runtime::Handle;
use znippy_format::ReadAt;

use crate::error::{Result, StoreError};

/// How a segment's object is named, under its archive's prefix.
const SEGMENT_SUFFIX: &str = ".blobs";
/// How a sealed archive's object is named, beside the segments.
const SEALED_PREFIX: &str = "sealed-";
const SEALED_SUFFIX: &str = ".znippy";

/// Whether an object named `name`, directly under an archive's prefix, is
/// one the store wrote there: a segment or a sealed archive. The prefix of
/// the blobs may hold what is not the store's (a REST catalog whose
/// warehouse is the same prefix keeps its tables at `znippy/<id>/...`
/// below it), and a drop or a gc must leave that alone.
pub(crate) fn is_ours(name: &str) -> bool {
    name.ends_with(SEGMENT_SUFFIX)
        || (name.starts_with(SEALED_PREFIX) && name.ends_with(SEALED_SUFFIX))
}

/// Deletes the objects of one archive, those [`is_ours`] directly under its
/// `prefix`, in bulk requests.
pub(crate) async fn delete_all(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
) -> object_store::Result<()> {
    let listed = store.list_with_delimiter(Some(prefix)).await?;
    let keys = listed
        .objects
        .into_iter()
        .map(|o| o.location)
        .filter(|key| key.filename().is_some_and(is_ours))
        .map(Ok);
    let keys = futures::StreamExt::boxed(futures::stream::iter(keys));
    crate::object_storage::drain(store.delete_stream(keys)).await
}

/// Bytes of a segment held before it becomes a multipart upload, and the
/// size of each part (S3 parts are at least 5 MiB, but for the last).
pub const PART: usize = 8 << 20;

/// Parts a writer lets upload at once before it waits.
pub const PARTS_IN_FLIGHT: usize = 2;

/// One committed segment: bytes `[start, start + len)` of the blob region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Where its bytes start in the blob region.
    pub start: u64,
    /// How many bytes it holds.
    pub len: u64,
    /// Its object's key.
    pub key: Path,
}

impl Segment {
    /// Whether byte `offset` of the region is in it.
    pub fn holds(&self, offset: u64) -> bool {
        self.start <= offset && offset - self.start < self.len
    }

    /// The reference its rows carry.
    pub fn named(&self) -> SegmentRef {
        SegmentRef {
            start: self.start,
            key: self.key.to_string(),
        }
    }
}

/// Runs `f` to its end from blocking code, on a blocking thread or on a
/// multi-threaded runtime's worker.
fn block_on<F: std::future::Future>(runtime: &Handle, f: F) -> F::Output {
    tokio::task::block_in_place(|| runtime.block_on(f))
}

fn store_error(context: impl Into<String>) -> impl FnOnce(object_store::Error) -> StoreError {
    let context = context.into();
    move |source| StoreError::ObjectStore { context, source }
}

/// Writes one segment: the blobs of one append, from `start` on in the blob
/// region. See the module doc for its memory and its atomicity.
pub struct SegmentWriter {
    store: Arc<dyn ObjectStore>,
    runtime: Handle,
    key: Path,
    start: u64,
    written: u64,
    /// The first bytes, until they fill a part.
    head: Vec<u8>,
    /// The upload, once the segment outgrew `head`; `None` again once
    /// finished or aborted.
    upload: Option<WriteMultipart>,
}

impl std::fmt::Debug for SegmentWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentWriter")
            .field("key", &self.key)
            .field("start", &self.start)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl SegmentWriter {
    /// A new segment under `prefix`, holding the blob region from `start`
    /// on; `runtime` runs the client's requests.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        runtime: Handle,
        prefix: &Path,
        start: u64,
    ) -> SegmentWriter {
        let key = prefix
            .clone()
            .join(format!("{}{SEGMENT_SUFFIX}", uuid::Uuid::now_v7()));
        Self::at(store, runtime, key, start)
    }

    /// A new object `key`, holding what is written to it (`start` is where
    /// its bytes would start in a blob region).
    fn at(store: Arc<dyn ObjectStore>, runtime: Handle, key: Path, start: u64) -> SegmentWriter {
        SegmentWriter {
            store,
            runtime,
            key,
            start,
            written: 0,
            head: Vec::new(),
            upload: None,
        }
    }

    /// Bytes written so far.
    #[cfg(test)]
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The key the segment is written under.
    #[cfg(test)]
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// Completes the segment: once this returns it exists, whole. An empty
    /// segment is not written at all.
    pub fn finish(mut self) -> Result<Segment> {
        let segment = Segment {
            start: self.start,
            len: self.written,
            key: self.key.clone(),
        };
        if let Some(upload) = self.upload.take() {
            block_on(&self.runtime, upload.finish())
                .map_err(store_error(format!("completing segment {}", self.key)))?;
        } else if !self.head.is_empty() {
            let body = PutPayload::from(std::mem::take(&mut self.head));
            let create = PutOptions::from(PutMode::Create);
            block_on(&self.runtime, self.store.put_opts(&self.key, body, create))
                .map_err(store_error(format!("writing segment {}", self.key)))?;
        }
        Ok(segment)
    }

    /// A multipart upload that starts with the held head.
    fn start_upload(&mut self) -> io::Result<WriteMultipart> {
        let upload = block_on(&self.runtime, self.store.put_multipart(&self.key))
            .map_err(io::Error::other)?;
        let mut upload = WriteMultipart::new_with_chunk_size(upload, PART);
        // A full part is uploaded by a task spawned on the current runtime.
        let _runtime = self.runtime.enter();
        upload.put(Bytes::from(std::mem::take(&mut self.head)));
        Ok(upload)
    }
}

impl Write for SegmentWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // At most one part's worth per call, so one call starts at most one
        // part upload past the wait below.
        let buf = &buf[..buf.len().min(PART)];
        if self.upload.is_none() && self.head.len() + buf.len() <= PART {
            self.head.extend_from_slice(buf);
        } else {
            let upload = match self.upload.take() {
                Some(upload) => upload,
                None => self.start_upload()?,
            };
            let upload = self.upload.insert(upload);
            block_on(&self.runtime, upload.wait_for_capacity(PARTS_IN_FLIGHT))
                .map_err(io::Error::other)?;
            let _runtime = self.runtime.enter();
            upload.write(buf);
        }
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SegmentWriter {
    /// An unfinished upload is aborted, so its parts do not linger; on a
    /// task of its own, as a drop may happen anywhere, even on a runtime's
    /// worker.
    fn drop(&mut self) {
        if let Some(upload) = self.upload.take() {
            self.runtime.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!("aborting an unfinished segment upload: {e}");
                }
            });
        }
    }
}

/// Which segment holds a row's blob: its key, and where it starts in the
/// blob region. The `files` rows carry it (columns `segment` and
/// `segment_start`), so the map is derived from the tables like the rest
/// of an archive's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRef {
    /// Where the segment starts in the blob region.
    pub start: u64,
    /// Its object's key.
    pub key: String,
}

/// The committed segments of one archive's blob region: a [`ReadAt`] over
/// the region, each read one ranged GET per segment it touches, and the
/// maker of the next segment's writer.
///
/// Only committed segments are in the map: an append's own segment joins it
/// when the append commits, at the start the commit settled on (another
/// node may have committed first, moving it). A segment's length is where
/// the next one starts (or the committed region ends), so the map has no
/// gaps but the one before the first segment, which only an append whose
/// blobs all died can leave, and which nothing reads.
pub struct Segments {
    store: Arc<dyn ObjectStore>,
    runtime: Handle,
    /// Where new segments go.
    prefix: Path,
    map: RwLock<Map>,
    read: AtomicU64,
}

#[derive(Debug, Default)]
struct Map {
    /// Each segment's key, by start.
    starts: BTreeMap<u64, Path>,
    /// The committed end of the region.
    end: u64,
}

impl Map {
    /// Adds `refs` (repeats allowed: every row of a segment names it) and
    /// moves the end to `end`.
    fn add(&mut self, refs: impl IntoIterator<Item = SegmentRef>, end: u64) -> Result<()> {
        self.end = self.end.max(end);
        for r in refs {
            if r.start >= self.end {
                return Err(StoreError::SegmentPastEnd {
                    start: r.start,
                    end: self.end,
                });
            }
            let key = Path::parse(&r.key).map_err(|_| StoreError::BadSegmentKey(r.key.clone()))?;
            match self.starts.get(&r.start) {
                Some(k) if *k != key => {
                    return Err(StoreError::SegmentClash {
                        start: r.start,
                        keys: [k.to_string(), r.key],
                    })
                }
                Some(_) => {}
                None => {
                    self.starts.insert(r.start, key);
                }
            }
        }
        Ok(())
    }

    /// The segment holding byte `offset`: its start, key and end.
    fn find(&self, offset: u64) -> Option<(u64, &Path, u64)> {
        if offset >= self.end {
            return None;
        }
        let (&start, key) = self.starts.range(..=offset).next_back()?;
        let end = self
            .starts
            .range(start + 1..)
            .next()
            .map_or(self.end, |(&next, _)| next);
        Some((start, key, end))
    }
}

impl std::fmt::Debug for Segments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments")
            .field("prefix", &self.prefix)
            .field("map", &self.map)
            .finish_non_exhaustive()
    }
}

impl Segments {
    /// The map of the segments `refs` name, in a region that ends at `end`;
    /// new segments go under `prefix`. Two keys at one start, or a segment
    /// starting at or past the end, are corruption.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        runtime: Handle,
        prefix: Path,
        refs: impl IntoIterator<Item = SegmentRef>,
        end: u64,
    ) -> Result<Self> {
        let mut map = Map::default();
        map.add(refs, end)?;
        Ok(Segments {
            store,
            runtime,
            prefix,
            map: RwLock::new(map),
            read: AtomicU64::new(0),
        })
    }

    /// A writer of a segment that starts at `start`.
    pub fn writer(&self, start: u64) -> SegmentWriter {
        SegmentWriter::new(
            Arc::clone(&self.store),
            self.runtime.clone(),
            &self.prefix,
            start,
        )
    }

    /// A writer of the archive's sealed `.znippy`: a new object beside
    /// the segments, written as they are (`sealed.rs`).
    pub fn sealed_writer(&self) -> SegmentWriter {
        let name = format!("{SEALED_PREFIX}{}{SEALED_SUFFIX}", uuid::Uuid::now_v7());
        SegmentWriter::at(
            Arc::clone(&self.store),
            self.runtime.clone(),
            self.prefix.clone().join(name),
            0,
        )
    }

    /// Adds committed segments, the region now ending at `end`.
    pub fn add(&self, refs: impl IntoIterator<Item = SegmentRef>, end: u64) -> Result<()> {
        self.map_mut().add(refs, end)
    }

    /// The committed segment that holds byte `offset`.
    pub fn segment_of(&self, offset: u64) -> Option<SegmentRef> {
        let map = self.map();
        map.find(offset).map(|(start, key, _)| SegmentRef {
            start,
            key: key.to_string(),
        })
    }

    /// The committed end of the region.
    pub fn end(&self) -> u64 {
        self.map().end
    }

    /// Bytes read since the map was made.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// The store and the prefix every segment of the map is under, for a drop.
    pub fn store(&self) -> (&Arc<dyn ObjectStore>, &Path) {
        (&self.store, &self.prefix)
    }

    fn map(&self) -> std::sync::RwLockReadGuard<'_, Map> {
        self.map
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn map_mut(&self) -> std::sync::RwLockWriteGuard<'_, Map> {
        self.map
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads `buf.len()` bytes at `from` in the object `key`.
    pub fn read_object(&self, key: &Path, buf: &mut [u8], from: u64) -> io::Result<()> {
        let n = buf.len() as u64;
        let got = block_on(&self.runtime, self.store.get_range(key, from..from + n))
            .map_err(io::Error::other)?;
        if got.len() as u64 != n {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("segment {key} gave {} bytes of {n}", got.len()),
            ));
        }
        buf.copy_from_slice(&got);
        self.read.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// The ranges of `len` bytes at `offset`, per segment: taken under the
    /// lock, read without it.
    fn pieces(&self, offset: u64, len: u64) -> io::Result<Vec<(Path, u64, u64)>> {
        let map = self.map();
        if offset.checked_add(len).is_none_or(|e| e > map.end) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read past the end of the blob segments ({})", map.end),
            ));
        }
        let (mut offset, mut left) = (offset, len);
        let mut out = Vec::new();
        while left > 0 {
            let Some((start, key, end)) = map.find(offset) else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("no blob segment holds byte {offset}"),
                ));
            };
            let n = (end - offset).min(left);
            out.push((key.clone(), offset - start, n));
            offset += n;
            left -= n;
        }
        Ok(out)
    }
}

impl ReadAt for Segments {
    fn read_exact_at(&self, mut buf: &mut [u8], offset: u64) -> io::Result<()> {
        for (key, from, n) in self.pieces(offset, buf.len() as u64)? {
            let (now, rest) = std::mem::take(&mut buf).split_at_mut(n as usize);
            self.read_object(&key, now, from)?;
            buf = rest;
        }
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.end())
    }

    /// Each read is a GET: a blob comes in one, not in pieces.
    fn read_piece(&self) -> usize {
        usize::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use object_store::memory::InMemory;
    use tokio::runtime::Runtime;
    use znippy_format::{ArchiveProps, BlobRegion, Engine, InputFile, SliceRow};
    use znippy_testkit::data;

    use crate::file::{FileReader, ScratchPool};

    fn runtime() -> Runtime {
        Runtime::new().unwrap()
    }

    fn prefix() -> Path {
        Path::from("znippy/a/blobs")
    }

    /// Files of every shape an append has: tiny ones that share a pack,
    /// and ones larger than a chunk.
    fn batch(seed: u64) -> Vec<(String, Vec<u8>)> {
        let sizes = [0, 1, 100, 4 << 10, 300 << 10, 3 << 20, 9 << 20];
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let bytes = data::mixed(seed * 100 + i as u64, len);
                (format!("b{seed}/f{i}"), bytes)
            })
            .collect()
    }

    /// One batch through the engine into `out`; its rows by path.
    fn compress(
        engine: &mut Engine,
        files: &[(String, Vec<u8>)],
        out: &mut (dyn Write + Send),
    ) -> BTreeMap<String, Vec<SliceRow>> {
        let input: Vec<_> = files
            .iter()
            .map(|(p, b)| Ok(InputFile::from_bytes(p.clone(), b.clone(), None)))
            .collect();
        let rows = engine.write_batch(input, out, &mut |_| {}).unwrap().rows;
        let mut by_path: BTreeMap<String, Vec<SliceRow>> = BTreeMap::new();
        for r in rows {
            by_path.entry(r.relative_path.clone()).or_default().push(r);
        }
        by_path
    }

    fn read_back(src: Arc<dyn ReadAt>, end: u64, path: &str, rows: Vec<SliceRow>) -> Vec<u8> {
        let region = BlobRegion {
            chunk_size: ArchiveProps::default().chunk_size,
            end,
        };
        let pool = Arc::new(ScratchPool::default());
        let file = FileReader::new(path, rows, region, src, pool).unwrap();
        let mut out = Vec::new();
        file.read_range(0..u64::MAX, &mut out).unwrap();
        out
    }

    /// Two appends as two segments hold exactly the bytes a sidecar would
    /// (the same engine writing both batches to one buffer), and every file
    /// reads back through the segment map, including the ones whose blobs
    /// a later batch deduplicated against an earlier one.
    fn two_appends_read_back(store: Arc<dyn ObjectStore>, rt: &Runtime) {
        let first = batch(1);
        let mut second = batch(2);
        second.push(("b2/copy".into(), first[5].1.clone()));

        let mut sidecar = Vec::new();
        let mut engine = Engine::new(ArchiveProps::default(), 2).unwrap();
        compress(&mut engine, &first, &mut sidecar);
        compress(&mut engine, &second, &mut sidecar);

        let mut engine = Engine::new(ArchiveProps::default(), 2).unwrap();
        let map = Segments::new(store.clone(), rt.handle().clone(), prefix(), [], 0).unwrap();
        let mut rows = BTreeMap::new();
        for files in [&first, &second] {
            let start = engine.blob_end();
            let mut w = map.writer(start);
            rows.extend(compress(&mut engine, files, &mut w));
            assert_eq!(start + w.written(), engine.blob_end());
            let segment = w.finish().unwrap();
            map.add([segment.named()], segment.start + segment.len)
                .unwrap();
        }
        assert_eq!(map.end(), sidecar.len() as u64);
        let mut whole = vec![0; sidecar.len()];
        map.read_exact_at(&mut whole, 0).unwrap();
        assert!(whole == sidecar, "the segments hold the sidecar's bytes");
        assert_eq!(map.bytes_read(), sidecar.len() as u64);

        // What an open derives from the rows: every row names its segment.
        let refs: Vec<SegmentRef> = rows
            .values()
            .flatten()
            .filter(|r| r.blob_size > 0)
            .map(|r| map.segment_of(r.blob_offset).unwrap())
            .collect();
        let derived = Segments::new(store, rt.handle().clone(), prefix(), refs, map.end()).unwrap();
        assert_eq!(derived.map().starts, map.map().starts);

        let src: Arc<dyn ReadAt> = Arc::new(derived);
        for (path, bytes) in first.iter().chain(&second) {
            let got = read_back(src.clone(), sidecar.len() as u64, path, rows[path].clone());
            assert!(&got == bytes, "{path}");
        }
    }

    #[test]
    fn two_appends_as_segments_hold_what_a_sidecar_holds() {
        let rt = runtime();
        two_appends_read_back(Arc::new(InMemory::new()), &rt);
    }

    /// A writer that outgrows its head streams parts, and the object
    /// appears only when the writer finishes; one dropped unfinished leaves
    /// nothing behind.
    fn a_segment_appears_whole_or_not_at_all(store: Arc<dyn ObjectStore>, rt: &Runtime) {
        let bytes = data::noise(7, 2 * PART + 12345);
        let mut w = SegmentWriter::new(store.clone(), rt.handle().clone(), &prefix(), 0);
        for piece in bytes.chunks(1 << 20) {
            w.write_all(piece).unwrap();
        }
        let key = w.key().clone();
        let missing = rt.block_on(store.head(&key)).unwrap_err();
        assert!(
            matches!(missing, object_store::Error::NotFound { .. }),
            "visible before it was finished: {missing}"
        );
        let segment = w.finish().unwrap();
        assert_eq!(segment.len, bytes.len() as u64);
        let got = rt.block_on(async { store.get(&key).await?.bytes().await });
        assert!(got.unwrap() == bytes);

        let abandoned = prefix().join("abandoned");
        let mut w = SegmentWriter::new(store.clone(), rt.handle().clone(), &abandoned, 0);
        w.write_all(&bytes[..PART + 1]).unwrap();
        drop(w);
        let listed = rt.block_on(async {
            use futures::TryStreamExt;
            store.list(Some(&abandoned)).try_collect::<Vec<_>>().await
        });
        assert!(
            listed.unwrap().is_empty(),
            "an unfinished segment is invisible"
        );
    }

    #[test]
    fn a_large_segment_is_streamed_and_appears_only_when_finished() {
        let rt = runtime();
        a_segment_appears_whole_or_not_at_all(Arc::new(InMemory::new()), &rt);
    }

    /// A small segment is one PUT that never replaces an object: if its key
    /// were somehow taken, the write fails rather than overwrite it.
    fn a_small_segment_never_overwrites(store: Arc<dyn ObjectStore>, rt: &Runtime) {
        let mut w = SegmentWriter::new(store.clone(), rt.handle().clone(), &prefix(), 0);
        w.write_all(b"blobs").unwrap();
        let key = w.key().clone();
        rt.block_on(store.put(&key, PutPayload::from_static(b"someone else's")))
            .unwrap();
        let e = w.finish().unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::ObjectStore {
                    source: object_store::Error::AlreadyExists { .. },
                    ..
                }
            ),
            "{e}"
        );
        let kept = rt.block_on(async { store.get(&key).await?.bytes().await });
        assert_eq!(&kept.unwrap()[..], b"someone else's");
    }

    #[test]
    fn a_small_segment_is_one_conditional_put() {
        let rt = runtime();
        a_small_segment_never_overwrites(Arc::new(InMemory::new()), &rt);
    }

    #[test]
    fn the_map_reads_across_segments_but_not_into_a_gap_or_past_the_end() {
        let rt = runtime();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let put = |name: &str, body: &'static [u8]| {
            let key = prefix().join(name);
            rt.block_on(store.put(&key, PutPayload::from_static(body)))
                .unwrap();
            key.to_string()
        };
        let (a, b) = (put("a", b"0123"), put("b", b"456789"));
        let at = |start, key: &str| SegmentRef {
            start,
            key: key.to_string(),
        };
        let map = |refs: Vec<SegmentRef>, end| {
            Segments::new(store.clone(), rt.handle().clone(), prefix(), refs, end)
        };
        assert!(matches!(
            map(vec![at(0, &a), at(0, &b)], 10),
            Err(StoreError::SegmentClash { start: 0, .. })
        ));
        assert!(matches!(
            map(vec![at(0, &a), at(10, &b)], 10),
            Err(StoreError::SegmentPastEnd { start: 10, end: 10 })
        ));
        assert!(matches!(
            map(vec![at(0, "a/../b")], 10),
            Err(StoreError::BadSegmentKey(_))
        ));

        let m = map(vec![at(4, &b), at(0, &a), at(4, &b)], 10).unwrap();
        assert_eq!(m.size().unwrap(), 10);
        let mut buf = [0u8; 5];
        m.read_exact_at(&mut buf, 2).unwrap();
        assert_eq!(&buf, b"23456");
        for offset in [6, 10, u64::MAX - 2] {
            let e = m.read_exact_at(&mut buf, offset).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "at {offset}");
        }
        assert_eq!(m.segment_of(5), Some(at(4, &b)));
        assert_eq!(m.segment_of(10), None);

        // An append whose blobs all died left bytes no segment holds.
        let gap = map(vec![at(4, &b)], 10).unwrap();
        let e = gap.read_exact_at(&mut buf, 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(gap.segment_of(2), None);
    }

    /// The same on a real S3 server (SeaweedFS), in a plain bucket.
    #[test]
    fn segments_on_seaweedfs() {
        use znippy_testkit::seaweed::{self, Seaweed};

        use crate::remote::RemoteConfig;

        let Some(server) = Seaweed::start() else {
            return;
        };
        let rt = runtime();
        let config = RemoteConfig::for_seaweed(&server);
        let store = config.bucket(seaweed::BUCKET).unwrap();
        two_appends_read_back(store.clone(), &rt);
        a_segment_appears_whole_or_not_at_all(store.clone(), &rt);
        a_small_segment_never_overwrites(store, &rt);
    }
}
