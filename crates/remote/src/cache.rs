//! [`IndexCache`]: the index bytes of remote archives, kept between commands.
//!
//! One file per location, named by the BLAKE3 of the location, holding the
//! object's size and ETag, where its blob region ends, and the index ranges
//! read from it. The file ends with the BLAKE3 of everything before it, so a
//! torn or damaged entry is a miss, never a wrong index. Entries are
//! replaced by rename; when the directory outgrows its bound, the entries
//! used longest ago go first.
//!
//! ```text
//! "ZNPYRC01" | size u64 | blob_end u64 | etag_len u32 | etag
//!            | n u32 | n x (offset u64 | len u32 | bytes) | blake3 (32)
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

const MAGIC: &[u8; 8] = b"ZNPYRC01";
/// The bound on the whole directory unless `ZNIPPY_CACHE_MAX` says otherwise.
const DEFAULT_MAX: u64 = 64 << 20;

/// An entry: what a [`crate::RemoteSource`] needs to open without a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CachedIndex {
    pub(crate) size: u64,
    pub(crate) etag: String,
    pub(crate) blob_end: u64,
    pub(crate) ranges: Vec<(u64, Bytes)>,
}

/// A directory of cached indexes, bounded in bytes.
#[derive(Debug, Clone)]
pub struct IndexCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl IndexCache {
    /// A cache in `dir` of at most `max_bytes`.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        IndexCache {
            dir: dir.into(),
            max_bytes,
        }
    }

    /// The user's cache: `ZNIPPY_CACHE_DIR`, else `$XDG_CACHE_HOME/znippy/index`,
    /// else `~/.cache/znippy/index`, bounded by `ZNIPPY_CACHE_MAX` bytes
    /// (64 MiB by default; 0 turns the cache off).
    pub fn from_env() -> Option<Self> {
        let max = match std::env::var("ZNIPPY_CACHE_MAX") {
            Ok(v) => v.parse().ok()?,
            Err(_) => DEFAULT_MAX,
        };
        if max == 0 {
            return None;
        }
        let env = |k| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let dir = env("ZNIPPY_CACHE_DIR")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("znippy/index")))
            .or_else(|| env("HOME").map(|h| h.join(".cache/znippy/index")))?;
        Some(IndexCache::new(dir, max))
    }

    fn entry(&self, location: &str) -> PathBuf {
        self.dir
            .join(blake3::hash(location.as_bytes()).to_hex().as_str())
    }

    /// The entry of `location`, if there is a sound one.
    pub(crate) fn load(&self, location: &str) -> Option<CachedIndex> {
        let path = self.entry(location);
        let len = fs::metadata(&path).ok()?.len();
        if len > self.max_bytes {
            return None;
        }
        let bytes = fs::read(&path).ok()?;
        let entry = decode(&bytes)?;
        // Used now: the last to go when the directory is trimmed.
        let _ = fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        Some(entry)
    }

    /// Writes the entry of `location`, then trims the directory to its bound.
    pub(crate) fn save(&self, location: &str, entry: &CachedIndex) -> io::Result<()> {
        let bytes = encode(entry);
        if bytes.len() as u64 > self.max_bytes {
            return Ok(());
        }
        fs::create_dir_all(&self.dir)?;
        let path = self.entry(location);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        fs::write(&tmp, &bytes)?;
        fs::rename(&tmp, &path)?;
        self.trim(&path)
    }

    /// Removes the entry of `location` (it was found stale).
    pub fn forget(&self, location: &str) {
        let _ = fs::remove_file(self.entry(location));
    }

    fn trim(&self, keep: &Path) -> io::Result<()> {
        let mut entries = Vec::new();
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let md = e.metadata()?;
            if md.is_file() {
                entries.push((md.modified()?, md.len(), e.path()));
            }
        }
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path != keep {
                let _ = fs::remove_file(&path);
                total -= len;
            }
        }
        Ok(())
    }
}

fn encode(e: &CachedIndex) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&e.size.to_le_bytes());
    out.extend_from_slice(&e.blob_end.to_le_bytes());
    out.extend_from_slice(&(e.etag.len() as u32).to_le_bytes());
    out.extend_from_slice(e.etag.as_bytes());
    out.extend_from_slice(&(e.ranges.len() as u32).to_le_bytes());
    for (offset, bytes) in &e.ranges {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    let hash = blake3::hash(&out);
    out.extend_from_slice(hash.as_bytes());
    out
}

fn decode(bytes: &[u8]) -> Option<CachedIndex> {
    let (body, hash) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if blake3::hash(body).as_bytes() != hash {
        return None;
    }
    let mut r = Reader(body.strip_prefix(MAGIC)?);
    let size = r.u64()?;
    let blob_end = r.u64()?;
    let etag_len = r.u32()? as usize;
    let etag = String::from_utf8(r.take(etag_len)?.to_vec()).ok()?;
    let n = r.u32()?;
    let mut ranges = Vec::new();
    for _ in 0..n {
        let offset = r.u64()?;
        let len = r.u32()? as usize;
        let data = r.take(len)?;
        offset
            .checked_add(len as u64)
            .filter(|end| *end <= size && offset >= blob_end)?;
        ranges.push((offset, Bytes::copy_from_slice(data)));
    }
    if !r.0.is_empty() || !ranges.is_sorted_by_key(|r| r.0) {
        return None;
    }
    Some(CachedIndex {
        size,
        etag,
        blob_end,
        ranges,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> CachedIndex {
        CachedIndex {
            size: 1000,
            etag: "\"abc\"".into(),
            blob_end: 100,
            ranges: vec![
                (100, Bytes::from_static(b"index")),
                (900, Bytes::from(vec![7u8; 100])),
            ],
        }
    }

    #[test]
    fn an_entry_round_trips_and_any_damage_is_a_miss() {
        let bytes = encode(&entry());
        assert_eq!(decode(&bytes), Some(entry()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert_eq!(decode(&bad), None, "flipped byte {i}");
            assert_eq!(decode(&bytes[..i]), None, "cut at {i}");
        }
    }

    #[test]
    fn the_directory_stays_within_its_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let one = encode(&entry()).len() as u64;
        let cache = IndexCache::new(tmp.path(), 3 * one);
        for i in 0..10 {
            cache.save(&format!("s3://b/{i}"), &entry()).unwrap();
            let total: u64 = fs::read_dir(tmp.path())
                .unwrap()
                .map(|e| e.unwrap().metadata().unwrap().len())
                .sum();
            assert!(total <= 3 * one, "{total} after {i}");
            assert_eq!(cache.load(&format!("s3://b/{i}")), Some(entry()));
        }
        cache.forget("s3://b/9");
        assert_eq!(cache.load("s3://b/9"), None);
    }
}
