//! The fst trie: `relative_path -> first data row` (from format version 4;
//! before it, the first lookup row), the native fast path.
//!
//! The trie indexes the rows; it is never a second source of truth. A reader
//! that finds it missing or damaged answers the same questions by binary
//! search over the sorted lookup (see `reader.rs`).
//!
//! # Shards (from format version 5)
//!
//! Until version 4 the trie is one `fst::Map`, and a reader loads all of it
//! before its first answer: 16 bytes or so per path, so a `get` out of an
//! archive of 300,000 files read 4.9 MB of trie for one file. From version 5
//! the keys are cut into shards of [`SHARD_KEYS`] consecutive keys, each its
//! own map, and a small map over the shards says which one holds a key. A
//! question costs the fence and one shard (two or more only for a listing
//! that spans shards), whatever the number of files. The section's bytes:
//!
//! ```text
//! shard 0 .. shard k-1   fst::Map each: SHARD_KEYS keys (the last shard the rest)
//! fence                  fst::Map: the last key of shard i -> i
//! records                k x (u64 LE start of shard i in the section, BLAKE3 of its bytes)
//! trailer (56 bytes)     BLAKE3 of fence and records, u64 LE fence length,
//!                        u64 LE k, u64 LE SHARD_KEYS
//! ```
//!
//! From format version 8 each shard is stored as one zstd frame of its map
//! (level [`SHARD_LEVEL`], the frame stating its content size, at most
//! [`MAX_SHARD`] bytes): a trie of paths shares what fst cannot (numbered
//! names, repeated stems across directories), and is a quarter to two fifths
//! smaller for one shard's inflate (some 64 KiB) per question. The fence and
//! the records stay plain. A shard's hash is of its stored bytes.
//!
//! A reader checks the trailer's hash before it trusts the fence and the
//! records, and a shard's hash before it opens the shard: the manifest's
//! hash of the whole section is what `verify` checks, and a question must
//! not read the whole section to check it. A shard that fails its hash makes
//! the questions it was needed for fall back to the lookup.
//!
//! A trie whose hashes match can still be malformed: whoever wrote the archive
//! wrote the hashes too. fst checks its header but not every node, and decoding
//! a bad node can panic (the structure-aware fuzzer found one in 50 cases).
//! fst has no checked decoding, so each query runs under `catch_unwind` and a
//! panic becomes [`Error::Corrupt`]; a prefix walk stops after as many keys
//! as the trie claims to have, so a node that points back up cannot loop.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use fst::{IntoStreamer, Map, MapBuilder, Streamer};

use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::ipc::{read_at, read_vec};

/// Keys per shard from format version 5. A `get` reads the fence and the
/// records (a key and 40 bytes per shard) and one shard, about 16 bytes a
/// key on trees of small files: some 64 KiB, up to millions of paths. Shards
/// of this size are also smaller than one map of all the keys (fst's builder
/// remembers a bounded number of nodes to share, so a small map finds more
/// of them): 1.5-1.8% on the trees of docs/benchmarks.md, where shards of
/// 1,024 keys were 2-3% larger and a fifth slower to build.
pub(crate) const SHARD_KEYS: u64 = 4_096;

/// zstd level of a shard from format version 8: fixed, so the bytes depend on
/// the keys alone.
const SHARD_LEVEL: i32 = 3;
/// Most bytes a shard may inflate to (format version 8 on). The writer's
/// shards of 4,096 keys of at most 4 KiB each stay under 17 MiB.
const MAX_SHARD: u64 = 64 << 20;

/// Bytes of a sharded trie's trailer.
const TRAILER: u64 = 56;
/// Bytes of one shard record: its start and its BLAKE3.
const RECORD: u64 = 40;

fn build_map<'a>(keys: impl Iterator<Item = (&'a str, u64)>) -> Result<Vec<u8>> {
    let mut b = MapBuilder::memory();
    for (k, v) in keys {
        b.insert(k, v)
            .map_err(|e| Error::corrupt(format!("building trie: {e}")))?;
    }
    b.into_inner()
        .map_err(|e| Error::corrupt(format!("building trie: {e}")))
}

