//! A live archive's package tables: one Iceberg table per plugin,
//! `packages_<plugin>`, holding what the plugin read from each package an
//! append brought, so that DuckDB, Spark or pyiceberg query a mirror's jars or
//! wheels live, as they query a sealed archive's package sections.
//!
//! A table per plugin, not columns in `files`: each plugin has its own typed
//! columns (a jar's coordinates, a wheel's requirements), a package may give
//! several rows (a shaded jar, one per artifact), and `files` has a row per
//! slice, not per file. Columns: `append_seq`, `relative_path`, `pkg_type`,
//! `repo`, `error`, then the plugin's own, typed as in the sealed section.
//!
//! The tables are append logs too, without tombstones: a row is current
//! while its file is, that is, while the file's live rows are of the same
//! `append_seq`. A replace or a delete of the file retires its package rows
//! without a write. They commit with the rows of their append: the `files`
//! snapshot (the commit point) names their data files, and a crash before
//! they are committed is rolled forward, as `meta`'s are (`archive.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{make_array, Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use znippy_format::{
    package_column, package_value, Column, ColumnType, PackageRow, PackageTable, Packages, Plugin,
    Value,
};

use crate::error::{Result, RowProblem, StoreError};

/// The table of `plugin`'s rows.
pub(crate) fn table_name(plugin: &str) -> String {
    format!("packages_{plugin}")
}

/// Iceberg schema of a package table with `columns` after the common ones.
pub(crate) fn schema(columns: &[Column]) -> Result<Schema> {
    let s = |id, name: &str, required| -> Arc<NestedField> {
        NestedField::new(id, name, Type::Primitive(PrimitiveType::String), required).into()
    };
    let mut fields = vec![
        NestedField::required(1, "append_seq", Type::Primitive(PrimitiveType::Long)).into(),
        s(2, "relative_path", true),
        NestedField::required(3, "pkg_type", Type::Primitive(PrimitiveType::Int)).into(),
        s(4, "repo", true),
        s(5, "error", false),
    ];
    // The plugin's columns, then the ids of their nested fields.
    let mut next = 6 + columns.len() as i32;
    for (i, c) in columns.iter().enumerate() {
        let id = 6 + i as i32;
        let string = || Type::Primitive(PrimitiveType::String);
        let ty = match c.ty {
            ColumnType::Str => string(),
            ColumnType::I64 => Type::Primitive(PrimitiveType::Long),
            ColumnType::StrList => {
                next += 1;
                Type::List(ListType::new(
                    NestedField::list_element(next - 1, string(), false).into(),
                ))
            }
            ColumnType::StrMap => {
                next += 2;
                Type::Map(MapType::new(
                    NestedField::map_key_element(next - 2, string()).into(),
                    NestedField::map_value_element(next - 1, string(), false).into(),
                ))
            }
        };
        fields.push(NestedField::optional(id, &c.name, ty).into());
    }
    Ok(Schema::builder().with_fields(fields).build()?)
}

/// One append's package rows for one table.
#[derive(Debug, Clone)]
pub(crate) struct LogRows {
    pub pkg_type: i8,
    pub repo: String,
    pub rows: Vec<PackageRow>,
    pub append_seq: u64,
}

/// The rows as an Arrow batch of `table`, with its field ids and the
/// nested fields named as Iceberg names them.
pub(crate) fn batch(table: &Table, columns: &[Column], log: &[LogRows]) -> Result<RecordBatch> {
    let arrow = Arc::new(schema_to_arrow_schema(table.metadata().current_schema())?);
    let names = arrow.fields().iter().skip(5).map(|f| f.name().as_str());
    if !names.eq(columns.iter().map(|c| c.name.as_str())) {
        // A build whose plugin has other columns than the table was made with.
        return Err(StoreError::Schema {
            table: table.identifier().to_string(),
            source: arrow_schema::ArrowError::SchemaError(
                "the plugin's columns are not the table's; append with the znippy that made it"
                    .into(),
            ),
        });
    }
    let mut seq = Int64Builder::new();
    let mut path = StringBuilder::new();
    let mut pkg = Int32Builder::new();
    let mut repo = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut rows: Vec<&PackageRow> = Vec::new();
    for l in log {
        for r in &l.rows {
            let s = i64::try_from(l.append_seq).map_err(|_| StoreError::BadRow {
                column: "append_seq",
                problem: RowProblem::TooLarge(l.append_seq),
            })?;
            seq.append_value(s);
            path.append_value(&r.path);
            pkg.append_value(i32::from(l.pkg_type));
            repo.append_value(&l.repo);
            error.append_option(r.error.as_deref());
            rows.push(r);
        }
    }
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(seq.finish()),
        Arc::new(path.finish()),
        Arc::new(pkg.finish()),
        Arc::new(repo.finish()),
        Arc::new(error.finish()),
    ];
    for (i, c) in columns.iter().enumerate() {
        let values = rows.iter().map(|r| r.values.get(i).unwrap_or(&Value::Null));
        let to = arrow.field(5 + i).data_type();
        cols.push(retype(package_column(c.ty, values), to)?);
    }
    RecordBatch::try_new(arrow, cols).map_err(|source| StoreError::Schema {
        table: table.identifier().to_string(),
        source,
    })
}

