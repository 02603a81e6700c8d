//! Load benchmark of `znippy serve` over loopback:
//! `cargo build --release -p znippy -p znippy-benches && target/release/http-bench`.
//!
//! Prints Markdown: small-file appends per second (concurrent raw PUTs, and
//! multipart batches), large-file MB/s next to `znippy compress` of the same
//! bytes, GET latency percentiles for random files of a live archive with
//! 100,000 files and of the same archive sealed, and the server's peak RSS
//! across a 4 GiB upload (memory is bounded by the engine's buffers, not the upload)
//! and across parallel metadata searches over 150 facts of 1 MB (answers come
//! in pages, not whole).
//! The server is the release `znippy` next to this binary (or `ZNIPPY_BIN`),
//! run as its own process so its memory is its own. `BENCH_QUICK=1` shrinks
//! every size for a smoke run; `BENCH_ONLY=get,rss` runs only those parts
//! (`small`, `large`, `get`, `rss`, `meta`); `BENCH_DIR` picks the disk.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use reqwest::multipart::{Form, Part};
use reqwest::Client;
use znippy_benches::compressible;

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(bin: &Path, data: &Path) -> Result<Server> {
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log",
                "warn",
                "--data",
            ])
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_string();
        Ok(Server { child, base })
    }

    /// Peak and current resident set of the server, in MiB.
    fn rss_mib(&self) -> Result<(f64, f64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let field = |name: &str| -> Result<f64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .with_context(|| format!("{name} not in /proc status"))?;
            let kib: f64 = line
                .split_whitespace()
                .nth(1)
                .context("no value")?
                .parse()?;
            Ok(kib / 1024.0)
        };
        Ok((field("VmHWM:")?, field("VmRSS:")?))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// p50, p99 and max of sorted latencies.
fn spread(sorted: &[Duration]) -> String {
    format!(
        "p50 {}, p99 {}, max {}",
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.99)),
        ms(sorted[sorted.len() - 1])
    )
}

