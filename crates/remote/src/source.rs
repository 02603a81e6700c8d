//! [`RemoteSource`]: positioned reads of one remote object, by range requests.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use tokio::runtime::Runtime;
use znippy_format::ReadAt;

use crate::cache::{CachedIndex, IndexCache};
use crate::error::RemoteError;
use crate::location::Location;

/// Bytes fetched from the end of the object when it is opened.
pub const WINDOW: u64 = 256 << 10;
/// Bytes fetched before an index read that misses, so that an Arrow footer
/// (whose length sits just after it) comes in the same request.
pub const BACK: u64 = 64 << 10;

/// A remote archive as a byte source for the `format` crate's reader.
pub struct RemoteSource {
    location: String,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    rt: Runtime,
    size: u64,
    etag: Option<String>,
    /// Index bytes fetched so far (or loaded from the cache), by offset.
    known: Mutex<Vec<(u64, Bytes)>>,
    /// Where the blob region ends, once the reader knows it; reads below it
    /// are blobs: fetched exactly and not kept.
    blob_end: AtomicU64,
    requests: AtomicU64,
    bytes: AtomicU64,
    from_cache: bool,
    /// Whether index bytes were fetched since the source opened: only then
    /// has the cache something new to keep.
    learned: AtomicBool,
}

impl std::fmt::Debug for RemoteSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSource")
            .field("location", &self.location)
            .field("size", &self.size)
            .field("etag", &self.etag)
            .finish_non_exhaustive()
    }
}

impl RemoteSource {
    /// Opens `location`: from `cache` when it holds this location's index
    /// (no request), else with one request for the last [`WINDOW`] bytes.
    pub fn open(location: &Location, cache: Option<&IndexCache>) -> Result<Self, RemoteError> {
        let (store, path) = location.client()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(RemoteError::Runtime)?;
        let mut source = RemoteSource {
            location: location.to_string(),
            store,
            path,
            rt,
            size: 0,
            etag: None,
            known: Mutex::new(Vec::new()),
            blob_end: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            from_cache: false,
            learned: AtomicBool::new(false),
        };
        if let Some(hit) = cache.and_then(|c| c.load(&source.location)) {
            source.size = hit.size;
            source.etag = Some(hit.etag);
            source.blob_end = AtomicU64::new(hit.blob_end);
            *source
                .known
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = hit.ranges;
            source.from_cache = true;
            return Ok(source);
        }
        let (start, bytes, size, etag) = source.fetch(GetRange::Suffix(WINDOW))?;
        source.size = size;
        source.etag = etag;
        source.remember(start, bytes);
        Ok(source)
    }

    /// Tells the source where the blob region ends (`Archive::blob_end`), so
    /// that it keeps index bytes and drops blobs.
    pub fn set_blob_end(&self, blob_end: u64) {
        self.blob_end.store(blob_end, Ordering::Relaxed);
    }

