//! A snapshot's manifest, encoded without iceberg-rust's avro writer.
//!
//! iceberg-rust's `ManifestWriter` builds the manifest's avro schema from
//! the table's schema and partition type for every file it writes, then
//! turns each entry into an apache-avro value and resolves it against that
//! schema: for the one-entry manifest of a small append, that was the larger
//! part of the manifest's cost (docs/benchmarks.md). Yet every manifest of a
//! table starts with the same header: the avro schema and iceberg's own keys
//! (the table schema, the partition spec, the format version, the content).
//!
//! So the catalog lets iceberg-rust write a table's first manifest in a
//! process, keeps that file's header ([`header_of`]), and writes the table's
//! later manifests itself: the header, a fresh sync marker, and one block of
//! entries in avro's binary encoding of that schema ([`encode`]). Only an
//! unpartitioned data manifest of a version 2 table is written here (what
//! the store's tables are); anything else goes through iceberg-rust. The
//! oracle test writes the same entries both ways and parses both back with
//! iceberg-rust.

use iceberg::spec::{DataFile, ManifestEntry, ManifestStatus};
use iceberg::{Error, ErrorKind, Result};

/// An avro object container file starts with these.
const MAGIC: &[u8; 4] = b"Obj\x01";

/// The header of the avro object container file `file`, up to its sync
/// marker (which each file draws anew): the magic and the metadata map.
/// `None` if `file` does not start with a well-formed one.
pub(crate) fn header_of(file: &[u8]) -> Option<&[u8]> {
    walk_header(file, |_, _| ())
}

/// Walks the metadata map of the header at the start of `file`, handing
/// each key and value to `each`; returns the header.
fn walk_header<'f>(file: &'f [u8], mut each: impl FnMut(&'f [u8], &'f [u8])) -> Option<&'f [u8]> {
    let mut at = MAGIC.len();
    if file.get(..at)? != MAGIC {
        return None;
    }
    let next = |at: &mut usize| -> Option<&'f [u8]> {
        let len = usize::try_from(read_long(file, at)?).ok()?;
        let start = *at;
        *at = at.checked_add(len).filter(|end| *end <= file.len())?;
        Some(&file[start..*at])
    };
    loop {
        let count = read_long(file, &mut at)?;
        if count == 0 {
            return Some(&file[..at]);
        }
        if count < 0 {
            // A negative count is followed by the block's size in bytes.
            read_long(file, &mut at)?;
        }
        for _ in 0..count.unsigned_abs() {
            let key = next(&mut at)?;
            let value = next(&mut at)?;
            each(key, value);
        }
    }
}

/// The metadata of the header at the start of `file`, by key: what two
/// headers must agree on (apache-avro writes the keys in a hash map's
/// order, which differs from file to file).
#[cfg(test)]
pub(crate) fn metadata_of(file: &[u8]) -> Option<std::collections::BTreeMap<&[u8], &[u8]>> {
    let mut map = std::collections::BTreeMap::new();
    walk_header(file, |k, v| {
        map.insert(k, v);
    })?;
    Some(map)
}

/// The manifest file holding `entries` under `header` (from [`header_of`]
/// of a manifest of the same table, schema and partition spec), one block
/// closed by `sync`.
pub(crate) fn encode(header: &[u8], sync: [u8; 16], entries: &[ManifestEntry]) -> Result<Vec<u8>> {
    let mut block = Vec::with_capacity(512 * entries.len());
    for e in entries {
        entry(&mut block, e)?;
    }
    let mut out = Vec::with_capacity(header.len() + block.len() + 64);
    out.extend_from_slice(header);
    out.extend_from_slice(&sync);
    if !entries.is_empty() {
        long(&mut out, entries.len() as i64);
        long(&mut out, block.len() as i64);
        out.extend_from_slice(&block);
        out.extend_from_slice(&sync);
    }
    Ok(out)
}

/// One `manifest_entry` record of iceberg's version 2 manifest schema.
fn entry(out: &mut Vec<u8>, e: &ManifestEntry) -> Result<()> {
    let status = match e.status {
        ManifestStatus::Existing => 0,
        ManifestStatus::Added => 1,
        ManifestStatus::Deleted => 2,
    };
    long(out, status);
    optional(out, e.snapshot_id, long);
    optional(out, e.sequence_number, long);
    optional(out, e.file_sequence_number, long);
    data_file(out, &e.data_file)
}

