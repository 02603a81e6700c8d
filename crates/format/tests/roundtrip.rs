//! Round trips: every file back byte for byte with its mode, on edge cases of
//! chunking and packing, and determinism across thread counts.

mod common;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use sha2::{Digest, Sha256};
use znippy_format::{
    compress, extract_all, scan_dir, Archive, ArchiveProps, Error, InputFile, Metadata,
    ScanOptions, Source,
};

fn compress_dir(dir: &Path, out: &Path, props: ArchiveProps, threads: usize) {
    let files = scan_dir(dir, ScanOptions::default()).unwrap().files;
    let mut f = std::io::BufWriter::new(File::create(out).unwrap());
    let inputs = files.iter().map(|f| Ok(f.input()));
    compress(
        &mut f,
        [inputs],
        props,
        threads,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
}

fn assert_same_tree(a: &Path, b: &Path) {
    let fa = scan_dir(a, ScanOptions::default()).unwrap().files;
    let fb = scan_dir(b, ScanOptions::default()).unwrap().files;
    assert_eq!(fa.len(), fb.len(), "file count");
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x.path, y.path);
        assert_eq!(x.mode, y.mode, "mode of {}", x.path);
        let (bx, by) = (
            std::fs::read(&x.disk_path).unwrap(),
            std::fs::read(&y.disk_path).unwrap(),
        );
        assert!(bx == by, "bytes of {}", x.path);
    }
}

fn edge_tree(chunk: usize, threshold: usize) -> Vec<(String, Vec<u8>, u32)> {
    let mut files = vec![
        ("empty".to_string(), vec![], 0o644),
        ("dir/empty2".to_string(), vec![], 0o600),
        ("exact_chunk".to_string(), text(1, chunk), 0o755),
        ("chunk_minus_1".to_string(), text(2, chunk - 1), 0o644),
        ("chunk_plus_1".to_string(), noise(3, chunk + 1), 0o644),
        ("three_chunks".to_string(), text(4, 3 * chunk + 17), 0o644),
        ("pack/at_threshold".to_string(), text(5, threshold), 0o644),
        (
            "pack/threshold_minus_1".to_string(),
            text(6, threshold - 1),
            0o644,
        ),
        (
            "pack/threshold_plus_1".to_string(),
            text(7, threshold + 1),
            0o444,
        ),
        ("ünïcødé/日本語/файл.txt".to_string(), text(8, 1000), 0o644),
        ("name with spaces".to_string(), b"x".to_vec(), 0o644),
        ("noise.bin".to_string(), noise(9, 5000), 0o640),
        ("image.png".to_string(), noise(10, 3000), 0o644),
    ];
    for i in 0..50 {
        files.push((format!("same/{i:03}.txt"), text(11, 2000), 0o644));
    }
    files
}

#[test]
fn edge_cases_round_trip_with_default_props() {
    let p = ArchiveProps::default();
    roundtrip(
        edge_tree(p.chunk_size as usize, p.pack_threshold as usize),
        p,
    );
}

#[test]
fn edge_cases_round_trip_with_small_props() {
    let p = small_props();
    roundtrip(
        edge_tree(p.chunk_size as usize, p.pack_threshold as usize),
        p,
    );
}

fn roundtrip(files: Vec<(String, Vec<u8>, u32)>, props: ArchiveProps) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_tree(&src, &files);
    let arc = tmp.path().join("a.znippy");
    compress_dir(&src, &arc, props, 3);
    let a = Archive::open(File::open(&arc).unwrap()).unwrap();
    assert_eq!(a.verify(2).unwrap(), a.row_count());
    let out = tmp.path().join("out");
    let stats = extract_all(&a, &out, 2, &|_| {}).unwrap();
    assert_eq!(stats.files, files.len() as u64);
    assert_same_tree(&src, &out);
    for (p, bytes, _) in &files {
        let mut got = Vec::new();
        a.read_file(p, &mut got).unwrap();
        assert!(got == *bytes, "get {p}");
    }
    // Identical files are stored once: 50 copies add 49 rows but no blob bytes.
    let same: Vec<_> = files.iter().filter(|f| f.0.starts_with("same/")).collect();
    let blobs: std::collections::HashSet<_> = same
        .iter()
        .map(|f| {
            let r = &a.slices(&f.0).unwrap()[0];
            (r.blob_offset, r.blob_inner_offset)
        })
        .collect();
    assert_eq!(blobs.len(), 1, "duplicates point at one slice");
}

