//! A seal after replaces and deletes is canonical: byte for byte what the CLI
//! makes of the live files (`compress` + `append`s), with no byte of a dead
//! file anywhere in it, raw or inside a zstd frame, and the codec run for the
//! changed packs alone.
//!
//! One test in this binary, its cases one after another, so the process-wide
//! codec counter sees only the seal being checked.

mod common;

use std::path::Path;

use common::{append_of, assert_no_token, cli_reference, noise, planted, play, text, token, Step};
use sha2::{Digest, Sha256};
use znippy_format::{codec_calls, Archive, ArchiveProps};
use znippy_seal::seal;

fn props() -> ArchiveProps {
    ArchiveProps {
        chunk_size: 64 << 10,
        pack_threshold: 16 << 10,
        pack_size: 32 << 10,
        level: 3,
    }
}

struct Case {
    name: &'static str,
    steps: Vec<Step>,
    /// Planted in dead files only.
    tokens: Vec<Vec<u8>>,
    /// Blobs the plan must rebuild through the codec, and copy unchanged.
    codec_runs: u64,
    copied: u64,
}

fn del(p: &str) -> Step {
    Step::Delete(p.to_string())
}

fn cases() -> Vec<Case> {
    let t = token;
    vec![
        Case {
            name: "(i) a dead large file between live small files",
            steps: vec![
                append_of(&[
                    ("s1", text(1, 3000)),
                    ("big", planted(text(2, 100_000), &t(1))),
                    ("s2", text(3, 3000)),
                ]),
                del("big"),
            ],
            tokens: vec![t(1)],
            // s1 and s2 now share one pack.
            codec_runs: 1,
            copied: 0,
        },
        Case {
            name: "(ii) a wholly dead pack lets a later small file fit in the pack before it",
            steps: vec![
                append_of(&[
                    ("x1", text(10, 7_000)),
                    ("x2", text(11, 7_000)),
                    ("x3", text(12, 7_000)),
                    ("x4", text(13, 7_000)),
                    ("d1", planted(text(14, 8_000), &t(2))),
                    ("d2", planted(text(15, 8_000), &t(3))),
                    ("d3", planted(text(16, 8_000), &t(4))),
                    ("d4", planted(text(17, 8_000), &t(5))),
                    ("y", text(18, 3000)),
                ]),
                del("d1"),
                del("d2"),
                del("d3"),
                del("d4"),
            ],
            tokens: vec![t(2), t(3), t(4), t(5)],
            // x1..x4 fill 28,000 of a 32 KiB pack, d1..d4 the next, y its
            // own; at the seal y joins x1..x4.
            codec_runs: 1,
            copied: 0,
        },
        Case {
            name: "(iii) live files that deduplicated into slices that later died (renames)",
            steps: vec![
                append_of(&[
                    ("f", text(20, 5000)),
                    ("d", planted(text(21, 5000), &t(6))),
                    ("h", text(22, 5000)),
                    ("big", text(23, 100_000)),
                ]),
                append_of(&[("g", text(20, 5000)), ("big2", text(23, 100_000))]),
                del("f"),
                del("d"),
                del("big"),
            ],
            tokens: vec![t(6)],
            // [h] and [g] are new packs; big2's two pieces are big's blobs.
            codec_runs: 2,
            copied: 2,
        },
        Case {
            name: "(iv) a compressed pack mixing live and dead small files",
            steps: vec![
                append_of(&[
                    ("a", text(30, 3000)),
                    ("d", planted(text(31, 3000), &t(7))),
                    ("b", text(32, 3000)),
                ]),
                append_of(&[("e", text(33, 3000)), ("k", text(34, 3000))]),
                del("d"),
            ],
            tokens: vec![t(7)],
            codec_runs: 1,
            copied: 1,
        },
        Case {
            name: "(v) a raw pack mixing live and dead small files",
            steps: vec![
                append_of(&[
                    ("a", noise(40, 3000)),
                    ("d", planted(noise(41, 3000), &t(8))),
                    ("b", noise(42, 3000)),
                ]),
                append_of(&[("e", noise(43, 3000)), ("k", noise(44, 3000))]),
                del("d"),
            ],
            tokens: vec![t(8)],
            // [a, b] is tried and stays raw; the untouched raw pack [e, k] is
            // copied, not tried again.
            codec_runs: 1,
            copied: 1,
        },
        Case {
            name: "(vi) an append whose files are all dead",
            steps: vec![
                append_of(&[("a", text(50, 3000))]),
                append_of(&[
                    ("d1", planted(text(51, 3000), &t(9))),
                    ("d2", planted(text(52, 3000), &t(10))),
                ]),
                append_of(&[("b", text(53, 3000))]),
                del("d2"),
                append_of(&[("d1", text(54, 3000))]),
            ],
            tokens: vec![t(9), t(10)],
            codec_runs: 0,
            copied: 3,
        },
    ]
}

/// Raw occurrences of `token` in any file below `dir`.
fn on_disk(dir: &Path, token: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            hits.extend(on_disk(&p, token));
        } else if std::fs::read(&p)
            .unwrap()
            .windows(token.len())
            .any(|w| w == token)
        {
            hits.push(p.display().to_string());
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_history_seals_to_the_cli_bytes_with_no_dead_byte() {
    for case in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let expected = cli_reference(tmp.path(), props(), &case.steps);
        let store = play(tmp.path(), props(), &case.steps).await;
        let before = codec_calls();
        let r = seal(&store, "a", None).await.unwrap();
        assert_eq!(
            codec_calls() - before,
            r.repack.codec_runs,
            "{}: the codec ran for the rebuilt blobs alone",
            case.name
        );
        let sealed = std::fs::read(r.at.file().unwrap()).unwrap();
        assert!(!r.in_place, "{}", case.name);
        assert_eq!(
            Sha256::digest(&sealed),
            Sha256::digest(&expected),
            "{}: byte-identical to compress + append",
            case.name
        );
        let frames = assert_no_token(&sealed, &case.tokens);
        assert!(frames > 0 || case.name.starts_with("(v)"), "{}", case.name);
        for t in &case.tokens {
            assert_eq!(
                on_disk(tmp.path().join("store").as_path(), t),
                Vec::<String>::new(),
                "{}: no dead payload left on disk",
                case.name
            );
        }
        assert_eq!(
            (r.repack.codec_runs, r.repack.blobs_copied),
            (case.codec_runs, case.copied),
            "{}: (codec runs, blobs copied)",
            case.name
        );
        let a = Archive::open(sealed).unwrap();
        assert_eq!(a.identity().unwrap(), r.identity, "{}", case.name);
        a.verify(2).unwrap();
    }
}