/// Builds the trie section from `(path, first_row)` pairs in byte order of
/// path: one map before version 5, shards from it, each a zstd frame from
/// version 8.
pub(crate) fn build(keys: &[(&str, u64)], version: u32) -> Result<Vec<u8>> {
    if version < 5 {
        return build_map(keys.iter().copied());
    }
    let mut out = Vec::new();
    let mut records = Vec::new();
    let mut fence = Vec::new();
    for (i, shard) in keys.chunks(SHARD_KEYS as usize).enumerate() {
        let mut bytes = build_map(shard.iter().copied())?;
        if version >= 8 {
            bytes = zstd::bulk::compress(&bytes, SHARD_LEVEL)
                .map_err(|e| Error::io("compressing a trie shard", e))?;
        }
        records.extend_from_slice(&(out.len() as u64).to_le_bytes());
        records.extend_from_slice(blake3::hash(&bytes).as_bytes());
        out.extend_from_slice(&bytes);
        if let Some((last, _)) = shard.last() {
            fence.push((*last, i as u64));
        }
    }
    let fence = build_map(fence.into_iter())?;
    let mut hash = blake3::Hasher::new();
    hash.update(&fence).update(&records);
    let shards = records.len() as u64 / RECORD;
    out.extend_from_slice(&fence);
    out.extend_from_slice(&records);
    out.extend_from_slice(hash.finalize().as_bytes());
    for n in [fence.len() as u64, shards, SHARD_KEYS] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    Ok(out)
}

/// A loaded trie. Questions take the archive's bytes, which a sharded trie
/// reads its shards from. An answer of `None` means the trie cannot answer
/// (a shard it needed failed its hash): the caller asks the lookup instead.
#[derive(Debug)]
pub(crate) enum Trie {
    /// One map, loaded whole (before version 5).
    Whole(Map<Vec<u8>>),
    /// Shards, each loaded when a question first needs it.
    Sharded(Shards),
}

/// A sharded trie's fence and records, and the shards loaded so far.
#[derive(Debug)]
pub(crate) struct Shards {
    /// Where the section starts in the archive.
    offset: u64,
    fence: Map<Vec<u8>>,
    /// Shard `i` is `[starts[i], starts[i + 1])` of the section; the last
    /// start is the fence's.
    starts: Vec<u64>,
    hashes: Vec<[u8; 32]>,
    keys: u64,
    shard_keys: u64,
    /// Whether each shard is a zstd frame (from version 8).
    packed: bool,
    /// `None` once loaded: the shard failed its checks.
    loaded: Vec<OnceLock<Option<Map<Vec<u8>>>>>,
}

impl Trie {
    /// A trie of one map, from its bytes.
    pub(crate) fn whole(bytes: Vec<u8>) -> Result<Self> {
        Map::new(bytes)
            .map(Trie::Whole)
            .map_err(|e| Error::corrupt(format!("trie: {e}")))
    }

