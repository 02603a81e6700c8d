//! A mutation fuzzer for the reader, bounded in time: open, list, get, metadata,
//! verify and extract on mutated archives must return errors or right answers,
//! never panic, hang or allocate by an untrusted number.
//!
//! - **Oracle.** Every file a mutated archive still gives back is checked
//!   against the files it was made of: its bytes are its own original bytes,
//!   or, when a flipped byte renamed an entry, some other original file's,
//!   and then `verify` must fail. Bytes are never invented or damaged (every
//!   slice is BLAKE3-checked); names can move because normal reads do not
//!   hash the index sections they take a batch of (the data sub-index, the
//!   lookup: that would cost O(index) per get), which `verify` does.
//! - **Allocation cap.** The test binary's allocator refuses to hold more
//!   than 1 GiB in all (the reader's largest legitimate buffers are a few
//!   times the 64 MiB chunk limit), which aborts the run.
//! - **Watchdog.** A case that runs for more than 20 s aborts the run.
//! - **Structure-aware mutations.** Half the cases mutate inside one section
//!   and write the section's new BLAKE3 into the manifest (which has no hash
//!   of its own), and in a trie the new hashes of its shards and fence (format
//!   version 5), so that they get past the section hashes: to the trie, the
//!   Arrow IPC validators and the row checks, and to `verify`'s re-encoding of
//!   the tail. The run counts the mutated tries the reader then used. Such an
//!   archive is self-consistent: its index may really say that a file is
//!   other slices than it was (as a hostile writer could), and `verify` may
//!   rightly pass it. Its oracle is the slice: every file it gives back is a
//!   run of the original files' slices, whole and in any order, since every
//!   slice is BLAKE3-checked.
//!
//! `ZNIPPY_FUZZ_SECS` sets the budget (default 5 s; CI runs 20 s), after the
//! cases of `tests/corpus/fuzz_reader.txt` (docs/testing.md). A failure prints
//! the case (put `case N` in the corpus to replay it) and writes the input to
//! the temp directory.

mod common;

use std::alloc::System;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::*;
use znippy_format::{
    extract_all, Archive, ArchiveProps, InputFile, Metadata, SectionEntry, TrieState, BATCH_TRIE,
    TRIE,
};
use znippy_testkit::fuzz;

/// The system allocator, capped: a buffer sized by a field the mutation made
/// huge fails to allocate, which aborts the run.
#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, ALLOC_CAP);

const ALLOC_CAP: usize = 1 << 30;

/// The files an archive was made of.
type Files = BTreeMap<String, Vec<u8>>;

/// A seed archive: the files it was made of, and where its sections are.
struct Seed {
    files: Files,
    /// `(start, end)` of each section.
    sections: Vec<(usize, usize)>,
    manifest_offset: usize,
    /// The trie or batch trie section's `(start, end, blake3)`, if there is
    /// one (both are laid out alike).
    trie: Option<(usize, usize, [u8; 32])>,
    /// Every slice of the original files, under either chunk size used.
    slices: Vec<Vec<u8>>,
}

impl Seed {
    fn new(bytes: &[u8], files: Files) -> Seed {
        let a = Archive::open(bytes).unwrap();
        let range = |s: &SectionEntry| {
            let start = s.index_offset as usize;
            (start, start + s.index_len as usize)
        };
        let trie = a
            .sections()
            .iter()
            .find(|s| s.module_name == TRIE || s.module_name == BATCH_TRIE)
            .map(|s| {
                let (start, end) = range(s);
                (start, end, s.blake3)
            });
        let chunk = small_props().chunk_size as usize;
        let slices = files
            .values()
            .flat_map(|b| b.chunks(chunk).map(<[u8]>::to_vec).chain([b.clone()]))
            .filter(|s| !s.is_empty())
            .collect();
        Seed {
            files,
            sections: a.sections().iter().map(range).collect(),
            manifest_offset: a.manifest_offset() as usize,
            trie,
            slices,
        }
    }
}

/// Mutates `bytes` anywhere, or (half the time) inside one section, then
/// puts the section's new hash where the manifest holds its old one.
fn mutate(rng: &mut znippy_testkit::data::Rng, bytes: &[u8], seed: &Seed) -> Vec<u8> {
    if seed.sections.is_empty() || rng.below(2) == 0 {
        return fuzz::mutate(rng, bytes.to_vec(), true);
    }
    let (start, end) = &seed.sections[rng.below(seed.sections.len())];
    let mut b = bytes.to_vec();
    let old = *blake3::hash(&b[*start..*end]).as_bytes();
    fuzz::mutate_within(rng, &mut b[*start..*end]);
    if seed.trie.is_some_and(|(s, e, _)| (s, e) == (*start, *end)) {
        rehash_trie(&mut b[*start..*end]);
    }
    let new = blake3::hash(&b[*start..*end]);
    let manifest = &mut b[seed.manifest_offset..];
    if let Some(at) = manifest.windows(32).position(|w| w == old) {
        manifest[at..at + 32].copy_from_slice(new.as_bytes());
    }
    b
}

