//! Slice rows: where each piece of each file lives, and their Arrow form.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, FixedSizeBinaryBuilder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeBinaryArray, PrimitiveArray, RecordBatch, StringArray,
};

use crate::error::{Error, Result};
use crate::schema::{base_schema, lookup_schema};

/// One slice of one file: the bytes `fdata_offset..+uncompressed_size` of
/// `relative_path`, found at `blob_inner_offset` inside the decoded blob at
/// `blob_offset..+blob_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceRow {
    /// Normalized path of the file.
    pub relative_path: String,
    /// Global slice number in write order.
    pub chunk_seq: u64,
    /// Offset of this slice within the file.
    pub fdata_offset: u64,
    /// Length of this slice.
    pub uncompressed_size: u64,
    /// Offset of the blob in the archive.
    pub blob_offset: u64,
    /// Stored length of the blob.
    pub blob_size: u64,
    /// Offset of the slice inside the decoded blob.
    pub blob_inner_offset: u64,
    /// Whether the blob is a zstd frame (`true`) or raw bytes.
    pub compressed: bool,
    /// blake3 of the slice's raw bytes.
    pub checksum: [u8; 32],
    /// Unix permission bits, when known.
    pub mode: Option<u32>,
}

/// Builders of the columns the lookup and the data sub-index share.
struct KeyColumns {
    path: StringBuilder,
    seq: UInt64Builder,
    fdata: UInt64Builder,
    size: UInt64Builder,
    mode: UInt32Builder,
}

impl KeyColumns {
    fn with_capacity(n: usize) -> Self {
        KeyColumns {
            path: StringBuilder::with_capacity(n, n * 32),
            seq: UInt64Builder::with_capacity(n),
            fdata: UInt64Builder::with_capacity(n),
            size: UInt64Builder::with_capacity(n),
            mode: UInt32Builder::with_capacity(n),
        }
    }

    fn append(&mut self, r: &SliceRow) {
        self.path.append_value(&r.relative_path);
        self.seq.append_value(r.chunk_seq);
        self.fdata.append_value(r.fdata_offset);
        self.size.append_value(r.uncompressed_size);
        self.mode.append_option(r.mode);
    }

    /// The path, chunk_seq, fdata_offset and size columns, and the mode.
    fn finish(mut self) -> ([ArrayRef; 4], ArrayRef) {
        let first: [ArrayRef; 4] = [
            Arc::new(self.path.finish()),
            Arc::new(self.seq.finish()),
            Arc::new(self.fdata.finish()),
            Arc::new(self.size.finish()),
        ];
        (first, Arc::new(self.mode.finish()))
    }
}

/// Whether `rows`, in chunk_seq order, are also in path order: each file's
/// slices in file order, the files in byte order of path. Every `compress` of
/// a directory writes them so, and from format version 8 such rows get a
/// batch trie instead of a trie (`tail.rs`).
pub(crate) fn in_path_order(rows: &[SliceRow]) -> bool {
    rows.windows(2).all(|w| {
        (w[0].relative_path.as_str(), w[0].fdata_offset)
            < (w[1].relative_path.as_str(), w[1].fdata_offset)
    })
}

/// Builds one record batch of base columns from `rows`, in the given order.
pub(crate) fn to_batch<'a>(
    rows: impl ExactSizeIterator<Item = &'a SliceRow>,
) -> Result<RecordBatch> {
    let n = rows.len();
    let mut keys = KeyColumns::with_capacity(n);
    let mut boff = UInt64Builder::with_capacity(n);
    let mut bsize = UInt64Builder::with_capacity(n);
    let mut inner = UInt64Builder::with_capacity(n);
    let mut comp = BooleanBuilder::with_capacity(n);
    let mut sum = FixedSizeBinaryBuilder::with_capacity(n, 32);
    for r in rows {
        keys.append(r);
        boff.append_value(r.blob_offset);
        bsize.append_value(r.blob_size);
        inner.append_value(r.blob_inner_offset);
        comp.append_value(r.compressed);
        sum.append_value(r.checksum)
            .map_err(|e| Error::corrupt(format!("checksum column: {e}")))?;
    }
    let (first, mode) = keys.finish();
    let mut cols: Vec<ArrayRef> = first.into();
    cols.extend([
        Arc::new(boff.finish()) as ArrayRef,
        Arc::new(bsize.finish()),
        Arc::new(inner.finish()),
        Arc::new(comp.finish()),
        Arc::new(sum.finish()),
        mode,
    ]);
    RecordBatch::try_new(base_schema(), cols)
        .map_err(|e| Error::corrupt(format!("index batch: {e}")))
}

/// Builds one record batch of the version-4 lookup's columns
/// ([`lookup_schema`]) from `rows`, in the given order.
pub(crate) fn to_lookup_batch<'a>(
    rows: impl ExactSizeIterator<Item = &'a SliceRow>,
) -> Result<RecordBatch> {
    let mut keys = KeyColumns::with_capacity(rows.len());
    rows.for_each(|r| keys.append(r));
    let (first, mode) = keys.finish();
    let mut cols: Vec<ArrayRef> = first.into();
    cols.push(mode);
    RecordBatch::try_new(lookup_schema(), cols)
        .map_err(|e| Error::corrupt(format!("lookup batch: {e}")))
}

