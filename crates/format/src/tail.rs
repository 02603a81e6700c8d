//! The tail writer: everything after the blob region, written by one function.
//!
//! compress, native append and the store's seal all end an archive by calling
//! [`write_tail`], so the bytes of a tail depend only on the rows, the metadata and
//! the properties handed to it. Byte identity between those paths holds by
//! construction.

use std::collections::hash_map::{Entry, HashMap};
use std::io::Write;

use crate::error::{Error, Result};
use crate::ipc::{self, Body};
use crate::kind::Kind;
use crate::manifest::{self, SectionEntry};
use crate::meta::Metadata;
use crate::package::{self, Packages};
use crate::path;
use crate::props::ArchiveProps;
use crate::row::{self, SliceRow};
use crate::schema::{
    self, base_schema, lookup_schema, meta_schema, BATCH_ROWS, FORMAT_VERSION, SMALL_BATCH_ROWS,
};
use crate::trie;

/// Every section starts at a multiple of this.
pub const ALIGN: u64 = 64;
/// The footer's magic bytes.
pub const MAGIC: &[u8; 8] = b"ZNPYMIDX";
/// Length of the footer: magic then the manifest offset as u64 LE.
pub const FOOTER_LEN: u64 = 16;

/// What a tail is made of.
#[derive(Debug, Clone, Copy)]
pub struct Tail<'a> {
    /// The archive properties, recorded in the manifest.
    pub props: ArchiveProps,
    /// End of the blob region; the tail starts at the next multiple of 64.
    pub blob_end: u64,
    /// Every live slice row, in chunk_seq order.
    pub rows: &'a [SliceRow],
    /// The metadata: `Absent` writes no section, an empty table an empty one.
    pub meta: &'a Metadata,
    /// The package rows: a section per `(pkg_type, repo)` that has any.
    pub packages: &'a Packages,
}

/// Summary of a written tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailInfo {
    /// Offset of the manifest.
    pub manifest_offset: u64,
    /// Total archive length, footer included.
    pub archive_len: u64,
    /// The archive's identity: blake3 of the tail, bytes `[blob_end, archive_len)`
    /// (see [`crate::Archive::identity`]).
    pub identity: [u8; 32],
}

/// Writes the tail of an archive to `out`, which is positioned at `tail.blob_end`.
pub fn write_tail(out: &mut dyn Write, tail: Tail<'_>) -> Result<TailInfo> {
    write_tail_as(out, tail, FORMAT_VERSION).map(|(info, _)| info)
}

/// [`write_tail`], then a signature section holding what `sign` makes of
/// the tail's [`crate::signed_content`] (docs/format.md, 6.6): the archive
/// a seal publishes signed, in the same pass. `archive_len` in the result
/// is the signed archive's.
pub fn write_signed_tail(
    out: &mut dyn Write,
    tail: Tail<'_>,
    sign: &dyn Fn(&[u8]) -> Result<Vec<u8>>,
) -> Result<TailInfo> {
    let (info, manifest) = write_tail_as(out, tail, FORMAT_VERSION)?;
    let signature = sign(&crate::signed_content(&info.identity))?;
    let archive_len = crate::signature::write_signatures(
        out,
        &manifest,
        info.archive_len,
        FORMAT_VERSION,
        &[signature],
    )?;
    Ok(TailInfo {
        archive_len,
        ..info
    })
}

/// The lookup's batch size before version 3, whose batches are compressed.
const LOOKUP_BATCH_ROWS_BEFORE_V3: usize = 1_024;

