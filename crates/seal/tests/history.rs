//! Property: for random histories of appends, replaces and deletes (small,
//! large, empty and duplicate contents), the seal is byte for byte the CLI's
//! `compress` + `append`s of the live files, and no content that only dead
//! files held is in it, raw or inside a zstd frame. A failure names its seed;
//! `HISTORY_SEED=N` replays that one history.

mod common;

use common::{assert_no_token, cli_reference, live_batches, noise, play, text, Step};
use sha2::{Digest, Sha256};
use znippy_format::ArchiveProps;
use znippy_seal::seal;
use znippy_testkit::data::Rng;

const TOKEN_LEN: usize = 22;

/// A content with its own token at the start, when it is long enough for one.
fn content(rng: &mut Rng, serial: u64, chunk: usize) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => 0,
        1 => rng.below(60),
        2..=6 => rng.below(16 << 10) + 1,
        7 => 16 << 10,
        8 => chunk * 2,
        _ => rng.below(3 * chunk) + (16 << 10) + 1,
    };
    let seed = rng.next_u64();
    let mut bytes = if rng.below(3) == 0 {
        noise(seed, len)
    } else {
        text(seed, len)
    };
    if len >= TOKEN_LEN {
        bytes[..TOKEN_LEN].copy_from_slice(&token(serial));
    }
    bytes
}

fn token(serial: u64) -> Vec<u8> {
    format!("<<TOKEN-{serial:012}>>").into_bytes()
}

fn history(seed: u64, chunk: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut live: Vec<String> = Vec::new();
    let mut steps = Vec::new();
    for _ in 0..rng.below(6) + 2 {
        if !live.is_empty() && rng.below(4) == 0 {
            let p = live.swap_remove(rng.below(live.len()));
            steps.push(Step::Delete(p));
            continue;
        }
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for _ in 0..rng.below(6) + 1 {
            let path = format!("d{}/f{}", rng.below(2), rng.below(9));
            if files.iter().any(|(p, _)| *p == path) {
                continue;
            }
            let bytes = if !pool.is_empty() && rng.below(4) == 0 {
                pool[rng.below(pool.len())].clone()
            } else {
                let c = content(&mut rng, pool.len() as u64, chunk);
                pool.push(c.clone());
                c
            };
            if !live.contains(&path) {
                live.push(path.clone());
            }
            files.push((path, bytes));
        }
        steps.push(Step::Append(files));
    }
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_histories_seal_to_the_cli_bytes() {
    let props = ArchiveProps {
        chunk_size: 32 << 10,
        pack_threshold: 16 << 10,
        pack_size: 32 << 10,
        level: 1,
    };
    let seeds: Vec<u64> = match std::env::var("HISTORY_SEED") {
        Ok(s) => vec![s.parse().expect("HISTORY_SEED is a number")],
        Err(_) => (1..=40).collect(),
    };
    let mut repacked = 0;
    for seed in seeds {
        let steps = history(seed, props.chunk_size as usize);
        let tmp = tempfile::tempdir().unwrap();
        let expected = cli_reference(tmp.path(), props, &steps);
        let store = play(tmp.path(), props, &steps).await;
        let r = seal(&store, "a", None).await.unwrap();
        let sealed = std::fs::read(r.at.file().unwrap()).unwrap();
        assert!(
            Sha256::digest(&sealed) == Sha256::digest(&expected),
            "seed {seed}: the seal differs from compress + append of the live files"
        );
        // A token is dead when no live file still holds the content it marks.
        let live: Vec<Vec<u8>> = live_batches(&steps)
            .into_iter()
            .flatten()
            .map(|(_, b)| b)
            .collect();
        let dead: Vec<Vec<u8>> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Append(files) => Some(files),
                Step::Delete(_) => None,
            })
            .flatten()
            .filter(|(_, b)| b.len() >= TOKEN_LEN && !live.contains(b))
            .map(|(_, b)| b[..TOKEN_LEN].to_vec())
            .collect();
        assert_no_token(&sealed, &dead);
        repacked += u32::from(!r.in_place);
    }
    assert!(repacked > 0, "some history needed a re-pack");
}
