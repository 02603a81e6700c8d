//! Arrow IPC *file* sections: writing them in bounded batches, and reading one
//! batch at a time from a byte range without trusting any length inside it.
//!
//! The reader parses the IPC footer itself (with the flatbuffer verifier) instead
//! of using arrow's `FileReader`, so that every buffer it allocates is bounded by
//! the section length that the manifest gave, and so that a request for row `r`
//! reads only the footer and the batch that holds it.

use std::collections::HashMap;
use std::sync::OnceLock;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::reader::{read_footer_length, FileDecoder};
use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_ipc::CompressionType;
use arrow_ipc::{Block, MetadataVersion};
use arrow_schema::{DataType, SchemaRef};

use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::path::MAX_PATH_LEN;
use crate::schema::{check_version, BATCH_ROWS, BATCH_ROWS_KEY, VERSION_KEY};

/// How a section's Arrow buffers are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// Plain buffers: an mmap reader decodes them zero-copy (meta, manifest).
    Plain,
    /// zstd-compressed buffers (Arrow IPC body compression): the data sub-indexes
    /// and, from format version 3, the lookup.
    Zstd,
}

/// Most bytes one record batch of a section may decode to, checked before arrow
/// allocates anything: what a crafted length prefix can cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// At most this many bytes, whatever the batch's length (sections whose
    /// buffers are plain, so that nothing decodes to more than the section).
    AtMost(u64),
    /// At most what the batch's rows of base columns can hold when every path
    /// is as long as a path may be: the bound of the compressed lookup and data
    /// sub-indexes, whose honest size is unknown until they are decoded.
    BaseRows,
}

/// Largest decoded size of one row of the base columns: the path, its offset,
/// six u64s, the checksum, the mode, and a byte for the validity and boolean bits.
const BASE_ROW_MAX: u64 = MAX_PATH_LEN as u64 + 4 + 6 * 8 + 32 + 4 + 2;

impl Decoded {
    /// The limit for a batch of `rows` rows stored in `buffers` buffers, each
    /// of which may be padded to Arrow's 64-byte alignment.
    fn limit(self, rows: u64, buffers: u64) -> u64 {
        match self {
            Decoded::AtMost(n) => n,
            Decoded::BaseRows => rows * BASE_ROW_MAX + 64 * buffers,
        }
    }
}

/// Encodes `batch` as an Arrow IPC file with record batches of `batch_rows` rows
/// (the last may hold fewer), recorded in the schema metadata under
/// [`BATCH_ROWS_KEY`] next to the metadata of `schema` and the archive's
/// format `version`.
pub(crate) fn encode(
    schema: &SchemaRef,
    batch: &RecordBatch,
    body: Body,
    batch_rows: usize,
    version: u32,
) -> Result<Vec<u8>> {
    let arrow = |e| Error::corrupt(format!("arrow encode: {e}"));
    let compression = match body {
        Body::Plain => None,
        Body::Zstd => Some(CompressionType::ZSTD),
    };
    // 64 is arrow-rs's default and what versions 1 to 6 wrote; 8 is all an
    // Arrow reader needs (the widest value is 8 bytes) and saves the padding
    // of some twenty buffers a batch, about 2 bytes a file on tiny files.
    let alignment = if version >= 7 { 8 } else { 64 };
    let options = IpcWriteOptions::try_new(alignment, false, MetadataVersion::V5)
        .and_then(|o| o.try_with_compression(compression))
        .map_err(arrow)?;
    let mut md = schema.metadata().clone();
    md.insert(BATCH_ROWS_KEY.into(), batch_rows.to_string());
    md.insert(VERSION_KEY.into(), version.to_string());
    let schema = schema.as_ref().clone().with_metadata(md);
    let mut out = Vec::new();
    let mut w = FileWriter::try_new_with_options(&mut out, &schema, options).map_err(arrow)?;
    let mut start = 0;
    while start < batch.num_rows() {
        let n = batch_rows.min(batch.num_rows() - start);
        w.write(&batch.slice(start, n)).map_err(arrow)?;
        start += n;
    }
    w.finish().map_err(arrow)?;
    drop(w);
    Ok(out)
}

