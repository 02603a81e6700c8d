//! The reader: opens an archive with one 16-byte read at EOF and one read of the
//! manifest, then answers questions by reading only what each one needs.
//!
//! | question            | reads                                             |
//! |---------------------|---------------------------------------------------|
//! | open                | footer, manifest, data sub-index footer           |
//! | `list` (names)      | + the trie's end, the prefix's shards             |
//! | `get` one file      | + the trie's end and one shard, one data batch,   |
//! |                     |   that file's blobs                               |
//! | `list` with sizes   | + the data batches of the prefix's files          |
//! | `metadata`          | + the meta section                                |
//! | `verify`            | everything                                        |
//!
//! That is format version 7. Versions 4 to 6 had a lookup, the slices sorted
//! by path, which a listing with sizes read and a damaged trie fell back on;
//! from version 7 such a fallback sorts the data rows it scans. Version 4
//! read its trie whole. Before it the lookup repeated every column of the
//! data sub-index and the trie named lookup rows, so open read the lookup's
//! footer and a `get` one lookup batch instead of a data batch.
//!
//! Nothing read from the archive is trusted: offsets and lengths are checked
//! against the file and the archive properties before any buffer is sized by
//! them, and every byte returned to a caller has passed its blake3 check.

use std::collections::HashMap;
use std::io::Write;
use std::sync::OnceLock;

use arrow_array::RecordBatch;

use crate::blobs::{BlobRegion, BlobScratch, WholeBlob};
use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::ipc::{read_at, read_vec, Batches, Decoded, IpcSection};
use crate::kind::Kind;
use crate::manifest::{self, SectionEntry};
use crate::meta::{MetaTable, Metadata};
use crate::package::{self, PackageTable, Packages};
use crate::props::ArchiveProps;
use crate::row::{check_file_rows, in_path_order, KeyBatch, RowBatch, SliceRow};
use crate::schema::{
    base_schema, check_version, lookup_schema, meta_schema, BATCH_TRIE, DEFAULT_MODULE,
    DEFAULT_PKG_TYPE, DEFAULT_REPO, LOOKUP, META, RESERVED_PKG_TYPE, TRIE,
};
use crate::signature::{self, Signed, MAX_SIGNATURE_LEN};
use crate::tail::{check_order, write_tail_as, Tail, ALIGN, FOOTER_LEN};
use crate::trie::Trie;

/// One file of an archive, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The archive path.
    pub path: String,
    /// Size in bytes (a link: its target's length).
    pub size: u64,
    /// Unix permission bits, when recorded, and the type bits of a link or a
    /// directory.
    pub mode: Option<u32>,
    /// Number of slices (rows).
    pub slices: u64,
}

impl Entry {
    /// What the entry is.
    pub fn kind(&self) -> Result<Kind> {
        Kind::of(self.mode)
    }
}

/// How path lookups are being answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrieState {
    /// Through the fst trie.
    Used,
    /// By binary search of the data rows, which are in path order (from
    /// version 8, an archive written in one batch), in the one data batch
    /// the batch trie names: the archive needs no trie.
    Batches,
    /// By binary search of the slices in path order (the lookup before
    /// version 7, from then the data rows sorted once): the archive has no
    /// trie.
    Missing,
    /// As `Missing`: the trie (or the batch trie) failed its checksum or did
    /// not load.
    Damaged,
}

/// Which rows a question needs the trie's values to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrieRows {
    /// Lookup rows (what the trie names before version 4).
    Lookup,
    /// Data rows (from version 4).
    Data,
    /// Either: the question checks the row it is given against the slices
    /// in path order.
    Either,
}

/// An opened `.znippy` archive over any [`ReadAt`] source.
pub struct Archive<R> {
    src: R,
    len: u64,
    version: u32,
    props: ArchiveProps,
    blob_end: u64,
    manifest_offset: u64,
    sections: Vec<SectionEntry>,
    /// The signed part's manifest metadata, which a signature repeats.
    md: HashMap<String, String>,
    signed: Signed,
    sorted: Sorted,
    rows: u64,
    /// From version 4, the one data sub-index, which a `get` reads a batch of.
    data: Option<Batches<RowBatch>>,
    trie: OnceLock<(TrieState, Option<Trie>)>,
}

/// The slices in path order, which a question falls back on when the trie
/// cannot answer it.
#[derive(Debug)]
enum Sorted {
    /// Versions 1 to 6: the lookup section.
    Lookup(Batches<LookupBatch>),
    /// From version 7, which has no lookup: the data rows' numbers in path
    /// order, from a scan of the data sub-index the first time one is needed.
    Scanned(OnceLock<Vec<u64>>),
    /// From version 8, with a batch trie: the data rows are in path order
    /// themselves.
    InOrder,
}

/// A decoded batch of the lookup: whole rows before version 4, then keys.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "`Batches` keeps each decoded batch in a box of its own"
)]
enum LookupBatch {
    Rows(RowBatch),
    Keys(KeyBatch),
}

impl LookupBatch {
    fn decode(version: u32, batch: &RecordBatch) -> Result<Self> {
        if version >= 4 {
            KeyBatch::new(batch).map(LookupBatch::Keys)
        } else {
            RowBatch::new(batch).map(LookupBatch::Rows)
        }
    }

    fn keys(&self) -> &KeyBatch {
        match self {
            LookupBatch::Rows(b) => b.keys(),
            LookupBatch::Keys(b) => b,
        }
    }
}

