//! The two Iceberg tables of a live archive and their rows.
//!
//! `files` holds one row per slice, as the container's base columns (offsets as
//! `long`, the checksum as `fixed[32]`) plus `append_seq` (which append wrote it)
//! and `tombstone` (a delete), and, for readers that do not decode `mode`'s
//! type bits, `kind` (`file`, `symlink`, `dir`) and a link's `link_target`. `meta` holds the metadata rows plus the same two
//! bookkeeping columns. Both tables are append logs: for a path (or a meta
//! `(key, path)`), the rows of the highest `append_seq` are the current ones, and
//! a tombstone there means deleted.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, FixedSizeBinaryBuilder, Int32Builder, Int64Builder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use futures::TryStreamExt;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataFile, DataFileFormat, ManifestList, ManifestStatus, NestedField, PrimitiveType, Schema,
    Snapshot, TableMetadata, Type,
};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use znippy_format::{Kind, MetaValue, MetaValueBuilder, MetaValueColumns, SliceRow};

use crate::backend::Backend;
use crate::error::{Result, RowProblem, StoreError};
use crate::segments::SegmentRef;
use crate::storage;

/// Name of the slice table.
pub const FILES: &str = "files";
/// Name of the metadata table.
pub const META: &str = "meta";

/// One of the two Iceberg tables of an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// `files`: one row per slice, and a tombstone per delete.
    Files,
    /// `meta`: one row per metadata fact, and a tombstone per delete.
    Meta,
}

impl TableKind {
    /// Both, in the order a listing names them.
    pub const ALL: [TableKind; 2] = [TableKind::Files, TableKind::Meta];

    /// The table's name in the archive's namespace.
    pub fn name(self) -> &'static str {
        match self {
            TableKind::Files => FILES,
            TableKind::Meta => META,
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

fn req(id: i32, name: &str, t: PrimitiveType) -> Arc<NestedField> {
    NestedField::required(id, name, Type::Primitive(t)).into()
}
fn opt(id: i32, name: &str, t: PrimitiveType) -> Arc<NestedField> {
    NestedField::optional(id, name, Type::Primitive(t)).into()
}

/// Iceberg schema of `files`.
pub fn files_schema() -> Schema {
    use PrimitiveType::*;
    Schema::builder()
        .with_fields(vec![
            req(1, "relative_path", String),
            req(2, "chunk_seq", Long),
            req(3, "fdata_offset", Long),
            req(4, "uncompressed_size", Long),
            req(5, "blob_offset", Long),
            req(6, "blob_size", Long),
            req(7, "blob_inner_offset", Long),
            req(8, "compressed", Boolean),
            req(9, "checksum", Fixed(32)),
            opt(10, "mode", Int),
            req(11, "append_seq", Long),
            req(12, "tombstone", Boolean),
            opt(13, "kind", String),
            opt(14, "link_target", String),
            opt(15, "segment", String),
            opt(16, "segment_start", Long),
        ])
        .build()
        .expect("a static, valid schema")
}

/// Iceberg schema of `meta`.
pub fn meta_schema() -> Schema {
    use PrimitiveType::*;
    Schema::builder()
        .with_fields(vec![
            opt(1, "relative_path", String),
            req(2, "key", String),
            req(3, "value_type", Int),
            opt(4, "v_str", String),
            opt(5, "v_i64", Long),
            opt(6, "v_f64", Double),
            opt(7, "v_bool", Boolean),
            opt(8, "v_bytes", Binary),
            req(9, "append_seq", Long),
            req(10, "tombstone", Boolean),
        ])
        .build()
        .expect("a static, valid schema")
}

/// A row of `files`: a slice (or a tombstone, whose slice fields are zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRow {
    /// The slice.
    pub slice: SliceRow,
    /// The append that wrote it.
    pub append_seq: u64,
    /// Whether it deletes the path.
    pub tombstone: bool,
    /// A symbolic link's target (the slice's bytes), as text for SQL readers.
    pub link_target: Option<String>,
    /// The blob segment its blob is in, on object storage.
    pub segment: Option<SegmentRef>,
}

/// A row of `meta`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaLogRow {
    /// The path, or `None` for archive-level facts.
    pub path: Option<String>,
    /// The key.
    pub key: String,
    /// The value (ignored for tombstones).
    pub value: MetaValue,
    /// The append that wrote it.
    pub append_seq: u64,
    /// Whether it removes the key.
    pub tombstone: bool,
}

