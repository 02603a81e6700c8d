//! A mutation fuzzer for the reader, bounded in time: open, list, get, metadata,
//! verify and extract on mutated archives must return errors or right answers,
//! never panic, hang or allocate by an untrusted number.
//!
//! - **Oracle.** Every file a mutated archive still gives back is checked
//!   against the files it was made of: its bytes are its own original bytes,
//!   or, when a flipped byte renamed an entry, some other original file's,
//!   and then `verify` must fail. Bytes are never invented or damaged (every
//!   slice is BLAKE3-checked); names can move because normal reads do not
//!   hash the lookup section (that would cost O(index) per get), which
//!   `verify` does.
//! - **Allocation cap.** The test binary's allocator refuses to hold more
//!   than 1 GiB in all (the reader's largest legitimate buffers are a few
//!   times the 64 MiB chunk limit), which aborts the run.
//! - **Watchdog.** A case that runs for more than 20 s aborts the run.
//!
//! `ZNIPPY_FUZZ_SECS` sets the budget (default 5 s; CI runs 20 s). A failure
//! prints the seed and iteration, and writes the input to the temp directory.

mod common;

use std::alloc::System;
use std::collections::BTreeMap;

use common::*;
use znippy_format::{extract_all, Archive, ArchiveProps, InputFile, Metadata};
use znippy_testkit::fuzz;

/// The system allocator, capped: a buffer sized by a field the mutation made
/// huge fails to allocate, which aborts the run.
#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, ALLOC_CAP);

const ALLOC_CAP: usize = 1 << 30;

/// The files an archive was made of.
type Files = BTreeMap<String, Vec<u8>>;

fn seeds() -> Vec<(Vec<u8>, Files)> {
    let files: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| {
            (
                format!("d{}/f{i}", i % 3),
                text(i, 10 + (i as usize * 997) % 40_000),
            )
        })
        .chain([
            ("big".to_string(), noise(5, 150_000)),
            ("e".to_string(), vec![]),
        ])
        .collect();
    let with_meta = archive_of(
        &files,
        small_props(),
        &meta_with(&[
            (Some("big"), "k", "v"),
            (None, "n", "1"),
            (Some("e"), "f", "1.5"),
        ]),
    );
    let plain = archive_of(&files[..5], ArchiveProps::default(), &Metadata::Absent);
    let mut two_batches = Vec::new();
    let batch = |r: std::ops::Range<usize>| -> Vec<znippy_format::Result<InputFile>> {
        files[r]
            .iter()
            .map(|(p, b)| Ok(InputFile::from_bytes(p.clone(), b.clone(), None)))
            .collect()
    };
    znippy_format::compress(
        &mut two_batches,
        [batch(0..20), batch(10..42)],
        small_props(),
        2,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    let empty = archive_of(&[], small_props(), &Metadata::Absent);
    let all: Files = files.iter().cloned().collect();
    let first5: Files = files[..5].iter().cloned().collect();
    vec![
        (with_meta, all.clone()),
        (plain, first5),
        (two_batches, all),
        (empty, Files::new()),
    ]
}

/// Checks one file a mutated archive gave back (see the oracle above);
/// returns whether its name was the original's.
fn check_answer(original: &Files, path: &str, got: &[u8]) -> bool {
    match original.get(path) {
        Some(want) if want.as_slice() == got => true,
        // The lookup's path column is not hashed: a renamed entry still has
        // its own bytes, which are some original file's.
        _ => {
            assert!(
                original.values().any(|b| b.as_slice() == got),
                "{path:?}: {} bytes that no original file holds",
                got.len()
            );
            false
        }
    }
}

fn exercise(bytes: &[u8], original: &Files, extract_to: Option<&std::path::Path>) {
    let Ok(a) = Archive::open(bytes) else { return };
    let mut renamed = false;
    let mut read = |p: &str| {
        let mut out = Vec::new();
        if a.read_file(p, &mut out).is_ok() {
            renamed |= !check_answer(original, p, &out);
        }
    };
    if let Ok(paths) = a.list("") {
        for p in paths.iter().take(8) {
            read(p);
        }
    }
    read("big");
    let _ = a.list("d1/");
    let _ = a.entries("");
    let _ = a.metadata();
    let _ = a.data_rows();
    let verified = a.verify(1).is_ok();
    assert!(
        !(renamed && verified),
        "verify passed an archive with a renamed entry"
    );
    if let Some(dir) = extract_to {
        if extract_all(&a, dir, 2, &|_| {}).is_ok() {
            // Whatever was extracted is a plain tree inside `dir`, of the
            // original files' bytes.
            for entry in walk(dir) {
                let m = std::fs::symlink_metadata(&entry).unwrap();
                assert!(!m.file_type().is_symlink(), "extraction made a symlink");
                assert!(entry.starts_with(dir));
                if m.is_file() {
                    let rel = entry.strip_prefix(dir).unwrap().to_string_lossy();
                    check_answer(original, &rel, &std::fs::read(&entry).unwrap());
                }
            }
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn reader_survives_mutated_archives() {
    fuzz::run(&seeds(), true, |input, original, iteration, tmp| {
        let dir = tmp.join(format!("x{iteration}"));
        let extract = iteration.is_multiple_of(16).then_some(dir.as_path());
        exercise(input, original, extract);
        if extract.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    });
}