    /// Opens the sharded trie at `[offset, offset + len)` of `src` holding
    /// `keys` keys: reads its trailer, fence and records, and checks them.
    /// No shard is read yet. `packed`: the shards are zstd frames.
    pub(crate) fn sharded(
        src: &dyn ReadAt,
        offset: u64,
        len: u64,
        keys: u64,
        packed: bool,
    ) -> Result<Self> {
        let bad = |m: &str| Error::corrupt(format!("trie: {m}"));
        if len < TRAILER {
            return Err(bad("shorter than its trailer"));
        }
        let mut trailer = [0u8; TRAILER as usize];
        read_at(src, &mut trailer, offset + len - TRAILER, "trie")?;
        let word = |i: usize| {
            let at = 32 + 8 * i;
            u64::from_le_bytes(trailer[at..at + 8].try_into().unwrap_or_default())
        };
        let (fence_len, shards, shard_keys) = (word(0), word(1), word(2));
        if shard_keys == 0 || shards != keys.div_ceil(shard_keys) {
            return Err(bad("shard count does not match its keys"));
        }
        // Bounded by `len`, which the manifest check bounded by the file.
        let head = shards
            .checked_mul(RECORD)
            .and_then(|r| r.checked_add(fence_len))
            .filter(|h| *h <= len - TRAILER)
            .ok_or_else(|| bad("fence and records overrun the section"))?;
        let fence_start = len - TRAILER - head;
        let mut bytes = read_vec(src, offset + fence_start, head, "trie")?;
        if blake3::hash(&bytes).as_bytes() != &trailer[..32] {
            return Err(Error::Checksum("trie fence".into()));
        }
        let records = bytes.split_off(fence_len as usize);
        let fence = Map::new(bytes).map_err(|e| bad(&e.to_string()))?;
        if fence.len() as u64 != shards {
            return Err(bad("the fence does not name every shard"));
        }
        let mut starts = Vec::with_capacity(shards as usize + 1);
        let mut hashes = Vec::with_capacity(shards as usize);
        for r in records.chunks_exact(RECORD as usize) {
            starts.push(u64::from_le_bytes(r[..8].try_into().unwrap_or_default()));
            hashes.push(r[8..].try_into().unwrap_or_default());
        }
        starts.push(fence_start);
        let tiled = starts.first() == Some(&0) && starts.windows(2).all(|w| w[0] < w[1]);
        if !tiled {
            return Err(bad("shards do not tile the section"));
        }
        Ok(Trie::Sharded(Shards {
            offset,
            fence,
            starts,
            hashes,
            keys,
            shard_keys,
            packed,
            loaded: (0..shards).map(|_| OnceLock::new()).collect(),
        }))
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Trie::Whole(m) => m.len() as u64,
            Trie::Sharded(s) => s.keys,
        }
    }

    /// The value of `path`, if it is a key.
    pub(crate) fn get(&self, src: &dyn ReadAt, path: &str) -> Result<Option<Option<u64>>> {
        self.in_map_of(src, path, |m| m.get(path))
    }

    /// The first key not less than `key`, and its value.
    pub(crate) fn first_from(
        &self,
        src: &dyn ReadAt,
        key: &str,
    ) -> Result<Option<Option<(String, u64)>>> {
        self.in_map_of(src, key, |m| {
            let mut stream = m.range().ge(key).into_stream();
            stream
                .next()
                .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v))
        })
    }

    /// `ask` of the map that would hold `key`: the whole trie, or its shard.
    /// A key past the last shard's is in none, which answers `None`.
    fn in_map_of<T>(
        &self,
        src: &dyn ReadAt,
        key: &str,
        ask: impl FnOnce(&Map<Vec<u8>>) -> Option<T>,
    ) -> Result<Option<Option<T>>> {
        let map = match self {
            Trie::Whole(m) => m,
            Trie::Sharded(s) => match s.holding(src, key)? {
                Holding::Shard(m) => m,
                Holding::PastTheEnd => return Ok(Some(None)),
                Holding::Damaged => return Ok(None),
            },
        };
        guarded(|| ask(map)).map(Some)
    }

    /// Every `(path, first_row)` whose path starts with `prefix`, in order.
    pub(crate) fn prefix(
        &self,
        src: &dyn ReadAt,
        prefix: &str,
    ) -> Result<Option<Vec<(String, u64)>>> {
        let mut out = Vec::new();
        match self {
            Trie::Whole(m) => {
                collect(m, prefix, &mut out, self.len())?;
            }
            Trie::Sharded(s) => {
                for i in s.from(prefix)? {
                    let Some(m) = s.shard(src, i)? else {
                        return Ok(None);
                    };
                    if !collect(m, prefix, &mut out, self.len())? {
                        break;
                    }
                }
            }
        }
        Ok(Some(out))
    }
}

