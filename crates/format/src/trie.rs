//! The fst trie: `relative_path -> first lookup row`, the native fast path.
//!
//! The trie indexes the sorted lookup; it is never a second source of truth. A
//! reader that finds it missing or damaged answers the same questions by binary
//! search over the lookup (see `reader.rs`).

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

    pub(crate) fn get(&self, path: &str) -> Option<u64> {
        self.0.get(path)
    }

    /// Every `(path, first_row)` whose path starts with `prefix`, in order.
    pub(crate) fn prefix(&self, prefix: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut stream = self.0.range().ge(prefix).into_stream();
        while let Some((k, v)) = stream.next() {
            if !k.starts_with(prefix.as_bytes()) {
                break;
            }
            out.push((String::from_utf8_lossy(k).into_owned(), v));
        }
        out
    }
}