    /// Requests made so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether the index came from the cache: then an [`RemoteError::Changed`]
    /// means the cached entry is stale, not that the archive is changing.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// Checks, with one `HEAD` carrying `If-Match`, that the object is still
    /// the one whose index this source holds: what a command answered from
    /// the cache alone, without a request of its own, must do.
    pub fn validate(&self) -> Result<(), RemoteError> {
        let options = GetOptions {
            if_match: self.etag.clone(),
            head: true,
            ..GetOptions::default()
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        let meta = self
            .rt
            .block_on(async { Ok(self.store.get_opts(&self.path, options).await?.meta) })
            .map_err(|e| self.failed(e, "its head".into()))?;
        self.check_same(meta.size, &meta.e_tag)
    }

    /// Stores the index bytes read so far in `cache`, when any were fetched.
    /// An object without an ETag is not cached: nothing would tell a stale
    /// entry.
    pub fn save_index(&self, cache: &IndexCache) -> io::Result<()> {
        let Some(etag) = &self.etag else {
            return Ok(());
        };
        if !self.learned.load(Ordering::Relaxed) {
            return Ok(());
        }
        let blob_end = self.blob_end.load(Ordering::Relaxed);
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        cache.save(
            &self.location,
            &CachedIndex {
                size: self.size,
                etag: etag.clone(),
                blob_end,
                // The first window of a small archive reaches into its blobs:
                // keep only its index part.
                ranges: known
                    .iter()
                    .filter(|(start, b)| start + b.len() as u64 > blob_end)
                    .map(|(start, b)| {
                        let skip = blob_end.saturating_sub(*start);
                        (start + skip, b.slice(skip as usize..))
                    })
                    .collect(),
            },
        )
    }

    /// One ranged GET. Every request after the first must see the same
    /// object: `If-Match` its ETag, and the same size.
    fn fetch(&self, range: GetRange) -> Result<(u64, Bytes, u64, Option<String>), RemoteError> {
        let what = match &range {
            GetRange::Bounded(r) => format!("bytes {}..{}", r.start, r.end),
            GetRange::Suffix(n) => format!("the last {n} bytes"),
            GetRange::Offset(o) => format!("bytes {o}.."),
        };
        // Open's request learns the size and the ETag; every later one must
        // see that object.
        let first = self.size == 0;
        let options = GetOptions {
            range: Some(range.clone()),
            if_match: if first { None } else { self.etag.clone() },
            ..GetOptions::default()
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        // The body is collected up to the length of the range the server
        // acknowledged (which the client checked against the one asked for),
        // and no further: a server that streams on is cut off, not buffered.
        let (got, meta, body) = self
            .rt
            .block_on(async {
                let r = self.store.get_opts(&self.path, options).await?;
                let (got, meta) = (r.range.clone(), r.meta.clone());
                let want = got.end - got.start;
                let mut body = Vec::with_capacity(want as usize);
                let mut stream = r.into_stream();
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk?;
                    if body.len() as u64 + chunk.len() as u64 > want {
                        return Ok((got, meta, Err(body.len() as u64 + chunk.len() as u64)));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok((got, meta, Ok(Bytes::from(body))))
            })
            .map_err(|e| self.failed(e, what))?;
        let received = match &body {
            Ok(b) => b.len() as u64,
            Err(at_least) => *at_least,
        };
        self.bytes.fetch_add(received, Ordering::Relaxed);
        if !first {
            self.check_same(meta.size, &meta.e_tag)?;
        }
        match body {
            Ok(bytes) if bytes.len() as u64 == got.end - got.start => {
                Ok((got.start, bytes, meta.size, meta.e_tag))
            }
            _ => Err(RemoteError::WrongLength {
                location: self.location.clone(),
                start: got.start,
                want: got.end - got.start,
                got: received,
            }),
        }
    }

    /// A failed request as an error: a failed `If-Match` says the object changed.
    fn failed(&self, e: object_store::Error, what: String) -> RemoteError {
        match e {
            object_store::Error::Precondition { .. } => RemoteError::Changed {
                location: self.location.clone(),
                what: format!(
                    "its ETag is no longer {}",
                    self.etag.as_deref().unwrap_or("")
                ),
            },
            source => RemoteError::Request {
                location: self.location.clone(),
                what,
                source,
            },
        }
    }

    /// The size and ETag of a response must be those of the first one.
    fn check_same(&self, size: u64, etag: &Option<String>) -> Result<(), RemoteError> {
        let changed = |what| RemoteError::Changed {
            location: self.location.clone(),
            what,
        };
        if size != self.size {
            return Err(changed(format!("{size} bytes long, not {}", self.size)));
        }
        if self.etag.is_some() && *etag != self.etag {
            return Err(changed(format!(
                "its ETag is {etag:?}, not {:?}",
                self.etag
            )));
        }
        Ok(())
    }

    fn remember(&self, start: u64, bytes: Bytes) {
        self.learned.store(true, Ordering::Relaxed);
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let at = known.partition_point(|(s, _)| *s < start);
        known.insert(at, (start, bytes));
    }

    /// Copies `[offset, offset + buf.len())` from the bytes already fetched,
    /// if they cover it.
    fn copy_known(&self, buf: &mut [u8], offset: u64) -> bool {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let end = offset + buf.len() as u64;
        let mut pos = offset;
        while pos < end {
            let best = known
                .iter()
                .filter(|(s, b)| *s <= pos && pos < s + b.len() as u64)
                .max_by_key(|(s, b)| s + b.len() as u64);
            let Some((s, b)) = best else {
                return false;
            };
            let upto = end.min(s + b.len() as u64);
            let dst = (pos - offset) as usize..(upto - offset) as usize;
            buf[dst].copy_from_slice(&b[(pos - s) as usize..(upto - s) as usize]);
            pos = upto;
        }
        true
    }
}

impl ReadAt for RemoteSource {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|e| *e <= self.size)
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        if buf.is_empty() || self.copy_known(buf, offset) {
            return Ok(());
        }
        let blob_end = self.blob_end.load(Ordering::Relaxed);
        let index = offset >= blob_end;
        let start = if index {
            offset.saturating_sub(BACK).max(blob_end)
        } else {
            offset
        };
        // The client checks that the range acknowledged is the one asked for
        // (`end` is within the size, which `fetch` checks is unchanged), and
        // `fetch` that the body is exactly that long.
        let (_, bytes, _, _) = self.fetch(GetRange::Bounded(start..end))?;
        let from = (offset - start) as usize;
        buf.copy_from_slice(&bytes[from..from + buf.len()]);
        if index {
            self.remember(start, bytes);
        }
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }

    /// A round trip costs more than the bytes: a blob comes in one request.
    fn read_piece(&self) -> usize {
        usize::MAX
    }
}
