//! Hostile archives and inputs: every one gets a typed error, never a panic, an
//! allocation sized by an untrusted field, or a write outside the target.

mod common;

use std::os::unix::fs::symlink;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::writer::FileWriter;

use common::*;
use znippy_format::{extract_all, Archive, ArchiveProps, Error, Metadata, TrieState, LOOKUP, META};

/// A named change to a value, for tables of hostile variants.
type Tamper<'a, T> = (&'a str, &'a dyn Fn(&mut T));

fn sample() -> Vec<u8> {
    let files: Vec<(String, Vec<u8>)> = (0..60)
        .map(|i| {
            (
                format!("d{}/f{i}", i % 4),
                text(i, 100 + (i as usize) * 1500),
            )
        })
        .chain([("big".to_string(), noise(1, 200_000))])
        .collect();
    archive_of(
        &files,
        small_props(),
        &meta_with(&[(Some("big"), "k", "v"), (None, "a", "1")]),
    )
}

/// Runs every reader operation; returns whether all of them succeeded.
fn exercise(bytes: &[u8]) -> bool {
    let Ok(a) = Archive::open(bytes) else {
        return false;
    };
    let mut ok = true;
    match a.list("") {
        Ok(paths) => {
            for p in paths.iter().take(20) {
                let mut out = Vec::new();
                ok &= a.read_file(p, &mut out).is_ok();
            }
        }
        Err(_) => ok = false,
    }
    ok &= a.entries("d1").is_ok();
    ok &= a.metadata().is_ok();
    ok &= a.verify(2).is_ok();
    ok
}

#[test]
fn every_truncation_is_refused() {
    let good = sample();
    let step = (good.len() / 500).max(1);
    for len in (0..good.len())
        .step_by(step)
        .chain(good.len() - 64..good.len())
    {
        let r = Archive::open(&good[..len]);
        assert!(r.is_err(), "truncated to {len} of {} opened", good.len());
    }
}

#[test]
fn a_flipped_byte_in_any_section_or_blob_is_caught_by_verify() {
    let good = sample();
    assert!(exercise(&good));
    let a = Archive::open(good.as_slice()).unwrap();
    let mut spans: Vec<(String, u64, u64)> = a
        .sections()
        .iter()
        .map(|s| (s.module_name.clone(), s.index_offset, s.index_len))
        .collect();
    spans.push(("blobs".into(), 0, a.blob_end()));
    spans.push((
        "manifest".into(),
        a.manifest_offset(),
        good.len() as u64 - 16 - a.manifest_offset(),
    ));
    spans.push(("footer".into(), good.len() as u64 - 16, 16));
    for (name, off, len) in spans {
        for k in 0..24u64 {
            let pos = off + (len * k) / 24;
            let mut bad = good.clone();
            bad[pos as usize] ^= 1 << (k % 8);
            let verified = Archive::open(bad.as_slice()).and_then(|a| a.verify(2));
            assert!(
                verified.is_err(),
                "flip at {pos} in {name} went unnoticed by verify"
            );
            exercise(&bad);
        }
    }
}

/// The manifest has no checksum of its own: `verify` checks it by rebuilding
/// the tail. A flipped byte anywhere in it, a section's name included (which
/// makes a tail this writer would not make, and hides the section from every
/// read), fails `verify`: each byte of the manifest, flipped in turn.
#[test]
fn a_flipped_byte_anywhere_in_the_manifest_fails_verify() {
    let good = sample();
    let a = Archive::open(good.as_slice()).unwrap();
    let (start, end) = (a.manifest_offset() as usize, good.len() - 16);
    for pos in start..end {
        let mut bad = good.clone();
        bad[pos] ^= 0x41;
        let verified = Archive::open(bad.as_slice()).and_then(|a| a.verify(2));
        assert!(
            verified.is_err(),
            "flip at {pos} of manifest {start}..{end} passed verify"
        );
    }
    // One such flip, by name: the meta section renamed is unknown to every
    // reader, which skips it, and refused by `verify`, which says why.
    let at = start
        + good[start..]
            .windows(META.len())
            .position(|w| w == META.as_bytes())
            .unwrap();
    let mut bad = good.clone();
    bad[at + 8] ^= 0x3e;
    let a = Archive::open(bad.as_slice()).unwrap();
    assert!(matches!(a.metadata(), Ok(Metadata::Absent)));
    let err = a.verify(2).unwrap_err().to_string();
    assert!(err.contains("this writer does not make"), "{err}");
}