fn long(v: u64, column: &'static str) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::BadRow {
        column,
        problem: RowProblem::TooLarge(v),
    })
}

fn ulong(v: i64, column: &'static str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::BadRow {
        column,
        problem: RowProblem::Negative(v),
    })
}

fn schema_error(table: &Table) -> impl FnOnce(arrow_schema::ArrowError) -> StoreError + '_ {
    |source| StoreError::Schema {
        table: table.identifier().to_string(),
        source,
    }
}

fn batch_for(table: &Table, cols: Vec<ArrayRef>) -> Result<RecordBatch> {
    let schema = schema_to_arrow_schema(table.metadata().current_schema())?;
    RecordBatch::try_new(Arc::new(schema), cols).map_err(schema_error(table))
}

/// Adds the columns of [`files_schema`] that `table` lacks (it was created
/// by an earlier znippy), as optional columns its old rows read as null. A
/// no-op on a current table.
pub async fn upgrade_files(catalog: &Backend, table: Table) -> Result<Table> {
    let missing = missing_columns(table.metadata().current_schema(), &files_schema());
    if missing.is_empty() {
        return Ok(table);
    }
    let tx = Transaction::new(&table);
    let action = missing
        .into_iter()
        .fold(tx.update_schema(), |a, c| a.add_column(c));
    Ok(action.apply(tx)?.commit(catalog.catalog()).await?)
}

/// The columns of `want` that `current` lacks, as optional columns.
fn missing_columns(current: &Schema, want: &Schema) -> Vec<AddColumn> {
    want.as_struct()
        .fields()
        .iter()
        .filter(|f| current.field_by_name(&f.name).is_none())
        .map(|f| AddColumn::optional(&f.name, (*f.field_type).clone()))
        .collect()
}

/// Arrow batch of `files` rows, with the table's field ids.
pub fn files_batch(table: &Table, rows: &[FileRow]) -> Result<RecordBatch> {
    let mut path = StringBuilder::new();
    let mut longs: Vec<Int64Builder> = (0..6).map(|_| Int64Builder::new()).collect();
    let mut comp = BooleanBuilder::new();
    let mut sum = FixedSizeBinaryBuilder::new(32);
    let mut mode = Int32Builder::new();
    let mut seq = Int64Builder::new();
    let mut tomb = BooleanBuilder::new();
    let mut kind = StringBuilder::new();
    let mut target = StringBuilder::new();
    let mut segment = StringBuilder::new();
    let mut segment_start = Int64Builder::new();
    for r in rows {
        let s = &r.slice;
        path.append_value(&s.relative_path);
        for (b, (v, column)) in longs.iter_mut().zip([
            (s.chunk_seq, "chunk_seq"),
            (s.fdata_offset, "fdata_offset"),
            (s.uncompressed_size, "uncompressed_size"),
            (s.blob_offset, "blob_offset"),
            (s.blob_size, "blob_size"),
            (s.blob_inner_offset, "blob_inner_offset"),
        ]) {
            b.append_value(long(v, column)?);
        }
        comp.append_value(s.compressed);
        sum.append_value(s.checksum).map_err(schema_error(table))?;
        mode.append_option(s.mode.map(|m| m as i32));
        seq.append_value(long(r.append_seq, "append_seq")?);
        tomb.append_value(r.tombstone);
        let k = (!r.tombstone)
            .then(|| Kind::of(s.mode).map(Kind::name))
            .transpose()?;
        kind.append_option(k);
        target.append_option(r.link_target.as_deref());
        segment.append_option(r.segment.as_ref().map(|g| &g.key));
        segment_start.append_option(
            r.segment
                .as_ref()
                .map(|g| long(g.start, "segment_start"))
                .transpose()?,
        );
    }
    let mut cols: Vec<ArrayRef> = vec![Arc::new(path.finish())];
    cols.extend(longs.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    cols.push(Arc::new(comp.finish()));
    cols.push(Arc::new(sum.finish()));
    cols.push(Arc::new(mode.finish()));
    cols.push(Arc::new(seq.finish()));
    cols.push(Arc::new(tomb.finish()));
    cols.push(Arc::new(kind.finish()));
    cols.push(Arc::new(target.finish()));
    cols.push(Arc::new(segment.finish()));
    cols.push(Arc::new(segment_start.finish()));
    batch_for(table, cols)
}

/// Arrow batch of `meta` rows, with the table's field ids.
pub fn meta_batch(table: &Table, rows: &[MetaLogRow]) -> Result<RecordBatch> {
    let mut path = StringBuilder::new();
    let mut key = StringBuilder::new();
    let mut ty = Int32Builder::new();
    // Iceberg's `binary` is Arrow's LargeBinary: 64-bit offsets.
    let mut values = MetaValueBuilder::<i64>::default();
    let mut seq = Int64Builder::new();
    let mut tomb = BooleanBuilder::new();
    for r in rows {
        path.append_option(r.path.as_deref());
        key.append_value(&r.key);
        ty.append_value(i32::from(r.value.type_code()));
        values.append(&r.value);
        seq.append_value(long(r.append_seq, "append_seq")?);
        tomb.append_value(r.tombstone);
    }
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(path.finish()),
        Arc::new(key.finish()),
        Arc::new(ty.finish()),
    ];
    cols.extend(values.finish());
    cols.push(Arc::new(seq.finish()));
    cols.push(Arc::new(tomb.finish()));
    batch_for(table, cols)
}

