//! Crash safety with real processes: appends run in a child `znippy live append`
//! that is SIGKILLed at random moments (while blobs are written, between fsync
//! and commit, during the commit). After every kill the store must reopen with
//! every acknowledged append present, nothing unacknowledged half visible, and
//! the sidecar cut back to the committed blob end.
//!
//! After each kill every acknowledged file must be listed at its size, and the
//! newest acknowledged batch is read back and verified: recovery only ever
//! cuts the sidecar's end, so a wrong cut shows there first. The end of the
//! run reads back and verifies every acknowledged byte.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use znippy_store::{Store, StoreError};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_znippy"))
}

/// Content of file `k` of batch `i`: distinct per batch, so nothing dedupes.
fn content(i: u64, k: u64, len: usize) -> Vec<u8> {
    let mut x = (i * 7919 + k * 104_729) | 1;
    (0..len)
        .map(|n| {
            if n % 4096 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            (x >> (n % 8 * 8)) as u8 ^ (n as u8)
        })
        .collect()
}

const SIZES: [usize; 3] = [3 << 20, 2 << 20, 1000];

fn make_batch(dir: &Path, i: u64) {
    std::fs::create_dir_all(dir).unwrap();
    for (k, len) in SIZES.iter().enumerate() {
        std::fs::write(dir.join(format!("b{i:03}-{k}")), content(i, k as u64, *len)).unwrap();
    }
}

struct Outcome {
    acked: bool,
}

fn append(data: &Path, batch: &Path, kill_after: Option<Duration>) -> Outcome {
    let mut child = bin()
        .args([
            "live",
            "--data",
            data.to_str().unwrap(),
            "--threads",
            "2",
            "append",
            "a",
            batch.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(d) = kill_after {
        let start = Instant::now();
        while start.elapsed() < d {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let acked =
        out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("appended");
    Outcome { acked }
}

/// Checks the store after a kill; `verify` are the acknowledged batches to
/// read back whole (the others are checked by listing). Returns the
/// unacknowledged batches that committed.
async fn check(data: &Path, acked: &[u64], verify: &[u64], unacked: &[u64]) -> Vec<u64> {
    let store = Store::open(data, 1)
        .await
        .expect("store reopens after a kill");
    let info = store.info("a").await.expect("archive loads");
    let sidecar = std::fs::metadata(data.join("blobs/a.znippy"))
        .unwrap()
        .len();
    assert_eq!(
        sidecar, info.bytes_stored,
        "sidecar cut to the committed blob end"
    );
    let read = |i: u64, k: usize| {
        let store = &store;
        async move {
            let mut out = Vec::new();
            store
                .read_file("a", &format!("b{i:03}-{k}"), &mut out)
                .await
                .map(|_| out)
        }
    };
    let listed: std::collections::HashMap<String, u64> = store
        .list_files("a", "")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.path, e.size))
        .collect();
    for &i in acked {
        for (k, len) in SIZES.iter().enumerate() {
            let path = format!("b{i:03}-{k}");
            assert_eq!(
                listed.get(&path),
                Some(&(*len as u64)),
                "acknowledged {path} listed at its size"
            );
        }
    }
    for &i in verify {
        for (k, len) in SIZES.iter().enumerate() {
            let got = read(i, k)
                .await
                .unwrap_or_else(|e| panic!("acknowledged batch {i} file {k}: {e}"));
            assert!(
                got == content(i, k as u64, *len),
                "batch {i} file {k} bytes"
            );
        }
    }
    let mut landed = Vec::new();
    for &i in unacked {
        let present: Vec<bool> = {
            let mut v = Vec::new();
            for (k, len) in SIZES.iter().enumerate() {
                v.push(match read(i, k).await {
                    Ok(bytes) => {
                        assert!(
                            bytes == content(i, k as u64, *len),
                            "unacked batch {i} file {k} wrong bytes"
                        );
                        true
                    }
                    Err(StoreError::NotFound(_)) => false,
                    Err(e) => panic!("unacked batch {i} file {k}: {e}"),
                });
            }
            v
        };
        assert!(
            present.iter().all(|p| *p) || present.iter().all(|p| !*p),
            "batch {i} half visible: {present:?}"
        );
        if present[0] {
            landed.push(i);
        }
    }
    landed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_appends_never_lose_acknowledged_data() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ok = bin()
        .args(["live", "--data", data.to_str().unwrap(), "create", "a"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    // Time one undisturbed append to aim the kills across its whole life.
    let b0 = tmp.path().join("batch0");
    make_batch(&b0, 0);
    let start = Instant::now();
    assert!(append(&data, &b0, None).acked);
    let span = start.elapsed();
    let mut acked = vec![0];
    let mut unacked = Vec::new();
    let iterations: u64 = std::env::var("ZNIPPY_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut seed = 0x9e37_79b9u64;
    let mut kills = 0;
    let mut committed_unacked = 0;
    for i in 1..=iterations {
        let batch = tmp.path().join(format!("batch{i}"));
        make_batch(&batch, i);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = span.mul_f64((seed % 1000) as f64 / 1000.0 * 2.0);
        let outcome = append(&data, &batch, Some(at));
        if outcome.acked {
            acked.push(i);
        } else {
            kills += 1;
            unacked.push(i);
        }
        let newest = acked.last().copied().into_iter().collect::<Vec<_>>();
        let landed = check(&data, &acked, &newest, &unacked).await;
        // A batch that committed but whose acknowledgement was lost stays whole.
        unacked.retain(|u| !landed.contains(u));
        committed_unacked += landed.len();
        acked.extend(landed);
        std::fs::remove_dir_all(&batch).unwrap();
    }
    assert!(
        kills >= iterations / 4,
        "only {kills} of {iterations} appends were interrupted"
    );
    // The archive takes appends again and everything still verifies.
    let last = tmp.path().join("last");
    make_batch(&last, 999);
    assert!(append(&data, &last, None).acked);
    acked.push(999);
    check(&data, &acked, &acked, &[]).await;
    eprintln!(
        "{kills} of {iterations} appends killed ({committed_unacked} of them after their commit); {} batches verified",
        acked.len()
    );
}