/// Found by probing: a `decompress` that met a damaged slice of a file of
/// several left that file at its full size, zeros where the slice was. A
/// failed extraction now removes the files it left short; every file it
/// leaves is whole (the oracle: each equals its original), and a file that
/// was there before and is not in the archive is not touched.
#[test]
fn a_failed_extraction_leaves_no_file_short() {
    let files: Vec<(String, Vec<u8>)> = vec![
        ("a".into(), text(1, 500)),
        ("big".into(), noise(2, 300_000)),
        ("z".into(), text(3, 700)),
    ];
    let good = archive_of(&files, small_props(), &Metadata::Absent);
    let a = Archive::open(good.as_slice()).unwrap();
    let last = a.slices("big").unwrap().pop().unwrap();
    assert!(last.fdata_offset > 0, "big is cut into several slices");
    let mut bad = good.clone();
    bad[(last.blob_offset + last.blob_size / 2) as usize] ^= 0x5a;
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("mine"), b"kept").unwrap();
    let a = Archive::open(bad.as_slice()).unwrap();
    assert!(extract_all(&a, out.path(), 2, &|_| {}).is_err());
    assert!(!out.path().join("big").exists(), "big was left short");
    for (path, want) in &files {
        if let Ok(got) = std::fs::read(out.path().join(path)) {
            assert_eq!(&got, want, "{path} was left, not whole");
        }
    }
    assert_eq!(std::fs::read(out.path().join("mine")).unwrap(), b"kept");
}

#[test]
fn a_manifest_offset_past_the_end_is_refused() {
    let mut bad = sample();
    let n = bad.len();
    for off in [u64::MAX, n as u64, n as u64 - 16, n as u64 - 17] {
        bad[n - 8..].copy_from_slice(&off.to_le_bytes());
        assert!(
            matches!(Archive::open(bad.as_slice()), Err(Error::Corrupt(_))),
            "{off}"
        );
    }
    let mut bad = sample();
    bad[n - 16] = b'X';
    assert!(matches!(
        Archive::open(bad.as_slice()),
        Err(Error::NotAnArchive(_))
    ));
    assert!(matches!(
        Archive::open(&b"short"[..]),
        Err(Error::NotAnArchive(_))
    ));
}

#[test]
fn absurd_section_lengths_and_counts_are_refused() {
    let blob = b"hello".to_vec();
    let rows = [raw_row("x", 0, 0, &blob)];
    let evil: [Tamper<ManifestRow>; 6] = [
        ("len u64::MAX", &|r| r.3 = u64::MAX),
        ("offset u64::MAX", &|r| r.2 = u64::MAX),
        ("unaligned", &|r| r.2 += 1),
        ("rows u64::MAX", &|r| r.4 = u64::MAX),
        ("rows + 1", &|r| r.4 += 1),
        ("inside blobs", &|r| r.2 = 0),
    ];
    for (what, f) in evil {
        let sections = [RawSection {
            pkg_type: 0,
            module: "files".into(),
            bytes: ipc_bytes(&rows_batch(&rows)),
            rows: 1,
        }];
        let bytes = assemble(&blob, &sections, small_props(), &|m| f(&mut m[0]));
        let a = Archive::open(bytes.as_slice());
        assert!(
            a.and_then(|a| a.data_rows()).is_err(),
            "{what} went through"
        );
        exercise(&bytes);
    }
}

