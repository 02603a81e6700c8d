//! A mutation fuzzer for the tar reader, bounded in time like the reader's
//! (`ZNIPPY_FUZZ_SECS`): a mutated tar stream compressed through
//! [`TarEntries`] must fail with an error or give an archive that opens,
//! verifies and reads back every file it lists, never panic, hang or
//! allocate by a header's number (the allocator is capped at 1 GiB).
//! Tar has no checksum over file bytes, so what the archive holds is checked
//! for integrity, not against the original stream; the unmutated seeds are
//! checked exactly.

mod common;

use std::alloc::System;
use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use common::*;
use znippy_format::{compress, Archive, Metadata, TarEntries};
use znippy_testkit::fuzz;

#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, 1 << 30);

type Files = BTreeMap<String, Vec<u8>>;

/// Tar streams of every entry kind the reader takes: files, a long (GNU)
/// name, a pax path, a symlink, a hard link and an empty directory.
fn seeds() -> Vec<(Vec<u8>, Files)> {
    let mut seeds = Vec::new();
    for variant in 0..3u64 {
        let mut b = tar::Builder::new(Vec::new());
        let mut files = Files::new();
        let mut add = |b: &mut tar::Builder<Vec<u8>>, path: &str, bytes: Vec<u8>| {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, bytes.as_slice()).unwrap();
            files.insert(path.to_string(), bytes);
        };
        add(&mut b, "a.txt", text(variant, 3_000));
        add(&mut b, "d/big.bin", noise(variant + 7, 70_000));
        add(
            &mut b,
            &format!("long/{}", "n".repeat(150)),
            text(variant + 3, 500),
        );
        add(&mut b, "e", Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, "d/link", "../a.txt").unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        h.set_mode(0o644);
        b.append_link(&mut h, "d/hard", "a.txt").unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        b.append_data(&mut h, "empty/", std::io::empty()).unwrap();
        seeds.push((b.into_inner().unwrap(), files));
    }
    seeds
}

/// Compresses a tar stream; `Ok` holds the archive.
fn archive_of_tar(bytes: &[u8]) -> znippy_format::Result<Vec<u8>> {
    let mut out = Vec::new();
    let entries = TarEntries::new(Box::new(Cursor::new(bytes.to_vec())));
    compress(
        &mut out,
        [entries],
        small_props(),
        2,
        &Metadata::Absent,
        &mut |_| {},
    )?;
    Ok(out)
}

#[test]
fn the_seeds_compress_to_their_files() {
    for (bytes, files) in seeds() {
        let out = archive_of_tar(&bytes).unwrap();
        let a = Archive::open(out.as_slice()).unwrap();
        for (path, want) in &files {
            let mut got = Vec::new();
            a.read_file(path, &mut got).unwrap();
            assert_eq!(&got, want, "{path}");
        }
        let mut hard = Vec::new();
        a.read_file("d/hard", &mut hard).unwrap();
        assert_eq!(hard, files["a.txt"]);
        assert!(a.list("").unwrap().contains(&"empty".to_string()));
    }
}

#[test]
fn tar_reader_survives_mutated_streams() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/fuzz_tar.txt");
    fuzz::run(&corpus, &seeds(), false, |input, _, _, _| {
        let out = match archive_of_tar(input) {
            Ok(out) => out,
            Err(e) => return fuzz::class(&e),
        };
        let a = Archive::open(out.as_slice()).expect("an archive the engine wrote opens");
        a.verify(1).expect("and verifies");
        for p in a.list("").unwrap() {
            a.read_file(&p, &mut Vec::new())
                .unwrap_or_else(|e| panic!("{p}: {e}"));
        }
        "compressed".into()
    });
}