/// Writes the tail as format `version` wrote it: `verify` rebuilds an older
/// archive's tail this way. Versions 1 and 2 differ only in the links and
/// directories they may hold, which the rows already say; before version 3 the
/// lookup's buffers are plain, in batches of 1,024 rows. Before version 4 the
/// data sub-index comes first, in batches of 65,536 rows, the lookup repeats
/// every base column, and the trie names lookup rows. Before version 5 the
/// trie is one map. Before version 7 there is a lookup, and Arrow buffers are
/// padded to 64 bytes.
/// Returns also the manifest it wrote, which a signature repeats.
pub(crate) fn write_tail_as(
    out: &mut dyn Write,
    tail: Tail<'_>,
    version: u32,
) -> Result<(TailInfo, manifest::Read)> {
    // The checks and the data sub-index need nothing from the trie (and,
    // before version 7, the lookup): they are made side by side, on the
    // cores the compression pool has just left, and nothing is written until
    // both are done. The bytes depend on the rows only, not on which thread
    // made them.
    let (checked_data, index) = std::thread::scope(|s| {
        let side = s.spawn(|| {
            check_rows(&tail, version)?;
            encode_data(tail.rows, version)
        });
        let index = encode_index(tail.rows, version);
        let side = side
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (side, index)
    });
    let data = checked_data?;
    let Index {
        lookup,
        trie_name,
        trie,
        keys,
    } = index?;

    let mut w = Aligned::new(out, tail.blob_end);
    let rows = tail.rows.len() as u64;
    let mut sections = Vec::new();
    if !tail.packages.is_empty() {
        if version < 6 {
            return Err(Error::corrupt(format!(
                "format version {version} has no package sections"
            )));
        }
        // First: nothing a `get` reads lies among them.
        let files = first_rows(tail.rows);
        for (key, table) in &tail.packages.tables {
            let bytes = ipc::encode(
                &package::schema(&table.columns),
                &package::to_batch(key, table, &files)?,
                Body::Plain,
                BATCH_ROWS,
                version,
            )?;
            let n = table.rows.len() as u64;
            sections.push(w.section(key.0, &key.1, &table.name, &bytes, n)?);
        }
    }
    match lookup {
        // The lookup goes first, so that the data sub-index's Arrow footer,
        // the trie and the manifest, all a `get` reads besides one data batch,
        // end the archive together (a remote reader's first request).
        Some(lookup) if version >= 4 => {
            sections.push(w.reserved(schema::LOOKUP, &lookup, rows)?);
            sections.push(w.data(&data, rows)?);
        }
        Some(lookup) => {
            sections.push(w.data(&data, rows)?);
            sections.push(w.reserved(schema::LOOKUP, &lookup, rows)?);
        }
        None => sections.push(w.data(&data, rows)?),
    }
    sections.push(w.reserved(trie_name, &trie, keys)?);

    if let Metadata::Present(table) = tail.meta {
        let meta = ipc::encode(
            &meta_schema(),
            &table.to_batch()?,
            Body::Plain,
            BATCH_ROWS,
            version,
        )?;
        sections.push(w.reserved(schema::META, &meta, table.len() as u64)?);
    }

    let mut md = HashMap::new();
    tail.props.to_metadata(&mut md, version);
    // Fixed width, so the manifest's length does not depend on the payload size.
    md.insert(
        manifest::KEY_BLOB_END.into(),
        format!("{:020}", tail.blob_end),
    );
    let manifest_offset = w.manifest(&sections, md.clone(), version)?;
    let info = TailInfo {
        manifest_offset,
        archive_len: w.pos,
        identity: *w.hash.finalize().as_bytes(),
    };
    let manifest = manifest::Read {
        sections,
        md,
        offset: manifest_offset,
    };
    Ok((info, manifest))
}

/// Each file's first data row and length, for the package sections.
fn first_rows(rows: &[SliceRow]) -> HashMap<&str, (u64, u64)> {
    let mut files: HashMap<&str, (u64, u64)> = HashMap::new();
    for r in rows {
        let e = files.entry(&r.relative_path).or_insert((r.chunk_seq, 0));
        e.1 = e.1.saturating_add(r.uncompressed_size);
    }
    files
}

/// The data sub-index: every row in chunk_seq order.
fn encode_data(rows: &[SliceRow], version: u32) -> Result<Vec<u8>> {
    let batch_rows = if version >= 4 {
        SMALL_BATCH_ROWS
    } else {
        BATCH_ROWS
    };
    ipc::encode(
        &base_schema(),
        &row::to_batch(rows.iter())?,
        Body::Zstd,
        batch_rows,
        version,
    )
}

/// The sections a path is looked up through.
struct Index {
    /// None from version 7.
    lookup: Option<Vec<u8>>,
    /// [`schema::TRIE`], or from version 8 [`schema::BATCH_TRIE`] when the
    /// rows are in path order.
    trie_name: &'static str,
    trie: Vec<u8>,
    /// The trie's keys.
    keys: u64,
}

/// `(path, row)` pairs with each path kept where it first comes: a trie's
/// keys, from pairs in byte order of path.
fn first_of_each<'a>(pairs: impl Iterator<Item = (&'a str, u64)>) -> Vec<(&'a str, u64)> {
    let mut keys: Vec<(&str, u64)> = Vec::new();
    for (path, row) in pairs {
        if keys.last().is_none_or(|(p, _)| *p != path) {
            keys.push((path, row));
        }
    }
    keys
}