/// The `data_file` record, fields in the schema's order.
fn data_file(out: &mut Vec<u8>, f: &DataFile) -> Result<()> {
    if !f.partition().fields().is_empty() {
        return Err(Error::new(
            ErrorKind::FeatureUnsupported,
            "only manifests of unpartitioned tables are encoded here",
        ));
    }
    long(out, f.content_type() as i64);
    bytes(out, f.file_path().as_bytes());
    bytes(
        out,
        f.file_format().to_string().to_ascii_uppercase().as_bytes(),
    );
    // The partition: a record of no fields, which encodes to nothing.
    long(out, number(f.record_count())?);
    long(out, number(f.file_size_in_bytes())?);
    // iceberg-rust writes every map, empty or not, and a list only when set.
    for counts in [
        f.column_sizes(),
        f.value_counts(),
        f.null_value_counts(),
        f.nan_value_counts(),
    ] {
        optional_array(out, Some(counts.iter()), |out, (k, v)| {
            long(out, i64::from(*k));
            long(out, number(*v)?);
            Ok(())
        })?;
    }
    for bounds in [f.lower_bounds(), f.upper_bounds()] {
        optional_array(out, Some(bounds.iter()), |out, (k, v)| {
            long(out, i64::from(*k));
            bytes(out, &v.to_bytes()?);
            Ok(())
        })?;
    }
    optional(out, f.key_metadata(), bytes);
    optional_array(out, f.split_offsets().map(|o| o.iter()), |out, o| {
        long(out, *o);
        Ok(())
    })?;
    optional_array(out, f.equality_ids().map(Vec::into_iter), |out, id| {
        long(out, i64::from(id));
        Ok(())
    })?;
    optional(out, f.sort_order_id().map(i64::from), long);
    optional(out, f.first_row_id(), long);
    optional(out, f.referenced_data_file().as_deref(), |out, s: &str| {
        bytes(out, s.as_bytes())
    });
    optional(out, f.content_offset(), long);
    optional(out, f.content_size_in_bytes(), long);
    Ok(())
}

/// An optional avro array (a union of null and the array): one block of
/// `items`, then the empty block that ends it.
fn optional_array<T>(
    out: &mut Vec<u8>,
    items: Option<impl ExactSizeIterator<Item = T>>,
    mut item: impl FnMut(&mut Vec<u8>, T) -> Result<()>,
) -> Result<()> {
    let Some(items) = items else {
        long(out, 0);
        return Ok(());
    };
    long(out, 1);
    if items.len() > 0 {
        long(out, items.len() as i64);
        for i in items {
            item(out, i)?;
        }
    }
    long(out, 0);
    Ok(())
}

/// A union of null (branch 0) and a value (branch 1), as iceberg's
/// optional fields are.
fn optional<T>(out: &mut Vec<u8>, v: Option<T>, write: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => long(out, 0),
        Some(v) => {
            long(out, 1);
            write(out, v);
        }
    }
}

fn number(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::new(ErrorKind::DataInvalid, format!("{n} exceeds a long")))
}

/// Avro's `int` and `long`: zig-zag, then 7 bits a byte, low first.
fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Avro's `bytes` and `string`: a length, then the bytes.
fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    long(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn read_long(buf: &[u8], at: &mut usize) -> Option<i64> {
    let mut z = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        z |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some((z >> 1) as i64 ^ -((z & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_round_trip_through_the_zig_zag_encoding() {
        for v in [0, 1, -1, 63, -64, 64, 300, -300, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            long(&mut out, v);
            let mut at = 0;
            assert_eq!(read_long(&out, &mut at), Some(v));
            assert_eq!(at, out.len());
        }
        let mut out = Vec::new();
        long(&mut out, 1);
        long(&mut out, -2);
        assert_eq!(out, [2, 3], "avro's own examples: 1 -> 02, -2 -> 03");
    }

    #[test]
    fn a_header_ends_where_its_map_ends_and_a_cut_one_is_none() {
        let mut file = MAGIC.to_vec();
        long(&mut file, 2);
        for (k, v) in [("avro.codec", "null"), ("content", "data")] {
            bytes(&mut file, k.as_bytes());
            bytes(&mut file, v.as_bytes());
        }
        long(&mut file, 0);
        let end = file.len();
        file.extend_from_slice(&[7; 16]);
        assert_eq!(header_of(&file), Some(&file[..end]));
        for cut in 0..end {
            assert_eq!(header_of(&file[..cut]), None, "cut at {cut}");
        }
        assert_eq!(header_of(b"Obj\x02\x00"), None);
    }
}
