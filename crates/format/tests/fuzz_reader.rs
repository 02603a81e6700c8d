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
//! `ZNIPPY_FUZZ_SECS` sets the budget (default 5 s; CI runs 30 s). A failure
//! prints the seed and iteration, and writes the input to the temp directory.

mod common;

use std::alloc::System;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use znippy_format::{extract_all, Archive, ArchiveProps, InputFile, Metadata};

/// The system allocator, capped: a buffer sized by a field the mutation made
/// huge fails to allocate, which aborts the run.
#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, ALLOC_CAP);

const ALLOC_CAP: usize = 1 << 30;

/// The files an archive was made of.
type Files = BTreeMap<String, Vec<u8>>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

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

const INTERESTING: [u64; 9] = [
    0,
    1,
    63,
    64,
    0x7fff_ffff,
    0xffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    65_536,
];

fn mutate(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1);
        // Most bytes worth hitting are in the tail: the last ~40%.
        let pos = if rng.below(10) < 7 {
            len - 1 - rng.below(len * 2 / 5 + 1).min(len - 1)
        } else {
            rng.below(len)
        };
        let at = pos.min(b.len().saturating_sub(1));
        match rng.below(7) {
            0 if !b.is_empty() => b[at] ^= 1 << rng.below(8),
            1 if !b.is_empty() => b[at] = rng.next() as u8,
            2 => {
                let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                let w = [1, 2, 4, 8][rng.below(4)];
                for (k, byte) in v[..w].iter().enumerate() {
                    if let Some(x) = b.get_mut(pos + k) {
                        *x = *byte;
                    }
                }
            }
            3 => b.truncate(rng.below(len)),
            4 => {
                let n = 1 + rng.below(64);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                let at = pos.min(b.len());
                b.splice(at..at, junk);
            }
            5 if b.len() > 64 => {
                let n = 1 + rng.below(64);
                let from = rng.below(b.len() - n);
                let to = rng.below(b.len() - n);
                let chunk = b[from..from + n].to_vec();
                b[to..to + n].copy_from_slice(&chunk);
            }
            _ => {
                let n = b.len();
                if n >= 8 {
                    // Point the manifest offset somewhere plausible but wrong.
                    let off = rng.below(n) as u64;
                    b[n - 8..].copy_from_slice(&off.to_le_bytes());
                }
            }
        }
    }
    b
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
    let secs: u64 = std::env::var("ZNIPPY_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let seed: u64 = std::env::var("ZNIPPY_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let seeds = seeds();
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed | 1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    // When the running case started (ms since `start`), for the watchdog.
    static CASE_STARTED: AtomicU64 = AtomicU64::new(0);
    const IDLE: u64 = u64::MAX;
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let began = CASE_STARTED.load(Ordering::Relaxed);
        if began != IDLE && start.elapsed().as_millis() as u64 > began + 20_000 {
            eprintln!("a fuzz case ran for over 20 s (ZNIPPY_FUZZ_SEED={seed}): a hang");
            std::process::abort();
        }
    });
    let mut iterations = 0u64;
    while Instant::now() < deadline {
        CASE_STARTED.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        let pick = rng.below(seeds.len());
        let (seed_bytes, original) = &seeds[pick];
        let input = mutate(&mut rng, seed_bytes.clone());
        let dir = tmp.path().join(format!("x{iterations}"));
        let extract = iterations.is_multiple_of(16).then_some(dir.as_path());
        let r = catch_unwind(AssertUnwindSafe(|| exercise(&input, original, extract)));
        if r.is_err() {
            let saved = tmp.path().join("crash.znippy");
            std::fs::write(&saved, &input).unwrap();
            let kept = tmp.keep();
            panic!(
                "panic on iteration {iterations} (ZNIPPY_FUZZ_SEED={seed}); input kept in {}",
                kept.join("crash.znippy").display()
            );
        }
        if extract.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        iterations += 1;
    }
    CASE_STARTED.store(IDLE, Ordering::Relaxed);
    eprintln!("fuzzed {iterations} mutated archives in {secs} s");
    assert!(iterations > 0);
}
