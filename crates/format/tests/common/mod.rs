//! Helpers shared by the integration tests: input trees, archives in memory, a
//! reader that records what it reads, and a hand-made tail writer for crafting
//! hostile archives that the real writer would refuse to produce.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use arrow_array::builder::{
    BooleanBuilder, FixedSizeBinaryBuilder, Int8Builder, StringBuilder, UInt32Builder,
    UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::writer::FileWriter;
use znippy_format::{
    base_schema, compress, manifest_schema, ArchiveProps, InputFile, MetaTable, Metadata, ReadAt,
    SliceRow, RESERVED_PKG_TYPE, TRIE,
};
// Each test binary takes what it needs of these.
#[allow(unused_imports)]
pub use znippy_testkit::data::{mixed, noise, text};

/// Writes `files` (path, bytes, mode) below `root`.
pub fn write_tree(root: &Path, files: &[(String, Vec<u8>, u32)]) {
    use std::os::unix::fs::PermissionsExt;
    for (p, bytes, mode) in files {
        let full = root.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(&full, bytes).unwrap();
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
}

/// Compresses in-memory files as one batch and returns the archive bytes.
pub fn archive_of(files: &[(String, Vec<u8>)], props: ArchiveProps, meta: &Metadata) -> Vec<u8> {
    let inputs: Vec<_> = files
        .iter()
        .map(|(p, b)| Ok(InputFile::from_bytes(p.clone(), b.clone(), Some(0o644))))
        .collect();
    let mut out = Vec::new();
    compress(&mut out, [inputs], props, 2, meta, &mut |_| {}).unwrap();
    out
}

/// Small properties so tests exercise chunking and packing with small inputs.
pub fn small_props() -> ArchiveProps {
    ArchiveProps {
        chunk_size: 64 << 10,
        pack_threshold: 16 << 10,
        pack_size: 32 << 10,
        level: 3,
    }
}

/// A byte source that records the (offset, len) of every read.
pub struct Recording {
    pub bytes: Vec<u8>,
    pub reads: Mutex<Vec<(u64, u64)>>,
    /// The threads that read.
    pub readers: Mutex<std::collections::HashSet<std::thread::ThreadId>>,
}

impl Recording {
    pub fn new(bytes: Vec<u8>) -> Arc<Self> {
        Arc::new(Recording {
            bytes,
            reads: Mutex::new(Vec::new()),
            readers: Mutex::default(),
        })
    }
    pub fn take(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.reads.lock().unwrap())
    }
    pub fn total(&self) -> u64 {
        self.reads.lock().unwrap().iter().map(|r| r.1).sum()
    }
}

impl ReadAt for Recording {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.reads.lock().unwrap().push((offset, buf.len() as u64));
        self.readers
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        self.bytes.as_slice().read_exact_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }
}

/// A manifest row: pkg_type, module, offset, len, rows, blake3.
pub type ManifestRow = (i8, String, u64, u64, u64, [u8; 32]);

/// One section of a hand-made tail.
pub struct RawSection {
    pub pkg_type: i8,
    pub module: String,
    pub bytes: Vec<u8>,
    pub rows: u64,
}

pub fn rows_batch(rows: &[SliceRow]) -> RecordBatch {
    let mut path = StringBuilder::new();
    let mut cols: Vec<UInt64Builder> = (0..6).map(|_| UInt64Builder::new()).collect();
    let mut comp = BooleanBuilder::new();
    let mut sum = FixedSizeBinaryBuilder::new(32);
    let mut mode = UInt32Builder::new();
    for r in rows {
        path.append_value(&r.relative_path);
        for (b, v) in cols.iter_mut().zip([
            r.chunk_seq,
            r.fdata_offset,
            r.uncompressed_size,
            r.blob_offset,
            r.blob_size,
            r.blob_inner_offset,
        ]) {
            b.append_value(v);
        }
        comp.append_value(r.compressed);
        sum.append_value(r.checksum).unwrap();
        mode.append_option(r.mode);
    }
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(path.finish())];
    arrays.extend(cols.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    arrays.push(Arc::new(comp.finish()));
    arrays.push(Arc::new(sum.finish()));
    arrays.push(Arc::new(mode.finish()));
    RecordBatch::try_new(base_schema(), arrays).unwrap()
}