#[test]
fn already_compressed_names_and_incompressible_data_are_stored_raw() {
    let props = small_props();
    let files = vec![
        ("a.png".to_string(), text(1, 100_000)),
        ("b.txt".to_string(), noise(2, 100_000)),
        ("c.txt".to_string(), text(3, 100_000)),
    ];
    let a = Archive::open(archive_of(&files, props, &Metadata::Absent)).unwrap();
    let first = |p: &str| a.slices(p).unwrap()[0].compressed;
    assert!(!first("a.png"), "listed extension is stored");
    assert!(!first("b.txt"), "noise does not shrink");
    assert!(first("c.txt"), "text is compressed");
}

#[test]
fn empty_directories_are_entries_and_an_empty_tree_an_empty_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("nested/empty")).unwrap();
    let arc = tmp.path().join("a.znippy");
    compress_dir(&src, &arc, ArchiveProps::default(), 2);
    let a = Archive::open(File::open(&arc).unwrap()).unwrap();
    assert_eq!(a.list("").unwrap(), ["nested/empty"], "only the innermost");
    assert_eq!(a.verify(1).unwrap(), 1);
    let out = tmp.path().join("out");
    assert_eq!(extract_all(&a, &out, 2, &|_| {}).unwrap().files, 1);
    assert!(out.join("nested/empty").is_dir());

    std::fs::remove_dir_all(src.join("nested")).unwrap();
    compress_dir(&src, &arc, ArchiveProps::default(), 2);
    let a = Archive::open(File::open(&arc).unwrap()).unwrap();
    assert_eq!(a.row_count(), 0);
    let out = tmp.path().join("out2");
    assert_eq!(extract_all(&a, &out, 2, &|_| {}).unwrap().files, 0);
    assert!(out.is_dir());
}

#[test]
fn archive_bytes_do_not_depend_on_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let mut files = edge_tree(64 << 10, 16 << 10);
    for i in 0..300 {
        files.push((
            format!("many/{i:04}.rs"),
            text(100 + i, 100 + (i as usize * 37) % 9000),
            0o644,
        ));
    }
    write_tree(&src, &files);
    let mut digests = Vec::new();
    for threads in [1, 2, 8] {
        let arc = tmp.path().join(format!("t{threads}.znippy"));
        compress_dir(&src, &arc, small_props(), threads);
        digests.push(Sha256::digest(std::fs::read(&arc).unwrap()));
    }
    assert_eq!(digests[0], digests[1]);
    assert_eq!(digests[0], digests[2]);
}

#[test]
fn modes_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_tree(
        &src,
        &[
            ("x".into(), b"1".to_vec(), 0o700),
            ("y".into(), text(1, 200_000), 0o640),
        ],
    );
    let arc = tmp.path().join("a.znippy");
    compress_dir(&src, &arc, small_props(), 2);
    let a = Archive::open(File::open(&arc).unwrap()).unwrap();
    let out = tmp.path().join("out");
    extract_all(&a, &out, 2, &|_| {}).unwrap();
    for (p, m) in [("x", 0o700), ("y", 0o640)] {
        let got = std::fs::metadata(out.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, m, "{p}");
    }
}

