//! The engine's layout against docs/format.md's rules (section 3, "Blobs and
//! slices"), re-derived here one file at a time with no threads.

mod common;

use std::collections::HashMap;

use common::noise;
use znippy_format::{ArchiveProps, Engine, InputFile};

const CHUNK: usize = 8 << 10;
const THRESHOLD: usize = 2 << 10;
/// Below CHUNK, so a pack that overflows here would not overflow a chunk.
const PACK: usize = 6 << 10;

/// docs/format.md's layout rules, one file at a time: (path, fdata_offset, size,
/// blob number, inner offset) for every slice.
fn expected(files: &[(&str, Vec<u8>)]) -> Vec<(String, u64, u64, usize, u64)> {
    let mut seen: HashMap<[u8; 32], (usize, u64)> = HashMap::new();
    let (mut blobs, mut pack, mut rows) = (0, None::<(usize, u64)>, Vec::new());
    for (path, bytes) in files {
        let mut row = |off: usize, piece: &[u8], at: (usize, u64)| {
            rows.push((path.to_string(), off as u64, piece.len() as u64, at.0, at.1));
        };
        if bytes.len() <= THRESHOLD {
            let hash = *blake3::hash(bytes).as_bytes();
            if let Some(&at) = seen.get(&hash) {
                row(0, bytes, at);
                continue;
            }
            if pack.is_some_and(|(_, len)| len as usize + bytes.len() > PACK) {
                pack = None;
            }
            let (blob, len) = pack.get_or_insert_with(|| {
                blobs += 1;
                (blobs - 1, 0)
            });
            row(0, bytes, (*blob, *len));
            seen.insert(hash, (*blob, *len));
            *len += bytes.len() as u64;
        } else {
            pack = None;
            for (k, piece) in bytes.chunks(CHUNK).enumerate() {
                let hash = *blake3::hash(piece).as_bytes();
                let at = *seen.entry(hash).or_insert_with(|| {
                    blobs += 1;
                    (blobs - 1, 0)
                });
                row(k * CHUNK, piece, at);
            }
        }
    }
    rows
}

/// The engine's files are read straight into the open pack and moved only
/// when they turn out large or overflow it; the layout must still be the
/// one the rules give, for every path through that.
#[test]
fn the_layout_follows_the_format_rules() {
    let big = noise(1, 2 * CHUNK + 1024);
    let a = noise(2, 1500);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("large-into-an-empty-pack", big.clone()),
        ("a", a.clone()),
        ("threshold", noise(3, THRESHOLD)),
        ("a-again", a),
        ("empty", Vec::new()),
        ("c", noise(4, 2000)),
        ("d", noise(5, 500)),
        ("overflows-the-pack", noise(6, 1000)),
        ("large-after-files", noise(7, THRESHOLD + 1)),
        (
            "large-whose-first-slice-dedupes",
            big[..CHUNK + 5000].to_vec(),
        ),
        ("small-equal-to-a-last-slice", big[2 * CHUNK..].to_vec()),
        ("last", noise(8, 100)),
    ];
    let props = ArchiveProps {
        chunk_size: CHUNK as u64,
        pack_threshold: THRESHOLD as u64,
        pack_size: PACK as u64,
        level: 3,
    };
    let inputs = files
        .iter()
        .map(|(p, b)| Ok(InputFile::from_bytes(*p, b.clone(), None)));
    let mut out = Vec::new();
    let mut engine = Engine::new(props, 2).unwrap();
    let rows = engine
        .write_batch(inputs, &mut out, &mut |_| {})
        .unwrap()
        .rows;

    let mut offsets: Vec<u64> = rows.iter().map(|r| r.blob_offset).collect();
    offsets.sort_unstable();
    offsets.dedup();
    let got: Vec<_> = rows
        .iter()
        .map(|r| {
            let blob = offsets.binary_search(&r.blob_offset).unwrap();
            let (path, inner) = (r.relative_path.clone(), r.blob_inner_offset);
            (path, r.fdata_offset, r.uncompressed_size, blob, inner)
        })
        .collect();
    assert_eq!(got, expected(&files));
    assert_eq!(offsets.len(), 8, "blobs: 3 + pack + pack + 1 + 1 + pack");
}