/// Data files of fewer rows than this are written uncompressed.
const COMPRESSED_FROM_ROWS: usize = 1024;

/// An embedded catalog under `dir` with the namespace `a`, for the crate's
/// tests.
#[cfg(test)]
pub(crate) async fn test_catalog(
    dir: &std::path::Path,
) -> (crate::RedbCatalog, iceberg::NamespaceIdent) {
    use iceberg::Catalog;
    let c = crate::RedbCatalog::open(&dir.join("c.redb"), &dir.join("w"))
        .await
        .expect("a catalog in a temporary directory");
    let ns = iceberg::NamespaceIdent::new("a".into());
    c.create_namespace(&ns, Default::default())
        .await
        .expect("a namespace in a new catalog");
    (c, ns)
}

/// A table of one required `n: long` column, for the crate's tests.
#[cfg(test)]
pub(crate) fn one_column(name: &str) -> iceberg::TableCreation {
    let n = NestedField::required(1, "n", Type::Primitive(PrimitiveType::Long));
    let schema = Schema::builder().with_fields([n.into()]).build();
    iceberg::TableCreation::builder()
        .name(name.into())
        .schema(schema.expect("one column is a schema"))
        .build()
}

/// Writes `batch` as one parquet data file of `table`, durable, and returns it.
pub async fn write_data_file(table: &Table, batch: RecordBatch) -> Result<Vec<DataFile>> {
    write_batches(table, vec![batch]).await
}