/// Appends `files` (path, bytes) to archive `id` in one multipart request.
async fn post_files(
    c: &Client,
    base: &str,
    id: &str,
    files: impl Iterator<Item = (String, Vec<u8>)>,
) -> Result<()> {
    let form = files.fold(Form::new(), |form, (path, data)| {
        form.part("f", Part::bytes(data).file_name(path))
    });
    check(
        c.post(format!("{base}/archives/{id}/files"))
            .multipart(form)
            .send()
            .await?,
    )
    .await?;
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

async fn check(r: reqwest::Response) -> Result<reqwest::Response> {
    if !r.status().is_success() {
        bail!("{}: {}", r.status(), r.text().await?);
    }
    Ok(r)
}

async fn create(c: &Client, base: &str, id: &str) -> Result<()> {
    check(
        c.post(format!("{base}/archives"))
            .json(&serde_json::json!({ "id": id }))
            .send()
            .await?,
    )
    .await?;
    Ok(())
}

/// `requests` GETs of random files `d{n % 100}/f{n}` of archive `many` from
/// `concurrency` clients: their latencies, sorted, and the rate.
async fn get_latency(
    c: &Client,
    base: &str,
    files: u64,
    requests: usize,
    concurrency: usize,
) -> Result<(Vec<Duration>, f64)> {
    let lat = Arc::new(std::sync::Mutex::new(Vec::with_capacity(requests)));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let (c, base, lat) = (c.clone(), base.to_string(), lat.clone());
        tasks.push(tokio::spawn(async move {
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
            for _ in 0..requests / concurrency {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let n = x % files;
                let t0 = Instant::now();
                let r = check(
                    c.get(format!("{base}/archives/many/files/d{}/f{n}", n % 100))
                        .send()
                        .await?,
                )
                .await?;
                let body = r.bytes().await?;
                let took = t0.elapsed();
                if body.len() != 200 + (n as usize * 37) % 4000 {
                    bail!("f{n}: {} bytes", body.len());
                }
                lat.lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .push(took);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let wall = start.elapsed();
    let mut lat = lat.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    lat.sort();
    let rate = lat.len() as f64 / wall.as_secs_f64();
    Ok((lat, rate))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let bin = match std::env::var_os("ZNIPPY_BIN") {
        Some(b) => PathBuf::from(b),
        None => std::env::current_exe()?
            .parent()
            .context("no exe dir")?
            .join("znippy"),
    };
    let base_dir =
        std::env::var("BENCH_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let tmp = tempfile::tempdir_in(base_dir)?;
    let c = Client::new();
    // BENCH_ONLY=get,rss runs only those parts (small, large, get, rss, meta).
    let only = std::env::var("BENCH_ONLY").ok();
    let wants = |part: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|p| p.trim() == part))
    };
    println!(
        "## HTTP service (`znippy serve` on loopback, {})\n",
        bin.display()
    );
    println!("| workload | result |\n|---|---|");

    // 1. Small files: concurrent single-file PUTs, then multipart batches.
    if wants("small") {
        let server = Server::start(&bin, &tmp.path().join("small"))?;
        let base = server.base.clone();
        create(&c, &base, "small").await?;
        let (clients, per_client) = if quick { (4, 25) } else { (8, 150) };
        let start = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..clients {
            let (c, base) = (c.clone(), base.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..per_client {
                    let body = compressible(t * 100_000 + i, 1024);
                    check(
                        c.put(format!("{base}/archives/small/files/c{t}/f{i}"))
                            .body(body)
                            .send()
                            .await?,
                    )
                    .await?;
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let took = start.elapsed();
        let n = clients * per_client;
        println!(
            "| {n} single-file appends (1 KiB, PUT), {clients} clients | {:.0} appends/s |",
            n as f64 / took.as_secs_f64()
        );
        let (batches, per_batch) = if quick { (5, 200) } else { (20, 1000) };
        let start = Instant::now();
        for b in 0..batches {
            let files = (0..per_batch).map(|i| {
                (
                    format!("batch{b}/f{i}"),
                    compressible(b * 1_000_000 + i, 1024),
                )
            });
            post_files(&c, &base, "small", files).await?;
        }
        let took = start.elapsed();
        println!(
            "| {batches} multipart batches of {per_batch} x 1 KiB | {:.0} files/s ({:.1} batches/s) |",
            (batches * per_batch) as f64 / took.as_secs_f64(),
            batches as f64 / took.as_secs_f64()
        );
        drop(server);
    }

    // 2. Large files: one PUT vs `znippy compress` of the same bytes on disk.
    if wants("large") {
        let server = Server::start(&bin, &tmp.path().join("large"))?;
        let base = server.base.clone();
        create(&c, &base, "large").await?;
        let size = if quick { 64 << 20 } else { 1 << 30 };
        let data = Bytes::from(compressible(42, size));
        let dir = tmp.path().join("large-input");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("big.bin"), &data)?;
        let start = Instant::now();
        check(
            c.put(format!("{base}/archives/large/files/big.bin"))
                .body(data.clone())
                .send()
                .await?,
        )
        .await?;
        let upload = start.elapsed();
        drop(data);
        let out = tmp.path().join("big.znippy");
        let start = Instant::now();
        let st = Command::new(&bin)
            .arg("compress")
            .arg(&dir)
            .arg("-o")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("znippy compress failed");
        }
        let compress = start.elapsed();
        let mb = size as f64 / 1e6;
        println!(
            "| one {} MiB file: PUT vs `znippy compress` | {:.0} MB/s vs {:.0} MB/s ({:.2}x) |",
            size >> 20,
            mb / upload.as_secs_f64(),
            mb / compress.as_secs_f64(),
            compress.as_secs_f64() / upload.as_secs_f64()
        );
        drop(server);
    }

    // 3. GET latency: random files of a live archive with 100,000 files.
    if wants("get") {
        let server = Server::start(&bin, &tmp.path().join("get"))?;
        let base = server.base.clone();
        create(&c, &base, "many").await?;
        let files: u64 = if quick { 10_000 } else { 100_000 };
        let batch: u64 = 5_000;
        let start = Instant::now();
        for b in 0..files / batch {
            let parts = (b * batch..(b + 1) * batch).map(|n| {
                let data = compressible(n, 200 + (n as usize * 37) % 4000);
                (format!("d{}/f{n}", n % 100), data)
            });
            post_files(&c, &base, "many", parts).await?;
        }
        let fill = start.elapsed();
        let requests = if quick { 2_000 } else { 20_000 };
        let concurrency = 4;
        let (lat, rate) = get_latency(&c, &base, files, requests, concurrency).await?;
        println!(
            "| GET of random files, live archive of {files} files ({} to fill), {concurrency} clients | {}; {rate:.0} req/s |",
            ms(fill),
            spread(&lat),
        );
        let start = Instant::now();
        check(c.post(format!("{base}/archives/many/seal")).send().await?).await?;
        let seal = start.elapsed();
        let (lat, rate) = get_latency(&c, &base, files, requests, concurrency).await?;
        println!(
            "| same, after sealing it ({} to seal) | {}; {rate:.0} req/s |",
            ms(seal),
            spread(&lat),
        );
        drop(server);
    }

    // 4. Rule 4 of docs/architecture.md (bounded memory): a 4 GiB upload,
    // streamed, against the server's peak RSS.
    if wants("rss") {
        let server = Server::start(&bin, &tmp.path().join("rss"))?;
        let base = server.base.clone();
        create(&c, &base, "rss").await?;
        let (peak_before, _) = server.rss_mib()?;
        let total: u64 = if quick { 256 << 20 } else { 4 << 30 };
        let block = Bytes::from(compressible(7, 1 << 20));
        let chunks = (total >> 20) as usize;
        // 1 MiB chunks that neither dedupe nor vanish: a counter in front of each.
        let body = futures::stream::iter((0..chunks).map(move |i| {
            let mut chunk = block.to_vec();
            chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
            Ok::<_, std::io::Error>(Bytes::from(chunk))
        }));
        let start = Instant::now();
        check(
            c.put(format!("{base}/archives/rss/files/huge.bin"))
                .body(reqwest::Body::wrap_stream(body))
                .send()
                .await?,
        )
        .await?;
        let took = start.elapsed();
        let (peak_after, now) = server.rss_mib()?;
        println!(
            "| {} MiB streamed upload: server peak RSS before / after | {:.1} / {:.1} MiB ({:.1} MiB now); {:.0} MB/s |",
            total >> 20,
            peak_before,
            peak_after,
            now,
            total as f64 / 1e6 / took.as_secs_f64()
        );
        drop(server);
    }

    // 5. Metadata searches: 4 clients page through 150 facts of 1 MB each.
    if wants("meta") {
        let server = Server::start(&bin, &tmp.path().join("meta"))?;
        let base = server.base.clone();
        check(
            c.post(format!("{base}/archives"))
                .json(&serde_json::json!({"id": "m", "metadata": true}))
                .send()
                .await?,
        )
        .await?;
        let facts = if quick { 30 } else { 150 };
        let value = "v".repeat(1_000_000);
        for batch in 0..facts / 10 {
            let mut form = Form::new();
            for i in 0..10 {
                let path = format!("f{:03}", batch * 10 + i);
                form = form
                    .part("f", Part::bytes(b"x".to_vec()).file_name(path.clone()))
                    .text("meta", format!("{path}=blob={value}"));
            }
            check(
                c.post(format!("{base}/archives/m/files"))
                    .multipart(form)
                    .send()
                    .await?,
            )
            .await?;
        }
        let (peak_before, _) = server.rss_mib()?;
        let start = Instant::now();
        let searches = (0..4).map(|_| {
            let (c, base) = (c.clone(), base.clone());
            tokio::spawn(async move {
                let (mut rows, mut after) = (0usize, None::<String>);
                loop {
                    let mut url = format!("{base}/archives/m/meta?prefix=");
                    if let Some(a) = &after {
                        url.push_str(&format!("&after={a}"));
                    }
                    let page: serde_json::Value =
                        check(c.get(url).send().await?).await?.json().await?;
                    rows += page["rows"].as_array().map_or(0, Vec::len);
                    match page["next"].as_str() {
                        Some(n) => after = Some(n.to_string()),
                        None => return Ok::<_, anyhow::Error>(rows),
                    }
                }
            })
        });
        for s in searches.collect::<Vec<_>>() {
            let rows = s.await??;
            if rows != facts {
                bail!("a search paged through {rows} facts, not {facts}");
            }
        }
        let took = start.elapsed();
        let (peak_after, now) = server.rss_mib()?;
        println!(
            "| 4 parallel searches through {facts} facts of 1 MB: server peak RSS before / after | {:.1} / {:.1} MiB ({:.1} MiB now); {} |",
            peak_before,
            peak_after,
            now,
            ms(took)
        );
        drop(server);
    }
    Ok(())
}