impl<R> std::fmt::Debug for Archive<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("len", &self.len)
            .field("props", &self.props)
            .field("blob_end", &self.blob_end)
            .field("sections", &self.sections)
            .finish_non_exhaustive()
    }
}

impl<R: ReadAt> Archive<R> {
    /// Opens an archive: reads the footer, the manifest and the footer of the
    /// section a `get` reads a batch of.
    pub fn open(src: R) -> Result<Self> {
        let len = src
            .size()
            .map_err(|e| Error::io("reading archive size", e))?;
        if len < FOOTER_LEN {
            return Err(Error::NotAnArchive(format!(
                "{len} bytes is shorter than the footer"
            )));
        }
        let outer = manifest::read(&src, len)?;
        let (inner, signed) = signature::split(&src, outer, len)?;
        let manifest::Read {
            sections,
            md,
            offset: manifest_offset,
        } = inner;
        let version = check_version(&md, "manifest")?;
        let props = ArchiveProps::from_metadata(&md, version)?;
        let blob_end: u64 = md
            .get(manifest::KEY_BLOB_END)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::corrupt("manifest lacks a valid znippy.blob_end"))?;
        if blob_end > manifest_offset {
            return Err(Error::corrupt("blob_end lies past the manifest"));
        }
        check_sections(&sections, blob_end, manifest_offset)?;

