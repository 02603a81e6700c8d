//! Live-store benchmark: `cargo run --release -p znippy-benches --bin store-bench`.
//!
//! Prints Markdown: append throughput for large files next to `compress` of the
//! same data, appends per second for small batches, the cost of the N-th append
//! as N grows, and the time to open an archive against its row count. Set
//! `BENCH_APPENDS` (default 1000) for the longest N; `BENCH_DIR` for the disk.

use std::time::{Duration, Instant};

use anyhow::Result;
use znippy_benches::compressible;
use znippy_format::{compress, ArchiveProps, InputFile, Metadata};
use znippy_store::{CreateOptions, Store};

fn mb_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let base =
        std::env::var("BENCH_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let tmp = tempfile::tempdir_in(base)?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let max_n: u64 = std::env::var("BENCH_APPENDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // BENCH_ONLY=seal runs only that part (large, small, seal).
    let only = std::env::var("BENCH_ONLY").ok();
    let want = |part: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|p| p == part))
    };
    println!("## Live store (threads = {threads})\n");

    let mut store = Store::open(&tmp.path().join("data"), threads).await?;
    if want("large") {
        // Large files: one append of 8 x 64 MiB vs compress of the same bytes.
        let files: Vec<Vec<u8>> = (0..8).map(|i| compressible(i, 64 << 20)).collect();
        let total: u64 = files.iter().map(|f| f.len() as u64).sum();
        let inputs = || -> Vec<InputFile> {
            files
                .iter()
                .enumerate()
                .map(|(i, f)| InputFile::from_bytes(format!("big/{i}"), f.clone(), Some(0o644)))
                .collect()
        };
        let out_path = tmp.path().join("c.znippy");
        let t = Instant::now();
        let mut out = std::io::BufWriter::new(std::fs::File::create(&out_path)?);
        let batch: Vec<_> = inputs().into_iter().map(Ok).collect();
        compress(
            &mut out,
            [batch],
            ArchiveProps::default(),
            threads,
            &Metadata::Absent,
            &mut |_| {},
        )?;
        drop(out);
        let compress_time = t.elapsed();
        store.create("big", CreateOptions::default()).await?;
        let t = Instant::now();
        store.append("big", inputs(), None).await?;
        let append_time = t.elapsed();
        println!("| large files, {} MiB in one append | MB/s |", total >> 20);
        println!("|---|---|");
        println!(
            "| `compress` (format crate, in memory input) | {:.0} |",
            mb_s(total, compress_time)
        );
        println!(
            "| store `append` (blobs fsynced + Iceberg commit) | {:.0} |",
            mb_s(total, append_time)
        );
        println!(
            "| ratio append / compress | {:.2} |\n",
            compress_time.as_secs_f64() / append_time.as_secs_f64()
        );
    }
    if want("small") {
        // Small batches: appends per second and the N-th append's cost.
        store.create("small", CreateOptions::default()).await?;
        let small = |n: u64| -> Vec<InputFile> {
            (0..10)
                .map(|k| {
                    InputFile::from_bytes(
                        format!("a{n:06}/f{k}"),
                        compressible(n * 10 + k, 1024),
                        Some(0o644),
                    )
                })
                .collect()
        };
        let mut marks = vec![1u64, 10, 100, 1000, 10_000];
        marks.retain(|m| *m <= max_n);
        println!("| appends so far (N) | N-th append (10 x 1 KiB), median of 5 | appends/s up to N | restart: open + first read |");
        println!("|---|---|---|---|");
        let mut n = 0u64;
        for &mark in &marks {
            let t = Instant::now();
            let start_n = n;
            while n + 5 < mark {
                store.append("small", small(n), None).await?;
                n += 1;
            }
            let rate = (n - start_n) as f64 / t.elapsed().as_secs_f64().max(1e-9);
            let mut costs = Vec::new();
            for _ in 0..5 {
                let t = Instant::now();
                store.append("small", small(n), None).await?;
                costs.push(t.elapsed());
                n += 1;
            }
            // Restart: open the store afresh, load the archive, read one file.
            drop(store);
            let t = Instant::now();
            store = Store::open(&tmp.path().join("data"), threads).await?;
            let mut sink = Vec::new();
            store.read_file("small", "a000000/f0", &mut sink).await?;
            let open_time = t.elapsed();
            println!(
                "| {n} | {:.1} ms | {} | {:.0} ms |",
                median(costs).as_secs_f64() * 1e3,
                if n - start_n > 5 {
                    format!("{rate:.1}")
                } else {
                    "-".into()
                },
                open_time.as_secs_f64() * 1e3
            );
        }
    }
    if want("seal") {
        seal_bench(&store).await?;
    }
    Ok(())
}

/// Seal time for the same 1,000 file names at 10 MB and at 1 GB of payload, in
/// place and with 1% of the files deleted (a re-pack).
async fn seal_bench(store: &Store) -> Result<()> {
    println!("\n| seal, 1,000 files in 10 appends | payload | deleted | seal time | blobs copied | rebuilt (codec runs) | tail bytes |");
    println!("|---|---|---|---|---|---|---|");
    for (size, label) in [(10_000usize, "10 MB"), (1_000_000, "1 GB")] {
        for deleted in [0u64, 10] {
            let id = format!("seal-{size}-{deleted}");
            store.create(&id, CreateOptions::default()).await?;
            for b in 0..10u64 {
                let files: Vec<InputFile> = (0..100u64)
                    .map(|k| {
                        InputFile::from_bytes(
                            format!("d{b}/f{k:03}"),
                            // compressible() makes seeds 2n and 2n + 1 alike.
                            compressible(2 * (b * 100 + k) + 1, size),
                            Some(0o644),
                        )
                    })
                    .collect();
                store.append(&id, files, None).await?;
            }
            // Spread over the archive: one file in every hundred.
            for k in 0..deleted {
                store
                    .delete_file(&id, &format!("d{k}/f{:03}", k * 7 % 100))
                    .await?;
            }
            let t = Instant::now();
            let r = znippy_seal::seal(store, &id, None).await?;
            println!(
                "| {id} | {label} | {}% | {:.1} ms | {} | {} ({}) | {} |",
                deleted / 10,
                t.elapsed().as_secs_f64() * 1e3,
                r.repack.blobs_copied,
                r.repack.blobs_rebuilt,
                r.repack.codec_runs,
                r.tail_bytes
            );
            store.drop_archive(&id).await?;
        }
    }
    Ok(())
}