#[test]
fn absurd_row_numbers_are_refused_before_allocating() {
    let blob = b"hello".to_vec();
    let base = raw_row("x", 0, 0, &blob);
    let evil: [Tamper<znippy_format::SliceRow>; 8] = [
        ("huge size", &|r| r.uncompressed_size = u64::MAX / 2),
        // Found by the fuzzer's oracle: an empty slice was not checked, so
        // the file read as empty.
        ("size zero", &|r| r.uncompressed_size = 0),
        ("huge blob", &|r| r.blob_size = u64::MAX),
        ("blob past end", &|r| r.blob_offset = 1 << 40),
        ("inner past blob", &|r| r.blob_inner_offset = 3),
        ("inner overflow", &|r| r.blob_inner_offset = u64::MAX),
        ("fake frame", &|r| r.compressed = true),
        ("gap in file", &|r| r.fdata_offset = 7),
    ];
    let get = |bytes: &[u8]| {
        let a = Archive::open(bytes)?;
        let mut out = Vec::new();
        a.read_file("x", &mut out).map(|_| out)
    };
    let extract = |bytes: &[u8]| {
        let tmp = tempfile::tempdir().unwrap();
        extract_all(&Archive::open(bytes)?, tmp.path(), 1, &|_| {})
    };
    let control = craft(&blob, std::slice::from_ref(&base), small_props());
    assert_eq!(
        get(&control).unwrap(),
        blob,
        "the crafted archive itself is readable"
    );
    assert!(extract(&control).is_ok());
    for (what, f) in evil {
        let mut row = base.clone();
        f(&mut row);
        let bytes = craft(&blob, &[row], small_props());
        assert!(get(&bytes).is_err(), "get: {what} went through");
        assert!(extract(&bytes).is_err(), "extract: {what} went through");
        exercise(&bytes);
    }
    // A zstd frame that claims an enormous content size.
    let mut frame = zstd::bulk::compress(b"tiny", 3).unwrap();
    let row = znippy_format::SliceRow {
        compressed: true,
        blob_size: frame.len() as u64,
        ..raw_row("x", 0, 0, b"tiny")
    };
    frame[4] |= 0xC0; // frame content size field: 8 bytes
    let bytes = craft(&frame, std::slice::from_ref(&row), small_props());
    assert!(get(&bytes).is_err());
    assert!(extract(&bytes).is_err());
    // A frame with no content size, and one that holds less than the row says.
    let mut unsized_frame = Vec::new();
    let mut enc = zstd::stream::write::Encoder::new(&mut unsized_frame, 3).unwrap();
    enc.include_contentsize(false).unwrap();
    std::io::Write::write_all(&mut enc, b"tiny").unwrap();
    enc.finish().unwrap();
    let short = zstd::bulk::compress(b"ti", 3).unwrap();
    for frame in [unsized_frame, short] {
        let row = znippy_format::SliceRow {
            blob_size: frame.len() as u64,
            ..row.clone()
        };
        let bytes = craft(&frame, &[row], small_props());
        assert!(get(&bytes).is_err());
        assert!(extract(&bytes).is_err());
        exercise(&bytes);
    }
}

#[test]
fn paths_that_escape_are_refused_and_nothing_is_written_outside() {
    for evil in [
        "../x",
        "/etc/x",
        "a/../../x",
        "a\0b",
        "a//b",
        "./x",
        "a\\..\\x",
        "",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let blob = b"pwned".to_vec();
        let bytes = craft(&blob, &[raw_row(evil, 0, 0, &blob)], small_props());
        let a = Archive::open(bytes.as_slice()).unwrap();
        let out = tmp.path().join("out");
        let r = extract_all(&a, &out, 2, &|_| {});
        assert!(
            matches!(r, Err(Error::InvalidPath { .. })),
            "{evil:?}: {r:?}"
        );
        let outside: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            outside.iter().all(|n| n == "out"),
            "{evil:?} wrote {outside:?}"
        );
        assert!(!std::path::Path::new("/etc/x").exists());
    }
}

