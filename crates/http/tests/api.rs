//! The service end to end over loopback: uploads of every kind, reads with
//! Range and ETag, listing pages, metadata, seal and download, metrics, and the
//! API description.

mod common;

use common::*;
use reqwest::header::{ETAG, IF_NONE_MATCH, RANGE};
use reqwest::multipart::{Form, Part};
use reqwest::StatusCode;
use serde_json::json;

fn tar_of(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_reads_and_seal() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "a", false).await;

    // Multipart, with facts about a file and about the archive.
    let big = text(1, 5_000_000);
    let form = Form::new()
        .part("f", Part::bytes(b"alpha".to_vec()).file_name("src/a.txt"))
        .part("f", Part::bytes(big.clone()).file_name("data/big.log"))
        .text("meta", "src/a.txt=version=1.0.2")
        .text("meta", "src/a.txt=lines=12")
        .text("meta-archive", "owner=ops");
    let r = c
        .post(s.url("/archives/a/files"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    let receipt = json(r, StatusCode::OK).await;
    assert_eq!(receipt["files"], 2);
    assert_eq!(receipt["bytes"], 5 + big.len() as u64);
    assert_eq!(receipt["append_seq"], 1);

    // A tar stream, with long names and modes, replacing src/a.txt.
    let long = format!("deep/{}/file.txt", "d".repeat(150));
    let tarball = tar_of(&[
        ("./src/a.txt", b"alpha v2", 0o600),
        (&long, b"long name", 0o644),
    ]);
    let r = c
        .post(s.url("/archives/a/files"))
        .header("content-type", "application/x-tar")
        .body(tarball)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r, StatusCode::OK).await["files"], 2);

    // A raw body with its mode.
    let r = c
        .put(s.url("/archives/a/files/bin/tool"))
        .header("x-znippy-mode", "755")
        .body(b"#!/bin/sh\n".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(json(r, StatusCode::OK).await["append_seq"], 3);

    assert_eq!(get(&c, &s, "a", "src/a.txt").await, b"alpha v2");
    assert_eq!(get(&c, &s, "a", &long).await, b"long name");
    assert_eq!(get(&c, &s, "a", "data/big.log").await, big);
    let listed = list_all(&c, &s, "a", 2).await;
    let paths: Vec<&str> = listed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        ["bin/tool", "data/big.log", long.as_str(), "src/a.txt"]
    );
    let r = c
        .get(s.url("/archives/a/files?prefix=src/"))
        .send()
        .await
        .unwrap();
    let v = json(r, StatusCode::OK).await;
    assert_eq!(v["files"][0]["path"], "src/a.txt");
    assert_eq!(v["files"][0]["mode"], 0o600);
    assert_eq!(v["next"], serde_json::Value::Null);

    // Range, suffix range, open range, HEAD, ETag.
    let url = s.url("/archives/a/files/data/big.log");
    let r = c
        .get(&url)
        .header(RANGE, "bytes=2097100-2097200")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes 2097100-2097200/{}", big.len()).as_str()
    );
    let etag = r.headers()[ETAG].clone();
    assert_eq!(&r.bytes().await.unwrap()[..], &big[2_097_100..=2_097_200]);
    let r = c.get(&url).header(RANGE, "bytes=-10").send().await.unwrap();
    assert_eq!(&r.bytes().await.unwrap()[..], &big[big.len() - 10..]);
    let r = c
        .get(&url)
        .header(RANGE, "bytes=4999990-")
        .send()
        .await
        .unwrap();
    assert_eq!(&r.bytes().await.unwrap()[..], &big[4_999_990..]);
    // A start at the length, or past any length (beyond u64 too), is not
    // satisfiable; an end past any length is the last byte; the unit's
    // case does not matter.
    for (range, status) in [
        (
            format!("bytes={}-", big.len()),
            StatusCode::RANGE_NOT_SATISFIABLE,
        ),
        (
            "bytes=99999999999999999999-".into(),
            StatusCode::RANGE_NOT_SATISFIABLE,
        ),
        (
            "bytes=4999990-99999999999999999999".into(),
            StatusCode::PARTIAL_CONTENT,
        ),
        ("BYTES=4999990-".into(), StatusCode::PARTIAL_CONTENT),
    ] {
        let r = c.get(&url).header(RANGE, &range).send().await.unwrap();
        assert_eq!(r.status(), status, "{range}");
        if status == StatusCode::PARTIAL_CONTENT {
            assert_eq!(&r.bytes().await.unwrap()[..], &big[4_999_990..], "{range}");
        }
    }
    // An empty file: a suffix range is satisfiable (RFC 9110) and the empty
    // body comes whole; a range from byte 0 is not.
    put(&c, &s, "a", "empty", Vec::new()).await;
    let empty = s.url("/archives/a/files/empty");
    let r = c
        .get(&empty)
        .header(RANGE, "bytes=-10")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.bytes().await.unwrap().is_empty());
    let r = c
        .get(&empty)
        .header(RANGE, "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(r, StatusCode::RANGE_NOT_SATISFIABLE).await,
        "bad_range"
    );
    let r = c.delete(&empty).send().await.unwrap();
    json(r, StatusCode::OK).await;
    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-length"],
        big.len().to_string().as_str()
    );
    assert_eq!(r.headers()[ETAG], etag);
    let r = c
        .get(&url)
        .header(IF_NONE_MATCH, etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    // Content, not time, makes the tag: the same bytes elsewhere, the same tag.
    put(&c, &s, "a", "copy/big.log", big.clone()).await;
    let r = c
        .head(s.url("/archives/a/files/copy/big.log"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[ETAG], etag);

    // Metadata: hits, no match; and PUT meta with typed JSON values.
    let r = c
        .get(s.url("/archives/a/meta?key=version"))
        .send()
        .await
        .unwrap();
    let v = json(r, StatusCode::OK).await;
    assert_eq!(v["result"], "hits");
    assert_eq!(v["rows"][0]["type"], "str");
    assert_eq!(v["rows"][0]["value"], "1.0.2");
    let r = c
        .get(s.url("/archives/a/meta?prefix=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(json(r, StatusCode::OK).await["result"], "no_match");
    let r = c
        .put(s.url("/archives/a/meta"))
        .json(&json!({ "set": [
            { "path": "bin/tool", "key": "exec", "value": true },
            { "key": "ratio", "value": 0.5 },
            { "key": "big", "value": 1e19 },
            { "key": "min", "value": i64::MIN },
            { "path": "bin/tool", "key": "sig", "bytes_hex": "00ff" },
        ]}))
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await;
    let r = c
        .get(s.url("/archives/a/meta?prefix="))
        .send()
        .await
        .unwrap();
    let rows = json(r, StatusCode::OK).await["rows"].clone();
    let find = |k: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == k)
            .cloned()
            .unwrap()
    };
    assert_eq!(find("exec")["type"], "bool");
    assert_eq!(find("lines")["value"], 12);
    assert_eq!(find("ratio")["type"], "f64");
    assert_eq!(
        (find("big")["type"].clone(), find("big")["value"].as_f64()),
        ("f64".into(), Some(1e19))
    );
    assert_eq!(find("min")["type"], "i64");
    assert_eq!(find("min")["value"], i64::MIN);
    assert_eq!(find("sig")["value"], "00ff");
    assert_eq!(find("owner")["path"], serde_json::Value::Null);

    // Delete, then seal and download.
    let r = c
        .delete(s.url("/archives/a/files/copy/big.log"))
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await;
    let r = c.post(s.url("/archives/a/seal")).send().await.unwrap();
    let sealed = json(r, StatusCode::OK).await;
    let r = c
        .get(s.url("/archives/a/archive.znippy"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let bytes = r.bytes().await.unwrap().to_vec();
    assert_eq!(bytes.len() as u64, sealed["size"].as_u64().unwrap());
    // The identity is the blake3 of the tail, from blob_end to the end.
    let blob_end = znippy_format::Archive::open(bytes.clone())
        .unwrap()
        .blob_end() as usize;
    let hash = blake3::hash(&bytes[blob_end..]).to_hex().to_string();
    assert_eq!(sealed["identity"], hash.as_str());
    let r = c
        .get(s.url("/archives/a/archive.znippy"))
        .header(RANGE, "bytes=-16")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(&r.bytes().await.unwrap()[..], &bytes[bytes.len() - 16..]);
    let archive = znippy_format::Archive::open(bytes).unwrap();
    archive.verify(2).unwrap();
    assert_eq!(
        archive.list("").unwrap(),
        ["bin/tool", "data/big.log", long.as_str(), "src/a.txt"]
    );
    let mut out = Vec::new();
    archive.read_file("data/big.log", &mut out).unwrap();
    assert_eq!(out, big);
    // Reads of a sealed archive go to the sealed file, with the same tags.
    assert_eq!(get(&c, &s, "a", "src/a.txt").await, b"alpha v2");
    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.headers()[ETAG], etag);
    // A second seal gives the same answer.
    let r = c.post(s.url("/archives/a/seal")).send().await.unwrap();
    assert_eq!(json(r, StatusCode::OK).await["identity"], hash.as_str());

    let v = json(
        c.get(s.url("/archives/a")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(v["state"], "sealed");
    assert_eq!(v["files"], 4);
    // Sealed by a service without a signing key: unsigned, said as null.
    assert!(v["signer"].is_null() && v.get("signer").is_some(), "{v}");
    s.stop().await;
}

/// A GET of one live file reads that file's blob from the sidecar and
/// nothing else: `bytes_read` moves by the blob's size, not the archive's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_get_reads_only_the_file_it_sends() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "r", false).await;
    // Incompressible and above the pack threshold: one blob per file, as
    // large as the file.
    const SIZE: usize = 600 << 10;
    for i in 0..16 {
        put(
            &c,
            &s,
            "r",
            &format!("f{i}"),
            znippy_testkit::data::noise(i, SIZE),
        )
        .await;
    }
    let info = || async {
        let r = c.get(s.url("/archives/r")).send().await.unwrap();
        json(r, StatusCode::OK).await
    };
    let before = info().await["bytes_read"].as_u64().unwrap();
    assert_eq!(
        get(&c, &s, "r", "f7").await,
        znippy_testkit::data::noise(7, SIZE)
    );
    let after = info().await;
    let one = after["bytes_read"].as_u64().unwrap() - before;
    let stored = &after["bytes_stored"];
    assert!(
        (SIZE as u64..SIZE as u64 + 4096).contains(&one),
        "one GET of a {SIZE}-byte file read {one} of the sidecar's {stored} bytes"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_absent_empty_and_found() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "none", false).await;
    create(&c, &s, "empty", true).await;
    let result = |id: &'static str| {
        let c = c.clone();
        let url = s.url(&format!("/archives/{id}/meta?key=k"));
        async move {
            let r = c.get(url).send().await.unwrap();
            json(r, StatusCode::OK).await["result"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(result("none").await, "no_metadata");
    assert_eq!(result("empty").await, "no_match");
    put(&c, &s, "none", "f", b"x".to_vec()).await;
    assert_eq!(result("none").await, "no_metadata");
    let r = c
        .put(s.url("/archives/none/meta"))
        .json(&json!({ "set": [{ "path": "f", "key": "k", "value": 7 }] }))
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await;
    assert_eq!(result("none").await, "hits");

    // ?path= gives every fact about one file, in key order, and nothing of
    // another file or of the archive.
    put(&c, &s, "none", "g", b"y".to_vec()).await;
    let r = c
        .put(s.url("/archives/none/meta"))
        .json(&json!({ "set": [
            { "path": "f", "key": "a", "value": "first" },
            { "path": "g", "key": "k", "value": 8 },
            { "key": "k", "value": "archive" },
        ] }))
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await;
    let facts = |q: &'static str| {
        let c = c.clone();
        let url = s.url(&format!("/archives/none/meta?{q}"));
        async move { json(c.get(url).send().await.unwrap(), StatusCode::OK).await }
    };
    let v = facts("path=f").await;
    assert_eq!(v["result"], "hits");
    let keys: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["a", "k"]);
    assert!(v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["path"] == "f"));
    let v = facts("path=f&limit=1").await;
    let next = v["next"].as_str().unwrap().to_string();
    let v = json(
        c.get(s.url("/archives/none/meta"))
            .query(&[("path", "f"), ("after", &next)])
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(v["rows"][0]["key"], "k");
    assert_eq!(v["next"], serde_json::Value::Null);
    assert_eq!(facts("path=nothing").await["result"], "no_match");
    let r = c
        .get(s.url("/archives/none/meta?path=f&key=k"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(r, StatusCode::BAD_REQUEST).await, "bad_query");
    s.stop().await;
}

/// A metadata search comes in pages, by count and by bytes: 40 facts of
/// 1 MB are never one answer, and following `next` gives every hit once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_search_pages_by_rows_and_bytes() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "m", true).await;
    // Facts of about 1 MB, as multipart `meta` fields: one an upload, as
    // the facts of one upload may hold 1 MiB together.
    let big = "v".repeat(1_000_000);
    let mut want = Vec::new();
    for i in 0..40 {
        let path = format!("f{i:02}");
        let form = Form::new()
            .part("f", Part::bytes(b"x".to_vec()).file_name(path.clone()))
            .text("meta", format!("{path}=blob={big}"));
        want.push(path);
        let r = c
            .post(s.url("/archives/m/files"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        json(r, StatusCode::OK).await;
    }
    let pages = |query: &'static str| {
        let (c, s) = (c.clone(), &s);
        async move {
            let (mut paths, mut sizes, mut after) = (Vec::new(), Vec::new(), None::<String>);
            loop {
                let mut url = s.url(&format!("/archives/m/meta?{query}"));
                if let Some(a) = &after {
                    url.push_str(&format!("&after={a}"));
                }
                let page = json(c.get(url).send().await.unwrap(), StatusCode::OK).await;
                assert_eq!(page["result"], "hits");
                let rows = page["rows"].as_array().unwrap();
                sizes.push(rows.len());
                paths.extend(rows.iter().map(|r| r["path"].as_str().unwrap().to_string()));
                match page["next"].as_str() {
                    Some(n) => after = Some(n.to_string()),
                    None => return (paths, sizes),
                }
            }
        }
    };
    // 4 MiB a page: the fifth row of 1 MB passes the mark and ends it.
    let (paths, sizes) = pages("prefix=bl").await;
    assert_eq!(paths, want);
    assert_eq!(sizes, vec![5, 5, 5, 5, 5, 5, 5, 5]);
    let (paths, sizes) = pages("key=blob&limit=3").await;
    assert_eq!(paths, want);
    assert_eq!(sizes.iter().sum::<usize>(), 40);
    assert!(sizes.iter().all(|&n| n <= 3));
    for bad in [
        "key=blob&after=zz",
        "key=blob&limit=0",
        "key=blob&limit=10001",
    ] {
        let r = c
            .get(s.url(&format!("/archives/m/meta?{bad}")))
            .send()
            .await
            .unwrap();
        let code = error_code(r, StatusCode::BAD_REQUEST).await;
        assert!(code == "bad_query" || code == "bad_limit", "{bad}: {code}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_cover_everything_once() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "p", false).await;
    let mut form = Form::new();
    let mut want = Vec::new();
    for i in 0..250 {
        let path = format!("d{}/f{i:03}", i % 7);
        form = form.part("f", Part::bytes(text(i, 100)).file_name(path.clone()));
        want.push((path, 100));
    }
    let r = c
        .post(s.url("/archives/p/files"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r, StatusCode::OK).await["files"], 250);
    want.sort();
    for limit in [1, 7, 100, 250, 1000] {
        assert_eq!(list_all(&c, &s, "p", limit).await, want, "limit {limit}");
    }
    s.stop().await;
}

/// A folded listing (`delimiter=/`) of any directory, at any page size, is
/// what folding the full listing gives (the oracle): each file directly in
/// the directory and each subdirectory once, in path order, across pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_listings_are_the_full_listing_folded() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "t", false).await;
    // Names chosen to sort around '/': "a-b" and "a.c" before "a/", "a0" after.
    let mut paths: Vec<String> = [
        "a-b", "a.c", "a/x", "a/y/z", "a/y/w", "a0", "b/c/d/e", "top",
    ]
    .map(String::from)
    .to_vec();
    paths.extend((0..40).map(|i| format!("many/d{}/f{i}", i % 6)));
    paths.extend((0..15).map(|i| format!("many/f{i:02}")));
    let mut form = Form::new();
    for p in &paths {
        form = form.part("f", Part::bytes(p.as_bytes().to_vec()).file_name(p.clone()));
    }
    let r = c
        .post(s.url("/archives/t/files"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r, StatusCode::OK).await["files"], paths.len());
    paths.sort();

    let fold = |dir: &str| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in paths.iter().filter_map(|p| p.strip_prefix(dir)) {
            let item = match p.find('/') {
                Some(i) => format!("{dir}{}", &p[..=i]),
                None => format!("{dir}{p}"),
            };
            if out.last() != Some(&item) {
                out.push(item);
            }
        }
        out
    };
    for dir in ["", "a/", "a/y/", "b/", "b/c/", "many/", "many/d3/", "nope/"] {
        for limit in [1, 2, 5, 1000] {
            let (mut got, mut after) = (Vec::new(), None::<String>);
            loop {
                let mut q = vec![
                    ("prefix", dir.to_string()),
                    ("delimiter", "/".into()),
                    ("limit", limit.to_string()),
                ];
                q.extend(after.iter().map(|a| ("after", a.clone())));
                let r = c
                    .get(s.url("/archives/t/files"))
                    .query(&q)
                    .send()
                    .await
                    .unwrap();
                let v = json(r, StatusCode::OK).await;
                let mut page: Vec<String> = v["files"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f["path"].as_str().unwrap().to_string())
                    .chain(
                        v["dirs"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|d| d.as_str().unwrap().to_string()),
                    )
                    .collect();
                assert!(page.len() <= limit, "{dir} limit {limit}: {page:?}");
                page.sort();
                got.extend(page);
                match v["next"].as_str() {
                    Some(n) => after = Some(n.to_string()),
                    None => break,
                }
            }
            assert_eq!(got, fold(dir), "{dir} limit {limit}");
        }
    }

    // Without a delimiter there is no dirs field; a bad delimiter or a
    // prefix that is not a directory is refused.
    let r = c
        .get(s.url("/archives/t/files?prefix=a/"))
        .send()
        .await
        .unwrap();
    assert!(json(r, StatusCode::OK).await.get("dirs").is_none());
    for q in ["delimiter=%2C", "delimiter=/&prefix=a", "delimiter="] {
        let r = c
            .get(s.url(&format!("/archives/t/files?{q}")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            error_code(r, StatusCode::BAD_REQUEST).await,
            "bad_query",
            "{q}"
        );
    }
    s.stop().await;
}

/// The history is the files table's snapshots, newest first, each saying
/// what it committed; the sealed file's SHA-256 is what `sha256sum` of the
/// download prints, read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_the_sealed_files_sha256() {
    use sha2::{Digest, Sha256};
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "h", false).await;
    create(&c, &s, "live", false).await;
    let form = Form::new()
        .part("f", Part::bytes(b"one".to_vec()).file_name("a"))
        .part("f", Part::bytes(b"three".to_vec()).file_name("b"));
    let r = c
        .post(s.url("/archives/h/files"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await;
    put(&c, &s, "h", "c", b"fourth".to_vec()).await;
    let r = c.delete(s.url("/archives/h/files/a")).send().await.unwrap();
    json(r, StatusCode::OK).await;
    let r = c.post(s.url("/archives/h/seal")).send().await.unwrap();
    let sealed = json(r, StatusCode::OK).await;

    let r = c.get(s.url("/archives/h/history")).send().await.unwrap();
    let v = json(r, StatusCode::OK).await;
    let changes = v["changes"].as_array().unwrap();
    let kinds: Vec<&str> = changes
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["seal", "delete", "append", "append"]);
    let seqs: Vec<u64> = changes
        .iter()
        .map(|c| c["append_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 3, 2, 1]);
    assert_eq!(changes[3]["files"], 2);
    assert_eq!(changes[3]["bytes"], 8);
    assert_eq!(changes[3]["appends"], 1);
    assert_eq!(changes[2]["files"], 1);
    assert_eq!(changes[1]["files"], serde_json::Value::Null);
    let times: Vec<i64> = changes
        .iter()
        .map(|c| c["timestamp_ms"].as_i64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    let ids: Vec<i64> = changes
        .iter()
        .map(|c| c["snapshot_id"].as_i64().unwrap())
        .collect();
    let info = json(
        c.get(s.url("/archives/h")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(info["snapshot_id"].as_i64(), Some(ids[0]));

    let r = c
        .get(s.url("/archives/h/archive.znippy"))
        .send()
        .await
        .unwrap();
    let bytes = r.bytes().await.unwrap();
    let hex: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sealed["size"], bytes.len() as u64);
    assert_eq!(sealed["sha256"], "/archives/h/archive.znippy.sha256");
    // The sealed file is read for it once, then not again.
    let bytes_read = || async {
        let r = c.get(s.url("/archives/h")).send().await.unwrap();
        json(r, StatusCode::OK).await["bytes_read"]
            .as_u64()
            .unwrap()
    };
    let mut reads = vec![bytes_read().await];
    for _ in 0..2 {
        let r = c
            .get(s.url("/archives/h/archive.znippy.sha256"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), format!("{hex}  h.znippy\n"));
        reads.push(bytes_read().await);
    }
    assert_eq!(reads[1] - reads[0], bytes.len() as u64, "{reads:?}");
    assert_eq!(reads[2], reads[1], "a known checksum reads nothing");
    let r = c.get(s.url("/archives/none/history")).send().await.unwrap();
    assert_eq!(error_code(r, StatusCode::NOT_FOUND).await, "no_archive");
    put(&c, &s, "live", "x", b"x".to_vec()).await;
    let r = c
        .get(s.url("/archives/live/archive.znippy.sha256"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(r, StatusCode::CONFLICT).await, "not_sealed");
    s.stop().await;
}

/// The Iceberg REST facade pages its listings as the spec says (`pageSize`,
/// `pageToken`, `next-page-token`) and names what is missing in the spec's
/// exception types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_catalog_pages_and_names_what_is_missing() {
    let s = Server::start(|_| {}).await;
    let c = client();
    for id in ["b", "a", "c"] {
        create(&c, &s, id, false).await;
    }
    let rest = |q: &str| s.url(&format!("/iceberg/v1/{q}"));
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let q = match &token {
            Some(t) => format!("namespaces?pageSize=2&pageToken={t}"),
            None => "namespaces?pageSize=2".to_string(),
        };
        let v = json(c.get(rest(&q)).send().await.unwrap(), StatusCode::OK).await;
        let page = v["namespaces"].as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|n| n[0].as_str().unwrap().to_string()));
        match v["next-page-token"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c"]);
    let v = json(
        c.get(rest("namespaces")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        v["namespaces"].as_array().unwrap().len(),
        3,
        "unpaged: whole"
    );
    let v = json(
        c.get(rest("namespaces/a/tables?pageSize=1"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(v["identifiers"][0]["name"], "files");
    assert_eq!(v["next-page-token"], "files");
    // Archives are one level deep: below one there is nothing.
    let v = json(
        c.get(rest("namespaces?parent=a")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(v["namespaces"], serde_json::json!([]));
    for q in [
        "namespaces?pageSize=0",
        "namespaces?pageSize=Infinity&parent=p",
        "namespaces?pageSize=1&pageSize=1",
        "namespaces/a/tables?pageSize=-1",
    ] {
        let r = c.get(rest(q)).send().await.unwrap();
        let v = json(r, StatusCode::BAD_REQUEST).await;
        assert_eq!(v["error"]["type"], "BadRequestException", "{q}");
    }
    let v = json(
        c.get(rest("namespaces/a/tables/files"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(v["metadata-location"]
        .as_str()
        .unwrap()
        .ends_with(".metadata.json"));
    assert_eq!(v["metadata"]["format-version"], 2);
    for (q, status, kind) in [
        (
            "namespaces/nope",
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        // A nested namespace (levels joined by 0x1F) is never an archive.
        (
            "namespaces/a%1Fb",
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "namespaces/nope/tables",
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "namespaces?parent=nope",
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "namespaces/nope/tables/files",
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "namespaces/nope/tables/x",
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "namespaces/a/tables/x",
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
    ] {
        let v = json(c.get(rest(q)).send().await.unwrap(), status).await;
        assert_eq!(v["error"]["type"], kind, "{q}");
        assert_eq!(v["error"]["code"], status.as_u16(), "{q}");
    }
    // A path parameter that is not UTF-8 once decoded: the spec's model too.
    for q in [
        "namespaces/%FF",
        "namespaces/%FF/tables",
        "namespaces/a/tables/%FF",
    ] {
        let v = json(
            c.get(rest(q)).send().await.unwrap(),
            StatusCode::BAD_REQUEST,
        )
        .await;
        assert_eq!(v["error"]["type"], "BadRequestException", "{q}");
        assert_eq!(v["error"]["code"], 400, "{q}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_openapi() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "m", false).await;
    put(&c, &s, "m", "x", text(3, 10_000)).await;
    get(&c, &s, "m", "x").await;
    let r = c.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Any token is a method to hyper; each new one must not be a new series.
    for i in 0..20 {
        let method = reqwest::Method::from_bytes(format!("ZZMETHOD{i}").as_bytes()).unwrap();
        let r = c.request(method, s.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
    let m = metrics(&c, &s).await;
    assert!(!m.contains("ZZMETHOD"), "{m}");
    for needle in [
        "znippy_http_requests_total{method=\"other\",status=\"405\"} 20",
        "znippy_http_requests_total{method=\"PUT\",status=\"200\"} 1",
        "znippy_http_bytes_in_total 10000",
        "znippy_http_bytes_out_total 10000",
        "znippy_append_seconds_count 1",
        "znippy_commit_seconds_count 1",
        "znippy_http_request_seconds_bucket{le=\"+Inf\"}",
    ] {
        assert!(m.contains(needle), "{needle} not in\n{m}");
    }
    assert!(
        m.ends_with("# EOF\n"),
        "OpenMetrics text ends in # EOF:\n{m}"
    );

    // The served description is the checked-in one, and every operation it
    // documents is routed (none falls through to "no route" or "bad method").
    let served = c
        .get(s.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/openapi.json"
    ))
    .unwrap();
    assert_eq!(served, file);
    let doc: serde_json::Value = serde_json::from_str(&served).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    let mut operations = 0;
    for (path, ops) in paths {
        // An archive that does not exist: routing is what is checked, and
        // nothing is changed by the check.
        let concrete = path
            .replace("{id}", "ghost")
            .replace("{path}", "x")
            .replace("{ns}", "ghost")
            .replace("{table}", "files")
            .replace("{asset}", "console.js");
        for method in ops.as_object().unwrap().keys() {
            // Path-level keys such as "parameters" are not operations.
            if !["get", "head", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            let m: reqwest::Method = method.to_uppercase().parse().unwrap();
            let mut req = c.request(m.clone(), s.url(&concrete));
            if m != reqwest::Method::GET && m != reqwest::Method::HEAD {
                req = req.header("content-type", "application/json").body("{}");
            }
            let r = req.send().await.unwrap();
            assert_ne!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{m} {path}");
            let body = r.text().await.unwrap();
            let code = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
            assert_ne!(code.as_deref(), Some("no_route"), "{m} {path}");
            operations += 1;
        }
    }
    // Every route of the router is documented.
    for (path, method) in [
        ("/archives", "post"),
        ("/archives", "get"),
        ("/archives/{id}", "get"),
        ("/archives/{id}", "delete"),
        ("/archives/{id}/files", "post"),
        ("/archives/{id}/files", "get"),
        ("/archives/{id}/files/{path}", "put"),
        ("/archives/{id}/files/{path}", "get"),
        ("/archives/{id}/files/{path}", "head"),
        ("/archives/{id}/files/{path}", "delete"),
        ("/archives/{id}/meta", "get"),
        ("/archives/{id}/meta", "put"),
        ("/archives/{id}/history", "get"),
        ("/archives/{id}/seal", "post"),
        ("/archives/{id}/archive.znippy", "get"),
        ("/archives/{id}/archive.znippy.sha256", "get"),
        ("/iceberg/v1/config", "get"),
        ("/iceberg/v1/namespaces", "get"),
        ("/iceberg/v1/namespaces/{ns}", "get"),
        ("/iceberg/v1/namespaces/{ns}/tables", "get"),
        ("/iceberg/v1/namespaces/{ns}/tables/{table}", "get"),
        ("/healthz", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
        ("/", "get"),
        ("/console/{asset}", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} is not in docs/openapi.json"
        );
    }
    assert!(operations >= 26);
    s.stop().await;
}

/// Media types are case-insensitive: a batch sent as `Multipart/Form-Data`
/// or `Application/X-Tar` is taken like one sent in lower case, and the
/// boundary keeps its case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_types_are_case_insensitive() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "m", false).await;
    let form = multipart("XyZ", &[("f", Some("from-form"), b"form")], true);
    let tarball = tar_of(&[("from-tar", b"tar", 0o644)]);
    for (ct, body) in [
        ("Multipart/Form-Data; boundary=XyZ", form),
        ("Application/X-Tar", tarball),
    ] {
        let r = c
            .post(s.url("/archives/m/files"))
            .header("content-type", ct)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(json(r, StatusCode::OK).await["files"], 1, "{ct}");
    }
    assert_eq!(get(&c, &s, "m", "from-form").await, b"form");
    assert_eq!(get(&c, &s, "m", "from-tar").await, b"tar");
    s.stop().await;
}

/// A tar upload keeps links and empty directories as entries: a link answers
/// with its target in a header and no body (nothing is followed), a hard link
/// is a copy of what it links, mode and all (so a hard link to a symlink is
/// a symlink), the listing says what each entry is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tar_links_and_empty_directories_are_entries() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "t", false).await;
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, "d/real", &b"bytes"[..]).unwrap();
    for (kind, name, target) in [
        (tar::EntryType::Symlink, "d/abs", "/etc/pass wd%"),
        (tar::EntryType::Link, "d/hard", "d/real"),
        (tar::EntryType::Link, "d/hard-abs", "d/abs"),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_entry_type(kind);
        h.set_mode(0o777);
        b.append_link(&mut h, name, target).unwrap();
    }
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o700);
    h.set_entry_type(tar::EntryType::Directory);
    b.append_data(&mut h, "empty/", &b""[..]).unwrap();
    let r = c
        .post(s.url("/archives/t/files"))
        .header("content-type", "application/x-tar")
        .body(b.into_inner().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(json(r, StatusCode::OK).await["files"], 5);

    for link in ["d/abs", "d/hard-abs"] {
        let r = c
            .get(s.url(&format!("/archives/t/files/{link}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["x-znippy-type"], "symlink", "{link}");
        assert_eq!(r.headers()["x-znippy-link-target"], "/etc/pass%20wd%25");
        assert!(
            r.bytes().await.unwrap().is_empty(),
            "no body: nothing followed"
        );
    }
    assert_eq!(get(&c, &s, "t", "d/hard").await, b"bytes");
    let r = c
        .get(s.url("/archives/t/files/empty"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-znippy-type"], "dir");

    let list = json(
        c.get(s.url("/archives/t/files")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let kinds: Vec<(String, String, u64)> = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap().to_string();
            (s("path"), s("type"), f["mode"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("d/abs".into(), "symlink".into(), 0o777),
            ("d/hard".into(), "file".into(), 0o644),
            ("d/hard-abs".into(), "symlink".into(), 0o777),
            ("d/real".into(), "file".into(), 0o644),
            ("empty".into(), "dir".into(), 0o700),
        ]
    );
}

/// Reads that race a drop of the archive answer with the archive as it was
/// or 404 `no_archive`, never a 500 for a file pulled from under them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_a_drop_find_the_archive_or_none() {
    let s = Server::start(|_| {}).await;
    let c = client();
    for round in 0..6 {
        let id = format!("r{round}");
        create(&c, &s, &id, false).await;
        put(&c, &s, &id, "x.txt", b"kept".to_vec()).await;
        if round % 2 == 0 {
            let r = c
                .post(s.url(&format!("/archives/{id}/seal")))
                .send()
                .await
                .unwrap();
            json(r, StatusCode::OK).await;
        }
        let reads: Vec<_> = ["/files/x.txt", "/archive.znippy", "/files?prefix=", ""]
            .iter()
            .cycle()
            .take(24)
            .map(|tail| {
                let url = s.url(&format!("/archives/{id}{tail}"));
                let c = c.clone();
                tokio::spawn(async move { c.get(url).send().await.unwrap() })
            })
            .collect();
        let r = c
            .delete(s.url(&format!("/archives/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        for read in reads {
            let r = read.await.unwrap();
            let status = r.status();
            if status == StatusCode::NOT_FOUND {
                assert_eq!(error_code(r, status).await, "no_archive");
            } else {
                assert!(
                    status.is_success() || status == StatusCode::CONFLICT,
                    "{status}: {}",
                    r.text().await.unwrap()
                );
            }
        }
    }
    s.stop().await;
}

/// An archive's pack size is what was asked for, or the default within the
/// archive's own threshold and chunk size, and reads back the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pack_size_is_asked_for_or_fits_the_other_properties() {
    let s = Server::start(|_| {}).await;
    let c = client();
    for (body, pack_size) in [
        (serde_json::json!({"id": "d"}), 512 << 10),
        (
            serde_json::json!({"id": "c", "chunk_size": 256 << 10, "pack_threshold": 64 << 10}),
            256 << 10,
        ),
        (
            serde_json::json!({"id": "t", "chunk_size": 4 << 20, "pack_threshold": 1 << 20}),
            1 << 20,
        ),
        (
            serde_json::json!({"id": "p", "pack_size": 700_000}),
            700_000,
        ),
    ] {
        let r = c.post(s.url("/archives")).json(&body).send().await.unwrap();
        let created = json(r, StatusCode::CREATED).await;
        assert_eq!(created["pack_size"], pack_size, "{body}");
        let id = body["id"].as_str().unwrap();
        let r = c
            .get(s.url(&format!("/archives/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            json(r, StatusCode::OK).await["pack_size"],
            pack_size,
            "{body}"
        );
    }
}