        let one = |name: &str| -> Result<Option<&SectionEntry>> {
            let mut it = sections
                .iter()
                .filter(|s| s.is_reserved() && s.module_name == name);
            let first = it.next();
            if it.next().is_some() {
                return Err(Error::corrupt(format!("two {name} sections")));
            }
            Ok(first)
        };
        let lookup_entry = one(LOOKUP)?;
        let trie_entry = one(TRIE)?;
        let batch_trie = one(BATCH_TRIE)?;
        one(META)?;
        if batch_trie.is_some() && (version < 8 || trie_entry.is_some()) {
            return Err(Error::corrupt(
                "a batch trie beside a trie, or before format version 8",
            ));
        }
        check_packages(&sections, version)?;
        let data_rows: u64 = sections
            .iter()
            .filter(|s| s.is_data(version))
            .try_fold(0u64, |acc, s| acc.checked_add(s.row_count))
            .ok_or_else(|| Error::corrupt("row counts overflow"))?;
        let sorted = match (lookup_entry, version >= 7) {
            (None, true) => match batch_trie {
                Some(_) => Sorted::InOrder,
                None => Sorted::Scanned(OnceLock::new()),
            },
            (Some(_), true) => {
                return Err(Error::corrupt(
                    "a lookup section in format version 7, which has none",
                ))
            }
            (None, false) => return Err(Error::corrupt("no lookup section")),
            (Some(l), false) => {
                if data_rows != l.row_count {
                    return Err(Error::corrupt(format!(
                        "lookup has {} rows but the data sections have {data_rows}",
                        l.row_count
                    )));
                }
                let schema = match version >= 4 {
                    true => lookup_schema(),
                    false => base_schema(),
                };
                let lookup =
                    Batches::new("lookup", l.index_offset, l.index_len, l.row_count, schema);
                if version < 4 {
                    lookup.open(&src)?;
                }
                Sorted::Lookup(lookup)
            }
        };
        let data = if version >= 4 {
            let mut all = sections.iter().filter(|s| s.is_data(version));
            let (Some(d), None) = (all.next(), all.next()) else {
                return Err(Error::corrupt(
                    "from format version 4 an archive has exactly one data sub-index",
                ));
            };
            let data = Batches::new(
                "data",
                d.index_offset,
                d.index_len,
                d.row_count,
                base_schema(),
            );
            data.open(&src)?;
            Some(data)
        } else {
            None
        };
        Ok(Archive {
            src,
            len,
            version,
            props,
            blob_end,
            manifest_offset,
            rows: data_rows,
            sections,
            md,
            signed,
            sorted,
            data,
            trie: OnceLock::new(),
        })
    }

    /// The byte source.
    pub fn source(&self) -> &R {
        &self.src
    }

    /// The format version the archive was written in (docs/format.md, section 4).
    pub fn format_version(&self) -> u32 {
        self.version
    }

    /// The archive properties.
    pub fn props(&self) -> ArchiveProps {
        self.props
    }

    /// End of the blob region.
    pub fn blob_end(&self) -> u64 {
        self.blob_end
    }

    /// The archive's identity: blake3 of its tail, bytes `[blob_end, len)`,
    /// or, once it is signed, of the tail the signatures sign (they follow
    /// it, see [`Archive::signed_len`]).
    ///
    /// The tail names every slice's blake3 (data index) and every section's
    /// (manifest), so two archives with the same identity hold the same files
    /// with the same contents and the same metadata. Reading it costs the
    /// index, never the payload: it is what a seal reports and a signature
    /// signs.
    pub fn identity(&self) -> Result<[u8; 32]> {
        self.hash_of(
            self.blob_end,
            self.signed.end - self.blob_end,
            "archive tail",
        )
    }

    /// Where the part of the archive its signatures sign ends: its length
    /// when it has none.
    pub fn signed_len(&self) -> u64 {
        self.signed.end
    }

    /// The manifest rows of the signature sections, in the order they were
    /// added.
    pub fn signature_sections(&self) -> &[SectionEntry] {
        &self.signed.sections
    }

    /// The signatures, each the bytes of one signature section (a DER CMS
    /// SignedData over [`crate::signed_content`] of the identity), each
    /// checked against its BLAKE3.
    pub fn signatures(&self) -> Result<Vec<Vec<u8>>> {
        self.signed
            .sections
            .iter()
            .map(|s| {
                if s.index_len > MAX_SIGNATURE_LEN {
                    return Err(Error::corrupt(format!(
                        "a signature section of {} bytes, more than the {MAX_SIGNATURE_LEN} \
                         a signature may be",
                        s.index_len
                    )));
                }
                let bytes = read_vec(&self.src, s.index_offset, s.index_len, "signature")?;
                expect_hash(s, blake3::hash(&bytes).as_bytes())?;
                Ok(bytes)
            })
            .collect()
    }

    /// What follows the signed part once `sigs` are its signatures: the
    /// signature sections and the manifest after them.
    pub(crate) fn signature_suffix(&self, sigs: &[Vec<u8>]) -> Result<Vec<u8>> {
        let signed = manifest::Read {
            sections: self.sections.clone(),
            md: self.md.clone(),
            offset: self.manifest_offset,
        };
        let mut out = Vec::new();
        signature::write_signatures(&mut out, &signed, self.signed.end, self.version, sigs)?;
        Ok(out)
    }

    /// BLAKE3 of `len` bytes of the archive from `offset`, read a MiB at a time.
    fn hash_of(&self, offset: u64, len: u64, what: &str) -> Result<[u8; 32]> {
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        let mut off = 0;
        while off < len {
            let n = (len - off).min(buf.len() as u64) as usize;
            read_at(&self.src, &mut buf[..n], offset + off, what)?;
            hasher.update(&buf[..n]);
            off += n as u64;
        }
        Ok(*hasher.finalize().as_bytes())
    }

    /// Checks section `s` against its BLAKE3 in the manifest.
    fn check_hash(&self, s: &SectionEntry) -> Result<()> {
        expect_hash(
            s,
            &self.hash_of(s.index_offset, s.index_len, &s.module_name)?,
        )
    }

    /// Total length of the archive.
    pub fn archive_len(&self) -> u64 {
        self.len
    }

    /// Offset of the manifest.
    pub fn manifest_offset(&self) -> u64 {
        self.manifest_offset
    }

    /// The manifest's rows.
    pub fn sections(&self) -> &[SectionEntry] {
        &self.sections
    }

    /// Number of slice rows.
    pub fn row_count(&self) -> u64 {
        self.rows
    }

    fn reserved(&self, name: &str) -> Option<&SectionEntry> {
        self.sections
            .iter()
            .find(|s| s.is_reserved() && s.module_name == name)
    }

    /// How path lookups are answered (loads the trie on first use).
    pub fn trie_state(&self) -> TrieState {
        self.trie().0
    }

    /// The trie, or the batch trie of an archive whose data rows are in
    /// path order.
    fn trie(&self) -> &(TrieState, Option<Trie>) {
        self.trie.get_or_init(|| {
            let (name, used) = match self.sorted {
                Sorted::InOrder => (BATCH_TRIE, TrieState::Batches),
                _ => (TRIE, TrieState::Used),
            };
            let Some(s) = self.reserved(name) else {
                return (TrieState::Missing, None);
            };
            let loaded = if self.version >= 5 {
                // Only the trailer, the fence and the records: each shard is
                // read, and checked against its own hash, when first needed.
                let packed = self.version >= 8;
                Trie::sharded(&self.src, s.index_offset, s.index_len, s.row_count, packed)
            } else {
                self.section_bytes(s).and_then(|bytes| {
                    expect_hash(s, blake3::hash(&bytes).as_bytes())?;
                    Trie::whole(bytes)
                })
            };
            let counted = loaded.and_then(|t| {
                if t.len() != s.row_count || s.row_count > self.rows {
                    return Err(Error::corrupt("trie key count"));
                }
                Ok(t)
            });
            match counted {
                Ok(t) => (used, Some(t)),
                Err(_) => (TrieState::Damaged, None),
            }
        })
    }

    /// The trie's answer to `ask`, or `None` when it has none to give: there
    /// is no usable trie (a batch trie names no path's row), or it names
    /// other rows than `rows` (lookup rows before version 4, data rows from
    /// then), or a shard the question needs is damaged. The caller then asks
    /// the slices in path order.
    fn by_trie<T>(
        &self,
        rows: TrieRows,
        ask: impl FnOnce(&Trie, &dyn ReadAt) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        if let Sorted::InOrder = self.sorted {
            return Ok(None);
        }
        let names = match self.version >= 4 {
            true => TrieRows::Data,
            false => TrieRows::Lookup,
        };
        match &self.trie().1 {
            Some(t) if rows == TrieRows::Either || rows == names => ask(t, &self.src),
            _ => Ok(None),
        }
    }

    fn section_bytes(&self, s: &SectionEntry) -> Result<Vec<u8>> {
        read_vec(&self.src, s.index_offset, s.index_len, &s.module_name)
    }

    /// The `row`th slice in path order: its lookup row before version 7,
    /// from then a data row (with a batch trie, row `row` itself).
    fn sorted_at(&self, row: u64) -> Result<(&KeyBatch, usize)> {
        match &self.sorted {
            Sorted::Lookup(lookup) => {
                let version = self.version;
                let (b, i) = lookup.row(&self.src, row, |b| LookupBatch::decode(version, b))?;
                Ok((b.keys(), i))
            }
            Sorted::Scanned(order) => {
                let (b, i) = self.data_at(self.scanned(order, row)?)?;
                Ok((b.keys(), i))
            }
            Sorted::InOrder => {
                let (b, i) = self.data_at(row)?;
                Ok((b.keys(), i))
            }
        }
    }

    /// From version 7: the data row of the `row`th slice in path order. The
    /// first call decodes the whole data sub-index and sorts its rows; the
    /// order is kept, the batches are kept by `data` as a `get` keeps them.
    fn scanned(&self, order: &OnceLock<Vec<u64>>, row: u64) -> Result<u64> {
        let order = match order.get() {
            Some(o) => o,
            None => {
                let mut keys = Vec::new();
                for seq in 0..self.rows {
                    let (b, i) = self.data_at(seq)?;
                    keys.push((b.keys().path(i), b.keys().key(i).fdata_offset, seq));
                }
                keys.sort_unstable();
                let sorted = keys.into_iter().map(|(_, _, seq)| seq).collect();
                order.get_or_init(|| sorted)
            }
        };
        order
            .get(row as usize)
            .copied()
            .ok_or_else(|| Error::corrupt(format!("the data sub-index has no row {row}")))
    }

    fn sorted_path(&self, row: u64) -> Result<&str> {
        let (b, i) = self.sorted_at(row)?;
        Ok(b.path(i))
    }

    /// The `row`th slice in path order made whole: a lookup row before
    /// version 4 is, from then its data row holds the rest, and must agree
    /// with the lookup's.
    fn sorted_row(&self, row: u64) -> Result<SliceRow> {
        let lookup = match &self.sorted {
            Sorted::Lookup(lookup) => lookup,
            Sorted::Scanned(order) => {
                let (b, i) = self.data_at(self.scanned(order, row)?)?;
                return Ok(b.row(i));
            }
            Sorted::InOrder => {
                let (b, i) = self.data_at(row)?;
                return Ok(b.row(i));
            }
        };
        let version = self.version;
        match lookup.row(&self.src, row, |b| LookupBatch::decode(version, b))? {
            (LookupBatch::Rows(b), i) => Ok(b.row(i)),
            (LookupBatch::Keys(b), i) => {
                let (path, key) = (b.path(i), b.key(i));
                let (data, at) = self.data_at(key.chunk_seq)?;
                let whole = data.row(at);
                let agree = whole.relative_path == path
                    && whole.fdata_offset == key.fdata_offset
                    && whole.uncompressed_size == key.uncompressed_size
                    && whole.mode == key.mode;
                if !agree {
                    return Err(Error::corrupt(format!(
                        "the lookup and the data sub-index disagree on {path}"
                    )));
                }
                Ok(whole)
            }
        }
    }

    /// From version 4: the batch holding data row `seq`, and the row's index
    /// in it. Its chunk_seq must be `seq`.
    fn data_at(&self, seq: u64) -> Result<(&RowBatch, usize)> {
        let data = self
            .data
            .as_ref()
            .ok_or_else(|| Error::corrupt("no data sub-index"))?;
        let (b, i) = data.row(&self.src, seq, RowBatch::new)?;
        let found = b.keys().key(i).chunk_seq;
        if found != seq {
            return Err(Error::corrupt(format!(
                "data row {seq} has chunk_seq {found}"
            )));
        }
        Ok((b, i))
    }

    /// First slice in path order whose path is not less than `key` (binary
    /// search; a lookup row before version 7). With a batch trie, among the
    /// rows of the one batch it names.
    fn partition(&self, key: &str) -> Result<u64> {
        let batch = self.batch_of(key)?;
        let (start, end) = batch.unwrap_or((0, self.rows));
        let (mut lo, mut hi) = (start, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.sorted_path(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        // The first row of the batch searched has a path less than `key`,
        // and the row after it one not less: otherwise the batch trie and
        // the rows disagree, and the answer would be wrong, not missing.
        let disagree = batch.is_some()
            && ((lo == start && start > 0 && start < end)
                || (lo == end && end < self.rows && self.sorted_path(end)? < key));
        if disagree {
            return Err(Error::corrupt(format!(
                "the batch trie and the data sub-index disagree on {key}"
            )));
        }
        Ok(lo)
    }

    /// From version 8, with a batch trie: the rows among which `key`'s first
    /// row lies, or would. The trie's first key not less than `key` starts
    /// a batch; the batch before it starts with a path less than `key` (it
    /// would be that key otherwise), so the row is in it or is the key's own.
    /// Past the last key, it is in the last batch. `None` when there is no
    /// batch trie to ask, or the shard it needs is damaged.
    fn batch_of(&self, key: &str) -> Result<Option<(u64, u64)>> {
        let (Sorted::InOrder, Some(t)) = (&self.sorted, &self.trie().1) else {
            return Ok(None);
        };
        let batch_rows = match &self.data {
            Some(d) => d.open(&self.src)?.0.batch_rows(),
            None => return Ok(None),
        };
        let end = match t.first_from(&self.src, key)? {
            None => return Ok(None),
            Some(Some((_, row))) => row,
            Some(None) => self.rows,
        };
        if end > self.rows {
            return Err(Error::corrupt(format!(
                "the batch trie names row {end} of {}",
                self.rows
            )));
        }
        let start = match end == self.rows {
            true => self.rows.saturating_sub(1) / batch_rows * batch_rows,
            false => end.saturating_sub(batch_rows),
        };
        Ok(Some((start, end)))
    }

    /// First slice in path order whose path is not less than `prefix`.
    /// Before version 4 the trie names a path's first lookup row; from then
    /// its first data row, which in an archive written in one batch (every
    /// `compress`) is the same number. Either way the row is only taken when
    /// the order agrees that it is that path's first; otherwise a binary
    /// search finds it.
    fn sorted_start(&self, prefix: &str) -> Result<u64> {
        if let Some(Some((path, r))) =
            self.by_trie(TrieRows::Either, |t, src| t.first_from(src, prefix))?
        {
            let first = r < self.rows
                && self.sorted_path(r)? == path
                && (r == 0 || self.sorted_path(r - 1)? < path.as_str());
            if first {
                return Ok(r);
            }
        }
        self.partition(prefix)
    }

    /// `path`'s first slice in path order, through a trie that names lookup
    /// rows (before version 4) or by binary search.
    fn first_row(&self, path: &str) -> Result<Option<u64>> {
        let by_trie = self.by_trie(TrieRows::Lookup, |t, src| t.get(src, path))?;
        let row = match by_trie {
            Some(Some(r)) => r,
            Some(None) => return Ok(None),
            None => self.partition(path)?,
        };
        if row >= self.rows {
            return match by_trie {
                Some(_) => Err(Error::corrupt("trie points past the lookup")),
                None => Ok(None),
            };
        }
        if self.sorted_path(row)? != path {
            return match by_trie {
                Some(_) => Err(Error::corrupt(format!(
                    "trie and lookup disagree on {path}"
                ))),
                None => Ok(None),
            };
        }
        Ok(Some(row))
    }

    /// From version 4: `path`'s rows, consecutive in the data sub-index from
    /// row `seq`, where the trie says the first is.
    fn data_run(&self, path: &str, seq: u64) -> Result<Vec<SliceRow>> {
        let mut rows = Vec::new();
        self.walk_data(path, seq, |b, i| rows.push(b.row(i)))?;
        Ok(rows)
    }

    /// From version 7: `path`'s entry, from its rows as [`Archive::data_run`]
    /// finds them, without copying them.
    fn data_entry(&self, path: String, seq: u64) -> Result<Entry> {
        let (mut size, mut mode, mut slices) = (0u64, None, 0);
        self.walk_data(&path, seq, |b, i| {
            let key = b.keys().key(i);
            size = size.saturating_add(key.uncompressed_size);
            mode = key.mode;
            slices += 1;
        })?;
        Ok(Entry {
            path,
            size,
            mode,
            slices,
        })
    }

    /// Hands `each` the rows of `path` from data row `seq` on, while they are
    /// its. None is an error (the trie named another file's row), and so is
    /// a run followed by the middle of another file.
    fn walk_data(
        &self,
        path: &str,
        seq: u64,
        mut each: impl FnMut(&RowBatch, usize),
    ) -> Result<()> {
        let mut s = seq;
        while s < self.rows {
            let (b, i) = self.data_at(s)?;
            if b.keys().path(i) != path {
                if s > seq && b.keys().key(i).fdata_offset != 0 {
                    return Err(cut_short(path));
                }
                break;
            }
            each(b, i);
            s += 1;
        }
        if s == seq {
            return Err(trie_disagrees(path));
        }
        Ok(())
    }

    /// The slice rows of `path`, in file order, or [`Error::NotFound`].
    pub fn slices(&self, path: &str) -> Result<Vec<SliceRow>> {
        let not_found = || Error::NotFound(path.to_string());
        let rows = match self.by_trie(TrieRows::Data, |t, src| t.get(src, path))? {
            Some(seq) => self.data_run(path, seq.ok_or_else(not_found)?)?,
            None => {
                let mut r = self.first_row(path)?.ok_or_else(not_found)?;
                let mut rows = Vec::new();
                while r < self.rows {
                    let (b, i) = self.sorted_at(r)?;
                    if b.path(i) != path {
                        if b.key(i).fdata_offset != 0 {
                            return Err(cut_short(path));
                        }
                        break;
                    }
                    rows.push(self.sorted_row(r)?);
                    r += 1;
                }
                rows
            }
        };
        check_file_rows(path, &rows)?;
        Ok(rows)
    }

    /// Whether `path` is in the archive.
    pub fn contains(&self, path: &str) -> Result<bool> {
        match self.by_trie(TrieRows::Data, |t, src| t.get(src, path))? {
            Some(Some(seq)) => {
                let (b, i) = self.data_at(seq)?;
                if b.keys().path(i) != path || b.keys().key(i).fdata_offset != 0 {
                    return Err(trie_disagrees(path));
                }
                Ok(true)
            }
            Some(None) => Ok(false),
            None => Ok(self.first_row(path)?.is_some()),
        }
    }

    /// Writes the bytes of `path` to `out`, verified; returns the byte count.
    /// A symbolic link's bytes are its target.
    pub fn read_file(&self, path: &str, out: &mut dyn Write) -> Result<u64> {
        Ok(self.read_entry(path, out)?.size)
    }

    /// [`Archive::read_file`], returning the entry it read: a caller learns
    /// whether it was a link or a directory from the same lookup.
    pub fn read_entry(&self, path: &str, out: &mut dyn Write) -> Result<Entry> {
        self.read_entry_on(path, out, 1)
    }

    /// [`Archive::read_entry`], the pieces of a large file read and decoded
    /// on up to `threads` threads ([`BlobRegion::write_file_on`]).
    pub fn read_entry_on(&self, path: &str, out: &mut dyn Write, threads: usize) -> Result<Entry> {
        let rows = self.slices(path)?;
        let size = self
            .region()
            .write_file_on(&self.src, &rows, out, threads)?;
        Ok(Entry {
            path: path.to_string(),
            size,
            mode: rows.first().and_then(|r| r.mode),
            slices: rows.len() as u64,
        })
    }

    /// The target of the symbolic link `path`. Its rows are checked before
    /// any blob is read: a link whose rows say it is longer than
    /// [`MAX_LINK_TARGET`] is corrupt, not a target to buffer.
    pub fn read_link(&self, path: &str) -> Result<Vec<u8>> {
        let rows = self.slices(path)?;
        self.region()
            .read_link(&self.src, path, &rows, &mut BlobScratch::default())
    }

    /// Paths starting with `prefix`, in byte order. Reads only the trie when there
    /// is one.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>> {
        match self.by_trie(TrieRows::Either, |t, src| t.prefix(src, prefix))? {
            Some(found) => Ok(found.into_iter().map(|(p, _)| p).collect()),
            None => Ok(self.entries(prefix)?.into_iter().map(|e| e.path).collect()),
        }
    }

    /// Entries (path, size, mode) whose paths start with `prefix`, in byte
    /// order. From version 7 reads the trie's prefix and the data batches
    /// that hold its files; before, the lookup's batches from the first such
    /// path on.
    pub fn entries(&self, prefix: &str) -> Result<Vec<Entry>> {
        if let Sorted::Scanned(_) = self.sorted {
            if let Some(found) = self.by_trie(TrieRows::Data, |t, src| t.prefix(src, prefix))? {
                return found
                    .into_iter()
                    .map(|(path, seq)| self.data_entry(path, seq))
                    .collect();
            }
        }
        let mut out: Vec<Entry> = Vec::new();
        let mut r = self.sorted_start(prefix)?;
        while r < self.rows {
            let (b, i) = self.sorted_at(r)?;
            let path = b.path(i);
            if !path.starts_with(prefix) {
                break;
            }
            let key = b.key(i);
            if out.last().is_some_and(|e| e.path.as_str() > path) {
                return Err(Error::corrupt(format!(
                    "the slices in path order are not: {path} comes after {}",
                    out.last().map_or("", |e| e.path.as_str())
                )));
            }
            match out.last_mut() {
                Some(e) if e.path == path => {
                    e.size = e.size.saturating_add(key.uncompressed_size);
                    e.mode = key.mode;
                    e.slices += 1;
                }
                _ => out.push(Entry {
                    path: path.to_string(),
                    size: key.uncompressed_size,
                    mode: key.mode,
                    slices: 1,
                }),
            }
            r += 1;
        }
        Ok(out)
    }

    /// Every slice row of the data sections, in chunk_seq order.
    pub fn data_rows(&self) -> Result<Vec<SliceRow>> {
        let mut rows = Vec::new();
        for s in self.sections.iter().filter(|s| s.is_data(self.version)) {
            // Read whole, so checked whole: names and modes are under no
            // slice's hash, and an append would write damaged rows into a
            // tail with good hashes, an extraction would follow them. Read
            // once, hashed and decoded from memory: the rows it makes take
            // more room than its bytes.
            let bytes = self.section_bytes(s)?;
            expect_hash(s, blake3::hash(&bytes).as_bytes())?;
            let bytes = bytes.as_slice();
            let sec = IpcSection::open(
                &bytes,
                "data",
                0,
                s.index_len,
                Some(s.row_count),
                base_schema(),
                Decoded::BaseRows,
            )?;
            for i in 0..sec.num_batches() {
                let b = RowBatch::new(&sec.batch(&bytes, i)?)?;
                rows.extend((0..b.keys().len()).map(|r| b.row(r)));
            }
        }
        rows.sort_by_key(|r| r.chunk_seq);
        if rows.windows(2).any(|w| w[0].chunk_seq == w[1].chunk_seq) {
            return Err(Error::corrupt("two rows share a chunk_seq"));
        }
        // What a version-4 `get` relies on, checked here for extraction and
        // for `verify`, whose rebuild of the tail may not run (an archive
        // with sections this writer does not write).
        check_order(&rows, self.version)?;
        if self.version >= 4 {
            // check_order made each file's slices one run of rows, in file order.
            for file in rows.chunk_by(|a, b| a.relative_path == b.relative_path) {
                check_file_rows(&file[0].relative_path, file)?;
            }
            return Ok(rows);
        }
        let mut by_path: HashMap<&str, Vec<&SliceRow>> = HashMap::new();
        for r in &rows {
            by_path.entry(&r.relative_path).or_default().push(r);
        }
        for (path, mut slices) in by_path {
            slices.sort_by_key(|r| r.fdata_offset);
            check_file_rows(path, slices)?;
        }
        Ok(rows)
    }

    /// The archive's metadata: [`Metadata::Absent`] when it has no meta section.
    pub fn metadata(&self) -> Result<Metadata> {
        let Some(s) = self.reserved(META) else {
            return Ok(Metadata::Absent);
        };
        let sec = IpcSection::open(
            &self.src,
            "meta",
            s.index_offset,
            s.index_len,
            Some(s.row_count),
            meta_schema(),
            Decoded::AtMost(s.index_len),
        )?;
        let mut table = MetaTable::new();
        for i in 0..sec.num_batches() {
            table.extend_from_batch(&sec.batch(&self.src, i)?)?;
        }
        Ok(Metadata::Present(table))
    }

    /// The archive's package sections (none before format version 6), read
    /// whole, so checked whole against their BLAKE3 as the data sub-index is
    /// (an append writes their rows into a tail with good hashes), each
    /// batch bounded by its section's length.
    pub fn packages(&self) -> Result<Packages> {
        let mut out = Packages::default();
        for s in self.sections.iter().filter(|s| s.is_package(self.version)) {
            let bytes = self.section_bytes(s)?;
            expect_hash(s, blake3::hash(&bytes).as_bytes())?;
            let bytes = bytes.as_slice();
            let what = "package";
            let open = |schema| {
                let d = Decoded::AtMost(s.index_len);
                IpcSection::open(&bytes, what, 0, s.index_len, Some(s.row_count), schema, d)
            };
            let columns = package::columns_of(open(package::schema(&[]))?.metadata(), what)?;
            let sec = open(package::schema(&columns))?;
            let key = (s.pkg_type, s.repo.clone());
            let mut table = PackageTable {
                name: s.module_name.clone(),
                columns,
                rows: Vec::new(),
            };
            for i in 0..sec.num_batches() {
                package::extend_from_batch(&mut table, &key, &sec.batch(&bytes, i)?, what)?;
            }
            out.tables.insert(key, table);
        }
        Ok(out)
    }

    /// Checks every section hash, that the whole index is exactly what its rows
    /// produce, and every slice's blake3. Returns the number of slices checked.
    pub fn verify(&self, threads: usize) -> Result<u64> {
        // The manifest has no checksum of its own: only the rebuild below
        // checks it, and a tail this writer would not make cannot be rebuilt.
        // Refused, not passed: one damaged byte of a section's name makes
        // such a tail (and hides the section from every read).
        if !self.written_by_this_writer() {
            const SHOWN: usize = 8;
            let mut names: Vec<String> = self
                .sections
                .iter()
                .take(SHOWN)
                .map(|s| format!("({}, {:?}, {:?})", s.pkg_type, s.repo, s.module_name))
                .collect();
            if self.sections.len() > SHOWN {
                names.push(format!("and {} more", self.sections.len() - SHOWN));
            }
            return Err(Error::corrupt(format!(
                "the manifest lists sections this writer does not make, so it cannot be \
                 checked (a damaged manifest, or a tail written by something else): {}",
                names.join(", ")
            )));
        }
        for s in &self.sections {
            self.check_hash(s)?;
        }
        // The tail is a function of the rows, the metadata and the properties
        // (one tail writer, deterministic), so rebuilding it must give back the
        // very bytes on disk. That checks the lookup, the trie and the manifest
        // (which has no checksum of its own) down to the last padding byte.
        let rows = self.data_rows()?;
        let meta = self.metadata()?;
        let packages = self.packages()?;
        if let Sorted::InOrder = self.sorted {
            if !in_path_order(&rows) {
                return Err(Error::corrupt(
                    "an archive with a batch trie whose data rows are not in path order",
                ));
            }
        }
        self.check_canonical_tail(&rows, &meta, &packages)?;
        let signatures = self.signatures()?;
        if !signatures.is_empty() {
            let rebuilt = self.signature_suffix(&signatures)?;
            let on_disk = read_vec(
                &self.src,
                self.signed.end,
                self.len - self.signed.end,
                "signatures",
            )?;
            if on_disk != rebuilt {
                return Err(Error::corrupt(
                    "the signatures and the manifest after them are not what they produce",
                ));
            }
        }
        for_each_blob(self, &rows, threads, &|_, _| Ok(()))?;
        Ok(rows.len() as u64)
    }

    /// Whether the sections are exactly the ones our tail writer produces; an
    /// archive with extra or unknown sections is still read (readers skip
    /// reserved sections they do not know, docs/format.md 8.2), but cannot be
    /// compared with a rebuilt tail, so `verify` refuses it.
    fn written_by_this_writer(&self) -> bool {
        // Package sections come first (`check_packages` saw to their order).
        let mut names = self
            .sections
            .iter()
            .skip_while(|s| s.is_package(self.version))
            .map(|s| (s.pkg_type, s.repo.as_str(), s.module_name.as_str()));
        let data = (DEFAULT_PKG_TYPE, DEFAULT_REPO, DEFAULT_MODULE);
        let lookup = (RESERVED_PKG_TYPE, "", LOOKUP);
        let trie = match self.sorted {
            Sorted::InOrder => (RESERVED_PKG_TYPE, "", BATCH_TRIE),
            _ => (RESERVED_PKG_TYPE, "", TRIE),
        };
        let fixed: &[_] = match self.version {
            7.. => &[data, trie],
            4..=6 => &[lookup, data, trie],
            _ => &[data, lookup, trie],
        };
        fixed.iter().all(|f| names.next() == Some(*f))
            && match names.next() {
                None => true,
                Some(m) => m == (RESERVED_PKG_TYPE, "", META) && names.next().is_none(),
            }
    }

    fn check_canonical_tail(
        &self,
        rows: &[SliceRow],
        meta: &Metadata,
        packages: &Packages,
    ) -> Result<()> {
        let tail_start = self.blob_end;
        let mut rebuilt = Vec::new();
        write_tail_as(
            &mut rebuilt,
            Tail {
                props: self.props,
                blob_end: self.blob_end,
                rows,
                meta,
                packages,
            },
            self.version,
        )?;
        // The tail is what its rows produce, so that bounds what is read.
        let tail_end = self.signed.end;
        if tail_end - tail_start != rebuilt.len() as u64 {
            return Err(Error::corrupt(format!(
                "the index is {} bytes where its rows produce {}",
                tail_end - tail_start,
                rebuilt.len()
            )));
        }
        let on_disk = read_vec(&self.src, tail_start, tail_end - tail_start, "archive tail")?;
        if let Some(i) = on_disk.iter().zip(&rebuilt).position(|(a, b)| a != b) {
            return Err(Error::corrupt(format!(
                "the index differs from the one its rows produce, at byte {}",
                tail_start + i as u64
            )));
        }
        Ok(())
    }

    /// Reads one slice, checks it, and returns its bytes (borrowed from `scratch`).
    pub fn read_slice<'s>(&self, row: &SliceRow, scratch: &'s mut BlobScratch) -> Result<&'s [u8]> {
        self.region().read_slice(&self.src, row, scratch)
    }

    /// The blob region, for checking and reading rows.
    pub fn region(&self) -> BlobRegion {
        BlobRegion {
            chunk_size: self.props.chunk_size,
            end: self.blob_end,
        }
    }
}