#[test]
fn extraction_does_not_follow_a_planted_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    symlink(&victim, out.join("x")).unwrap();
    let bytes = archive_of(
        &[("x".to_string(), b"overwrite".to_vec())],
        small_props(),
        &Metadata::Absent,
    );
    let a = Archive::open(bytes.as_slice()).unwrap();
    assert!(extract_all(&a, &out, 1, &|_| {}).is_err());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

/// From format version 4 a row's chunk_seq is its row number and a file's
/// slices are consecutive rows in file order, as a `get` reads them: the tail
/// writer refuses rows that break that rather than write an archive whose
/// trie would lead a `get` astray.
#[test]
fn the_tail_writer_refuses_rows_a_get_could_not_follow() {
    let blob = b"hello".to_vec();
    let row = |path: &str, seq: u64, fdata_offset: u64| znippy_format::SliceRow {
        fdata_offset,
        ..raw_row(path, seq, 0, &blob)
    };
    let write = |rows: &[znippy_format::SliceRow]| {
        znippy_format::write_tail(
            &mut Vec::new(),
            znippy_format::Tail {
                props: small_props(),
                blob_end: blob.len() as u64,
                rows,
                meta: &Metadata::Absent,
                packages: &Default::default(),
            },
        )
    };
    let good = [row("a", 0, 0), row("a", 1, 5), row("b", 2, 0)];
    assert!(write(&good).is_ok());
    // Paths need not rise (an append adds what sorts before): only a file's
    // slices must be together.
    let unsorted = [
        row("b", 0, 0),
        row("a", 1, 0),
        row("c", 2, 0),
        row("c", 3, 5),
    ];
    assert!(write(&unsorted).is_ok());
    let split_later = [
        row("a", 0, 0),
        row("c", 1, 0),
        row("b", 2, 0),
        row("c", 3, 5),
    ];
    assert!(matches!(write(&split_later), Err(Error::Corrupt(m)) if m.contains("slices of c")));
    // Slices in order that leave a gap in their file: no writer makes them,
    // and a reader that reads the rows whole refuses them.
    let gap = [row("a", 0, 0), row("a", 1, 10), row("b", 2, 0)];
    let bytes = craft(&blob, &gap, small_props());
    let a = Archive::open(bytes.as_slice()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let extracted = extract_all(&a, out.path(), 1, &|_| {});
    assert!(matches!(extracted, Err(Error::Corrupt(m)) if m.contains("do not tile")));
    for (what, rows) in [
        (
            "a gap in chunk_seq",
            [row("a", 0, 0), row("a", 1, 5), row("b", 3, 0)],
        ),
        (
            "not from 0",
            [row("a", 1, 0), row("a", 2, 5), row("b", 3, 0)],
        ),
        (
            "a file split",
            [row("a", 0, 0), row("b", 1, 0), row("a", 2, 5)],
        ),
        (
            "out of file order",
            [row("a", 0, 5), row("a", 1, 0), row("b", 2, 0)],
        ),
        (
            "one slice twice",
            [row("a", 0, 0), row("a", 1, 0), row("b", 2, 0)],
        ),
    ] {
        assert!(matches!(write(&rows), Err(Error::Corrupt(_))), "{what}");
        // Another writer's archive with these rows: extraction and `verify`
        // read the rows whole and refuse them too, rebuilt tail or not.
        let bytes = craft(&blob, &rows, small_props());
        let a = Archive::open(bytes.as_slice()).unwrap();
        assert!(matches!(a.verify(1), Err(Error::Corrupt(_))), "{what}");
        let tmp = tempfile::tempdir().unwrap();
        assert!(extract_all(&a, tmp.path(), 1, &|_| {}).is_err(), "{what}");
        exercise(&bytes);
    }
}

/// Every slice checks its own bytes, not that its file has them all: a
/// later slice of a file renamed in the index must make a `get` fail, not
/// give back a shorter file. Found by the reader fuzzer (a byte of the data
/// sub-index's path column changed inside its zstd body): the get of a
/// three-slice file returned the first two.
#[test]
fn a_file_whose_last_slice_is_renamed_is_an_error_not_a_shorter_file() {
    let blob = b"hello, world!".to_vec();
    // Slice `seq` of `path`: `len` bytes at `at` in the blob, `in_file` into the file.
    let slice =
        |path: &str, seq: u64, at: usize, len: usize, in_file: u64| znippy_format::SliceRow {
            fdata_offset: in_file,
            blob_offset: at as u64,
            ..raw_row(path, seq, 0, &blob[at..at + len])
        };
    let whole = [
        slice("f", 0, 0, 5, 0),
        slice("f", 1, 5, 7, 5),
        slice("g", 2, 12, 1, 0),
    ];
    // The last slice of f renamed f~: its rows still sort where they were.
    let renamed = [
        slice("f", 0, 0, 5, 0),
        slice("f~", 1, 5, 7, 5),
        slice("g", 2, 12, 1, 0),
    ];
    let trie_keys: Vec<(&str, u64)> = renamed
        .iter()
        .filter(|r| r.fdata_offset == 0 || r.relative_path == "f~")
        .map(|r| (r.relative_path.as_str(), r.chunk_seq))
        .collect();
    let good = craft(&blob, &whole, small_props());
    let mut out = Vec::new();
    Archive::open(good.as_slice())
        .unwrap()
        .read_file("f", &mut out)
        .unwrap();
    assert_eq!(out, b"hello, world");
    for (how, bytes) in [
        ("through the lookup", craft(&blob, &renamed, small_props())),
        (
            "through the trie",
            craft_with_trie(&blob, &renamed, &trie_keys, small_props()),
        ),
    ] {
        let a = Archive::open(bytes.as_slice()).unwrap();
        assert_eq!(
            a.trie_state() == TrieState::Used,
            how == "through the trie",
            "{how}"
        );
        let mut out = Vec::new();
        let got = a.read_file("f", &mut out);
        assert!(matches!(got, Err(Error::Corrupt(_))), "{how}: {got:?}");
        assert!(out.is_empty(), "{how}");
        exercise(&bytes);
    }
}

/// What reads the data sub-index whole (extraction, an append) checks its
/// hash first: a damaged name or mode is under no slice's hash, and an
/// append would otherwise write it into a tail with good hashes.
#[test]
fn a_damaged_data_sub_index_is_refused_before_an_extraction_or_an_append() {
    let good = sample();
    let a = Archive::open(good.as_slice()).unwrap();
    let data = a
        .sections()
        .iter()
        .find(|s| s.module_name == "files")
        .unwrap();
    let mut bad = good.clone();
    bad[(data.index_offset + data.index_len / 2) as usize] ^= 0x20;
    let a = Archive::open(bad.as_slice()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let got = extract_all(&a, &out, 1, &|_| {});
    assert!(matches!(got, Err(Error::Checksum(_))), "{got:?}");
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());
    let path = tmp.path().join("a.znippy");
    std::fs::write(&path, &bad).unwrap();
    let one = [Ok(znippy_format::InputFile::from_bytes(
        "new",
        b"x".to_vec(),
        None,
    ))];
    let got = znippy_format::append(&path, one, Default::default(), 1, &mut |_| {});
    assert!(matches!(got, Err(Error::Checksum(_))), "{got:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bad,
        "the archive is as it was"
    );
}

#[test]
fn writers_refuse_bad_paths_and_properties() {
    for bad in ["../x", "/abs", "a/./b", "a\0"] {
        let inputs = vec![Ok(znippy_format::InputFile::from_bytes(bad, vec![1], None))];
        let r = znippy_format::compress(
            &mut Vec::new(),
            [inputs],
            small_props(),
            1,
            &Metadata::Absent,
            &mut |_| {},
        );
        assert!(matches!(r, Err(Error::InvalidPath { .. })), "{bad:?}");
    }
    let twice = vec![
        Ok(znippy_format::InputFile::from_bytes("a", vec![1], None)),
        Ok(znippy_format::InputFile::from_bytes("a", vec![2], None)),
    ];
    assert!(znippy_format::compress(
        &mut Vec::new(),
        [twice],
        small_props(),
        1,
        &Metadata::Absent,
        &mut |_| {}
    )
    .is_err());
    for props in [
        ArchiveProps {
            chunk_size: 1,
            ..ArchiveProps::default()
        },
        ArchiveProps {
            chunk_size: 1 << 40,
            ..ArchiveProps::default()
        },
        ArchiveProps {
            pack_threshold: 4 << 20,
            ..ArchiveProps::default()
        },
        ArchiveProps {
            pack_threshold: ArchiveProps::default().chunk_size,
            ..ArchiveProps::default()
        },
        ArchiveProps {
            pack_size: ArchiveProps::default().pack_threshold - 1,
            ..ArchiveProps::default()
        },
        ArchiveProps {
            pack_size: ArchiveProps::default().chunk_size + 1,
            ..ArchiveProps::default()
        },
        ArchiveProps {
            level: 99,
            ..ArchiveProps::default()
        },
    ] {
        assert!(
            matches!(props.validate(), Err(Error::Property(_))),
            "{props:?}"
        );
    }
}

#[test]
fn a_path_twice_in_one_batch_is_refused_by_name() {
    let files = vec![
        Ok(znippy_format::InputFile::from_bytes(
            "a/x",
            b"one".to_vec(),
            None,
        )),
        Ok(znippy_format::InputFile::from_bytes(
            "a/x",
            b"two".to_vec(),
            None,
        )),
    ];
    let mut out = Vec::new();
    let err = znippy_format::compress(
        &mut out,
        [files],
        small_props(),
        1,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Input { path, .. } if path == "a/x"),
        "{err}"
    );
}

