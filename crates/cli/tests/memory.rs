//! Bounded memory (docs/architecture.md): compress, decompress and get of a
//! file far larger than the engine's bound keep the process's peak RSS under
//! that bound, `Engine::memory_bound` for the archive's properties and two
//! workers, plus a fixed allowance for the process itself (its code, the
//! allocator, the index). Peak RSS comes from the kernel
//! (`getrusage(RUSAGE_CHILDREN)`); this file holds one test so no other child
//! process of the test binary can be counted.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use znippy_format::{ArchiveProps, Engine};

const GIB: u64 = 1 << 30;
/// What the process holds beside the engine: decompress, which has no
/// engine, peaks near 13 MiB (docs/benchmarks.md).
const PROCESS_KIB: u64 = 24 * 1024;

/// The archive's properties: the defaults at level 1.
fn props() -> ArchiveProps {
    ArchiveProps {
        level: 1,
        ..ArchiveProps::default()
    }
}

fn limit_kib() -> i64 {
    (Engine::memory_bound(props(), 2) / 1024 + PROCESS_KIB) as i64
}

/// Peak RSS (KiB) of the largest child waited for so far.
fn children_peak_rss_kib() -> i64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    assert_eq!(rc, 0);
    u.ru_maxrss
}

fn run(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (peak, limit) = (children_peak_rss_kib(), limit_kib());
    assert!(
        peak < limit,
        "{args:?}: peak RSS {peak} KiB, bound {limit} KiB"
    );
    eprintln!(
        "{:?}: peak RSS so far {} MiB (bound {} MiB)",
        args[0],
        peak / 1024,
        limit / 1024
    );
}

/// One GiB that does not dedupe but compresses (so every chunk goes through
/// zstd, whose contexts are part of the bound): a 1 MiB block of noise over
/// 16 letters, each copy behind its own counter.
fn big_file(path: &Path) {
    let mut block = vec![0u8; 1 << 20];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = b"abcdefghijklmnop"[(x >> 60) as usize];
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..(GIB >> 20) {
        block[..8].copy_from_slice(&i.to_le_bytes());
        f.write_all(&block).unwrap();
    }
    f.flush().unwrap();
}

#[test]
fn peak_rss_stays_bounded_on_a_file_far_larger_than_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    big_file(&src.join("big.bin"));
    let arc = tmp.path().join("a.znippy");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let level = props().level.to_string();
    run(&[
        "compress",
        &s(&src),
        "-o",
        &s(&arc),
        "--level",
        &level,
        "--threads",
        "2",
    ]);
    let stored = std::fs::metadata(&arc).unwrap().len();
    assert!(stored < GIB * 3 / 4, "the input compressed: {stored} bytes");
    std::fs::remove_file(src.join("big.bin")).unwrap();
    run(&[
        "decompress",
        &s(&arc),
        "-o",
        &s(&tmp.path().join("out")),
        "--threads",
        "2",
    ]);
    assert_eq!(
        std::fs::metadata(tmp.path().join("out/big.bin"))
            .unwrap()
            .len(),
        GIB
    );
    run(&["get", &s(&arc), "big.bin"]);
}