/// Writes the hashes of a version-5 trie section (docs/format.md, section
/// 6.3) again over its bytes as they are, where its trailer still describes
/// a layout: each shard's into its record, then the fence's and records'
/// into the trailer.
fn rehash_trie(t: &mut [u8]) {
    let n = t.len();
    if n < 56 {
        return;
    }
    let word = |t: &[u8], at: usize| u64::from_le_bytes(t[at..at + 8].try_into().unwrap());
    let (fence_len, shards) = (word(t, n - 24), word(t, n - 16));
    let head = shards
        .checked_mul(40)
        .and_then(|r| r.checked_add(fence_len))
        .filter(|h| *h <= (n - 56) as u64);
    let Some(head) = head else {
        return;
    };
    let fence_start = n - 56 - head as usize;
    let records = fence_start + fence_len as usize;
    for i in 0..shards as usize {
        let rec = records + 40 * i;
        let start = word(t, rec) as usize;
        let end = match i + 1 < shards as usize {
            true => word(t, rec + 40) as usize,
            false => fence_start,
        };
        if start < end && end <= fence_start {
            let h = blake3::hash(&t[start..end]);
            t[rec + 8..rec + 40].copy_from_slice(h.as_bytes());
        }
    }
    let h = blake3::hash(&t[fence_start..n - 56]);
    t[n - 56..n - 24].copy_from_slice(h.as_bytes());
}

/// A plugin for the seeds: claims `d1/`, and makes a row of every column
/// type from a file's first words.
struct Words;

impl znippy_format::Plugin for Words {
    fn name(&self) -> &'static str {
        "words"
    }
    fn pkg_type(&self) -> i8 {
        9
    }
    fn columns(&self) -> Vec<znippy_format::Column> {
        use znippy_format::{Column, ColumnType};
        vec![
            Column::new("first", ColumnType::Str),
            Column::new("len", ColumnType::I64),
            Column::new("words", ColumnType::StrList),
            Column::new("pairs", ColumnType::StrMap),
        ]
    }
    fn matches_path(&self, path: &str) -> bool {
        path.starts_with("d1/")
    }
    fn extract(&self, file: &znippy_format::Window) -> znippy_format::Outcome {
        use znippy_format::Value;
        let text = String::from_utf8_lossy(&file.head()[..file.head().len().min(200)]).to_string();
        let words: Vec<String> = text
            .split_whitespace()
            .take(6)
            .map(str::to_string)
            .collect();
        let pairs = words
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()));
        znippy_format::Outcome::Package(vec![vec![
            Value::opt_str(words.first().cloned()),
            Value::I64(file.len() as i64),
            Value::List(words.clone()),
            Value::Map(pairs.collect()),
        ]])
    }
}

fn seeds() -> Vec<(Vec<u8>, Seed)> {
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
    // Package sections of every column type: format version 6.
    let mut packages = Vec::new();
    let plugins = znippy_format::Plugins::new(vec![std::sync::Arc::new(Words)], "seed").unwrap();
    znippy_format::compress_with(
        &mut packages,
        [batch(0..42)],
        small_props(),
        2,
        &Metadata::Absent,
        &plugins,
        &mut |_| {},
    )
    .unwrap();
    // Two signature sections after the signed part (the format stores a
    // signature's bytes and does not read them).
    let signed = {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signed.znippy");
        std::fs::write(&path, &plain).unwrap();
        let identity = Archive::open(plain.as_slice()).unwrap().identity().unwrap();
        for sig in [&b"first signature"[..], &[0x30; 300][..]] {
            znippy_format::add_signature(&path, &identity, sig.to_vec()).unwrap();
        }
        std::fs::read(&path).unwrap()
    };
    let all: Files = files.iter().cloned().collect();
    let first5: Files = files[..5].iter().cloned().collect();
    // Versions 5 and 6, with their lookups, and 7, with a trie over rows in
    // path order (tests/versions.rs pins them).
    let fixture = |name: &str| {
        let bytes = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data")
                .join(name),
        )
        .unwrap();
        let a = Archive::open(bytes.as_slice()).unwrap();
        let files: Files = a
            .list("")
            .unwrap()
            .into_iter()
            .map(|p| {
                let mut out = Vec::new();
                a.read_file(&p, &mut out).unwrap();
                (p, out)
            })
            .collect();
        (bytes, files)
    };
    [
        (signed, first5.clone()),
        (with_meta, all.clone()),
        (plain, first5),
        (two_batches, all.clone()),
        (empty, Files::new()),
        (packages, all),
        fixture("v5.znippy"),
        fixture("v6.znippy"),
        fixture("v7.znippy"),
    ]
    .into_iter()
    .map(|(bytes, files)| {
        let seed = Seed::new(&bytes, files);
        (bytes, seed)
    })
    .collect()
}

