//! A mutation fuzzer for the reader, bounded in time: open, list, get, metadata,
//! verify and extract on mutated archives must return errors, never panic, hang
//! or allocate by an untrusted number (an allocation failure aborts the test).
//!
//! `ZNIPPY_FUZZ_SECS` sets the budget (default 5 s; CI runs 60 s). A failure
//! prints the seed and iteration, and writes the input to the temp directory.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::*;
use znippy_format::{extract_all, Archive, ArchiveProps, InputFile, Metadata};

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

fn seeds() -> Vec<Vec<u8>> {
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
    vec![with_meta, plain, two_batches, empty]
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

fn exercise(bytes: &[u8], extract_to: Option<&std::path::Path>) {
    let Ok(a) = Archive::open(bytes) else { return };
    if let Ok(paths) = a.list("") {
        for p in paths.iter().take(8) {
            let _ = a.read_file(p, &mut Vec::new());
        }
    }
    let _ = a.list("d1/");
    let _ = a.entries("");
    let _ = a.read_file("big", &mut Vec::new());
    let _ = a.metadata();
    let _ = a.data_rows();
    let _ = a.verify(1);
    if let Some(dir) = extract_to {
        if extract_all(&a, dir, 2, &|_| {}).is_ok() {
            // Whatever was extracted is a plain tree inside `dir`.
            for entry in walk(dir) {
                let m = std::fs::symlink_metadata(&entry).unwrap();
                assert!(!m.file_type().is_symlink(), "extraction made a symlink");
                assert!(entry.starts_with(dir));
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
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut iterations = 0u64;
    while Instant::now() < deadline {
        let pick = rng.below(seeds.len());
        let input = mutate(&mut rng, seeds[pick].clone());
        let dir = tmp.path().join(format!("x{iterations}"));
        let extract = iterations.is_multiple_of(16).then_some(dir.as_path());
        let r = catch_unwind(AssertUnwindSafe(|| exercise(&input, extract)));
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
    eprintln!("fuzzed {iterations} mutated archives in {secs} s");
    assert!(iterations > 0);
}
