//! The live files of an archive, path to rows, with what is derived from
//! them kept beside, in one place: their total size (what `inspect` reports,
//! without a walk of every file) and the paths not in Unicode NFC (what the
//! twin check compares a batch against).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use znippy_format::{nfc, Entry, SliceRow};

/// A live file: its rows (in file order) and the append that wrote them.
#[derive(Debug, Clone)]
pub struct LiveFile {
    /// The append that last wrote this path.
    pub append_seq: u64,
    /// Its slices, in file order.
    pub rows: Vec<SliceRow>,
}

impl LiveFile {
    fn size(&self) -> u64 {
        // Sizes come from the tables: a damaged row must not overflow them.
        self.rows
            .iter()
            .fold(0, |n, r| n.saturating_add(r.uncompressed_size))
    }

    pub(crate) fn entry(&self, path: &str) -> Entry {
        Entry {
            path: path.to_string(),
            size: self.size(),
            mode: self.rows.first().and_then(|r| r.mode),
            slices: self.rows.len() as u64,
        }
    }
}

/// Live files by path. Reads go through the map ([`Deref`]); changes only
/// through [`LiveFiles::insert`] and [`LiveFiles::remove`], which keep the
/// derived parts right.
#[derive(Debug, Default)]
pub(crate) struct LiveFiles {
    files: BTreeMap<String, LiveFile>,
    bytes: u64,
    unnormalized: BTreeSet<String>,
}

impl LiveFiles {
    pub fn new(files: BTreeMap<String, LiveFile>) -> Self {
        let mut live = LiveFiles::default();
        for (path, file) in files {
            live.insert(path, file);
        }
        live
    }

    /// Sets `path`'s file, returning the one it replaced.
    pub fn insert(&mut self, path: String, file: LiveFile) -> Option<LiveFile> {
        self.bytes = self.bytes.saturating_add(file.size());
        if matches!(nfc(&path), Cow::Owned(_)) {
            self.unnormalized.insert(path.clone());
        }
        let old = self.files.insert(path, file);
        if let Some(old) = &old {
            self.bytes = self.bytes.saturating_sub(old.size());
        }
        old
    }

    pub fn remove(&mut self, path: &str) -> Option<LiveFile> {
        let old = self.files.remove(path)?;
        self.bytes = self.bytes.saturating_sub(old.size());
        self.unnormalized.remove(path);
        Some(old)
    }

    /// The live files' total size.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The live paths not in Unicode normalization form C.
    pub fn unnormalized(&self) -> &BTreeSet<String> {
        &self.unnormalized
    }
}

impl Deref for LiveFiles {
    type Target = BTreeMap<String, LiveFile>;

    fn deref(&self) -> &Self::Target {
        &self.files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(sizes: &[u64]) -> LiveFile {
        let rows = sizes
            .iter()
            .map(|&uncompressed_size| SliceRow {
                relative_path: String::new(),
                chunk_seq: 0,
                fdata_offset: 0,
                uncompressed_size,
                blob_offset: 0,
                blob_size: 0,
                blob_inner_offset: 0,
                compressed: false,
                checksum: [0; 32],
                mode: None,
            })
            .collect();
        LiveFile {
            append_seq: 1,
            rows,
        }
    }

    /// After any inserts, replacements and removals, the derived parts are
    /// what walking the map gives (the oracle).
    #[test]
    fn derived_parts_follow_every_change() {
        let mut live = LiveFiles::new(BTreeMap::from([
            ("a".to_string(), file(&[3, 4])),
            ("cafe\u{301}".to_string(), file(&[10])),
        ]));
        let check = |live: &LiveFiles| {
            let bytes: u64 = live.values().map(LiveFile::size).sum();
            assert_eq!(live.bytes(), bytes);
            let odd: BTreeSet<String> = live
                .keys()
                .filter(|p| matches!(nfc(p), Cow::Owned(_)))
                .cloned()
                .collect();
            assert_eq!(live.unnormalized(), &odd);
        };
        check(&live);
        assert!(live.insert("a".into(), file(&[1])).is_some());
        check(&live);
        live.insert("b\u{308}".into(), file(&[5, 5, 5]));
        check(&live);
        assert!(live.remove("cafe\u{301}").is_some());
        assert!(live.remove("nothing").is_none());
        check(&live);
        assert_eq!(live.bytes(), 16);
    }
}