impl Index {
    fn new(
        lookup: Option<Vec<u8>>,
        trie_name: &'static str,
        keys: &[(&str, u64)],
        version: u32,
    ) -> Result<Self> {
        Ok(Index {
            lookup,
            trie_name,
            trie: trie::build(keys, version)?,
            keys: keys.len() as u64,
        })
    }
}

/// The lookup (rows by path, before version 7) and the trie (each path's
/// first slice), or from version 8, when the data rows are in path order
/// already, the batch trie (each data batch's first path).
fn encode_index(rows: &[SliceRow], version: u32) -> Result<Index> {
    if version >= 8 && row::in_path_order(rows) {
        // A batch that starts inside a file's run has that file's path: only
        // the first batch a path starts is kept (docs/format.md, 6.3.1).
        let starts = rows
            .iter()
            .step_by(SMALL_BATCH_ROWS)
            .map(|r| (r.relative_path.as_str(), r.chunk_seq));
        return Index::new(None, schema::BATCH_TRIE, &first_of_each(starts), version);
    }
    let mut sorted: Vec<&SliceRow> = rows.iter().collect();
    sorted.sort_unstable_by(|a, b| {
        (a.relative_path.as_str(), a.fdata_offset).cmp(&(b.relative_path.as_str(), b.fdata_offset))
    });
    let lookup = if version >= 7 {
        None
    } else if version >= 4 {
        Some(ipc::encode(
            &lookup_schema(),
            &row::to_lookup_batch(sorted.iter().copied())?,
            Body::Zstd,
            SMALL_BATCH_ROWS,
            version,
        )?)
    } else {
        let (body, batch_rows) = if version == 3 {
            (Body::Zstd, SMALL_BATCH_ROWS)
        } else {
            (Body::Plain, LOOKUP_BATCH_ROWS_BEFORE_V3)
        };
        Some(ipc::encode(
            &base_schema(),
            &row::to_batch(sorted.iter().copied())?,
            body,
            batch_rows,
            version,
        )?)
    };

    // Each path's first slice: from version 4 the trie names its data row
    // (its chunk_seq), before that its lookup row.
    let firsts = sorted.iter().enumerate().map(|(i, r)| {
        let at = if version >= 4 { r.chunk_seq } else { i as u64 };
        (r.relative_path.as_str(), at)
    });
    Index::new(lookup, schema::TRIE, &first_of_each(firsts), version)
}

/// The rules a tail's rows must obey; checked here because every writer comes here.
fn check_rows(tail: &Tail<'_>, version: u32) -> Result<()> {
    check_order(tail.rows, version)?;
    // From version 4 the order already rules it out: a path's slices are
    // consecutive rows at rising offsets.
    let mut seen = (version < 4).then(std::collections::HashSet::new);
    for r in tail.rows {
        path::validate(&r.relative_path)?;
        if seen
            .as_mut()
            .is_some_and(|seen| !seen.insert((r.relative_path.as_str(), r.fdata_offset)))
        {
            return Err(Error::corrupt(format!(
                "two slices of {} at offset {}",
                r.relative_path, r.fdata_offset
            )));
        }
        if r.blob_offset
            .checked_add(r.blob_size)
            .is_none_or(|e| e > tail.blob_end)
        {
            return Err(Error::corrupt(format!(
                "blob of {} lies past blob_end {}",
                r.relative_path, tail.blob_end
            )));
        }
    }
    check_tail_nesting(tail.rows)
}

/// The order of the rows of a data sub-index: chunk_seq strictly rising, and
/// from version 4 row `i` is chunk_seq `i` and a file's slices are
/// consecutive rows in file order, as a `get` reads them from its first.
/// The tail writer checks it, and the reader wherever it reads the rows whole.
pub(crate) fn check_order(rows: &[SliceRow], version: u32) -> Result<()> {
    // While the paths rise from file to file, none that ended can come back,
    // as every compress of a directory writes them; the set of the paths
    // that ended is made only once they stop rising.
    let mut ended: Option<std::collections::HashSet<&str>> = None;
    let mut last: Option<&SliceRow> = None;
    for (i, r) in rows.iter().enumerate() {
        let in_order = if version >= 4 {
            r.chunk_seq == i as u64
        } else {
            last.is_none_or(|l| r.chunk_seq > l.chunk_seq)
        };
        if !in_order {
            return Err(Error::corrupt(format!(
                "rows out of chunk_seq order at {} (seq {})",
                r.relative_path, r.chunk_seq
            )));
        }
        if version >= 4 {
            match last {
                Some(l) if l.relative_path != r.relative_path => {
                    let back = match &mut ended {
                        None if r.relative_path > l.relative_path => false,
                        None => {
                            let set = rows[..i].iter().map(|e| e.relative_path.as_str()).collect();
                            ended.insert(set).contains(r.relative_path.as_str())
                        }
                        Some(set) => {
                            set.insert(l.relative_path.as_str());
                            set.contains(r.relative_path.as_str())
                        }
                    };
                    if back {
                        return Err(Error::corrupt(format!(
                            "slices of {} are not consecutive rows",
                            r.relative_path
                        )));
                    }
                }
                Some(l) if r.fdata_offset <= l.fdata_offset => {
                    return Err(Error::corrupt(format!(
                        "slices of {} out of file order",
                        r.relative_path
                    )))
                }
                _ => {}
            }
        }
        last = Some(r);
    }
    Ok(())
}

