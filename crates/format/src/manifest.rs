//! The manifest: one row per section, plus the archive properties in its schema
//! metadata. It is the only thing a reader must read whole.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{FixedSizeBinaryBuilder, Int8Builder, StringBuilder, UInt64Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int8Type, UInt64Type};
use arrow_array::{ArrayRef, RecordBatch};

use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::ipc::{self, read_at, Decoded, IpcSection};
use crate::schema::{manifest_schema, BATCH_ROWS, RESERVED, RESERVED_PKG_TYPE};
use crate::tail::{FOOTER_LEN, MAGIC};

/// Schema-metadata key recording the end of the blob region.
pub(crate) const KEY_BLOB_END: &str = "znippy.blob_end";

/// Largest manifest a reader accepts (a manifest has a handful of rows).
const MAX_MANIFEST_LEN: u64 = 16 << 20;

/// Most manifest rows a reader accepts. (What a damaged manifest can cost to
/// decode is bounded by its length: its buffers are plain, and its blocks may
/// not overlap, see `ipc.rs`.)
const MAX_SECTIONS: u64 = 1 << 16;

/// One manifest row: where a section is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionEntry {
    /// The data section's pkg_type, or -128 for reserved sections.
    pub pkg_type: i8,
    /// The data section's repo, or "" for reserved sections.
    pub repo: String,
    /// Module name; for reserved sections one of the reserved names.
    pub module_name: String,
    /// Section start in the archive.
    pub index_offset: u64,
    /// Section length.
    pub index_len: u64,
    /// Rows in the section (keys, for the trie).
    pub row_count: u64,
    /// blake3 of the section's bytes.
    pub blake3: [u8; 32],
}

impl SectionEntry {
    /// Whether this is a reserved (non-data) section.
    pub fn is_reserved(&self) -> bool {
        self.pkg_type == RESERVED_PKG_TYPE
    }

    /// Whether this is a package section (from version 6, a positive
    /// `pkg_type`); before version 6 every unreserved section is data.
    pub fn is_package(&self, version: u32) -> bool {
        version >= 6 && self.pkg_type > 0
    }

    /// Whether this is a data sub-index, one that holds slice rows.
    pub fn is_data(&self, version: u32) -> bool {
        !self.is_reserved() && !self.is_package(version)
    }
}

pub(crate) fn encode(
    sections: &[SectionEntry],
    md: HashMap<String, String>,
    version: u32,
) -> Result<Vec<u8>> {
    let n = sections.len();
    let mut pkg = Int8Builder::with_capacity(n);
    let mut repo = StringBuilder::new();
    let mut module = StringBuilder::new();
    let mut off = UInt64Builder::with_capacity(n);
    let mut len = UInt64Builder::with_capacity(n);
    let mut rows = UInt64Builder::with_capacity(n);
    let mut hash = FixedSizeBinaryBuilder::with_capacity(n, 32);
    for s in sections {
        if s.is_reserved() && !RESERVED.contains(&s.module_name.as_str()) {
            return Err(Error::corrupt(format!(
                "unknown reserved section name {:?}",
                s.module_name
            )));
        }
        pkg.append_value(s.pkg_type);
        repo.append_value(&s.repo);
        module.append_value(&s.module_name);
        off.append_value(s.index_offset);
        len.append_value(s.index_len);
        rows.append_value(s.row_count);
        hash.append_value(s.blake3)
            .map_err(|e| Error::corrupt(format!("manifest: {e}")))?;
    }
    let schema = manifest_schema(md);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(pkg.finish()),
        Arc::new(repo.finish()),
        Arc::new(module.finish()),
        Arc::new(off.finish()),
        Arc::new(len.finish()),
        Arc::new(rows.finish()),
        Arc::new(hash.finish()),
    ];
    let batch = RecordBatch::try_new(schema.clone(), cols)
        .map_err(|e| Error::corrupt(format!("manifest: {e}")))?;
    ipc::encode(&schema, &batch, ipc::Body::Plain, BATCH_ROWS, version)
}

