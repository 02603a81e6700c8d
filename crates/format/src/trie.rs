//! The fst trie: `relative_path -> first data row` (from format version 4;
//! before it, the first lookup row), the native fast path.
//!
//! The trie indexes the rows; it is never a second source of truth. A reader
//! that finds it missing or damaged answers the same questions by binary
//! search over the sorted lookup (see `reader.rs`).
//!
//! A trie whose hash matches can still be malformed: whoever wrote the archive
//! wrote the hash too. fst checks its header but not every node, and decoding
//! a bad node can panic (the structure-aware fuzzer found one in 50 cases).
//! fst has no checked decoding, so each query runs under `catch_unwind` and a
//! panic becomes [`Error::Corrupt`]; a prefix walk stops after as many keys
//! as the trie claims to have, so a node that points back up cannot loop.

use std::panic::{catch_unwind, AssertUnwindSafe};

use fst::{IntoStreamer, Map, MapBuilder, Streamer};

use crate::error::{Error, Result};

/// Builds the trie bytes from `(path, first_row)` pairs in byte order of path.
pub(crate) fn build<'a>(keys: impl Iterator<Item = (&'a str, u64)>) -> Result<Vec<u8>> {
    let mut b = MapBuilder::memory();
    for (k, v) in keys {
        b.insert(k, v)
            .map_err(|e| Error::corrupt(format!("building trie: {e}")))?;
    }
    b.into_inner()
        .map_err(|e| Error::corrupt(format!("building trie: {e}")))
}

/// A loaded trie.
#[derive(Debug)]
pub(crate) struct Trie(Map<Vec<u8>>);

impl Trie {
    pub(crate) fn new(bytes: Vec<u8>) -> Result<Self> {
        Map::new(bytes)
            .map(Trie)
            .map_err(|e| Error::corrupt(format!("trie: {e}")))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn get(&self, path: &str) -> Result<Option<u64>> {
        guarded(|| self.0.get(path))
    }

    /// The first key not less than `key`, and its value.
    pub(crate) fn first_from(&self, key: &str) -> Result<Option<(String, u64)>> {
        guarded(|| {
            let mut stream = self.0.range().ge(key).into_stream();
            stream
                .next()
                .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v))
        })
    }

    /// Every `(path, first_row)` whose path starts with `prefix`, in order.
    pub(crate) fn prefix(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        guarded(|| {
            let mut out = Vec::new();
            let mut stream = self.0.range().ge(prefix).into_stream();
            while let Some((k, v)) = stream.next() {
                if !k.starts_with(prefix.as_bytes()) {
                    break;
                }
                if out.len() == self.0.len() {
                    return Err(Error::corrupt("the trie holds more keys than it says"));
                }
                out.push((String::from_utf8_lossy(k).into_owned(), v));
            }
            Ok(out)
        })?
    }
}

/// Runs a query on the trie's bytes; a panic in fst is a malformed trie.
fn guarded<T>(query: impl FnOnce() -> T) -> Result<T> {
    // The map is only read: a panic leaves nothing half-changed behind.
    catch_unwind(AssertUnwindSafe(query)).map_err(|_| Error::corrupt("the trie is malformed"))
}