/// [`write_data_file`] for several batches, as they come out of a scan of
/// the same table (their schema is replaced by the table's, whose field ids
/// the writer needs).
pub async fn write_batches(table: &Table, batches: Vec<RecordBatch>) -> Result<Vec<DataFile>> {
    let arrow = Arc::new(schema_to_arrow_schema(table.metadata().current_schema())?);
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    // parquet sets up a zstd context pair per column chunk, written and read:
    // for the few rows of one append that costs more than the bytes it
    // saves (it was the largest cost of a single-file commit). A dictionary
    // per column and page-level statistics (the page index) likewise cost
    // more to build than they give a file of a few rows: without them a
    // one-row `files` file is encoded in 40 µs instead of 87, and iceberg's
    // pruning uses the chunk statistics that stay. The rule is by rows,
    // whoever writes the file: a large append, or a compaction whose merged
    // file reaches the threshold, writes zstd, dictionaries and the index.
    let small = rows < COMPRESSED_FROM_ROWS;
    let props = match small {
        true => WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::Chunk),
        false => {
            WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default()))
        }
    }
    .build();
    let schema = table.metadata().current_schema().clone();
    let parquet = ParquetWriterBuilder::new(props, schema);
    let locations = DefaultLocationGenerator::new(table.metadata())?;
    // A fresh prefix per file: a reused name would overwrite a committed file.
    let names = DefaultFileNameGenerator::new(
        uuid::Uuid::now_v7().to_string(),
        None,
        DataFileFormat::Parquet,
    );
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        locations,
        names,
    );
    let mut writer = DataFileWriterBuilder::new(rolling).build(None).await?;
    for batch in batches {
        let batch = RecordBatch::try_new(arrow.clone(), batch.columns().to_vec())
            .map_err(schema_error(table))?;
        writer.write(batch).await?;
    }
    let files = writer.close().await?;
    storage::sync_new_names(files.iter().map(DataFile::file_path)).await?;
    Ok(files)
}

/// Every batch of `table` at its current snapshot (none for an empty table).
pub async fn scan_all(table: &Table) -> Result<Vec<RecordBatch>> {
    if table.metadata().current_snapshot().is_none() {
        return Ok(Vec::new());
    }
    let stream = table.scan().select_all().build()?.to_arrow().await?;
    Ok(stream.try_collect().await?)
}

/// The rows the snapshots after `since` added, oldest first: what a node
/// that derived its state at `since` has not seen. Every row of the table
/// if `since` is not in the current snapshot's history (or is `None`).
/// Only the manifests each newer snapshot added are read, and only the
/// data files they added.
pub async fn rows_since(table: &Table, since: Option<i64>) -> Result<Vec<RecordBatch>> {
    let md = table.metadata();
    let mut newer = Vec::new();
    let mut found = since.is_none();
    for s in crate::history::ancestors(md) {
        if Some(s.snapshot_id()) == since {
            found = true;
            break;
        }
        newer.push(s);
    }
    if !found {
        return scan_all(table).await;
    }
    let mut files = Vec::new();
    for s in newer.into_iter().rev() {
        let list = manifest_list(table.file_io(), md, s).await?;
        for m in list.entries() {
            if m.added_snapshot_id != s.snapshot_id() {
                continue;
            }
            let manifest = m.load_manifest(table.file_io()).await?;
            files.extend(
                manifest
                    .entries()
                    .iter()
                    .filter(|e| e.status() == ManifestStatus::Added)
                    .map(|e| e.data_file().clone()),
            );
        }
    }
    read_data_files(table, &files).await
}

/// The manifest list of `snap`, a snapshot of the table `metadata` describes.
pub(crate) async fn manifest_list(
    file_io: &FileIO,
    metadata: &TableMetadata,
    snap: &Snapshot,
) -> iceberg::Result<ManifestList> {
    let bytes = file_io.new_input(snap.manifest_list())?.read().await?;
    ManifestList::parse_with_version(&bytes, metadata.format_version())
}

/// The rows of `files`, data files of `table`, in its current schema.
pub async fn read_data_files(table: &Table, files: &[DataFile]) -> Result<Vec<RecordBatch>> {
    let schema = table.metadata().current_schema().clone();
    let fields: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
    let tasks: Vec<_> = files
        .iter()
        .map(|f| {
            Ok(FileScanTask::builder()
                .with_file_size_in_bytes(f.file_size_in_bytes())
                .with_start(0)
                .with_length(f.file_size_in_bytes())
                .with_record_count(Some(f.record_count()))
                .with_data_file_path(f.file_path().to_string())
                .with_data_file_format(f.file_format())
                .with_schema(schema.clone())
                .with_project_field_ids(fields.clone())
                .with_partition(Some(f.partition().clone()))
                .with_case_sensitive(true)
                .build())
        })
        .collect();
    let reader =
        ArrowReaderBuilder::new(table.file_io().clone(), iceberg::Runtime::current()).build();
    let tasks = Box::pin(futures::stream::iter(tasks));
    Ok(reader.read(tasks)?.stream().try_collect().await?)
}

