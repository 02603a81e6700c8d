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
            sha, "503c710a76cb6efca5b241d77cba42fec6b29e14394419a0fa5b7970e27d79d5",
            "threads = {threads}"
        );
    }
}
