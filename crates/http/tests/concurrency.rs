//! 16 clients append to 4 archives at once; afterwards every archive lists
//! exactly the files its clients were told were stored, once each, and every
//! one reads back byte for byte.

mod common;

use std::collections::BTreeMap;

use common::*;
use reqwest::multipart::{Form, Part};
use reqwest::StatusCode;

const ARCHIVES: usize = 4;
const CLIENTS: usize = 16;
const BATCHES: usize = 6;
const FILES: usize = 5;

fn content(client: usize, batch: usize, file: usize) -> Vec<u8> {
    text((client * 1000 + batch * 10 + file) as u64, 200 + 997 * file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_four_archives() {
    let s = Server::start(|_| {}).await;
    let c = client();
    for a in 0..ARCHIVES {
        create(&c, &s, &format!("arc{a}"), false).await;
    }
    let mut tasks = Vec::new();
    for client_no in 0..CLIENTS {
        let c = c.clone();
        let base = s.base.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("arc{}", client_no % ARCHIVES);
            let mut seqs = Vec::new();
            for batch in 0..BATCHES {
                let mut form = Form::new();
                for file in 0..FILES {
                    let path = format!("c{client_no}/b{batch}/f{file}");
                    let data = content(client_no, batch, file);
                    form = form.part("f", Part::bytes(data).file_name(path));
                }
                let r = c
                    .post(format!("{base}/archives/{id}/files"))
                    .multipart(form)
                    .send()
                    .await
                    .unwrap();
                let v = json(r, StatusCode::OK).await;
                assert_eq!(v["files"], FILES as u64);
                seqs.push(v["append_seq"].as_u64().unwrap());
            }
            (id, seqs)
        }));
    }
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for t in tasks {
        let (id, s) = t.await.unwrap();
        seqs.entry(id).or_default().extend(s);
    }
    // Commits to one archive were serialized: each got its own number.
    for (id, mut s) in seqs {
        s.sort();
        let want: Vec<u64> = (1..=(CLIENTS / ARCHIVES * BATCHES) as u64).collect();
        assert_eq!(s, want, "append numbers of {id}");
    }
    for a in 0..ARCHIVES {
        let id = format!("arc{a}");
        let mut want = Vec::new();
        for client_no in (a..CLIENTS).step_by(ARCHIVES) {
            for batch in 0..BATCHES {
                for file in 0..FILES {
                    let path = format!("c{client_no}/b{batch}/f{file}");
                    want.push((path, content(client_no, batch, file)));
                }
            }
        }
        want.sort();
        let listed = list_all(&c, &s, &id, 37).await;
        let expect: Vec<(String, u64)> = want
            .iter()
            .map(|(p, d)| (p.clone(), d.len() as u64))
            .collect();
        assert_eq!(listed, expect, "listing of {id}");
        for (path, data) in &want {
            assert_eq!(&get(&c, &s, &id, path).await, data, "{id}/{path}");
        }
    }
    s.stop().await;
}

/// An upload that stalls halfway holds up other changes to its archive but
/// no read of it: listing, inspecting and reading all answer while it waits,
/// and see the state before it. Once it finishes, it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_does_not_block_reads() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "r", false).await;
    put(&c, &s, "r", "before.txt", text(1, 1000)).await;

    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let first = bytes::Bytes::from(text(2, 3_000_000));
    let second = bytes::Bytes::from(text(3, 1_000_000));
    // Sends the first part, then waits for the release before the rest.
    let body = futures::stream::unfold((0u8, Some(release_rx)), move |(step, gate)| {
        let (first, second) = (first.clone(), second.clone());
        async move {
            match step {
                0 => Some((Ok::<_, std::io::Error>(first), (1, gate))),
                1 => {
                    if let Some(g) = gate {
                        let _ = g.await;
                    }
                    Some((Ok(second), (2, None)))
                }
                _ => None,
            }
        }
    });
    let upload = tokio::spawn({
        let c = c.clone();
        let url = s.url("/archives/r/files/stalled.bin");
        async move {
            c.put(url)
                .body(reqwest::Body::wrap_stream(body))
                .send()
                .await
                .unwrap()
        }
    });
    let deadline = std::time::Duration::from_secs(60);
    let reads = async {
        let listed = list_all(&c, &s, "r", 100).await;
        assert_eq!(listed, [("before.txt".to_string(), 1000)]);
        assert_eq!(get(&c, &s, "r", "before.txt").await, text(1, 1000));
        let v = json(
            c.get(s.url("/archives/r")).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(v["files"], 1);
    };
    tokio::time::timeout(deadline, reads)
        .await
        .expect("reads waited for a stalled upload");
    assert!(!upload.is_finished());
    release_tx.send(()).unwrap();
    let r = upload.await.unwrap();
    json(r, StatusCode::OK).await;
    let mut want = text(2, 3_000_000);
    want.extend(text(3, 1_000_000));
    assert_eq!(get(&c, &s, "r", "stalled.bin").await, want);
    s.stop().await;
}

/// A client that asks for a large file and never reads it holds the thread
/// streaming it no longer than the body timeout: the streams gauge goes back
/// to 0 while the connection is still open, and the file still reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_download_frees_its_thread() {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncWriteExt;
    let s = Server::start(|c| c.body_timeout = Duration::from_secs(1)).await;
    let c = client();
    create(&c, &s, "d", false).await;
    let big = text(7, 16 << 20);
    put(&c, &s, "d", "big", big.clone()).await;
    let streams = || async {
        metrics(&c, &s)
            .await
            .lines()
            .find_map(|l| l.strip_prefix("znippy_http_streams "))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .expect("no znippy_http_streams gauge")
    };
    assert_eq!(streams().await, 0);
    // A small receive window, so that the sockets' buffers hold a few MiB
    // of the file at most and the rest waits on the server.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr = s.base.trim_start_matches("http://").parse().unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /archives/d/files/big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Far above the body timeout: a thread held for good fails, not a slow run.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (want, what) in [
        (1, "the download never streamed"),
        (0, "the thread was held"),
    ] {
        while streams().await != want {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(get(&c, &s, "d", "big").await, big);
    drop(stalled);
    s.stop().await;
}