/// No entry below a file or a link (`x` and `x/y` extract nowhere), and no
/// two names that are one in NFC.
fn check_tail_nesting(rows: &[SliceRow]) -> Result<()> {
    // Each path once, in row order, so that the first conflict is the one
    // reported whatever the hash order.
    let mut entries: Vec<(&str, bool)> = Vec::with_capacity(rows.len());
    let mut dirs: HashMap<&str, bool, ahash::RandomState> =
        HashMap::with_capacity_and_hasher(rows.len(), Default::default());
    for r in rows {
        let dir = Kind::of(r.mode)? == Kind::Dir;
        if let Entry::Vacant(v) = dirs.entry(&r.relative_path) {
            v.insert(dir);
            entries.push((&r.relative_path, dir));
        }
    }
    let below = path::Below::new(entries.iter().map(|e| e.0).collect());
    path::check_nesting(
        entries.iter().copied(),
        |p| dirs.get(p).copied(),
        |p| below.first(p),
    )?;
    path::check_twins(entries.iter().map(|e| e.0), |p| dirs.contains_key(p))
}

/// A writer that knows its archive offset, pads sections to [`ALIGN`] and
/// hashes what it writes.
pub(crate) struct Aligned<'a> {
    out: &'a mut dyn Write,
    pub(crate) pos: u64,
    hash: blake3::Hasher,
}

impl<'a> Aligned<'a> {
    /// A writer positioned at archive offset `pos`.
    pub(crate) fn new(out: &'a mut dyn Write, pos: u64) -> Self {
        Aligned {
            out,
            pos,
            hash: blake3::Hasher::new(),
        }
    }

    /// Ends the archive: the manifest of `sections` with metadata `md`, then
    /// the footer. Returns the manifest's offset.
    pub(crate) fn manifest(
        &mut self,
        sections: &[SectionEntry],
        md: HashMap<String, String>,
        version: u32,
    ) -> Result<u64> {
        let manifest = manifest::encode(sections, md, version)?;
        self.pad()?;
        let manifest_offset = self.pos;
        self.write(&manifest)?;
        let mut footer = [0u8; FOOTER_LEN as usize];
        footer[..8].copy_from_slice(MAGIC);
        footer[8..].copy_from_slice(&manifest_offset.to_le_bytes());
        self.write(&footer)?;
        Ok(manifest_offset)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io("writing the archive tail", e))?;
        self.hash.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> Result<()> {
        let pad = self.pos.next_multiple_of(ALIGN) - self.pos;
        self.write(&[0u8; ALIGN as usize][..pad as usize])
    }

    fn section(
        &mut self,
        pkg_type: i8,
        repo: &str,
        module: &str,
        bytes: &[u8],
        rows: u64,
    ) -> Result<SectionEntry> {
        self.pad()?;
        let entry = SectionEntry {
            pkg_type,
            repo: repo.to_string(),
            module_name: module.to_string(),
            index_offset: self.pos,
            index_len: bytes.len() as u64,
            row_count: rows,
            blake3: *blake3::hash(bytes).as_bytes(),
        };
        self.write(bytes)?;
        Ok(entry)
    }

    fn data(&mut self, bytes: &[u8], rows: u64) -> Result<SectionEntry> {
        self.section(
            schema::DEFAULT_PKG_TYPE,
            schema::DEFAULT_REPO,
            schema::DEFAULT_MODULE,
            bytes,
            rows,
        )
    }

    pub(crate) fn reserved(&mut self, name: &str, bytes: &[u8], rows: u64) -> Result<SectionEntry> {
        self.section(schema::RESERVED_PKG_TYPE, "", name, bytes, rows)
    }
}
