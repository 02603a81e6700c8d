//! create -> append A -> restart -> append B (replaces one path of A, deletes
//! another) -> seal: the sealed archive equals a one-shot compress of the live
//! files batch by batch, reads back through the ordinary reader and verifies.
//! Once in one process, once with every step in its own process, processes
//! SIGKILLed between steps and in the middle of the seal.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use znippy_format::{compress, Archive, ArchiveProps, InputFile, Metadata};
use znippy_store::{CreateOptions, Store};

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 2 == 0 {
                b' ' + (x >> 59) as u8
            } else {
                (x >> 40) as u8
            }
        })
        .collect()
}

/// A batch as a directory gives it: in byte order of the paths.
fn sorted(mut b: Vec<(&'static str, Vec<u8>)>) -> Vec<(&'static str, Vec<u8>)> {
    b.sort_by_key(|(p, _)| *p);
    b
}

fn batch_a() -> Vec<(&'static str, Vec<u8>)> {
    sorted(vec![
        ("keep/small.txt", data(1, 900)),
        ("keep/large.bin", data(2, 5 << 20)),
        ("replace.bin", data(3, 3 << 20)),
        ("delete.bin", data(4, 3 << 20)),
    ])
}

fn batch_b() -> Vec<(&'static str, Vec<u8>)> {
    sorted(vec![
        ("new/file.txt", data(5, 40_000)),
        ("replace.bin", data(6, 2 << 20)),
    ])
}

const DELETED: &str = "delete.bin";

fn inputs(b: &[(&'static str, Vec<u8>)]) -> Vec<InputFile> {
    b.iter()
        .map(|(p, d)| InputFile::from_bytes(*p, d.clone(), Some(0o644)))
        .collect()
}

/// What compressing the live files, batch by batch, in one go produces.
fn expected() -> Vec<u8> {
    let a_live: Vec<_> = batch_a()
        .into_iter()
        .filter(|(p, _)| *p != DELETED && !batch_b().iter().any(|(q, _)| q == p))
        .collect();
    let mut out = Vec::new();
    let batches =
        [inputs(&a_live), inputs(&batch_b())].map(|b| b.into_iter().map(Ok).collect::<Vec<_>>());
    compress(
        &mut out,
        batches,
        ArchiveProps::default(),
        2,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    out
}

fn check_sealed(path: &Path) {
    let want = expected();
    let got = std::fs::read(path).unwrap();
    assert_eq!(
        Sha256::digest(&got),
        Sha256::digest(&want),
        "sealed archive equals the one-shot compress"
    );
    let a = Archive::open(std::fs::File::open(path).unwrap()).unwrap();
    assert_eq!(a.verify(2).unwrap(), a.row_count());
    let live: Vec<(&str, Vec<u8>)> = batch_a()
        .into_iter()
        .filter(|(p, _)| *p != DELETED && *p != "replace.bin")
        .chain(batch_b())
        .collect();
    assert_eq!(a.list("").unwrap().len(), live.len());
    for (p, d) in live {
        let mut out = Vec::new();
        a.read_file(p, &mut out).unwrap();
        assert!(out == d, "{p} reads back");
    }
    assert!(!a.contains(DELETED).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_in_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let store = Store::open(tmp.path(), 2).await.unwrap();
        store.create("a", CreateOptions::default()).await.unwrap();
        store.append("a", inputs(&batch_a()), None).await.unwrap();
    }
    let store = Store::open(tmp.path(), 2).await.unwrap();
    store.append("a", inputs(&batch_b()), None).await.unwrap();
    store.delete_file("a", DELETED).await.unwrap();
    let r = znippy_seal::seal(&store, "a", None).await.unwrap();
    check_sealed(r.at.file().unwrap());
}

fn znippy() -> PathBuf {
    // target/<profile>/deps/lifecycle-… -> target/<profile>/znippy
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join("znippy");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p znippy`",
        bin.display()
    );
    bin
}

fn write_batch(dir: &Path, b: &[(&str, Vec<u8>)]) {
    for (p, d) in b {
        let full = dir.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, d).unwrap();
    }
}

/// Runs one step in its own process and SIGKILLs it as soon as it has said it
/// is done, before it can shut down cleanly.
fn step_then_kill(args: &[&str]) -> String {
    let mut child = Command::new(znippy())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    {
        use std::io::Read;
        let stdout = child.stdout.as_mut().unwrap();
        let mut buf = [0u8; 256];
        while !out.contains('\n') {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(!out.is_empty(), "step {args:?} reported nothing");
    out
}

#[test]
fn lifecycle_across_killed_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    let d = d.to_str().unwrap();
    let (a_dir, b_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    write_batch(&a_dir, &batch_a());
    write_batch(&b_dir, &batch_b());
    step_then_kill(&["live", "--data", d, "create", "a"]);
    step_then_kill(&["live", "--data", d, "append", "a", a_dir.to_str().unwrap()]);
    step_then_kill(&["live", "--data", d, "append", "a", b_dir.to_str().unwrap()]);
    step_then_kill(&["live", "--data", d, "rm", "a", DELETED]);
    // Kill the seal itself at moments spread over its run, then seal for real.
    let start = Instant::now();
    let mut kills = 0;
    for i in 0..12u32 {
        let mut child = Command::new(znippy())
            .args(["seal", "--data", d, "a"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(u64::from(i) * 15));
        if child.try_wait().unwrap().is_none() {
            kills += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        // Whatever the kill left, the archive reads on.
        let got = Command::new(znippy())
            .args(["live", "--data", d, "get", "a", "keep/small.txt"])
            .output()
            .unwrap();
        assert!(got.stdout == data(1, 900), "readable after kill {i}");
    }
    let out = Command::new(znippy())
        .args(["seal", "--data", d, "a"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let path = text.split_whitespace().nth(2).unwrap();
    check_sealed(Path::new(path));
    eprintln!(
        "{kills} seals killed mid-run in {:?}; the final seal matched",
        start.elapsed()
    );
    // Sealed means sealed, from any process.
    let again = Command::new(znippy())
        .args(["live", "--data", d, "rm", "a", "new/file.txt"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("sealed"));
}