/// From version 6, package sections: a positive `pkg_type`, a plugin's name
/// as `module_name`, each `(pkg_type, repo)` once and in ascending order.
fn check_packages(sections: &[SectionEntry], version: u32) -> Result<()> {
    let mut last: Option<(i8, &str)> = None;
    for s in sections.iter().filter(|s| s.is_package(version)) {
        let key = (s.pkg_type, s.repo.as_str());
        if !package::is_ident(&s.module_name)
            || s.module_name == DEFAULT_MODULE
            || last.is_some_and(|l| l >= key)
        {
            return Err(Error::corrupt(format!(
                "package section ({}, {:?}, {:?}) is out of order or misnamed",
                s.pkg_type, s.repo, s.module_name
            )));
        }
        last = Some(key);
    }
    Ok(())
}

/// Sections must be aligned, inside `[blob_end, manifest_offset)` and disjoint.
fn check_sections(sections: &[SectionEntry], blob_end: u64, manifest_offset: u64) -> Result<()> {
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(sections.len());
    for s in sections {
        let end = s.index_offset.checked_add(s.index_len);
        if s.index_offset % ALIGN != 0
            || s.index_offset < blob_end
            || end.is_none_or(|e| e > manifest_offset)
        {
            return Err(Error::corrupt(format!(
                "section {} at {}+{} lies outside the index region",
                s.module_name, s.index_offset, s.index_len
            )));
        }
        spans.push((s.index_offset, s.index_offset + s.index_len));
    }
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[0].1 > w[1].0) {
        return Err(Error::corrupt("sections overlap"));
    }
    Ok(())
}

