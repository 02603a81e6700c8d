//! Law 4, bounded memory: compress, decompress and get of a file much larger than
//! the engine's bound keep the process's peak RSS under 300 MiB. Peak RSS comes
//! from the kernel (`getrusage(RUSAGE_CHILDREN)`); this file holds one test so no
//! other child process of the test binary can be counted.

use std::io::Write;
use std::path::Path;
use std::process::Command;

const GIB: u64 = 1 << 30;
const LIMIT_KIB: i64 = 300 * 1024;

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
    let peak = children_peak_rss_kib();
    assert!(peak < LIMIT_KIB, "{args:?}: peak RSS {peak} KiB");
    eprintln!("{:?}: peak RSS so far {} MiB", args[0], peak / 1024);
}

/// One GiB that neither dedupes nor compresses away: a 1 MiB noise block, each
/// copy behind its own counter.
fn big_file(path: &Path) {
    let mut block = vec![0u8; 1 << 20];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
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
    run(&["compress", &s(&src), "-o", &s(&arc), "--level", "1"]);
    std::fs::remove_file(src.join("big.bin")).unwrap();
    run(&["decompress", &s(&arc), "-o", &s(&tmp.path().join("out"))]);
    assert_eq!(
        std::fs::metadata(tmp.path().join("out/big.bin"))
            .unwrap()
            .len(),
        GIB
    );
    run(&["get", &s(&arc), "big.bin"]);
}
