//! Mutation fuzzing of multipart uploads, through a real server on loopback.
//!
//! Well-formed bodies (files with text, binary and hostile names, metadata
//! facts) are mutated and posted to one archive. The oracle is the archive
//! itself, as a client sees it: a refused upload (4xx, with an error code)
//! leaves it exactly as it was; an accepted one changes at most as many paths
//! as it reports files, and every file it added holds bytes that appear in
//! the body sent (a part's data is a run of the body: the server cannot have
//! made them up). No case may get a 5xx, hang (the harness's watchdog) or
//! take the server down.

use std::alloc::System;
use std::collections::BTreeMap;

use reqwest::StatusCode;

mod common;
use common::*;

#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, 1 << 30);

const BOUNDARY: &str = "zNiPpYfUzZ";

fn seeds() -> Vec<(Vec<u8>, ())> {
    let bin: Vec<u8> = (0..3000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    let bodies = [
        multipart(
            BOUNDARY,
            &[("file", Some("a.txt"), text(1, 700).as_slice())],
            true,
        ),
        multipart(
            BOUNDARY,
            &[
                ("file", Some("dir/b.bin"), bin.as_slice()),
                ("file", Some("dir/c.txt"), text(2, 90).as_slice()),
                ("meta", None, b"dir/c.txt=owner=ci"),
                ("meta-archive", None, b"build=42"),
            ],
            true,
        ),
        multipart(
            BOUNDARY,
            &[
                ("file", Some("x/../y"), b"dots".as_slice()),
                ("file", Some("ok"), b"".as_slice()),
            ],
            true,
        ),
        multipart(BOUNDARY, &[("meta", None, b"a.txt=n=7")], true),
    ];
    bodies.into_iter().map(|b| (b, ())).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn mutated_multipart_uploads_are_refused_or_stored_faithfully() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, c) = rt.block_on(async {
        let s = Server::start(|_| {}).await;
        let c = client();
        create(&c, &s, "a", true).await;
        (s, c)
    });
    let mut model: BTreeMap<String, u64> = BTreeMap::new();
    let (mut accepted, mut refused) = (0u64, 0u64);
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/fuzz_multipart.txt");
    znippy_testkit::fuzz::run(&corpus, &seeds(), false, |body, _, _, _| {
        rt.block_on(async {
            let r = c
                .post(server.url("/archives/a/files"))
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={BOUNDARY}"),
                )
                .body(body.to_vec())
                .send()
                .await
                .unwrap();
            let status = r.status();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            assert!(
                !status.is_server_error(),
                "{status} {v} for {:?}",
                String::from_utf8_lossy(body)
            );
            let now: BTreeMap<String, u64> =
                list_all(&c, &server, "a", 1000).await.into_iter().collect();
            if status.is_client_error() {
                refused += 1;
                assert!(
                    v["error"]["code"].is_string(),
                    "{status} without a code: {v}"
                );
                assert_eq!(now, model, "a refused upload ({v}) changed the archive");
                return format!("{status} {}", v["error"]["code"]);
            }
            assert_eq!(status, StatusCode::OK, "{v}");
            accepted += 1;
            let changed: Vec<&String> = now
                .iter()
                .filter(|(p, size)| model.get(*p) != Some(size))
                .map(|(p, _)| p)
                .collect();
            let files = v["files"].as_u64().unwrap();
            assert!(
                changed.len() as u64 <= files,
                "{} paths changed by an upload of {files} files",
                changed.len()
            );
            assert!(model.keys().all(|p| now.contains_key(p)), "a path vanished");
            for p in changed {
                // Each segment percent-encoded: a mutated name may hold any
                // character a URL gives meaning to.
                let mut url = reqwest::Url::parse(&server.base).unwrap();
                url.path_segments_mut()
                    .unwrap()
                    .extend(["archives", "a", "files"])
                    .extend(p.split('/'));
                let r = c.get(url).send().await.unwrap();
                assert_eq!(r.status(), StatusCode::OK, "GET {p:?}");
                let got = r.bytes().await.unwrap();
                assert!(contains(body, &got), "{p}: bytes that are not in the body");
            }
            model = now;
            "accepted".to_string()
        })
    });
    eprintln!("{accepted} uploads accepted, {refused} refused");
    assert!(
        accepted > 0 && refused > 0,
        "the mutations reach both outcomes"
    );
    rt.block_on(server.stop());
}