/// `a` with the data type `to`, which has its layout and differs in the
/// names and metadata of its nested fields only.
fn retype(a: ArrayRef, to: &DataType) -> Result<ArrayRef> {
    fn data(
        d: arrow_data::ArrayData,
        to: &DataType,
    ) -> std::result::Result<arrow_data::ArrayData, arrow_schema::ArrowError> {
        let children: Vec<_> = match to {
            DataType::List(f) | DataType::Map(f, _) => {
                vec![data(d.child_data()[0].clone(), f.data_type())?]
            }
            DataType::Struct(fields) => d
                .child_data()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| data(c.clone(), f.data_type()))
                .collect::<std::result::Result<_, _>>()?,
            _ => return Ok(d),
        };
        d.into_builder()
            .data_type(to.clone())
            .child_data(children)
            .build()
    }
    let d = data(a.to_data(), to).map_err(|source| StoreError::Schema {
        table: "a package table".into(),
        source,
    })?;
    Ok(make_array(d))
}

/// A package table's rows, by path: `(append_seq, (pkg_type, repo), row)`,
/// in table order.
pub(crate) type Scanned = BTreeMap<String, Vec<(u64, (i8, String), PackageRow)>>;

/// Decodes scanned batches of a package table with `columns`.
pub(crate) fn rows(batches: &[RecordBatch], columns: &[Column], into: &mut Scanned) -> Result<()> {
    let bad = |column: &'static str| StoreError::BadRow {
        column,
        problem: RowProblem::WrongType,
    };
    for b in batches {
        let col = |name: &'static str| b.column_by_name(name).ok_or_else(|| bad(name));
        let seq = col("append_seq")?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad("append_seq"))?;
        let path = col("relative_path")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("relative_path"))?;
        let pkg = col("pkg_type")?
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| bad("pkg_type"))?;
        let repo = col("repo")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("repo"))?;
        let error = col("error")?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("error"))?;
        for r in 0..b.num_rows() {
            let mut values = Vec::with_capacity(columns.len());
            for c in columns {
                let a = b
                    .column_by_name(&c.name)
                    .ok_or_else(|| bad("a plugin column"))?;
                values.push(
                    package_value(a.as_ref(), c.ty, r).ok_or_else(|| bad("a plugin column"))?,
                );
            }
            let pkg_type = i8::try_from(pkg.value(r)).map_err(|_| bad("pkg_type"))?;
            let key = (pkg_type, repo.value(r).to_string());
            let append_seq = u64::try_from(seq.value(r)).map_err(|_| bad("append_seq"))?;
            into.entry(path.value(r).to_string()).or_default().push((
                append_seq,
                key,
                PackageRow {
                    path: path.value(r).to_string(),
                    error: error.is_valid(r).then(|| error.value(r).to_string()),
                    values,
                },
            ));
        }
    }
    Ok(())
}

/// The current package rows of `plugin`'s table: those whose file is live
/// at the `append_seq` that wrote them, as `live` gives each path's.
pub(crate) fn current(
    plugin: &dyn Plugin,
    scanned: Scanned,
    live: &HashMap<&str, u64>,
    into: &mut Packages,
) {
    let columns = plugin.columns();
    for (path, rows) in scanned {
        let Some(&seq) = live.get(path.as_str()) else {
            continue;
        };
        for (s, key, row) in rows {
            if s != seq {
                continue;
            }
            into.tables
                .entry(key)
                .or_insert_with(|| PackageTable {
                    name: plugin.name().to_string(),
                    columns: columns.clone(),
                    rows: Vec::new(),
                })
                .rows
                .push(row);
        }
    }
}
