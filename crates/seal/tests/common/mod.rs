//! What the seal tests share: a history of appends and deletes played on a real
//! store, the CLI's reference for it (`compress` of the first batch's live
//! files, then `append` of each later batch's), and a search for dead bytes
//! that looks inside every zstd frame of a file.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use znippy_format::{append, compress, ArchiveProps, InputFile, MetaUpdate, Metadata};
use znippy_store::{CreateOptions, Store};
// Each test binary takes what it needs of these.
#[allow(unused_imports)]
pub use znippy_testkit::data::{noise, text};

/// One step of an archive's life.
#[derive(Debug, Clone)]
pub enum Step {
    /// One append: its files in the order they arrive.
    Append(Vec<(String, Vec<u8>)>),
    /// A delete.
    Delete(String),
}

pub fn append_of(files: &[(&str, Vec<u8>)]) -> Step {
    Step::Append(
        files
            .iter()
            .map(|(p, b)| (p.to_string(), b.clone()))
            .collect(),
    )
}

fn inputs(files: &[(String, Vec<u8>)]) -> Vec<InputFile> {
    files
        .iter()
        .map(|(p, b)| InputFile::from_bytes(p.clone(), b.clone(), Some(0o644)))
        .collect()
}

/// The live files of each append, in arrival order: a later append of a path,
/// or a delete, kills it. Appends left with no live file are dropped.
pub fn live_batches(steps: &[Step]) -> Vec<Vec<(String, Vec<u8>)>> {
    let mut last: HashMap<&str, Option<(usize, usize)>> = HashMap::new();
    for (s, step) in steps.iter().enumerate() {
        match step {
            Step::Append(files) => {
                for (i, (p, _)) in files.iter().enumerate() {
                    last.insert(p, Some((s, i)));
                }
            }
            Step::Delete(p) => {
                last.insert(p, None);
            }
        }
    }
    let mut out = Vec::new();
    for (s, step) in steps.iter().enumerate() {
        if let Step::Append(files) = step {
            let live: Vec<_> = files
                .iter()
                .enumerate()
                .filter(|(i, (p, _))| last.get(p.as_str()) == Some(&Some((s, *i))))
                .map(|(_, f)| f.clone())
                .collect();
            if !live.is_empty() {
                out.push(live);
            }
        }
    }
    out
}

/// What the CLI makes of the live files: `compress` of the first batch, then
/// `append` of each later one, through a real file.
pub fn cli_reference(dir: &Path, props: ArchiveProps, steps: &[Step]) -> Vec<u8> {
    let path = dir.join("reference.znippy");
    let mut batches = live_batches(steps).into_iter();
    let mut out = std::fs::File::create(&path).unwrap();
    let first = batches.next().unwrap_or_default();
    let first: Vec<_> = inputs(&first).into_iter().map(Ok).collect();
    compress(&mut out, [first], props, 2, &Metadata::Absent, &mut |_| {}).unwrap();
    drop(out);
    for b in batches {
        let files = inputs(&b).into_iter().map(Ok);
        append(&path, files, MetaUpdate::default(), 2, &mut |_| {}).unwrap();
    }
    std::fs::read(&path).unwrap()
}

/// Plays `steps` on archive "a" of a fresh store in `dir`.
pub async fn play(dir: &Path, props: ArchiveProps, steps: &[Step]) -> Store {
    let store = Store::open(&dir.join("store"), 2).await.unwrap();
    play_on(&store, "a", props, steps).await;
    store
}

/// Plays `steps` on a new archive `id` of `store`.
pub async fn play_on(store: &Store, id: &str, props: ArchiveProps, steps: &[Step]) {
    store
        .create(
            id,
            CreateOptions {
                props,
                with_meta: false,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for step in steps {
        match step {
            Step::Append(files) => {
                store.append(id, inputs(files), None).await.unwrap();
            }
            Step::Delete(p) => {
                store.delete_file(id, p).await.unwrap();
            }
        }
    }
}

/// Every zstd frame that starts anywhere in `bytes`, decoded as far as it goes.
fn frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    use std::io::Read;
    const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
    let mut out = Vec::new();
    for i in 0..bytes.len().saturating_sub(3) {
        if bytes[i..i + 4] != MAGIC {
            continue;
        }
        let Ok(d) = zstd::stream::read::Decoder::with_buffer(&bytes[i..]) else {
            continue;
        };
        let mut decoded = Vec::new();
        let mut d = d.single_frame().take(64 << 20);
        let mut buf = [0u8; 64 << 10];
        while let Ok(n) = d.read(&mut buf) {
            if n == 0 {
                break;
            }
            decoded.extend_from_slice(&buf[..n]);
        }
        out.push(decoded);
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Asserts that no token is in `bytes`, raw or inside any zstd frame; returns
/// how many frames were decoded.
pub fn assert_no_token(bytes: &[u8], tokens: &[Vec<u8>]) -> usize {
    let frames = frames(bytes);
    for t in tokens {
        let name = String::from_utf8_lossy(t);
        assert!(!contains(bytes, t), "{name} is in the sealed file, raw");
        for f in &frames {
            assert!(!contains(f, t), "{name} is inside a zstd frame");
        }
    }
    frames.len()
}

/// A token no generated content holds by chance.
pub fn token(n: u64) -> Vec<u8> {
    format!("<<DEAD-TOKEN-{n:06}>>").into_bytes()
}

/// `len` bytes of `seed` with tokens at the start, the middle and the end.
pub fn planted(mut bytes: Vec<u8>, token: &[u8]) -> Vec<u8> {
    let len = bytes.len();
    assert!(len >= 3 * token.len());
    for at in [0, len / 2 - token.len() / 2, len - token.len()] {
        bytes[at..at + token.len()].copy_from_slice(token);
    }
    bytes
}
