//! Arrow schemas of every section, the format version, and the reserved names.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};

/// The format version this crate writes, and the newest it reads. Version 1
/// holds regular files; version 2 adds links and directories (`kind.rs`);
/// version 3 compresses the lookup's buffers. Older archives are read, and
/// verified against a tail rebuilt in their own version. Version 4 keeps the
/// row's blob columns and checksum in the data sub-index only: the trie points
/// a path at its first data row, and the lookup keeps what a listing shows.
/// Version 5 cuts the trie into shards, so that a question reads one of them
/// rather than all of it (`trie.rs`). Version 6 adds package sections
/// (`package.rs`), and was written only by an archive that had one. Version 7
/// drops the lookup (the trie names data rows, which hold the rest) and pads
/// Arrow buffers to 8 bytes rather than 64. Version 8 writes an archive whose
/// data rows are already in path order (every `compress` of a directory) with
/// a batch trie ([`BATCH_TRIE`]) in place of the trie: the data sub-index is
/// then itself the sorted copy, and a path needs only its batch found; it
/// also stores each shard of a trie (and of a batch trie) as a zstd frame.
/// Version 9 records `pack_size`, the most a pack holds, which was
/// `chunk_size` before it (`props.rs`). Every archive is written in version 9.
pub const FORMAT_VERSION: u32 = 9;
/// Schema-metadata key carrying the format version in every Arrow section.
pub const VERSION_KEY: &str = "znippy_format_version";
/// Most rows in one Arrow record batch of any section (docs/format.md, section 4).
pub const BATCH_ROWS: usize = 65_536;
/// Schema-metadata key giving a section's batch size: all its batches but the
/// last hold exactly that many rows, so row `r` lives in batch `r / batch_rows`.
pub const BATCH_ROWS_KEY: &str = "znippy.batch_rows";
/// Batch size of the sections a cold `get` decodes one batch of: the lookup
/// in version 3, and from version 4 the data sub-index instead. 256 rows
/// cost 0.2% more archive than 1,024 on a tree of small files, and a quarter
/// of the inflating (docs/benchmarks.md). The sections read whole (meta,
/// manifest, and the data sub-index before version 4) use [`BATCH_ROWS`].
pub const SMALL_BATCH_ROWS: usize = 256;

/// `pkg_type` of the manifest rows of reserved sections.
pub const RESERVED_PKG_TYPE: i8 = -128;
/// Module name of the sorted lookup section, versions 1 to 6.
pub const LOOKUP: &str = "__znippy_lookup__";
/// Module name of the fst trie section.
pub const TRIE: &str = "__znippy_trie__";
/// Module name of the batch trie (from format version 8): the first path of
/// each data batch -> that batch's first row, written instead of the trie
/// when the data rows are in path order.
pub const BATCH_TRIE: &str = "__znippy_batch_trie__";
/// Module name of the metadata section.
pub const META: &str = "__znippy_meta__";
/// Module name of a signature section (`signature.rs`): a detached CMS
/// signature over the archive's identity, after the part it signs.
pub const SIGNATURE: &str = "__znippy_signature__";
/// Every reserved module name, listed once. Code that gathers data sections skips
/// these; a writer refuses a manifest row with any other reserved name, and a
/// reader skips one (docs/format.md, 8.2).
pub const RESERVED: [&str; 5] = [LOOKUP, TRIE, BATCH_TRIE, META, SIGNATURE];

/// `pkg_type` of the data section written by this crate.
pub const DEFAULT_PKG_TYPE: i8 = 0;
/// `repo` of the data section written by this crate.
pub const DEFAULT_REPO: &str = "";
/// `module_name` of the data section written by this crate.
pub const DEFAULT_MODULE: &str = "files";

fn with_version(fields: Vec<Field>, mut md: HashMap<String, String>) -> Schema {
    md.insert(VERSION_KEY.into(), FORMAT_VERSION.to_string());
    Schema::new_with_metadata(fields, md)
}

/// The base columns shared by data sub-indexes and the lookup, in order.
pub fn base_schema() -> SchemaRef {
    static S: LazyLock<SchemaRef> = LazyLock::new(|| {
        Arc::new(with_version(
            vec![
                Field::new("relative_path", DataType::Utf8, false),
                Field::new("chunk_seq", DataType::UInt64, false),
                Field::new("fdata_offset", DataType::UInt64, false),
                Field::new("uncompressed_size", DataType::UInt64, false),
                Field::new("blob_offset", DataType::UInt64, false),
                Field::new("blob_size", DataType::UInt64, false),
                Field::new("blob_inner_offset", DataType::UInt64, false),
                Field::new("compressed", DataType::Boolean, false),
                Field::new("checksum", DataType::FixedSizeBinary(32), false),
                Field::new("mode", DataType::UInt32, true),
            ],
            HashMap::new(),
        ))
    });
    S.clone()
}

/// Columns of the lookup from version 4: the path, where its row is in the
/// data sub-index, and what a listing shows, each as the base columns have
/// it. Before version 4 the lookup holds the [`base_schema`].
pub fn lookup_schema() -> SchemaRef {
    static S: LazyLock<SchemaRef> = LazyLock::new(|| {
        let base = base_schema();
        let keep = [
            "relative_path",
            "chunk_seq",
            "fdata_offset",
            "uncompressed_size",
            "mode",
        ];
        let fields = base
            .fields()
            .iter()
            .filter(|f| keep.contains(&f.name().as_str()))
            .map(|f| f.as_ref().clone())
            .collect();
        Arc::new(with_version(fields, HashMap::new()))
    });
    S.clone()
}

/// Columns of the meta sub-index.
pub fn meta_schema() -> SchemaRef {
    static S: LazyLock<SchemaRef> = LazyLock::new(|| {
        Arc::new(with_version(
            vec![
                Field::new("relative_path", DataType::Utf8, true),
                Field::new("key", DataType::Utf8, false),
                Field::new("value_type", DataType::Int8, false),
                Field::new("v_str", DataType::Utf8, true),
                Field::new("v_i64", DataType::Int64, true),
                Field::new("v_f64", DataType::Float64, true),
                Field::new("v_bool", DataType::Boolean, true),
                Field::new("v_bytes", DataType::Binary, true),
            ],
            HashMap::new(),
        ))
    });
    S.clone()
}

/// Columns of the manifest; `md` carries the archive properties.
pub fn manifest_schema(md: HashMap<String, String>) -> SchemaRef {
    Arc::new(with_version(
        vec![
            Field::new("pkg_type", DataType::Int8, false),
            Field::new("repo", DataType::Utf8, false),
            Field::new("module_name", DataType::Utf8, false),
            Field::new("index_offset", DataType::UInt64, false),
            Field::new("index_len", DataType::UInt64, false),
            Field::new("row_count", DataType::UInt64, false),
            Field::new("blake3", DataType::FixedSizeBinary(32), false),
        ],
        md,
    ))
}

/// The major format version of a section, refused when it is missing or newer
/// than ours.
pub(crate) fn check_version(md: &HashMap<String, String>, what: &str) -> Result<u32> {
    let found = md
        .get(VERSION_KEY)
        .ok_or_else(|| Error::corrupt(format!("{what} has no {VERSION_KEY}")))?;
    let major = found.split('.').next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m @ 1..=FORMAT_VERSION) => Ok(m),
        Some(m) if m > FORMAT_VERSION => Err(Error::UnsupportedVersion {
            found: found.clone(),
            supported: FORMAT_VERSION,
        }),
        _ => Err(Error::corrupt(format!(
            "{what} has format version {found:?}, expected 1 to {FORMAT_VERSION}"
        ))),
    }
}