fn col<'a>(b: &'a RecordBatch, column: &'static str) -> Result<&'a dyn Array> {
    b.column_by_name(column)
        .map(|c| c.as_ref())
        .ok_or(StoreError::BadRow {
            column,
            problem: RowProblem::Missing,
        })
}

fn bad(column: &'static str) -> StoreError {
    StoreError::BadRow {
        column,
        problem: RowProblem::WrongType,
    }
}

/// Decodes scanned `files` batches.
pub fn file_rows(batches: &[RecordBatch]) -> Result<Vec<FileRow>> {
    let mut out = Vec::new();
    for b in batches {
        let path = col(b, "relative_path")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("relative_path"))?;
        let l = |n: &'static str| {
            col(b, n).and_then(|c| c.as_primitive_opt::<Int64Type>().ok_or_else(|| bad(n)))
        };
        let (seq, fdata, size, boff, bsize, inner, aseq) = (
            l("chunk_seq")?,
            l("fdata_offset")?,
            l("uncompressed_size")?,
            l("blob_offset")?,
            l("blob_size")?,
            l("blob_inner_offset")?,
            l("append_seq")?,
        );
        let comp = col(b, "compressed")?
            .as_boolean_opt()
            .ok_or_else(|| bad("compressed"))?;
        let tomb = col(b, "tombstone")?
            .as_boolean_opt()
            .ok_or_else(|| bad("tombstone"))?;
        let sum = col(b, "checksum")?
            .as_fixed_size_binary_opt()
            .filter(|a| a.value_length() == 32)
            .ok_or_else(|| bad("checksum"))?;
        let mode = col(b, "mode")?
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| bad("mode"))?;
        let target = col(b, "link_target")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("link_target"))?;
        let segment = col(b, "segment")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("segment"))?;
        let segment_start = l("segment_start")?;
        for r in 0..b.num_rows() {
            let mut checksum = [0u8; 32];
            checksum.copy_from_slice(sum.value(r));
            out.push(FileRow {
                slice: SliceRow {
                    relative_path: path.value(r).to_string(),
                    chunk_seq: ulong(seq.value(r), "chunk_seq")?,
                    fdata_offset: ulong(fdata.value(r), "fdata_offset")?,
                    uncompressed_size: ulong(size.value(r), "uncompressed_size")?,
                    blob_offset: ulong(boff.value(r), "blob_offset")?,
                    blob_size: ulong(bsize.value(r), "blob_size")?,
                    blob_inner_offset: ulong(inner.value(r), "blob_inner_offset")?,
                    compressed: comp.value(r),
                    checksum,
                    mode: mode.is_valid(r).then(|| mode.value(r) as u32),
                },
                append_seq: ulong(aseq.value(r), "append_seq")?,
                tombstone: tomb.value(r),
                link_target: target.is_valid(r).then(|| target.value(r).to_string()),
                segment: match (segment.is_valid(r), segment_start.is_valid(r)) {
                    (true, true) => Some(SegmentRef {
                        start: ulong(segment_start.value(r), "segment_start")?,
                        key: segment.value(r).to_string(),
                    }),
                    (false, false) => None,
                    _ => {
                        return Err(StoreError::BadRow {
                            column: "segment_start",
                            problem: RowProblem::Unpaired("segment"),
                        })
                    }
                },
            });
        }
    }
    Ok(out)
}