/// An Arrow IPC file of `batches`, one block each, whose footer then names
/// the first block in place of every other (the section is otherwise
/// untouched: the blocks' bytes are all there).
fn ipc_naming_the_first_block_each_time(batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = FileWriter::try_new(&mut out, &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    drop(w);
    let footer_end = out.len() - 10;
    let footer_len = i32::from_le_bytes(out[footer_end..footer_end + 4].try_into().unwrap());
    let footer_start = footer_end - footer_len as usize;
    let footer = arrow_ipc::root_as_footer(&out[footer_start..footer_end]).unwrap();
    let blocks: Vec<arrow_ipc::Block> = footer.recordBatches().unwrap().iter().copied().collect();
    // A block is a flatbuffer struct: offset, metadata length, 4 bytes of
    // padding, body length.
    let layout = |b: &arrow_ipc::Block| {
        [
            &b.offset().to_le_bytes()[..],
            &b.metaDataLength().to_le_bytes(),
            &[0; 4],
            &b.bodyLength().to_le_bytes(),
        ]
        .concat()
    };
    for b in &blocks[1..] {
        let at = footer_start
            + out[footer_start..footer_end]
                .windows(24)
                .position(|w| w == layout(b))
                .unwrap();
        out[at..at + 24].copy_from_slice(&layout(&blocks[0]));
    }
    out
}

/// From version 7 there is no lookup: a manifest that names one is damaged,
/// not a second source of rows to read, and the archive is refused at open.
#[test]
fn an_archive_of_version_7_on_with_a_lookup_is_refused() {
    let blob = b"hello".to_vec();
    let rows = [raw_row("x", 0, 0, &blob)];
    let control = craft(&blob, &rows, small_props());
    assert!(Archive::open(control.as_slice()).unwrap().format_version() >= 7);
    let sections = [
        RawSection {
            pkg_type: 0,
            module: "files".into(),
            bytes: ipc_bytes(&rows_batch(&rows)),
            rows: 1,
        },
        RawSection {
            pkg_type: znippy_format::RESERVED_PKG_TYPE,
            module: LOOKUP.into(),
            bytes: ipc_bytes(&rows_batch(&rows)),
            rows: 1,
        },
    ];
    let bytes = assemble(&blob, &sections, small_props(), &|_| {});
    match Archive::open(bytes.as_slice()) {
        Err(Error::Corrupt(m)) => assert!(m.contains("which has none"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// Found by review: nothing checked that a footer's blocks are distinct, so
/// a footer naming one block many times made a small section decode as
/// many batches (a manifest of 4.7 MB took 1.45 GB), and passed the check
/// of batches against the row count with repeated rows. Blocks must follow
/// one another now.
#[test]
fn a_footer_that_names_one_block_twice_is_refused() {
    let blob = b"hello".to_vec();
    let rows: Vec<_> = (0..6)
        .map(|i| raw_row(&format!("f{i}"), i, 0, &blob))
        .collect();
    let in_threes = |batch: RecordBatch| {
        let mut md = batch.schema().metadata().clone();
        md.insert(znippy_format::BATCH_ROWS_KEY.to_string(), "3".to_string());
        let schema = Arc::new(batch.schema().as_ref().clone().with_metadata(md));
        batch.with_schema(schema).unwrap()
    };
    let data = in_threes(rows_batch(&rows));
    let section = |files: Vec<u8>| {
        vec![RawSection {
            pkg_type: 0,
            module: "files".into(),
            bytes: files,
            rows: 6,
        }]
    };
    let two_blocks = |a: RecordBatch, b: RecordBatch| {
        let mut out = Vec::new();
        let mut w = FileWriter::try_new(&mut out, &a.schema()).unwrap();
        w.write(&a).unwrap();
        w.write(&b).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    };
    let control = assemble(
        &blob,
        &section(two_blocks(data.slice(0, 3), data.slice(3, 3))),
        small_props(),
        &|_| {},
    );
    let a = Archive::open(control.as_slice()).unwrap();
    let read_all = |a: &Archive<&[u8]>| -> znippy_format::Result<usize> {
        let paths = a.list("")?;
        for p in &paths {
            a.read_file(p, &mut Vec::new())?;
        }
        Ok(paths.len())
    };
    assert_eq!(read_all(&a).unwrap(), 6, "the control reads");

    let repeated = assemble(
        &blob,
        &section(ipc_naming_the_first_block_each_time(&[
            data.slice(0, 3),
            data.slice(3, 3),
        ])),
        small_props(),
        &|_| {},
    );
    let err = match Archive::open(repeated.as_slice()) {
        Err(e) => e,
        Ok(a) => read_all(&a).unwrap_err(),
    };
    assert!(
        err.to_string().contains("overlap or are out of order"),
        "{err}"
    );
    assert!(!exercise(&repeated));
}

/// Found by review: `list -l` read a link's target whole, however long its
/// rows said it was (300 MB of zeros took 1.85 GB). A target is read only
/// through `read_link`, which checks the length first.
#[test]
fn a_link_target_longer_than_a_link_may_be_is_refused_before_reading() {
    let link = |path: &str, seq: u64, target: &[u8]| znippy_format::SliceRow {
        mode: Some(znippy_format::S_IFLNK | 0o777),
        ..raw_row(path, seq, 0, target)
    };
    let short = b"../elsewhere".to_vec();
    let bytes = craft(&short, &[link("l", 0, &short)], small_props());
    let a = Archive::open(bytes.as_slice()).unwrap();
    assert_eq!(a.read_link("l").unwrap(), short);

    let long = vec![b'a'; znippy_format::MAX_LINK_TARGET + 1];
    let bytes = craft(&long, &[link("l", 0, &long)], small_props());
    let a = Archive::open(bytes.as_slice()).unwrap();
    let err = a.read_link("l").unwrap_err();
    assert!(
        err.to_string().contains("a link target of 4097 bytes"),
        "{err}"
    );
    let tmp = tempfile::tempdir().unwrap();
    assert!(extract_all(&a, tmp.path(), 1, &|_| {}).is_err());
}