/// Hands every slice of `rows` to `f`, on `threads` threads, grouped by blob
/// so that each blob is read and decoded once. Every slice is checked against
/// its blake3 before `f` sees it.
pub(crate) fn for_each_blob<R: ReadAt>(
    archive: &Archive<R>,
    rows: &[SliceRow],
    threads: usize,
    f: &(dyn Fn(&SliceRow, &[u8]) -> Result<()> + Sync),
) -> Result<()> {
    let region = archive.region();
    for r in rows {
        region.check(r)?;
    }
    // A blob is (offset, size, compressed): an empty blob shares its offset with
    // the next one.
    let blob = |i: usize| (rows[i].blob_offset, rows[i].blob_size, rows[i].compressed);
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| (blob(i), rows[i].blob_inner_offset));
    let groups: Vec<&[usize]> = order.chunk_by(|&a, &b| blob(a) == blob(b)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<()> {
        let mut whole = WholeBlob::new()?;
        loop {
            let g = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(group) = groups.get(g) else {
                return Ok(());
            };
            for &i in *group {
                let r = &rows[i];
                f(r, whole.slice(&region, &archive.src, r)?)?;
            }
        }
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(work)).collect();
        let mut result = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|_| {
                Err(Error::io(
                    "reading blobs",
                    std::io::Error::other("worker panicked"),
                ))
            });
            if result.is_ok() {
                result = r;
            }
        }
        result
    })
}

/// `got`, the BLAKE3 of section `s`, must be the manifest's.
fn expect_hash(s: &SectionEntry, got: &[u8; 32]) -> Result<()> {
    if got != &s.blake3 {
        return Err(Error::Checksum(format!("section {}", s.module_name)));
    }
    Ok(())
}

fn trie_disagrees(path: &str) -> Error {
    Error::corrupt(format!("trie and data sub-index disagree on {path}"))
}

/// A file's rows end at a row of another path that does not start its file:
/// a row of `path` was renamed, and its bytes would be left out unnoticed
/// (every slice checks its own bytes, not that the file has them all).
fn cut_short(path: &str) -> Error {
    Error::corrupt(format!(
        "the rows of {path} are followed by the middle of another file"
    ))
}