/// Appends `m`'s keys from `prefix` on that start with it to `out`; returns
/// whether the run of matching keys may go on past `m`'s last key.
fn collect(
    m: &Map<Vec<u8>>,
    prefix: &str,
    out: &mut Vec<(String, u64)>,
    keys: u64,
) -> Result<bool> {
    guarded(|| {
        let mut stream = m.range().ge(prefix).into_stream();
        while let Some((k, v)) = stream.next() {
            if !k.starts_with(prefix.as_bytes()) {
                return Ok(false);
            }
            if out.len() as u64 == keys {
                return Err(Error::corrupt("the trie holds more keys than it says"));
            }
            out.push((String::from_utf8_lossy(k).into_owned(), v));
        }
        Ok(true)
    })?
}

/// Which shard a key would be in.
enum Holding<'a> {
    Shard(&'a Map<Vec<u8>>),
    /// The key sorts after every key of the trie.
    PastTheEnd,
    /// The shard failed its checks.
    Damaged,
}

impl Shards {
    /// The shards from the one that would hold `key` on, in order.
    fn from(&self, key: &str) -> Result<Vec<usize>> {
        guarded(|| {
            let mut stream = self.fence.range().ge(key).into_stream();
            let mut out = Vec::new();
            while let Some((_, i)) = stream.next() {
                out.push(i as usize);
                if out.len() == self.loaded.len() {
                    break;
                }
            }
            out
        })
    }

    /// The shard that would hold `key`: the one the first fence key not
    /// less than it names.
    fn holding(&self, src: &dyn ReadAt, key: &str) -> Result<Holding<'_>> {
        let first = guarded(|| {
            let mut stream = self.fence.range().ge(key).into_stream();
            stream.next().map(|(_, i)| i as usize)
        })?;
        Ok(match first {
            None => Holding::PastTheEnd,
            Some(i) => match self.shard(src, i)? {
                Some(m) => Holding::Shard(m),
                None => Holding::Damaged,
            },
        })
    }

    /// Shard `i`, read and checked on first use; `None` if it fails its checks.
    fn shard(&self, src: &dyn ReadAt, i: usize) -> Result<Option<&Map<Vec<u8>>>> {
        let slot = self
            .loaded
            .get(i)
            .ok_or_else(|| Error::corrupt("the trie's fence names a shard it does not have"))?;
        if let Some(m) = slot.get() {
            return Ok(m.as_ref());
        }
        let (start, end) = (self.starts[i], self.starts[i + 1]);
        let bytes = read_vec(src, self.offset + start, end - start, "trie")?;
        // Every shard holds shard_keys keys but the last, which holds the rest.
        let expected = (self.keys - self.shard_keys * i as u64).min(self.shard_keys);
        let map = (blake3::hash(&bytes).as_bytes() == &self.hashes[i])
            .then(|| match self.packed {
                true => inflate(&bytes),
                false => Some(bytes),
            })
            .flatten()
            .and_then(|b| Map::new(b).ok())
            .filter(|m| m.len() as u64 == expected);
        Ok(slot.get_or_init(|| map).as_ref())
    }
}

/// A packed shard's map: its frame must state a content size of at most
/// [`MAX_SHARD`], which sizes the buffer, and inflate to exactly that.
fn inflate(frame: &[u8]) -> Option<Vec<u8>> {
    let size = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .filter(|n| *n <= MAX_SHARD)?;
    let map = zstd::bulk::decompress(frame, size as usize).ok()?;
    (map.len() as u64 == size).then_some(map)
}

/// Runs a query on the trie's bytes; a panic in fst is a malformed trie.
fn guarded<T>(query: impl FnOnce() -> T) -> Result<T> {
    // The map is only read: a panic leaves nothing half-changed behind.
    catch_unwind(AssertUnwindSafe(query)).map_err(|_| Error::corrupt("the trie is malformed"))
}