/// A file of many pieces read on several threads is the file, and what one
/// thread reads: its bytes and its errors. A damaged piece in the middle,
/// or an output that fails, ends the read with that error and never hangs.
#[test]
fn a_file_of_many_pieces_reads_the_same_on_any_number_of_threads() {
    use std::io::Write;

    let props = ArchiveProps {
        chunk_size: 4 << 10,
        pack_threshold: 1 << 10,
        pack_size: 4 << 10,
        level: 3,
    };
    // Text and noise, and a piece repeated, so pieces are compressed, raw
    // and deduplicated.
    let mut big = noise(1, 100 << 10);
    big.extend((0..20_000u32).flat_map(|i| format!("{i}\n").into_bytes()));
    big.extend(big[..8 << 10].to_vec());
    let files = vec![
        ("big".to_string(), big.clone()),
        ("s".to_string(), b"x".to_vec()),
    ];
    let bytes = archive_of(&files, props, &Metadata::Absent);
    let src = Recording::new(bytes.clone());
    let a = Archive::open(std::sync::Arc::clone(&src)).unwrap();
    let pieces = a.slices("big").unwrap().len();
    assert!(pieces > 30, "{pieces}");
    let me = std::thread::current().id();
    for threads in [1, 2, 3, 8] {
        src.readers.lock().unwrap().clear();
        let mut out = Vec::new();
        let e = a.read_entry_on("big", &mut out, threads).unwrap();
        assert!(out == big, "threads = {threads}");
        assert_eq!(e.size, big.len() as u64);
        // One thread reads on the caller's; more read the blobs elsewhere.
        let others = src.readers.lock().unwrap().iter().any(|t| *t != me);
        assert_eq!(others, threads > 1, "threads = {threads}");
        let mut one = Vec::new();
        a.read_entry_on("s", &mut one, threads).unwrap();
        assert_eq!(one, b"x");
    }

    // A byte of the tenth piece's blob flipped.
    let tenth = a.slices("big").unwrap()[10].clone();
    let mut damaged = bytes.clone();
    damaged[(tenth.blob_offset + tenth.blob_size / 2) as usize] ^= 0x55;
    let d = Archive::open(damaged.as_slice()).unwrap();
    for threads in [1, 2, 8] {
        let err = d
            .read_entry_on("big", &mut Vec::new(), threads)
            .unwrap_err();
        assert!(
            matches!(err, Error::Checksum(_) | Error::Corrupt(_)),
            "threads = {threads}: {err}"
        );
    }

    /// Takes `left` bytes, then fails.
    struct Full {
        left: usize,
    }
    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if buf.len() > self.left {
                return Err(std::io::Error::other("disk full"));
            }
            self.left -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    for threads in [1, 2, 8] {
        let err = a
            .read_entry_on("big", &mut Full { left: 20 << 10 }, threads)
            .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
    }
}

/// A file whose size when read is not its size when listed changed while
/// the batch ran: the summary names it, with both sizes, and the archive
/// holds what was read. Files read as listed, and streams (which have no
/// listed size), are not named.
#[test]
fn a_file_read_at_another_size_than_listed_is_named_and_stored_as_read() {
    let tmp = tempfile::tempdir().unwrap();
    let props = small_props();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let on_disk = [
        ("grew", b"ten bytes!".to_vec(), 4),
        ("shrank", big.clone(), 300_000),
        ("same", big[..5000].to_vec(), 5000),
        ("emptied", Vec::new(), 9),
    ];
    let mut inputs = Vec::new();
    for (name, bytes, listed) in &on_disk {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        inputs.push(Ok(InputFile {
            path: name.to_string(),
            mode: Some(0o644),
            source: Source::Path {
                path,
                size: *listed,
            },
        }));
    }
    inputs.push(Ok(InputFile::from_bytes("stream", b"x".to_vec(), None)));
    let mut out = Vec::new();
    let summary = compress(&mut out, [inputs], props, 2, &Metadata::Absent, &mut |_| {}).unwrap();
    let named: Vec<(String, u64, u64)> = summary
        .changed
        .iter()
        .map(|c| (c.path.clone(), c.listed, c.read))
        .collect();
    assert_eq!(
        named,
        [
            ("grew".to_string(), 4, 10),
            ("shrank".to_string(), 300_000, 200_000),
            ("emptied".to_string(), 9, 0),
        ]
    );
    assert_eq!(
        summary.changed[0].to_string(),
        "grew changed as it was read: 4 bytes when listed, 10 stored"
    );
    let archive = Archive::open(out).unwrap();
    for (name, bytes, _) in &on_disk {
        let mut got = Vec::new();
        archive.read_entry(name, &mut got).unwrap();
        assert_eq!(&got, bytes, "{name}");
    }
}
