//! The `.znippy` container: a seekable, deduplicating archive with an Arrow index.
//!
//! An archive is a region of *blobs* (zstd frames, or raw bytes when compression
//! does not pay) followed by a *tail* of index sections and a 16-byte footer:
//!
//! ```text
//! [ blobs ][ pad ][ packages? ][ data index ][ trie ][ meta? ][ manifest ][ ZNPYMIDX u64 ]
//! ```
//!
//! * The **data index** lists every *slice* (a piece of a file inside a blob,
//!   with its BLAKE3) in write order, row `i` being slice `i`; the **trie**
//!   (`fst::Map` shards of 4,096 paths, each a zstd frame) maps each path to
//!   its first data row, and the rows of a file follow one another from
//!   there. When the rows are in path order already (every compress of a
//!   directory), a **batch trie** takes its place: the first path of each
//!   256-row batch, so each path is stored once and a path's batch is
//!   searched. Index sections are Arrow IPC files, so pyarrow, Polars or
//!   DuckDB can read them by slicing the archive.
//! * A reader finds everything from the footer: one 16-byte read at the end, one
//!   read of the manifest. Getting one file reads the (batch) trie's end and
//!   one of its shards, one batch of the data index and that file's blobs,
//!   whatever the size of the archive ([`Archive`]). When the trie cannot
//!   answer, the data index is read once and sorted by path, with the same
//!   answers. Archives of format versions 1 to 7 (which had a trie of plain
//!   shards and no batch trie; before 7 a *lookup*, the slices sorted by
//!   path; before 5 a trie of one map; before 4 a lookup that repeated the
//!   data index's columns) read as before.
//! * Writing goes through one [`Engine`] (slice, pack small files, hash, dedupe,
//!   compress on a worker pool, write in order) and one tail writer
//!   ([`write_tail`]), shared by [`compress`], [`append`] and the store's seal, so
//!   the same input always gives the same bytes, whatever the thread count.
//!
//! The byte-level contract is `docs/format.md` in the repository.
//!
//! Modules, from the bytes up:
//!
//! - Layout and encoding: `props.rs` (archive properties), `path.rs` (the one
//!   path validator), `kind.rs` (file, link, directory), `row.rs` (slice rows),
//!   `schema.rs` (every section's Arrow schema), `ipc.rs` (Arrow IPC sections,
//!   bounded), `manifest.rs`, `trie.rs` (the fst path map), `meta.rs` (the
//!   metadata table), `meta_arrow.rs` (a value as Arrow columns, shared with
//!   the store).
//! - Writing: `layout.rs` (packing and dedupe decisions), `engine.rs` (the
//!   worker pool that slices, hashes and compresses), `pages.rs` (its
//!   huge-page buffers), `spare.rs` (what a one-job batch leaves for the
//!   next), `tail.rs` (the one tail writer), `writer.rs`
//!   (compress, append, merge, recover), `undo.rs` (an append's undo file),
//!   `repack.rs` (a blob region re-packed around dead slices).
//! - Reading: `io.rs` (positioned reads, the reader's only door), `reader.rs`
//!   ([`Archive`]), `blobs.rs` (one slice out of a blob, checked),
//!   `extract.rs` (whole-archive extraction), `beneath.rs` (paths opened below
//!   a directory without following links).
//! - Inputs: `scan.rs` (a directory as one ordered batch), `tar.rs` (a tar
//!   stream as a batch).
//! - Durability: `durable.rs` (every fsync of the format, the store and the
//!   seal), `failpoint.rs` (the named crash points crash tests die at) and,
//!   for those tests only, `powerloss.rs` (what a power cut would keep).
//! - `error.rs`: the crate's one [`Error`].
//!
//! ```
//! use znippy_format::{compress, Archive, ArchiveProps, InputFile, Metadata};
//!
//! let files = vec![Ok(InputFile::from_bytes("hello.txt", b"hello".to_vec(), Some(0o644)))];
//! let mut bytes = Vec::new();
//! compress(&mut bytes, [files], ArchiveProps::default(), 2, &Metadata::Absent, &mut |_| {})?;
//!
//! let archive = Archive::open(bytes)?;
//! let mut out = Vec::new();
//! archive.read_file("hello.txt", &mut out)?;
//! assert_eq!(out, b"hello");
//! # Ok::<(), znippy_format::Error>(())
//! ```

mod beneath;
mod blobs;
pub mod durable;
mod engine;
mod error;
mod extract;
mod failpoint;
mod io;
mod ipc;
mod kind;
mod layout;
mod manifest;
mod meta;
mod meta_arrow;
mod package;
mod pages;
mod path;
#[cfg(feature = "failpoints")]
pub mod powerloss;
mod probe;
mod props;
mod reader;
mod repack;
mod row;
mod scan;
mod schema;
mod signature;
mod spare;
mod tail;
mod tar;
mod trie;
mod undo;
mod writer;

pub use blobs::{BlobRegion, BlobScratch};
pub use engine::{codec_calls, Batch, BatchStats, Changed, Engine, InputFile, Source};
pub use error::{Error, Result};
pub use extract::{extract_all, extract_all_with, ExtractOptions, ExtractStats};
pub use failpoint::failpoint;
pub use io::{CountingReader, ReadAt, READ_PIECE};
pub use kind::{Kind, MAX_LINK_TARGET, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
pub use manifest::SectionEntry;
pub use meta::{
    MetaCursor, MetaQuery, MetaRow, MetaSearch, MetaTable, MetaValue, Metadata, PageLimit,
};
pub use meta_arrow::{MetaValueBuilder, MetaValueColumns};
pub use package::{
    column as package_column, value as package_value, Column, ColumnType, Follow, Outcome,
    PackageRow, PackageTable, Packages, Plugin, Plugins, Value, Window, WindowReader, COLUMNS_KEY,
    MAX_VALUE_LEN, PREFIX, WINDOW_HALF,
};
pub use path::{check_nesting, check_twins, nfc, validate as validate_path, MAX_PATH_LEN};
pub use props::{ArchiveProps, CODEC, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};
pub use reader::{Archive, Entry, TrieState};
pub use repack::{repack, RepackStats};
pub use row::{check_file_rows, SliceRow};
pub use scan::{scan_dir, walk, Found, Scan, ScanOptions, ScannedFile, Skipped, WALK_STACK};
pub use schema::{
    base_schema, lookup_schema, manifest_schema, meta_schema, BATCH_ROWS, BATCH_ROWS_KEY,
    BATCH_TRIE, FORMAT_VERSION, LOOKUP, META, RESERVED, RESERVED_PKG_TYPE, SIGNATURE,
    SMALL_BATCH_ROWS, TRIE, VERSION_KEY,
};
pub use signature::{signed_content, MAX_SIGNATURES, MAX_SIGNATURE_LEN};
pub use tail::{write_signed_tail, write_tail, Tail, TailInfo, ALIGN, FOOTER_LEN, MAGIC};
pub use tar::{TarEntries, MAX_TAR_EXTENSION};
pub use undo::{undo_path, Recovery};
pub use writer::{
    add_signature, append, append_with, compress, compress_with, merge_batch, recover, MetaUpdate,
    Summary,
};
