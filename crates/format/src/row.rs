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

/// Builds one record batch of base columns from `rows`, in the given order.
pub(crate) fn to_batch<'a>(
    rows: impl ExactSizeIterator<Item = &'a SliceRow>,
) -> Result<RecordBatch> {
    let n = rows.len();
    let mut path = StringBuilder::with_capacity(n, n * 32);
    let mut seq = UInt64Builder::with_capacity(n);
    let mut fdata = UInt64Builder::with_capacity(n);
    let mut size = UInt64Builder::with_capacity(n);
    let mut boff = UInt64Builder::with_capacity(n);
    let mut bsize = UInt64Builder::with_capacity(n);
    let mut inner = UInt64Builder::with_capacity(n);
    let mut comp = BooleanBuilder::with_capacity(n);
    let mut sum = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut mode = UInt32Builder::with_capacity(n);
    for r in rows {
        path.append_value(&r.relative_path);
        seq.append_value(r.chunk_seq);
        fdata.append_value(r.fdata_offset);
        size.append_value(r.uncompressed_size);
        boff.append_value(r.blob_offset);
        bsize.append_value(r.blob_size);
        inner.append_value(r.blob_inner_offset);
        comp.append_value(r.compressed);
        sum.append_value(r.checksum)
            .map_err(|e| Error::corrupt(format!("checksum column: {e}")))?;
        mode.append_option(r.mode);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(path.finish()),
        Arc::new(seq.finish()),
        Arc::new(fdata.finish()),
        Arc::new(size.finish()),
        Arc::new(boff.finish()),
        Arc::new(bsize.finish()),
        Arc::new(inner.finish()),
        Arc::new(comp.finish()),
        Arc::new(sum.finish()),
        Arc::new(mode.finish()),
    ];
    RecordBatch::try_new(base_schema(), cols)
        .map_err(|e| Error::corrupt(format!("index batch: {e}")))
}

/// Builds one record batch of the version-4 lookup's columns
/// ([`lookup_schema`]) from `rows`, in the given order.
pub(crate) fn to_lookup_batch<'a>(
    rows: impl ExactSizeIterator<Item = &'a SliceRow>,
) -> Result<RecordBatch> {
    let n = rows.len();
    let mut path = StringBuilder::with_capacity(n, n * 32);
    let mut seq = UInt64Builder::with_capacity(n);
    let mut fdata = UInt64Builder::with_capacity(n);
    let mut size = UInt64Builder::with_capacity(n);
    let mut mode = UInt32Builder::with_capacity(n);
    for r in rows {
        path.append_value(&r.relative_path);
        seq.append_value(r.chunk_seq);
        fdata.append_value(r.fdata_offset);
        size.append_value(r.uncompressed_size);
        mode.append_option(r.mode);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(path.finish()),
        Arc::new(seq.finish()),
        Arc::new(fdata.finish()),
        Arc::new(size.finish()),
        Arc::new(mode.finish()),
    ];
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

/// Typed, zero-copy access to a decoded batch of the version-4 lookup.
#[derive(Debug, Clone)]
pub(crate) struct KeyBatch {
    path: StringArray,
    seq: PrimitiveArray<UInt64Type>,
    fdata: PrimitiveArray<UInt64Type>,
    size: PrimitiveArray<UInt64Type>,
    mode: PrimitiveArray<UInt32Type>,
}

impl KeyBatch {
    pub(crate) fn new(batch: &RecordBatch) -> Result<Self> {
        let col = |i: usize| batch.column(i).as_ref();
        let bad = |name: &str| Error::corrupt(format!("lookup column {name} has the wrong type"));
        let u64s = |i: usize, name: &str| {
            col(i)
                .as_primitive_opt::<UInt64Type>()
                .cloned()
                .ok_or_else(|| bad(name))
        };
        Ok(KeyBatch {
            path: col(0)
                .as_string_opt::<i32>()
                .cloned()
                .ok_or_else(|| bad("relative_path"))?,
            seq: u64s(1, "chunk_seq")?,
            fdata: u64s(2, "fdata_offset")?,
            size: u64s(3, "uncompressed_size")?,
            mode: col(4)
                .as_primitive_opt::<UInt32Type>()
                .cloned()
                .ok_or_else(|| bad("mode"))?,
        })
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
    path: StringArray,
    seq: PrimitiveArray<UInt64Type>,
    fdata: PrimitiveArray<UInt64Type>,
    size: PrimitiveArray<UInt64Type>,
    boff: PrimitiveArray<UInt64Type>,
    bsize: PrimitiveArray<UInt64Type>,
    inner: PrimitiveArray<UInt64Type>,
    comp: BooleanArray,
    sum: FixedSizeBinaryArray,
    mode: PrimitiveArray<UInt32Type>,
}

impl RowBatch {
    pub(crate) fn new(batch: &RecordBatch) -> Result<Self> {
        let col = |i: usize| batch.column(i).as_ref();
        let bad = |name: &str| Error::corrupt(format!("index column {name} has the wrong type"));
        let u64s = |i: usize, name: &str| {
            col(i)
                .as_primitive_opt::<UInt64Type>()
                .cloned()
                .ok_or_else(|| bad(name))
        };
        let sum = col(8)
            .as_fixed_size_binary_opt()
            .filter(|a| a.value_length() == 32)
            .cloned()
            .ok_or_else(|| bad("checksum"))?;
        Ok(RowBatch {
            path: col(0)
                .as_string_opt::<i32>()
                .cloned()
                .ok_or_else(|| bad("relative_path"))?,
            seq: u64s(1, "chunk_seq")?,
            fdata: u64s(2, "fdata_offset")?,
            size: u64s(3, "uncompressed_size")?,
            boff: u64s(4, "blob_offset")?,
            bsize: u64s(5, "blob_size")?,
            inner: u64s(6, "blob_inner_offset")?,
            comp: col(7)
                .as_boolean_opt()
                .cloned()
                .ok_or_else(|| bad("compressed"))?,
            sum,
            mode: col(9)
                .as_primitive_opt::<UInt32Type>()
                .cloned()
                .ok_or_else(|| bad("mode"))?,
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

    pub(crate) fn row(&self, i: usize) -> SliceRow {
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(self.sum.value(i));
        SliceRow {
            relative_path: self.path.value(i).to_string(),
            chunk_seq: self.seq.value(i),
            fdata_offset: self.fdata.value(i),
            uncompressed_size: self.size.value(i),
            blob_offset: self.boff.value(i),
            blob_size: self.bsize.value(i),
            blob_inner_offset: self.inner.value(i),
            compressed: self.comp.value(i),
            checksum,
            mode: self.mode.is_valid(i).then(|| self.mode.value(i)),
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
