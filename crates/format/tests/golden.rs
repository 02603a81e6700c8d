//! Pinned bytes: the archive a fixed input compresses to, as a sha256. Any
//! change to slicing, packing, dedupe, the codec's settings or the tail shows
//! here first; a deliberate one updates the pin and says why in its commit.

mod common;

use common::{noise, text};
use sha2::{Digest, Sha256};
use znippy_format::{compress, ArchiveProps, InputFile, MetaTable, MetaValue, Metadata};

fn file(path: &str, bytes: Vec<u8>) -> znippy_format::Result<InputFile> {
    Ok(InputFile::from_bytes(path, bytes, Some(0o644)))
}

/// Every layout case in two batches: packs that overflow, a large file between
/// small ones, dedupe within a pack, across batches and into a large file's
/// last piece, empty files, a stored extension, a raw pack and a replacement.
fn batches() -> Vec<Vec<znippy_format::Result<InputFile>>> {
    let props = props();
    let chunk = props.chunk_size as usize;
    vec![
        vec![
            file("a/empty", Vec::new()),
            file("a/one.txt", text(1, 3_000)),
            file("a/two.txt", text(2, 15_000)),
            file("a/dup-of-one", text(1, 3_000)),
            file("b/big.bin", text(3, 2 * chunk + 500)),
            file("b/tail-dup", text(3, 2 * chunk + 500)[2 * chunk..].to_vec()),
            file("c/noise", noise(4, 12_000)),
            file("c/noise2", noise(5, 14_000)),
            file("c/pic.png", text(6, 9_000)),
            file("c/more.txt", text(7, 16_000)),
            file("c/empty2", Vec::new()),
        ],
        vec![
            file("a/one.txt", text(8, 4_000)),
            file("d/again", text(2, 15_000)),
            file("d/big2", noise(9, chunk + 1)),
            file("d/last", text(10, 100)),
        ],
    ]
}

fn props() -> ArchiveProps {
    ArchiveProps {
        chunk_size: 32 << 10,
        pack_threshold: 16 << 10,
        pack_size: 16 << 10,
        level: 3,
    }
}

#[test]
fn a_fixed_input_compresses_to_pinned_bytes() {
    let mut meta = MetaTable::new();
    meta.set(Some("a/one.txt"), "lang", MetaValue::infer("en"))
        .unwrap();
    meta.set(None, "built", MetaValue::infer("42")).unwrap();
    for threads in [1, 3] {
        let mut out = Vec::new();
        compress(
            &mut out,
            batches(),
            props(),
            threads,
            &Metadata::Present(meta.clone()),
            &mut |_| {},
        )
        .unwrap();
        let sha = format!("{:x}", Sha256::digest(&out));
        assert_eq!(
            sha, "326b375973c27544c5a1bdc969fd86d0c2f548d1e5461fab8451cdbced5c9d10",
            "threads = {threads}"
        );
    }
}

/// docs/format.md's worked example (section 3.7), row by row, and its bytes.
#[test]
fn the_worked_example_of_the_format_document() {
    let abcdefgh: Vec<u8> = b"abcdefgh"
        .iter()
        .copied()
        .cycle()
        .take(1_600_000)
        .collect();
    let batch = vec![
        file("a.txt", b"hello\n".to_vec()),
        file("big.txt", abcdefgh),
        file("d/dup.txt", b"hello\n".to_vec()),
        file("d/empty2", Vec::new()),
        file("d/rand.bin", noise(11, 300_000)),
        file("d/y.png", b"x".to_vec()),
        file("empty", Vec::new()),
    ];
    let props = ArchiveProps {
        chunk_size: 64 << 10,
        pack_threshold: 16 << 10,
        pack_size: 16 << 10,
        level: 3,
    };
    let mut out = Vec::new();
    compress(&mut out, [batch], props, 2, &Metadata::Absent, &mut |_| {}).unwrap();
    let a = znippy_format::Archive::open(out.as_slice()).unwrap();

    // (seq, path, fdata_offset, size, blob_offset, blob_size, compressed),
    // blob_inner_offset 0 throughout, as the document's table has them.
    let mut want: Vec<(u64, &str, u64, u64, u64, u64, bool)> = vec![
        (0, "a.txt", 0, 6, 0, 6, false),
        (1, "big.txt", 0, 65536, 6, 26, true),
    ];
    for k in 1..24 {
        want.push((1 + k, "big.txt", 65536 * k, 65536, 6, 26, true));
    }
    want.push((25, "big.txt", 1_572_864, 27_136, 32, 26, true));
    want.push((26, "d/dup.txt", 0, 6, 0, 6, false));
    want.push((27, "d/empty2", 0, 0, 58, 0, false));
    for k in 0..5 {
        let size = if k == 4 { 37_856 } else { 65_536 };
        want.push((
            28 + k,
            "d/rand.bin",
            65_536 * k,
            size,
            58 + 65_536 * k,
            size,
            false,
        ));
    }
    want.push((33, "d/y.png", 0, 1, 300_058, 1, false));
    want.push((34, "empty", 0, 0, 58, 0, false));
    let got: Vec<(u64, &str, u64, u64, u64, u64, bool)> = a
        .data_rows()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r.blob_inner_offset, 0, "{}", r.relative_path);
            (
                r.chunk_seq,
                // The paths of `want` outlive the rows: compare by value.
                want.iter()
                    .map(|w| w.1)
                    .find(|p| *p == r.relative_path)
                    .unwrap_or("?"),
                r.fdata_offset,
                r.uncompressed_size,
                r.blob_offset,
                r.blob_size,
                r.compressed,
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(a.blob_end(), 300_059);
    assert_eq!(
        a.sections()[0].index_offset,
        300_096,
        "first section at the next multiple of 64"
    );
    let sha = format!("{:x}", Sha256::digest(&out));
    assert_eq!(
        sha, "b0c464c376f62a9b7cd9e89e6c7e3e12d1c598b4169f79e7ee1dbcb8a68e0ed5",
        "the worked example's bytes"
    );
}