/// What the lookup says of one slice: enough to list it, and the data row
/// (its `chunk_seq`) that holds the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SliceKey {
    pub(crate) chunk_seq: u64,
    pub(crate) fdata_offset: u64,
    pub(crate) uncompressed_size: u64,
    pub(crate) mode: Option<u32>,
}

fn wrong_type(name: &str) -> Error {
    Error::corrupt(format!("index column {name} has the wrong type"))
}

fn u64s(batch: &RecordBatch, i: usize, name: &str) -> Result<PrimitiveArray<UInt64Type>> {
    batch
        .column(i)
        .as_primitive_opt::<UInt64Type>()
        .cloned()
        .ok_or_else(|| wrong_type(name))
}

/// Typed, zero-copy access to the columns of a decoded batch that the lookup
/// and the data sub-index share: all of a version-4 lookup batch.
#[derive(Debug, Clone)]
pub(crate) struct KeyBatch {
    path: StringArray,
    seq: PrimitiveArray<UInt64Type>,
    fdata: PrimitiveArray<UInt64Type>,
    size: PrimitiveArray<UInt64Type>,
    mode: PrimitiveArray<UInt32Type>,
}

impl KeyBatch {
    /// The version-4 lookup's columns of `batch`.
    pub(crate) fn new(batch: &RecordBatch) -> Result<Self> {
        Self::with_mode_at(batch, 4)
    }

    /// The path, chunk_seq, fdata_offset and size columns, which every
    /// section of slices starts with, and the mode from column `mode`.
    fn with_mode_at(batch: &RecordBatch, mode: usize) -> Result<Self> {
        Ok(KeyBatch {
            path: batch
                .column(0)
                .as_string_opt::<i32>()
                .cloned()
                .ok_or_else(|| wrong_type("relative_path"))?,
            seq: u64s(batch, 1, "chunk_seq")?,
            fdata: u64s(batch, 2, "fdata_offset")?,
            size: u64s(batch, 3, "uncompressed_size")?,
            mode: batch
                .column(mode)
                .as_primitive_opt::<UInt32Type>()
                .cloned()
                .ok_or_else(|| wrong_type("mode"))?,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.path.len()
    }

    pub(crate) fn path(&self, i: usize) -> &str {
        self.path.value(i)
    }

    pub(crate) fn key(&self, i: usize) -> SliceKey {
        SliceKey {
            chunk_seq: self.seq.value(i),
            fdata_offset: self.fdata.value(i),
            uncompressed_size: self.size.value(i),
            mode: self.mode.is_valid(i).then(|| self.mode.value(i)),
        }
    }
}

/// Typed, zero-copy access to a decoded batch of base columns.
#[derive(Debug, Clone)]
pub(crate) struct RowBatch {
    keys: KeyBatch,
    boff: PrimitiveArray<UInt64Type>,
    bsize: PrimitiveArray<UInt64Type>,
    inner: PrimitiveArray<UInt64Type>,
    comp: BooleanArray,
    sum: FixedSizeBinaryArray,
}

impl RowBatch {
    pub(crate) fn new(batch: &RecordBatch) -> Result<Self> {
        Ok(RowBatch {
            keys: KeyBatch::with_mode_at(batch, 9)?,
            boff: u64s(batch, 4, "blob_offset")?,
            bsize: u64s(batch, 5, "blob_size")?,
            inner: u64s(batch, 6, "blob_inner_offset")?,
            comp: batch
                .column(7)
                .as_boolean_opt()
                .cloned()
                .ok_or_else(|| wrong_type("compressed"))?,
            sum: batch
                .column(8)
                .as_fixed_size_binary_opt()
                .filter(|a| a.value_length() == 32)
                .cloned()
                .ok_or_else(|| wrong_type("checksum"))?,
        })
    }

    /// The columns the lookup shares.
    pub(crate) fn keys(&self) -> &KeyBatch {
        &self.keys
    }

    pub(crate) fn row(&self, i: usize) -> SliceRow {
        let key = self.keys.key(i);
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(self.sum.value(i));
        SliceRow {
            relative_path: self.keys.path(i).to_string(),
            chunk_seq: key.chunk_seq,
            fdata_offset: key.fdata_offset,
            uncompressed_size: key.uncompressed_size,
            blob_offset: self.boff.value(i),
            blob_size: self.bsize.value(i),
            blob_inner_offset: self.inner.value(i),
            compressed: self.comp.value(i),
            checksum,
            mode: key.mode,
        }
    }
}

/// The rows of one file must tile it: offsets 0, s0, s0+s1, ... Returns its size.
pub fn check_file_rows<'a>(
    path: &str,
    rows: impl IntoIterator<Item = &'a SliceRow>,
) -> Result<u64> {
    let mut expect = 0u64;
    for r in rows {
        if r.fdata_offset != expect {
            return Err(Error::corrupt(format!(
                "slices of {path} do not tile the file"
            )));
        }
        expect = expect
            .checked_add(r.uncompressed_size)
            .ok_or_else(|| Error::corrupt(format!("size of {path} overflows")))?;
    }
    Ok(expect)
}