/// A manifest as read from an archive.
#[derive(Debug)]
pub(crate) struct Read {
    /// Its rows.
    pub(crate) sections: Vec<SectionEntry>,
    /// Its schema metadata.
    pub(crate) md: HashMap<String, String>,
    /// Where it starts.
    pub(crate) offset: u64,
}

/// Reads the manifest whose footer ends at `end`: the footer, then the
/// manifest it points at, bounded before anything is allocated for it.
pub(crate) fn read(src: &dyn ReadAt, end: u64) -> Result<Read> {
    if end < FOOTER_LEN {
        return Err(Error::corrupt(format!("no footer fits in {end} bytes")));
    }
    let mut footer = [0u8; FOOTER_LEN as usize];
    read_at(src, &mut footer, end - FOOTER_LEN, "footer")?;
    if &footer[..8] != MAGIC {
        return Err(Error::NotAnArchive(format!(
            "no ZNPYMIDX footer ends at byte {end}"
        )));
    }
    let mut off = [0u8; 8];
    off.copy_from_slice(&footer[8..]);
    let offset = u64::from_le_bytes(off);
    let manifest_end = end - FOOTER_LEN;
    if offset >= manifest_end || manifest_end - offset > MAX_MANIFEST_LEN {
        return Err(Error::corrupt(format!(
            "manifest offset {offset} does not fit a footer ending at {end}"
        )));
    }
    let mut bytes = vec![0u8; (manifest_end - offset) as usize];
    read_at(src, &mut bytes, offset, "manifest")?;
    let (sections, md) = decode(&bytes)?;
    Ok(Read {
        sections,
        md,
        offset,
    })
}

/// Decodes a manifest held in memory; returns its rows and schema metadata.
pub(crate) fn decode(bytes: &[u8]) -> Result<(Vec<SectionEntry>, HashMap<String, String>)> {
    let len = bytes.len() as u64;
    let sec = IpcSection::open(
        &bytes,
        "manifest",
        0,
        len,
        None,
        manifest_schema(HashMap::new()),
        Decoded::AtMost(len),
    )?;
    let md = sec.metadata().clone();
    let mut out = Vec::new();
    for i in 0..sec.num_batches() {
        let b = sec.batch(&bytes, i)?;
        let bad = |c: &str| Error::corrupt(format!("manifest column {c} has the wrong type"));
        let col = |i: usize| b.column(i).as_ref();
        let pkg = col(0)
            .as_primitive_opt::<Int8Type>()
            .ok_or_else(|| bad("pkg_type"))?;
        let repo = col(1).as_string_opt::<i32>().ok_or_else(|| bad("repo"))?;
        let module = col(2)
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("module_name"))?;
        let u64s = |i: usize, c: &str| {
            col(i)
                .as_primitive_opt::<UInt64Type>()
                .ok_or_else(|| bad(c))
        };
        let (off, len, rows) = (
            u64s(3, "index_offset")?,
            u64s(4, "index_len")?,
            u64s(5, "row_count")?,
        );
        let hash = col(6)
            .as_fixed_size_binary_opt()
            .filter(|a| a.value_length() == 32)
            .ok_or_else(|| bad("blake3"))?;
        for r in 0..b.num_rows() {
            let mut h = [0u8; 32];
            h.copy_from_slice(hash.value(r));
            out.push(SectionEntry {
                pkg_type: pkg.value(r),
                repo: repo.value(r).to_string(),
                module_name: module.value(r).to_string(),
                index_offset: off.value(r),
                index_len: len.value(r),
                row_count: rows.value(r),
                blake3: h,
            });
        }
    }
    if out.len() as u64 > MAX_SECTIONS {
        return Err(Error::corrupt(format!("manifest has {} rows", out.len())));
    }
    Ok((out, md))
}
