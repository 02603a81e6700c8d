//! Signing is O(index): the bytes this process reads while signing a 1 GB
//! archive stay within 2x of what signing a 10 MB one with the same files
//! reads. One test in this binary, so the process-wide counter
//! (/proc/self/io) sees only the signing.

use znippy_format::{add_signature, compress, Archive, ArchiveProps, InputFile, Metadata};

fn bytes_read() -> u64 {
    let s = std::fs::read_to_string("/proc/self/io").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Bytes read by signing an archive of 100 files of `size` incompressible
/// bytes each, and the archive's length.
fn signing_reads(size: usize) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.znippy");
    let files = (0..100u32).map(|i| {
        let mut data = vec![0u8; size];
        blake3::Hasher::new()
            .update(&i.to_le_bytes())
            .finalize_xof()
            .fill(&mut data);
        Ok(InputFile::from_bytes(format!("f{i:03}"), data, None))
    });
    let props = ArchiveProps {
        chunk_size: 8 << 20,
        pack_threshold: 4 << 20,
        pack_size: 4 << 20,
        level: 1,
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    compress(&mut out, [files], props, 2, &Metadata::Absent, &mut |_| {}).unwrap();
    drop(out);
    let identity = Archive::open(std::fs::File::open(&path).unwrap())
        .unwrap()
        .identity()
        .unwrap();
    let before = bytes_read();
    add_signature(&path, &identity, vec![0x30; 2000]).unwrap();
    (
        bytes_read() - before,
        std::fs::metadata(&path).unwrap().len(),
    )
}

#[test]
fn signing_reads_the_index_not_the_blobs() {
    let (small, small_len) = signing_reads(100_000);
    let (large, large_len) = signing_reads(10_000_000);
    assert!(large_len > 1_000_000_000 && small_len > 10_000_000);
    assert!(
        large <= 2 * small,
        "signing read {small} bytes of a {small_len}-byte archive, {large} of a {large_len}-byte one"
    );
    eprintln!("signing read {small} bytes of {small_len}, {large} of {large_len}");
}