/// An opened Arrow IPC file section: its footer parsed, its blocks bounds-checked.
#[derive(Debug)]
pub(crate) struct IpcSection {
    name: &'static str,
    offset: u64,
    rows: Option<u64>,
    batch_rows: u64,
    blocks: Vec<Block>,
    version: MetadataVersion,
    schema: SchemaRef,
    metadata: HashMap<String, String>,
    decoded: Decoded,
}

impl IpcSection {
    /// Reads and checks the footer of the IPC file at `offset..offset+len` of `src`.
    /// `schema` is what the section must hold; `rows` is the manifest's row count,
    /// when there is a manifest to say it.
    pub(crate) fn open(
        src: &dyn ReadAt,
        name: &'static str,
        offset: u64,
        len: u64,
        rows: Option<u64>,
        schema: SchemaRef,
        decoded: Decoded,
    ) -> Result<Self> {
        let bad = |m: String| Error::corrupt(format!("{name} section: {m}"));
        if len < 18 {
            return Err(bad(format!("{len} bytes is too short for an Arrow file")));
        }
        let mut trailer = [0u8; 10];
        read_at(src, &mut trailer, offset + len - 10, name)?;
        let footer_len = read_footer_length(trailer).map_err(|e| bad(e.to_string()))? as u64;
        if footer_len > len - 10 {
            return Err(bad(format!(
                "footer length {footer_len} exceeds the section"
            )));
        }
        let footer_bytes = read_vec(src, offset + len - 10 - footer_len, footer_len, name)?;
        let footer = arrow_ipc::root_as_footer(&footer_bytes)
            .map_err(|e| bad(format!("unreadable footer: {e}")))?;

        let fb_schema = footer.schema().ok_or_else(|| bad("no schema".into()))?;
        let mut metadata = HashMap::new();
        for kv in fb_schema.custom_metadata().into_iter().flatten() {
            if let (Some(k), Some(v)) = (kv.key(), kv.value()) {
                metadata.insert(k.to_string(), v.to_string());
            }
        }
        check_version(&metadata, name)?;
        let names: Vec<&str> = fb_schema
            .fields()
            .into_iter()
            .flatten()
            .map(|f| f.name().unwrap_or(""))
            .collect();
        let expected: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        if names.len() < expected.len() || names[..expected.len()] != expected[..] {
            return Err(bad(format!("columns {names:?}, expected {expected:?}")));
        }

        let batch_rows = match metadata.get(BATCH_ROWS_KEY) {
            None => BATCH_ROWS as u64,
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=BATCH_ROWS as u64).contains(n))
                .ok_or_else(|| bad(format!("{BATCH_ROWS_KEY} = {v:?}")))?,
        };
        let data_end = len - 10 - footer_len;
        let blocks: Vec<Block> = footer
            .recordBatches()
            .into_iter()
            .flatten()
            .copied()
            .collect();
        let expected_blocks = rows.map(|r| r.div_ceil(batch_rows));
        if expected_blocks.is_some_and(|n| n != blocks.len() as u64) {
            return Err(bad(format!(
                "{} record batches for {} rows",
                blocks.len(),
                rows.unwrap_or_default()
            )));
        }
        // Each block in bounds, and after the one before: a footer that
        // names one block many times would make a few bytes decode as many
        // batches, past any bound on the section's size.
        let mut free_from = 0;
        for b in &blocks {
            let start = u64::try_from(b.offset()).ok();
            let end = start
                .zip(u64::try_from(b.metaDataLength()).ok())
                .zip(u64::try_from(b.bodyLength()).ok())
                .and_then(|((o, m), body)| o.checked_add(m)?.checked_add(body));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(bad("record batch block out of bounds".into()));
            };
            if end > data_end || b.metaDataLength() < 8 {
                return Err(bad("record batch block out of bounds".into()));
            }
            if start < free_from {
                return Err(bad("record batch blocks overlap or are out of order".into()));
            }
            free_from = end;
        }
        Ok(IpcSection {
            name,
            offset,
            rows,
            batch_rows,
            blocks,
            version: footer.version(),
            schema,
            metadata,
            decoded,
        })
    }

    /// The section's schema metadata.
    pub(crate) fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// Rows in every batch but the last.
    pub(crate) fn batch_rows(&self) -> u64 {
        self.batch_rows
    }

    /// Number of record batches.
    pub(crate) fn num_batches(&self) -> usize {
        self.blocks.len()
    }

    /// Decodes batch `i`, reading only its bytes.
    pub(crate) fn batch(&self, src: &dyn ReadAt, i: usize) -> Result<RecordBatch> {
        let block = self
            .blocks
            .get(i)
            .ok_or_else(|| Error::corrupt(format!("{}: no record batch {i}", self.name)))?;
        // Bounds were checked in `open`, so these conversions and the sum cannot fail
        // or exceed the section length.
        let start = self.offset + block.offset() as u64;
        let len = block.metaDataLength() as u64 + block.bodyLength() as u64;
        let bytes = read_vec(src, start, len, self.name)?;
        // The rows this batch must have, checked before anything is decoded:
        // what a batch may decode to follows from its row count.
        let rows = match self.rows {
            Some(rows) => {
                let n = rows
                    .saturating_sub(i as u64 * self.batch_rows)
                    .min(self.batch_rows);
                n..=n
            }
            None => 0..=self.batch_rows,
        };
        check_message(
            &bytes,
            block.metaDataLength() as usize,
            &self.schema,
            rows,
            self.decoded,
        )
        .map_err(|m| Error::corrupt(format!("{}: batch {i}: {m}", self.name)))?;
        let buf = Buffer::from_vec(bytes);
        let decoded = FileDecoder::new(self.schema.clone(), self.version)
            .read_record_batch(block, &buf)
            .map_err(|e| Error::corrupt(format!("{}: batch {i}: {e}", self.name)))?
            .ok_or_else(|| Error::corrupt(format!("{}: batch {i} is empty", self.name)))?;
        Ok(decoded)
    }
}