pub fn ipc_bytes(batch: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = FileWriter::try_new(&mut out, &batch.schema()).unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

/// Assembles `blobs` + sections + manifest + footer with no validation at all,
/// with manifest rows as given (`fix` may then tamper with them).
pub fn assemble(
    blobs: &[u8],
    sections: &[RawSection],
    props: ArchiveProps,
    fix: &dyn Fn(&mut Vec<ManifestRow>),
) -> Vec<u8> {
    let mut out = blobs.to_vec();
    let blob_end = out.len() as u64;
    let mut rows = Vec::new();
    for s in sections {
        out.resize(out.len().next_multiple_of(64), 0);
        rows.push((
            s.pkg_type,
            s.module.clone(),
            out.len() as u64,
            s.bytes.len() as u64,
            s.rows,
            *blake3::hash(&s.bytes).as_bytes(),
        ));
        out.extend_from_slice(&s.bytes);
    }
    fix(&mut rows);
    let mut md = HashMap::new();
    md.insert(
        "znippy.chunk_size".to_string(),
        props.chunk_size.to_string(),
    );
    md.insert(
        "znippy.pack_threshold".to_string(),
        props.pack_threshold.to_string(),
    );
    md.insert("znippy.pack_size".to_string(), props.pack_size.to_string());
    md.insert("znippy.codec".to_string(), "zstd".to_string());
    md.insert("znippy.level".to_string(), props.level.to_string());
    md.insert("znippy.blob_end".to_string(), blob_end.to_string());
    let schema = manifest_schema(md);
    let mut pkg = Int8Builder::new();
    let mut repo = StringBuilder::new();
    let mut module = StringBuilder::new();
    let mut u: Vec<UInt64Builder> = (0..3).map(|_| UInt64Builder::new()).collect();
    let mut h = FixedSizeBinaryBuilder::new(32);
    for (p, m, o, l, r, hash) in &rows {
        pkg.append_value(*p);
        repo.append_value("");
        module.append_value(m);
        u[0].append_value(*o);
        u[1].append_value(*l);
        u[2].append_value(*r);
        h.append_value(hash).unwrap();
    }
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(pkg.finish()),
        Arc::new(repo.finish()),
        Arc::new(module.finish()),
    ];
    cols.extend(u.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    cols.push(Arc::new(h.finish()));
    let manifest = ipc_bytes(&RecordBatch::try_new(schema, cols).unwrap());
    out.resize(out.len().next_multiple_of(64), 0);
    let manifest_offset = out.len() as u64;
    out.extend_from_slice(&manifest);
    out.extend_from_slice(b"ZNPYMIDX");
    out.extend_from_slice(&manifest_offset.to_le_bytes());
    out
}

/// A hand-made archive with the given rows as its data sub-index and no
/// trie: lets a test put paths or numbers in an archive that our writer
/// refuses.
pub fn craft(blobs: &[u8], rows: &[SliceRow], props: ArchiveProps) -> Vec<u8> {
    assemble(blobs, &crafted_sections(rows), props, &|_| {})
}

/// As [`craft`], with a version-5 trie of `keys` (each path and its first
/// data row, in byte order) in one shard.
pub fn craft_with_trie(
    blobs: &[u8],
    rows: &[SliceRow],
    keys: &[(&str, u64)],
    props: ArchiveProps,
) -> Vec<u8> {
    let mut sections = crafted_sections(rows);
    sections.push(RawSection {
        pkg_type: RESERVED_PKG_TYPE,
        module: TRIE.into(),
        bytes: sharded_trie(keys, 4_096),
        rows: keys.len() as u64,
    });
    assemble(blobs, &sections, props, &|_| {})
}

/// The data sub-index of [`craft`], the only section a version-7 archive
/// needs.
fn crafted_sections(rows: &[SliceRow]) -> Vec<RawSection> {
    vec![RawSection {
        pkg_type: 0,
        module: "files".into(),
        bytes: ipc_bytes(&rows_batch(rows)),
        rows: rows.len() as u64,
    }]
}

/// A version-8 trie section of `keys` in shards of `shard_keys`, laid out
/// by hand as docs/format.md (section 6.3) describes it: each shard a zstd
/// frame, at level 3, of its map.
pub fn sharded_trie(keys: &[(&str, u64)], shard_keys: usize) -> Vec<u8> {
    sharded_trie_with(keys, shard_keys, |_, map| {
        zstd::bulk::compress(&map, 3).unwrap()
    })
}

/// [`sharded_trie`] with shard `i` stored as `stored(i, its map's bytes)`
/// returns, its record's hash of those bytes.
pub fn sharded_trie_with(
    keys: &[(&str, u64)],
    shard_keys: usize,
    stored: impl Fn(usize, Vec<u8>) -> Vec<u8>,
) -> Vec<u8> {
    let map = |pairs: &mut dyn Iterator<Item = (&str, u64)>| {
        let mut b = fst::MapBuilder::memory();
        for (k, v) in pairs {
            b.insert(k, v).unwrap();
        }
        b.into_inner().unwrap()
    };
    let (mut out, mut records, mut lasts) = (Vec::new(), Vec::new(), Vec::new());
    for (i, shard) in keys.chunks(shard_keys).enumerate() {
        let bytes = stored(i, map(&mut shard.iter().copied()));
        records.extend_from_slice(&(out.len() as u64).to_le_bytes());
        records.extend_from_slice(blake3::hash(&bytes).as_bytes());
        out.extend_from_slice(&bytes);
        lasts.push((shard[shard.len() - 1].0, i as u64));
    }
    let fence = map(&mut lasts.into_iter());
    let shards = records.len() as u64 / 40;
    let hash = blake3::hash(&[fence.as_slice(), &records].concat());
    out.extend_from_slice(&fence);
    out.extend_from_slice(&records);
    out.extend_from_slice(hash.as_bytes());
    for n in [fence.len() as u64, shards, shard_keys as u64] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out
}

/// The trie section name, re-exported for tests that strip it.
pub const TRIE_NAME: &str = TRIE;

/// A slice row pointing at a raw blob.
pub fn raw_row(path: &str, seq: u64, blob_offset: u64, bytes: &[u8]) -> SliceRow {
    SliceRow {
        relative_path: path.to_string(),
        chunk_seq: seq,
        fdata_offset: 0,
        uncompressed_size: bytes.len() as u64,
        blob_offset,
        blob_size: bytes.len() as u64,
        blob_inner_offset: 0,
        compressed: false,
        checksum: *blake3::hash(bytes).as_bytes(),
        mode: Some(0o644),
    }
}

pub fn meta_with(rows: &[(Option<&str>, &str, &str)]) -> Metadata {
    let mut t = MetaTable::new();
    for (p, k, v) in rows {
        t.set(*p, k, znippy_format::MetaValue::infer(v)).unwrap();
    }
    Metadata::Present(t)
}