/// Decodes scanned `meta` batches.
pub fn meta_rows(batches: &[RecordBatch]) -> Result<Vec<MetaLogRow>> {
    let mut out = Vec::new();
    for b in batches {
        let path = col(b, "relative_path")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("relative_path"))?;
        let key = col(b, "key")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("key"))?;
        let ty = col(b, "value_type")?
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| bad("value_type"))?;
        let values = MetaValueColumns::<i64>::of(b, "meta table")?;
        let seq = col(b, "append_seq")?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad("append_seq"))?;
        let tomb = col(b, "tombstone")?
            .as_boolean_opt()
            .ok_or_else(|| bad("tombstone"))?;
        for r in 0..b.num_rows() {
            let value = values.value(i64::from(ty.value(r)), r)?;
            out.push(MetaLogRow {
                path: path.is_valid(r).then(|| path.value(r).to_string()),
                key: key.value(r).to_string(),
                value,
                append_seq: ulong(seq.value(r), "append_seq")?,
                tombstone: tomb.value(r),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `files` names each entry's kind and a link's target for SQL readers, also
    /// in a table created before those columns existed: opening the archive adds
    /// them as optional columns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_table_has_kind_and_link_target_columns_after_an_upgrade() {
        use iceberg::{TableCreation, TableIdent};
        use znippy_format::{InputFile, S_IFDIR, S_IFLNK};

        use crate::{CreateOptions, Store};

        let tmp = tempfile::tempdir().unwrap();
        let ident = TableIdent::from_strs(["znippy", "old", FILES]).unwrap();
        {
            let store = Store::open(tmp.path(), 2).await.unwrap();
            store.create("old", CreateOptions::default()).await.unwrap();
            // `files` as an earlier znippy created it: without the columns
            // added since.
            let added = ["kind", "link_target", "segment", "segment_start"];
            let current = files_schema();
            let old_fields = current.as_struct().fields().iter();
            let old = Schema::builder()
                .with_fields(
                    old_fields
                        .filter(|f| !added.contains(&f.name.as_str()))
                        .cloned(),
                )
                .build()
                .unwrap();
            assert!(old.field_by_name("kind").is_none());
            store.catalog.purge_table(&ident).await.unwrap();
            let creation = TableCreation::builder()
                .name(FILES.to_string())
                .schema(old)
                .build();
            store
                .catalog
                .create_table(ident.namespace(), creation)
                .await
                .unwrap();
        }
        let store = Store::open(tmp.path(), 2).await.unwrap();
        let files = vec![
            InputFile::from_bytes("f", b"text".to_vec(), Some(0o644)),
            InputFile::from_bytes("l", b"../elsewhere/t".to_vec(), Some(S_IFLNK | 0o777)),
            InputFile::from_bytes("d", Vec::new(), Some(S_IFDIR | 0o750)),
        ];
        store.append("old", files, None).await.unwrap();
        store.delete_file("old", "f").await.unwrap();
        let t = store.catalog.load_table(&ident).await.unwrap();
        let schema = t.metadata().current_schema();
        for column in ["kind", "link_target", "segment", "segment_start"] {
            assert!(schema.field_by_name(column).is_some(), "{column}");
        }
        let batches = scan_all(&t).await.unwrap();
        let mut seen: Vec<(String, bool, Option<String>, Option<String>)> = Vec::new();
        for b in &batches {
            let col = |n: &str| {
                b.column_by_name(n)
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .unwrap()
                    .clone()
            };
            let (path, kind, target) = (col("relative_path"), col("kind"), col("link_target"));
            let tomb = b
                .column_by_name("tombstone")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::BooleanArray>()
                .unwrap()
                .clone();
            for r in 0..b.num_rows() {
                let opt =
                    |a: &arrow_array::StringArray| a.is_valid(r).then(|| a.value(r).to_string());
                seen.push((
                    path.value(r).into(),
                    tomb.value(r),
                    opt(&kind),
                    opt(&target),
                ));
            }
        }
        seen.sort();
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            seen,
            vec![
                ("d".into(), false, s(Kind::Dir.name()), None),
                ("f".into(), false, s(Kind::File.name()), None),
                ("f".into(), true, None, None),
                (
                    "l".into(),
                    false,
                    s(Kind::Symlink.name()),
                    s("../elsewhere/t")
                ),
            ]
        );
        // The store reads its rows back the same way.
        let rows = file_rows(&batches).unwrap();
        let link = rows.iter().find(|r| r.slice.relative_path == "l").unwrap();
        assert_eq!(link.link_target.as_deref(), Some("../elsewhere/t"));
    }
}