/// A section read one batch at a time: its footer read on first use, and each
/// batch decoded once, into a `B`, and kept. A slot not yet filled costs a
/// pointer, as an archive of millions of files has thousands of batches.
#[derive(Debug)]
pub(crate) struct Batches<B> {
    name: &'static str,
    offset: u64,
    len: u64,
    rows: u64,
    schema: SchemaRef,
    opened: OnceLock<(IpcSection, Vec<OnceLock<Box<B>>>)>,
}

impl<B> Batches<B> {
    /// The section at `offset..+len` holding `rows` rows of `schema`, not read yet.
    pub(crate) fn new(
        name: &'static str,
        offset: u64,
        len: u64,
        rows: u64,
        schema: SchemaRef,
    ) -> Self {
        Batches {
            name,
            offset,
            len,
            rows,
            schema,
            opened: OnceLock::new(),
        }
    }

    /// Reads and checks the section's footer, once.
    pub(crate) fn open(&self, src: &dyn ReadAt) -> Result<&(IpcSection, Vec<OnceLock<Box<B>>>)> {
        if let Some(o) = self.opened.get() {
            return Ok(o);
        }
        let sec = IpcSection::open(
            src,
            self.name,
            self.offset,
            self.len,
            Some(self.rows),
            self.schema.clone(),
            Decoded::BaseRows,
        )?;
        let cells = (0..sec.num_batches()).map(|_| OnceLock::new()).collect();
        Ok(self.opened.get_or_init(|| (sec, cells)))
    }