/// Whether `got` is a run of whole `slices` (longest first at each step).
fn made_of_slices(slices: &[Vec<u8>], mut got: &[u8]) -> bool {
    while !got.is_empty() {
        let next = slices
            .iter()
            .filter(|s| got.starts_with(s))
            .map(Vec::len)
            .max();
        match next {
            Some(n) => got = &got[n..],
            None => return false,
        }
    }
    true
}

/// Checks one file a mutated archive gave back (see the oracle above);
/// returns whether its name was the original's.
fn check_answer(seed: &Seed, consistent: bool, path: &str, got: &[u8]) -> bool {
    let original = &seed.files;
    match original.get(path) {
        Some(want) if want.as_slice() == got => true,
        _ if consistent => {
            assert!(
                made_of_slices(&seed.slices, got),
                "{path:?}: {} bytes that are not the original slices",
                got.len()
            );
            false
        }
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

/// Runs every read on `bytes`; returns the outcome's class and whether the
/// reader used a trie whose bytes differ from the seed's.
fn exercise(bytes: &[u8], seed: &Seed, extract_to: Option<&std::path::Path>) -> (String, bool) {
    let a = match Archive::open(bytes) {
        Ok(a) => a,
        Err(e) => return (fuzz::class(&e), false),
    };
    // Every section matches its hash: a structure-aware mutation (or none).
    let consistent = a.sections().iter().all(|s| {
        let (start, end) = (
            s.index_offset as usize,
            (s.index_offset + s.index_len) as usize,
        );
        bytes
            .get(start..end)
            .is_some_and(|b| blake3::hash(b).as_bytes() == &s.blake3)
    });
    let mutated_trie = matches!(a.trie_state(), TrieState::Used | TrieState::Batches)
        && seed.trie.is_some_and(|(start, end, hash)| {
            bytes.get(start..end).map(|t| *blake3::hash(t).as_bytes()) != Some(hash)
        });
    let mut renamed = false;
    let mut read = |p: &str| {
        let mut out = Vec::new();
        if a.read_file(p, &mut out).is_ok() {
            renamed |= !check_answer(seed, consistent, p, &out);
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
    let _ = a.packages();
    let _ = a.data_rows();
    let verify = a.verify(1);
    let verified = verify.is_ok();
    assert!(
        consistent || !(renamed && verified),
        "verify passed an archive with a renamed entry"
    );
    if let Some(dir) = extract_to {
        if extract_all(&a, dir, 2, &|_| {}).is_ok() {
            // Whatever was extracted is inside `dir`, of the original files'
            // bytes. A link too: the seeds hold none, but the mode is not
            // under any slice's hash, and an index whose mode says "link"
            // (as a hostile writer's may) makes one of the file's bytes as
            // its target, never a file written through it.
            for entry in walk(dir) {
                let m = std::fs::symlink_metadata(&entry).unwrap();
                assert!(entry.starts_with(dir));
                let rel = entry.strip_prefix(dir).unwrap().to_string_lossy();
                if m.is_file() {
                    check_answer(seed, consistent, &rel, &std::fs::read(&entry).unwrap());
                } else if m.file_type().is_symlink() {
                    let target = std::fs::read_link(&entry).unwrap();
                    check_answer(seed, consistent, &rel, target.as_os_str().as_bytes());
                }
            }
        }
    }
    let class = format!(
        "{:?} {}",
        a.trie_state(),
        verify.map_or_else(|e| fuzz::class(&e), |_| "verified".into())
    );
    (class, mutated_trie)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        // Not into a link, wherever it points.
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        }
        out.push(e.path());
    }
    out
}

#[test]
fn reader_survives_mutated_archives() {
    let mut mutated_tries = 0u64;
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/fuzz_reader.txt");
    fuzz::run_with(&corpus, &seeds(), mutate, |input, seed, iteration, tmp| {
        let dir = tmp.join(format!("x{iteration}"));
        let extract = iteration.is_multiple_of(16).then_some(dir.as_path());
        let (class, mutated_trie) = exercise(input, seed, extract);
        mutated_tries += u64::from(mutated_trie);
        if extract.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        class
    });
    eprintln!("{mutated_tries} cases read through a mutated trie");
    assert!(mutated_tries > 0, "no mutation got past the trie's hash");
}