    /// The batch holding row `row`, decoded by `decode` on first use, and the
    /// row's index in it.
    pub(crate) fn row(
        &self,
        src: &dyn ReadAt,
        row: u64,
        decode: impl FnOnce(&RecordBatch) -> Result<B>,
    ) -> Result<(&B, usize)> {
        if row >= self.rows {
            return Err(Error::corrupt(format!("{} has no row {row}", self.name)));
        }
        let (sec, cells) = self.open(src)?;
        let n = sec.batch_rows();
        let i = (row / n) as usize;
        let cell = cells
            .get(i)
            .ok_or_else(|| Error::corrupt(format!("{} has no row {row}", self.name)))?;
        let at = (row % n) as usize;
        if let Some(b) = cell.get() {
            return Ok((b, at));
        }
        let batch = Box::new(decode(&sec.batch(src, i)?)?);
        Ok((cell.get_or_init(|| batch), at))
    }
}

pub(crate) fn read_at(src: &dyn ReadAt, buf: &mut [u8], offset: u64, what: &str) -> Result<()> {
    src.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corrupt(format!(
                "{what}: truncated (read of {} bytes at {offset} past the end)",
                buf.len()
            ))
        } else {
            Error::io(format!("reading {what}"), e)
        }
    })
}

/// The `len` bytes at `offset`, allocated as they are read, a step at a time,
/// rather than all at once: every length read from an archive is bounded by
/// the source's size, and a remote source's size is what its server claims,
/// so memory follows the bytes that actually arrive.
pub(crate) fn read_vec(src: &dyn ReadAt, offset: u64, len: u64, what: &str) -> Result<Vec<u8>> {
    const STEP: u64 = 16 << 20;
    let mut bytes = Vec::new();
    let mut at = 0;
    while at < len {
        let n = (len - at).min(STEP);
        let start = bytes.len();
        bytes.resize(start + n as usize, 0);
        read_at(src, &mut bytes[start..], offset + at, what)?;
        at += n;
    }
    Ok(bytes)
}

/// Checks a record batch message against `schema` before arrow decodes it.
///
/// arrow's IPC decoder trusts the lengths in a message: a node length larger than
/// its buffers panics, and a compressed buffer's length prefix sizes an
/// allocation. Our sections hold only flat columns, so the whole message can be
/// checked here first: the batch length against `rows` (what the manifest's
/// row count leaves for this batch), node lengths and null counts against it,
/// buffers against the body, and the decoded size against `bound`.
fn check_message(
    block: &[u8],
    meta_len: usize,
    schema: &SchemaRef,
    rows: std::ops::RangeInclusive<u64>,
    bound: Decoded,
) -> Result<(), String> {
    let meta = block.get(..meta_len).ok_or("metadata past the block")?;
    let body = &block[meta_len..];
    let fb = match meta.get(..4) {
        Some(m) if m == [0xff; 4] => meta.get(8..),
        _ => meta.get(4..),
    }
    .ok_or("short message")?;
    let msg = arrow_ipc::root_as_message(fb).map_err(|e| format!("unreadable message: {e}"))?;
    let rb = msg.header_as_record_batch().ok_or("not a record batch")?;
    let len = u64::try_from(rb.length()).map_err(|_| "negative length")?;
    if !rows.contains(&len) {
        return Err(format!(
            "{len} rows, which does not match the manifest ({} to {})",
            rows.start(),
            rows.end()
        ));
    }
    // Variadic buffer counts belong to view columns, which no section has;
    // arrow asserts, rather than checks, that none are left over.
    if rb.variadicBufferCounts().is_some_and(|c| !c.is_empty()) {
        return Err("variadic buffer counts, but no view columns".into());
    }
    let nodes: Vec<_> = rb.nodes().into_iter().flatten().collect();
    let buffers: Vec<_> = rb.buffers().into_iter().flatten().collect();
    let mut walk = Walk {
        nodes: &nodes,
        buffers: &buffers,
        body,
        compressed: rb.compression().is_some(),
        node: 0,
        buffer: 0,
        decoded: 0,
    };
    for field in schema.fields() {
        walk.field(field, Some(len))?;
    }
    let (decoded_total, b) = (walk.decoded, walk.buffer);
    let decoded_limit = bound.limit(len, b as u64);
    if decoded_total > decoded_limit {
        return Err(format!(
            "decodes to {decoded_total} bytes, more than the {decoded_limit} allowed"
        ));
    }
    Ok(())
}

/// The nodes and buffers of a record batch, checked in the order Arrow lays
/// them out: a column's node and buffers, then its children's (a list's
/// items, a map's entries, a struct's fields).
struct Walk<'a> {
    nodes: &'a [&'a arrow_ipc::FieldNode],
    buffers: &'a [&'a arrow_ipc::Buffer],
    body: &'a [u8],
    compressed: bool,
    node: usize,
    buffer: usize,
    decoded: u64,
}

impl Walk<'_> {
    /// Checks `field`'s node (of `rows` rows for a column; a child's length
    /// is its parent's offsets', which arrow checks when it decodes) and
    /// buffers, then its children's.
    fn field(&mut self, field: &arrow_schema::Field, rows: Option<u64>) -> Result<(), String> {
        let node = self
            .nodes
            .get(self.node)
            .ok_or("fewer columns than the schema")?;
        self.node += 1;
        let length = u64::try_from(node.length()).map_err(|_| "negative length")?;
        if rows.is_some_and(|r| r != length)
            || node.null_count() < 0
            || node.null_count() > node.length()
        {
            return Err(format!(
                "column {} has a bad length or null count",
                field.name()
            ));
        }
        if !field.is_nullable() && node.null_count() != 0 {
            return Err(format!("column {} has nulls", field.name()));
        }
        // Element width of each buffer (validity first). arrow asserts, rather
        // than checks, that a typed buffer's length is a multiple of its width.
        let (widths, children): (&[u64], Vec<&arrow_schema::Field>) = match field.data_type() {
            DataType::Utf8 | DataType::Binary => (&[1, 4, 1], vec![]),
            DataType::UInt64 | DataType::Int64 | DataType::Float64 => (&[1, 8], vec![]),
            DataType::UInt32 => (&[1, 4], vec![]),
            DataType::List(item) | DataType::Map(item, _) => (&[1, 4], vec![item.as_ref()]),
            DataType::Struct(fields) => (&[1], fields.iter().map(|f| f.as_ref()).collect()),
            _ => (&[1, 1], vec![]),
        };
        for (k, width) in widths.iter().enumerate() {
            let buf = self
                .buffers
                .get(self.buffer)
                .ok_or("fewer buffers than columns need")?;
            self.buffer += 1;
            let (off, blen) = (buf.offset(), buf.length());
            let end = u64::try_from(off)
                .ok()
                .zip(u64::try_from(blen).ok())
                .and_then(|(o, l)| o.checked_add(l));
            let Some(end) = end.filter(|&e| e <= self.body.len() as u64) else {
                return Err(format!("buffer of {} past the body", field.name()));
            };
            let raw = &self.body[off as usize..end as usize];
            let decoded = match (self.compressed, raw.len()) {
                (false, n) | (true, n @ 0) => n as u64,
                (true, 1..=7) => return Err("compressed buffer without its length".into()),
                (true, _) => {
                    let mut p = [0u8; 8];
                    p.copy_from_slice(&raw[..8]);
                    match i64::from_le_bytes(p) {
                        -1 => raw.len() as u64 - 8,
                        n if n >= 0 => n as u64,
                        _ => return Err("bad compressed length".into()),
                    }
                }
            };
            if decoded % width != 0 {
                return Err(format!("a buffer of {} has a ragged length", field.name()));
            }
            if k == 0 && node.null_count() > 0 && decoded < length.div_ceil(8) {
                return Err(format!("validity of {} is too short", field.name()));
            }
            self.decoded = self.decoded.saturating_add(decoded);
        }
        for child in children {
            self.field(child, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{self, SliceRow};
    use crate::schema::base_schema;

    fn section(body: Body) -> Vec<u8> {
        let rows: Vec<SliceRow> = (0..300)
            .map(|i| SliceRow {
                relative_path: format!("dir/file{i:04}"),
                chunk_seq: i,
                fdata_offset: 0,
                uncompressed_size: 10,
                blob_offset: 10 * i,
                blob_size: 10,
                blob_inner_offset: 0,
                compressed: false,
                checksum: [7; 32],
                mode: Some(0o644),
            })
            .collect();
        let batch = row::to_batch(rows.iter()).unwrap();
        encode(&base_schema(), &batch, body, 100, 3).unwrap()
    }

    fn open(bytes: &[u8], bound: Decoded) -> IpcSection {
        let len = bytes.len() as u64;
        IpcSection::open(&bytes, "lookup", 0, len, Some(300), base_schema(), bound).unwrap()
    }

    /// Overwrites the length prefix of the first compressed buffer of batch 1.
    fn claim(bytes: &mut [u8], sec: &IpcSection, decoded: i64) {
        let block = sec.blocks[1];
        let meta_start = block.offset() as usize;
        let body_start = meta_start + block.metaDataLength() as usize;
        let meta = &bytes[meta_start + 8..body_start];
        let msg = arrow_ipc::root_as_message(meta).unwrap();
        let rb = msg.header_as_record_batch().unwrap();
        let buf = rb
            .buffers()
            .unwrap()
            .iter()
            .find(|b| b.length() >= 8)
            .unwrap();
        let at = body_start + buf.offset() as usize;
        bytes[at..at + 8].copy_from_slice(&decoded.to_le_bytes());
    }

    #[test]
    fn a_compressed_batch_decodes_within_what_its_rows_can_hold() {
        let mut bytes = section(Body::Zstd);
        let sec = open(&bytes, Decoded::BaseRows);
        for i in 0..3 {
            assert_eq!(sec.batch(&bytes.as_slice(), i).unwrap().num_rows(), 100);
        }
        // 100 rows of base columns hold at most about 400 KiB: a claim of a
        // terabyte is refused before anything is allocated for it.
        claim(&mut bytes, &sec, 1 << 40);
        let err = sec.batch(&bytes.as_slice(), 1).unwrap_err().to_string();
        assert!(err.contains("more than the 419944 allowed"), "{err}");
    }

    #[test]
    fn a_plain_section_may_not_decode_to_more_than_its_length() {
        let bytes = section(Body::Plain);
        let len = bytes.len() as u64;
        assert!(open(&bytes, Decoded::AtMost(len))
            .batch(&bytes.as_slice(), 0)
            .is_ok());
        let err = open(&bytes, Decoded::AtMost(100))
            .batch(&bytes.as_slice(), 0)
            .unwrap_err();
        assert!(
            err.to_string().contains("more than the 100 allowed"),
            "{err}"
        );
    }

    /// A source that claims a terabyte and holds a kilobyte, as a server's
    /// answer may: a read of all of it fails after the bytes there are,
    /// holding no more than a step of memory (an allocation of the whole
    /// claim would abort the test).
    #[test]
    fn a_region_is_allocated_as_it_arrives() {
        struct Claims(Vec<u8>, std::sync::atomic::AtomicU64);
        impl ReadAt for Claims {
            fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
                let most = self.1.load(std::sync::atomic::Ordering::Relaxed);
                self.1.store(
                    most.max(buf.len() as u64),
                    std::sync::atomic::Ordering::Relaxed,
                );
                self.0.as_slice().read_exact_at(buf, offset)
            }
            fn size(&self) -> std::io::Result<u64> {
                Ok(1 << 40)
            }
        }
        let src = Claims(vec![7; 1024], Default::default());
        assert_eq!(read_vec(&src, 0, 1024, "small").unwrap(), vec![7; 1024]);
        let err = read_vec(&src, 0, 1 << 40, "claimed").unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert_eq!(src.1.into_inner(), 16 << 20, "one step at most");
    }
}
