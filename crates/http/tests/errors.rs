//! Every malformed request gets its status and error code, and changes
//! nothing: the archive's state, its listing and its sidecar are the same
//! after each one. Then auth (the token for writes, private reads, the
//! refusal to open a tokenless service to the network) and a full disk.

mod common;

use common::*;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};

const MAX_BODY: u64 = 1 << 20;

struct Case {
    name: &'static str,
    req: RequestBuilder,
    status: StatusCode,
    code: &'static str,
}

async fn state(c: &reqwest::Client, s: &Server) -> (Value, Value, Vec<(String, u64)>, u64) {
    let live = json(
        c.get(s.url("/archives/a")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let sealed = json(
        c.get(s.url("/archives/s")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let files = list_all(c, s, "a", 1000).await;
    let sidecar = std::fs::metadata(s.dir.path().join("data/blobs/a.znippy"))
        .unwrap()
        .len();
    (live, sealed, files, sidecar)
}

/// A PUT with `target` sent verbatim on the request line.
async fn raw_put(s: &Server, target: &str) -> (u16, String) {
    raw_request(s, &format!("PUT {target}"), 1, b"x").await
}

/// Sends `line` (method and target) declaring a body of `declared` bytes,
/// writes `body` of it, and reads the answer until the server closes. What
/// was read before a reset counts: a server that closes with bytes unread
/// may reset the connection after its answer.
async fn raw_request(s: &Server, line: &str, declared: usize, body: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{line} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut resp = Vec::new();
    let _ = conn.read_to_end(&mut resp).await;
    let resp = String::from_utf8_lossy(&resp);
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// One entry written by hand, so that names a well-behaved tar writer refuses
/// (`..`) can be sent.
fn tar_entry(path: &str, kind: tar::EntryType, data: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(kind);
    if kind == tar::EntryType::Symlink {
        h.set_link_name("/etc/passwd").unwrap();
    }
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, data).unwrap();
    b.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_change_nothing() {
    let s = Server::start(|c| c.max_body = MAX_BODY).await;
    // One pooled client throughout: refusals that end their connection say
    // so, and the client must never be handed one the server closed.
    let c = client();
    create(&c, &s, "a", true).await;
    put(&c, &s, "a", "keep/one.txt", text(1, 5000)).await;
    put(&c, &s, "a", "keep/two.txt", text(2, 700_000)).await;
    create(&c, &s, "s", false).await;
    put(&c, &s, "s", "x", b"sealed".to_vec()).await;
    let r = c.post(s.url("/archives/s/seal")).send().await.unwrap();
    json(r, StatusCode::OK).await;

    let u = |p: &str| s.url(p);
    let mp = |parts: &[(&str, Option<&str>, &[u8])], close: bool| {
        c.post(u("/archives/a/files"))
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(chunked(multipart("XyZ", parts, close)))
    };
    let tar = |body: Vec<u8>| {
        c.post(u("/archives/a/files"))
            .header("content-type", "application/x-tar")
            .body(body)
    };
    let good = text(9, 3000);
    // 40 one-byte files, each under a 50 KB part header: 2 MB of body,
    // nearly all framing, past the 1 MiB limit.
    let mut padded = Vec::new();
    for i in 0..40 {
        padded.extend_from_slice(
            format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"pad{i}\"\r\n\
                 X-Pad: {}\r\n\r\nx\r\n",
                "p".repeat(50_000)
            )
            .as_bytes(),
        );
    }
    padded.extend_from_slice(b"--XyZ--\r\n");
    let mut truncated_tar = tar_entry("t.txt", tar::EntryType::Regular, &text(3, 4000));
    truncated_tar.truncate(512 + 1000);
    let cases = vec![
        Case {
            name: "create: bad id",
            req: c.post(u("/archives")).json(&json!({"id": "a/b"})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_id",
        },
        Case {
            name: "create: empty id",
            req: c.post(u("/archives")).json(&json!({"id": ""})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_id",
        },
        Case {
            name: "create: exists",
            req: c.post(u("/archives")).json(&json!({"id": "a"})),
            status: StatusCode::CONFLICT,
            code: "exists",
        },
        Case {
            name: "create: unknown field",
            req: c.post(u("/archives")).json(&json!({"id": "n", "size": 1})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_body",
        },
        Case {
            name: "create: not JSON",
            req: c.post(u("/archives")).body("{"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_body",
        },
        Case {
            name: "create: tiny chunks",
            req: c
                .post(u("/archives"))
                .json(&json!({"id": "n", "chunk_size": 1})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_property",
        },
        Case {
            name: "create: packs larger than a chunk",
            req: c
                .post(u("/archives"))
                .json(&json!({"id": "n", "chunk_size": 1 << 20, "pack_size": 2 << 20})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_property",
        },
        Case {
            name: "create: packs smaller than the threshold",
            req: c
                .post(u("/archives"))
                .json(&json!({"id": "n", "pack_threshold": 1 << 19, "pack_size": 1 << 18})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_property",
        },
        Case {
            // Over a GiB of engine memory per append: past the whole budget.
            name: "create: over the engine-memory budget",
            req: c.post(u("/archives")).json(
                &json!({"id": "n", "chunk_size": 64 << 20, "pack_threshold": 1 << 20, "level": 22}),
            ),
            status: StatusCode::BAD_REQUEST,
            code: "bad_property",
        },
        Case {
            name: "put: dot-dot",
            req: c.put(u("/archives/a/files/x/..%2Fy")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "put: leading dot-dot",
            req: c.put(u("/archives/a/files/..%2F..%2Fetc/x")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "put: NUL",
            req: c.put(u("/archives/a/files/x%00y")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "put: absolute",
            req: c.put(u("/archives/a/files/%2Fetc%2Fpasswd")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "put: empty component",
            req: c.put(u("/archives/a/files/x//y")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "put: not UTF-8",
            req: c.put(u("/archives/a/files/x%FFy")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "put: no archive",
            req: c.put(u("/archives/nope/files/x")).body("x"),
            status: StatusCode::NOT_FOUND,
            code: "no_archive",
        },
        Case {
            name: "put: too large",
            req: c
                .put(u("/archives/a/files/big"))
                .body(chunked(vec![7u8; MAX_BODY as usize + 1])),
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
        },
        Case {
            name: "put: bad mode",
            req: c
                .put(u("/archives/a/files/m"))
                .header("x-znippy-mode", "rwx")
                .body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_mode",
        },
        Case {
            name: "put: mode with a sign",
            req: c
                .put(u("/archives/a/files/m"))
                .header("x-znippy-mode", "+7")
                .body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_mode",
        },
        Case {
            name: "put: sealed",
            req: c.put(u("/archives/s/files/y")).body("x"),
            status: StatusCode::CONFLICT,
            code: "sealed",
        },
        Case {
            name: "post: media type",
            req: c
                .post(u("/archives/a/files"))
                .header("content-type", "text/plain")
                .body("x"),
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "bad_media_type",
        },
        Case {
            name: "post: no boundary",
            req: c
                .post(u("/archives/a/files"))
                .header("content-type", "multipart/form-data")
                .body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_body",
        },
        Case {
            name: "multipart: cut short",
            req: mp(
                &[
                    ("f", Some("ok.txt"), &good),
                    ("f", Some("cut.txt"), b"partial"),
                ],
                false,
            ),
            status: StatusCode::BAD_REQUEST,
            code: "bad_body",
        },
        Case {
            name: "multipart: unknown field",
            req: mp(
                &[("f", Some("ok.txt"), &good), ("color", None, b"red")],
                true,
            ),
            status: StatusCode::BAD_REQUEST,
            code: "bad_field",
        },
        Case {
            name: "multipart: bad fact",
            req: mp(
                &[
                    ("f", Some("ok.txt"), &good),
                    ("meta", None, b"no-equals-sign"),
                ],
                true,
            ),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "multipart: fact about a bad path",
            req: mp(
                &[("meta", None, b"../x=k=v"), ("f", Some("ok.txt"), &good)],
                true,
            ),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "multipart: bad path after a good file",
            req: mp(
                &[("f", Some("ok.txt"), &good), ("f", Some("../escape"), b"x")],
                true,
            ),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "multipart: too large",
            req: mp(
                &[
                    ("f", Some("ok.txt"), &good),
                    ("f", Some("big"), &vec![1u8; MAX_BODY as usize]),
                ],
                true,
            ),
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
        },
        Case {
            name: "multipart: framing counts against the limit",
            req: c
                .post(u("/archives/a/files"))
                .header("content-type", "multipart/form-data; boundary=XyZ")
                .body(chunked(padded)),
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
        },
        Case {
            name: "tar: garbage",
            req: tar(vec![b'x'; 1024]),
            status: StatusCode::BAD_REQUEST,
            code: "bad_input",
        },
        Case {
            name: "tar: cut inside an entry",
            req: tar(truncated_tar),
            status: StatusCode::BAD_REQUEST,
            code: "bad_body",
        },
        Case {
            name: "put: a path below a live file",
            req: c.put(u("/archives/a/files/keep/one.txt/under")).body("x"),
            status: StatusCode::CONFLICT,
            code: "path_conflict",
        },
        Case {
            name: "put: a file where live files lie below",
            req: c.put(u("/archives/a/files/keep")).body("x"),
            status: StatusCode::CONFLICT,
            code: "path_conflict",
        },
        Case {
            name: "put: a control character in the path",
            req: c.put(u("/archives/a/files/bad%1B%5B31m")).body("x"),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "tar: a device",
            req: tar(tar_entry("dev", tar::EntryType::Char, b"")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_input",
        },
        Case {
            name: "tar: escaping path",
            req: tar(tar_entry("ok/../../x", tar::EntryType::Regular, b"x")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "list: limit 0",
            req: c.get(u("/archives/a/files?limit=0")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_limit",
        },
        Case {
            name: "list: limit not a number",
            req: c.get(u("/archives/a/files?limit=many")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_query",
        },
        Case {
            name: "list archives: a parameter it takes none of",
            req: c.get(u("/archives?limit=1")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_query",
        },
        Case {
            name: "history: a parameter it takes none of",
            req: c.get(u("/archives/a/history?after=x")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_query",
        },
        Case {
            name: "meta: both key and prefix",
            req: c.get(u("/archives/a/meta?key=a&prefix=b")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_query",
        },
        Case {
            name: "meta: array value",
            req: c
                .put(u("/archives/a/meta"))
                .json(&json!({"set": [{"key": "k", "value": [1]}]})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "meta: an integer under i64, which JSON parsers read as a float",
            req: c
                .put(u("/archives/a/meta"))
                .header("content-type", "application/json")
                .body(r#"{"set": [{"key": "k", "value": -9223372036854775809}]}"#),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "meta: an integer past u64",
            req: c
                .put(u("/archives/a/meta"))
                .header("content-type", "application/json")
                .body(r#"{"set": [{"key": "k", "value": 18446744073709551616}]}"#),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "meta: an integer past i64",
            req: c
                .put(u("/archives/a/meta"))
                .json(&json!({"set": [{"key": "k", "value": 9223372036854775808u64}]})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "meta: bad hex",
            req: c
                .put(u("/archives/a/meta"))
                .json(&json!({"set": [{"key": "k", "bytes_hex": "zz"}]})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "meta: empty key",
            req: c
                .put(u("/archives/a/meta"))
                .json(&json!({"set": [{"key": "", "value": 1}]})),
            status: StatusCode::BAD_REQUEST,
            code: "bad_meta",
        },
        Case {
            name: "meta: sealed",
            req: c
                .put(u("/archives/s/meta"))
                .json(&json!({"set": [{"key": "k", "value": 1}]})),
            status: StatusCode::CONFLICT,
            code: "sealed",
        },
        Case {
            name: "get: no file",
            req: c.get(u("/archives/a/files/missing")),
            status: StatusCode::NOT_FOUND,
            code: "no_file",
        },
        Case {
            name: "get: a path no upload could store",
            req: c.get(u("/archives/a/files/a%5Cb")),
            status: StatusCode::BAD_REQUEST,
            code: "bad_path",
        },
        Case {
            name: "get: range past the end",
            req: c
                .get(u("/archives/a/files/keep/one.txt"))
                .header("range", "bytes=5000-"),
            status: StatusCode::RANGE_NOT_SATISFIABLE,
            code: "bad_range",
        },
        Case {
            name: "delete: no file",
            req: c.delete(u("/archives/a/files/missing")),
            status: StatusCode::NOT_FOUND,
            code: "no_file",
        },
        Case {
            name: "delete: sealed",
            req: c.delete(u("/archives/s/files/x")),
            status: StatusCode::CONFLICT,
            code: "sealed",
        },
        Case {
            name: "download: live",
            req: c.get(u("/archives/a/archive.znippy")),
            status: StatusCode::CONFLICT,
            code: "not_sealed",
        },
        Case {
            name: "seal: no archive",
            req: c.post(u("/archives/nope/seal")),
            status: StatusCode::NOT_FOUND,
            code: "no_archive",
        },
        Case {
            name: "drop: no archive",
            req: c.delete(u("/archives/nope")),
            status: StatusCode::NOT_FOUND,
            code: "no_archive",
        },
        Case {
            name: "method",
            req: c.request(Method::PATCH, u("/archives/a")),
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: "bad_method",
        },
        Case {
            name: "route",
            req: c.get(u("/nothing/here")),
            status: StatusCode::NOT_FOUND,
            code: "no_route",
        },
    ];
    let before = state(&c, &s).await;
    for case in cases {
        let r = case.req.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, case.status, "{}: {text}", case.name);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{}: {text}", case.name));
        assert_eq!(v["error"]["code"], case.code, "{}: {text}", case.name);
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert_eq!(
            state(&c, &s).await,
            before,
            "{} changed the archive",
            case.name
        );
    }
    // A create body over the JSON limit. Sent whole, its writer races the
    // server, which answers once the limit is passed and closes with the
    // rest unread: the client can see its write fail before it reads the
    // answer. So the request declares 2 MiB and sends one byte past the
    // limit, which the server reads to its end.
    let (status, body) =
        raw_request(&s, "POST /archives", 2 << 20, &vec![b' '; (1 << 20) + 1]).await;
    assert_eq!(status, 413, "create: huge body: {body}");
    assert!(body.contains("too_large"), "create: huge body: {body}");
    assert_eq!(
        state(&c, &s).await,
        before,
        "a huge create changed the archive"
    );
    // Dot segments as the bytes of the request line: URL libraries resolve
    // them before sending, a hostile client does not.
    for target in [
        "/archives/a/files/x/../y",
        "/archives/a/files/../../../etc/x",
    ] {
        let (status, body) = raw_put(&s, target).await;
        assert_eq!(status, 400, "{target}: {body}");
        assert!(
            body.contains("bad_path") || body.contains("no_route"),
            "{target}: {body}"
        );
        assert_eq!(state(&c, &s).await, before, "{target} changed the archive");
    }
    // RFC 5987's filename*, which multipart/form-data does not use (RFC 7578):
    // refused with what to send instead, not as a part with no filename.
    let r = c
        .post(u("/archives/a/files"))
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(
            "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename*=UTF-8''%C3%A9.txt\r\n\
             \r\nx\r\n--XyZ--\r\n",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "bad_field");
    let said = v["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("filename*") && said.contains("as filename"),
        "{said}"
    );
    assert_eq!(
        state(&c, &s).await,
        before,
        "a filename* part changed the archive"
    );
    // A transfer coding hyper would pass through undecoded: the body would
    // be stored still gzip'd, as if it were the file.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = s.base.trim_start_matches("http://");
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "PUT /archives/a/files/coded HTTP/1.1\r\nHost: {addr}\r\n\
             Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n"
        );
        conn.write_all(req.as_bytes()).await.unwrap();
        let mut resp = Vec::new();
        let _ = conn.read_to_end(&mut resp).await;
        let resp = String::from_utf8_lossy(&resp);
        assert!(resp.starts_with("HTTP/1.1 501"), "{resp}");
        assert!(resp.contains("unsupported"), "{resp}");
        assert_eq!(
            state(&c, &s).await,
            before,
            "a gzip'd body changed the archive"
        );
    }
    // And the archive still takes a good append afterwards.
    put(&c, &s, "a", "after.txt", text(5, 100)).await;
    assert_eq!(get(&c, &s, "a", "keep/two.txt").await, text(2, 700_000));
    assert_eq!(get(&c, &s, "a", "after.txt").await, text(5, 100));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_guards_writes_and_private_reads() {
    let s = Server::start(|c| c.token = Some("s3cret".into())).await;
    let c = client();
    let create = |token: Option<&str>| {
        let mut r = c.post(s.url("/archives")).json(&json!({"id": "t"}));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    assert_eq!(
        error_code(create(None).await.unwrap(), StatusCode::UNAUTHORIZED).await,
        "unauthorized"
    );
    assert_eq!(
        error_code(create(Some("guess")).await.unwrap(), StatusCode::FORBIDDEN).await,
        "forbidden"
    );
    json(create(Some("s3cret")).await.unwrap(), StatusCode::CREATED).await;
    let r = c
        .put(s.url("/archives/t/files/x"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(r, StatusCode::UNAUTHORIZED).await,
        "unauthorized"
    );
    let r = c
        .put(s.url("/archives/t/files/x"))
        .bearer_auth("s3cret")
        .body("x")
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await;
    // The scheme is case-insensitive; another scheme is no token at all.
    for (header, status) in [
        ("bearer s3cret", StatusCode::OK),
        ("BEARER  s3cret", StatusCode::OK),
        ("Basic s3cret", StatusCode::UNAUTHORIZED),
    ] {
        let r = c
            .put(s.url("/archives/t/files/y"))
            .header("authorization", header)
            .body("y")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{header}");
    }
    // Reads are public by default.
    assert_eq!(get(&c, &s, "t", "x").await, b"x");
    let r = c.get(s.url("/iceberg/v1/namespaces")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    s.stop().await;

    let s = Server::start(|c| {
        c.token = Some("s3cret".into());
        c.private_reads = true;
    })
    .await;
    for path in ["/archives", "/archives/t/files/x"] {
        let r = c.get(s.url(path)).send().await.unwrap();
        assert_eq!(
            error_code(r, StatusCode::UNAUTHORIZED).await,
            "unauthorized",
            "{path}"
        );
    }
    // The REST catalog answers in the Iceberg REST error model its clients parse.
    let r = c.get(s.url("/iceberg/v1/namespaces")).send().await.unwrap();
    let v = json(r, StatusCode::UNAUTHORIZED).await;
    assert_eq!(v["error"]["type"], "NotAuthorizedException");
    assert_eq!(v["error"]["code"], 401);
    let r = c
        .get(s.url("/archives"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Health and metrics stay open for probes.
    assert_eq!(
        c.get(s.url("/healthz")).send().await.unwrap().status(),
        StatusCode::OK
    );
    // So do the console's files, which hold no data, each with a policy
    // that lets the page run only its own script against this origin.
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let r = c.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let h = r.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let policy = h["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("script-src 'self'") && policy.contains("connect-src 'self'"));
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    let page = c
        .get(s.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(r#"<script src="/console/console.js""#),
        "{page}"
    );
    let r = c.get(s.url("/console/nope.js")).send().await.unwrap();
    assert_eq!(error_code(r, StatusCode::NOT_FOUND).await, "no_file");
    s.stop().await;
}

#[tokio::test]
async fn no_token_no_network() {
    let open = znippy_http::Config {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..Default::default()
    };
    let err = znippy_http::bind(&open).await.unwrap_err();
    assert!(
        matches!(err, znippy_http::ServeError::OpenToNetwork(_)),
        "{err}"
    );
    let with_token = znippy_http::Config {
        token: Some("t".into()),
        ..open.clone()
    };
    znippy_http::bind(&with_token).await.unwrap();
    let told = znippy_http::Config {
        insecure_open: true,
        ..open
    };
    znippy_http::bind(&told).await.unwrap();
}

/// A full disk answers 507 and changes nothing. The archive's sidecar is
/// pointed at /dev/full, where every write fails with ENOSPC, as on a disk
/// with no space left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_507_and_changes_nothing() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "full", false).await;
    let s = s
        .restart(|data| {
            let sidecar = data.join("blobs/full.znippy");
            std::fs::remove_file(&sidecar).unwrap();
            std::os::unix::fs::symlink("/dev/full", &sidecar).unwrap();
        })
        .await;
    let before = json(
        c.get(s.url("/archives/full")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    for body in [b"small".to_vec(), text(1, 3_000_000)] {
        let r = c
            .put(s.url("/archives/full/files/x"))
            .body(body)
            .send()
            .await
            .unwrap();
        let v = json(r, StatusCode::INSUFFICIENT_STORAGE).await;
        assert_eq!(v["error"]["code"], "no_space");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains('/') && !message.contains("znippy"),
            "a 5xx names no server path: {message}"
        );
        let after = json(
            c.get(s.url("/archives/full")).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(after, before);
    }
    let r = c.get(s.url("/archives/full/files/x")).send().await.unwrap();
    assert_eq!(error_code(r, StatusCode::NOT_FOUND).await, "no_file");
    s.stop().await;
}

#[tokio::test]
async fn a_refusal_that_leaves_the_body_unread_closes_the_connection() {
    // Whether hyper drains an unread body or drops the connection depends on
    // timing; the server says `Connection: close` itself, so a pooling client
    // never sends its next request on a connection about to close.
    let s = Server::start(|c| c.max_body = MAX_BODY).await;
    let c = client();
    create(&c, &s, "a", false).await;
    for (url, body, status, code) in [
        (
            "/archives/a/files/big",
            vec![b'x'; 2 * MAX_BODY as usize],
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            "/archives/a",
            b"small".to_vec(),
            StatusCode::METHOD_NOT_ALLOWED,
            "bad_method",
        ),
    ] {
        let r = c.put(s.url(url)).body(chunked(body)).send().await.unwrap();
        assert_eq!(
            r.headers().get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..]),
            "{url}"
        );
        assert_eq!(error_code(r, status).await, code);
    }
    // And the server does close it: the response, then end of stream.
    let addr = s.url("").trim_start_matches("http://").to_string();
    let raw = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        tcp.write_all(b"PUT /archives/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nsmall")
            .unwrap();
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).unwrap();
        String::from_utf8(raw).unwrap()
    })
    .await
    .unwrap();
    assert!(raw.starts_with("HTTP/1.1 405"), "{raw}");
    assert!(raw.contains("connection: close"), "{raw}");
    // A body read to its end, and no body at all, keep the connection.
    let r = c
        .put(s.url("/archives/a/files/small"))
        .body(b"small".to_vec())
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("connection").is_none());
    json(r, StatusCode::OK).await;
    let r = c
        .get(s.url("/archives/a/files/small"))
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("connection").is_none());
    assert_eq!(r.text().await.unwrap(), "small");
    s.stop().await;
}

/// A multipart preamble, or a part header, that never ends is refused once
/// 64 KiB are held without progress: the server stops reading long before the
/// client's 200 MiB are sent, and the archive is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_framing_that_never_ends_is_refused_early() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "a", false).await;
    let starts: [&[u8]; 2] = [
        b"no boundary here, ",
        b"--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\nX-Long: ",
    ];
    for start in starts {
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        let first = bytes::Bytes::from_static(start);
        let filler = bytes::Bytes::from(vec![b'a'; 64 << 10]);
        let chunks = futures::stream::iter(
            std::iter::once(first)
                .chain(std::iter::repeat_n(filler, 3200))
                .inspect(move |c| {
                    counter.fetch_add(c.len() as u64, Ordering::Relaxed);
                })
                .map(Ok::<_, std::io::Error>),
        );
        let r = c
            .post(s.url("/archives/a/files"))
            .header("content-type", "multipart/form-data; boundary=B")
            .body(reqwest::Body::wrap_stream(chunks))
            .send()
            .await;
        if let Ok(r) = r {
            assert_eq!(
                error_code(r, StatusCode::PAYLOAD_TOO_LARGE).await,
                "too_large"
            );
        }
        let sent = sent.load(Ordering::Relaxed);
        assert!(sent < 32 << 20, "the server read {sent} bytes of framing");
        let v = json(
            c.get(s.url("/archives/a")).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(v["files"], 0);
    }
    s.stop().await;
}

/// The facts of one multipart upload are held until its body ends, so they
/// are capped together at 1 MiB, as PUT /meta's whole body is: two facts of
/// 600 KB are refused (413, nothing appended) though each is under 1 MiB;
/// two of 400 KB are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facts_of_one_upload_are_capped_together() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "a", true).await;
    let upload = |each: usize| {
        let (k1, k2) = (
            format!("k1={}", "v".repeat(each)),
            format!("k2={}", "w".repeat(each)),
        );
        let body = multipart(
            "XyZ",
            &[
                ("f", Some("f.txt"), b"file"),
                ("meta-archive", None, k1.as_bytes()),
                ("meta-archive", None, k2.as_bytes()),
            ],
            true,
        );
        c.post(s.url("/archives/a/files"))
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(chunked(body))
            .send()
    };
    let r = upload(600_000).await.unwrap();
    assert_eq!(
        error_code(r, StatusCode::PAYLOAD_TOO_LARGE).await,
        "too_large"
    );
    let v = json(
        c.get(s.url("/archives/a")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        (v["files"].as_u64(), v["appends"].as_u64()),
        (Some(0), Some(0))
    );
    let r = upload(400_000).await.unwrap();
    assert_eq!(json(r, StatusCode::OK).await["files"], 1);
    s.stop().await;
}

/// An append whose blob file was removed under the service is refused with 503
/// instead of being acknowledged into a deleted inode, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_into_a_removed_sidecar_is_refused() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "a", false).await;
    put(&c, &s, "a", "first", text(1, 1000)).await;
    let before = json(
        c.get(s.url("/archives/a")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    std::fs::remove_file(s.dir.path().join("data/blobs/a.znippy")).unwrap();
    let r = c
        .put(s.url("/archives/a/files/second"))
        .body(text(2, 1000))
        .send()
        .await
        .unwrap();
    let v = json(r, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(v["error"]["code"], "unavailable");
    let after = json(
        c.get(s.url("/archives/a")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(after, before, "nothing was committed");
    s.stop().await;
}

/// Opens a raw connection to `s` and sends `head` (which may stop anywhere).
async fn raw(s: &Server, head: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = s.base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    conn
}

/// Reads until the server closes the connection, which must happen within
/// `limit` (far above the timeouts under test: a hang fails, not a slow run).
async fn until_closed(conn: &mut tokio::net::TcpStream, limit: u64) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let read = conn.read_to_end(&mut got);
    // A reset after the response is a close too, so the read's own result
    // does not matter; only that it ended.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(limit), read).await;
    assert!(
        ended.is_ok(),
        "the server kept the connection open: {got:?}"
    );
    String::from_utf8_lossy(&got).into_owned()
}

/// Sends `body` one byte at a time, `gap` apart, until the peer stops reading.
fn trickle(mut conn: tokio::net::tcp::OwnedWriteHalf, body: usize, gap: u64) {
    use tokio::io::AsyncWriteExt;
    tokio::spawn(async move {
        for _ in 0..body {
            tokio::time::sleep(std::time::Duration::from_millis(gap)).await;
            if conn.write_all(b"x").await.is_err() {
                break;
            }
        }
    });
}

/// Slow headers, an idle keep-alive connection and an upload sent a byte at
/// a time are cut off by their timeouts; the slow upload answers 408, holds
/// the archive's append lock no longer, and commits nothing. A declared
/// Content-Length past the limit is refused before any body byte is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let s = Server::start(|c| {
        c.max_body = MAX_BODY;
        c.header_timeout = std::time::Duration::from_secs(1);
        c.body_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let c = client();
    create(&c, &s, "a", false).await;
    put(&c, &s, "a", "kept", b"kept".to_vec()).await;
    let before = list_all(&c, &s, "a", 100).await;

    // Headers that never end, and a connection idle after its response.
    let mut half = raw(&s, "GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
    let mut idle = raw(&s, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(until_closed(&mut half, 20).await, "");
    let answered = until_closed(&mut idle, 20).await;
    assert!(
        answered.starts_with("HTTP/1.1 200") && answered.ends_with("ok\n"),
        "{answered}"
    );

    // An upload at 10 bytes a second: far below 64 KiB a second.
    let conn = raw(
        &s,
        "PUT /archives/a/files/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
    )
    .await;
    let (mut read, write) = conn.into_split();
    trickle(write, 100_000, 100);
    let mut answer = String::new();
    {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(std::time::Duration::from_secs(20), read.read(&mut buf))
            .await
            .expect("the slow upload was never answered")
            .unwrap();
        answer.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("\"too_slow\"") && answer.contains("connection: close"),
        "{answer}"
    );
    // The lock is free: the next append goes through, and the slow one left nothing.
    put(&c, &s, "a", "next", b"next".to_vec()).await;
    let after = list_all(&c, &s, "a", 100).await;
    assert_eq!(after.len(), before.len() + 1);
    assert!(after.iter().all(|(p, _)| p != "slow"));

    // Refused from its head: not one byte of the declared body is sent.
    let mut big = raw(
        &s,
        &format!(
            "PUT /archives/a/files/big HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        ),
    )
    .await;
    let answer = until_closed(&mut big, 20).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"too_large\""), "{answer}");
    s.stop().await;
}

/// Shutdown waits for requests in flight only for its grace period: an
/// upload still trickling in and a request whose headers never end are cut,
/// the server returns, the data directory opens again at once, and the cut
/// upload committed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_what_does_not_finish_within_its_grace() {
    let s = Server::start(|c| {
        c.body_timeout = std::time::Duration::from_secs(3600);
        c.header_timeout = std::time::Duration::from_secs(3600);
        c.shutdown_grace = std::time::Duration::from_secs(1);
    })
    .await;
    let c = client();
    create(&c, &s, "a", false).await;
    put(&c, &s, "a", "kept", b"kept".to_vec()).await;
    let _half = raw(&s, "GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
    let conn = raw(
        &s,
        "PUT /archives/a/files/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nxxxx",
    )
    .await;
    let (_read, write) = conn.into_split();
    trickle(write, 100_000, 100);
    // The append has begun: its first bytes went through the engine's budget.
    let bytes_in = || async {
        metrics(&c, &s)
            .await
            .lines()
            .find_map(|l| l.strip_prefix("znippy_http_bytes_in_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = bytes_in().await;
    while bytes_in().await <= before {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A restart stops the server (within its grace) and opens the same data
    // directory again.
    let s = tokio::time::timeout(std::time::Duration::from_secs(30), s.restart(|_| {}))
        .await
        .expect("shutdown waited past its grace");
    let files: Vec<String> = list_all(&c, &s, "a", 100)
        .await
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(files, vec!["kept".to_string()]);
    s.stop().await;
}

/// What the server sends on a fresh connection for `request`, until it closes.
async fn raw_exchange(s: &Server, request: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before it has read all of a large
    // head; what it sent is still there to read.
    let _ = conn.write_all(request).await;
    let mut got = Vec::new();
    let read = conn.read_to_end(&mut got);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), read).await;
    assert!(ended.is_ok(), "no answer: {got:?}");
    got
}

/// Requests hyper refuses before routing (a malformed header, a request
/// target over 64 KiB, too many headers) still answer with the service's
/// JSON error, and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_requests_answer_json_errors() {
    let s = Server::start(|_| {}).await;
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let many: String = (0..150).map(|i| format!("X-{i}: y\r\n")).collect();
    let many = format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    for (request, status, code) in [
        (
            "GET / HTTP/1.1\r\nnot a header\r\n\r\n".to_string(),
            400,
            "bad_request",
        ),
        ("NOT HTTP AT ALL\r\n\r\n".to_string(), 400, "bad_request"),
        (long, 414, "uri_too_long"),
        (many, 431, "headers_too_large"),
    ] {
        let got = String::from_utf8(raw_exchange(&s, request.as_bytes()).await).unwrap();
        let (head, body) = got
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{got}"));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{got}");
        assert!(head.contains("content-type: application/json"), "{got}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{got}"
        );
        let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{got}"));
        assert_eq!(v["error"]["code"], code, "{got}");
    }
    let r = client().get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    s.stop().await;
}

/// A response body that holds, byte for byte, one of hyper's own error
/// answers is sent as it is, whether it goes out with its head or alone
/// (the last 256 KiB piece of a streamed range), and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_looks_like_an_error_answer_is_sent_intact() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "a", false).await;
    let answer = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                   content-length: 0\r\ndate: Tue, 01 Dec 2026 21:15:31 GMT\r\n\r\n";
    let piece = 256 << 10;
    let mut bytes = text(3, 20 * piece);
    bytes.extend_from_slice(answer);
    put(&c, &s, "a", "looks", bytes.clone()).await;
    put(&c, &s, "a", "only", answer.to_vec()).await;
    for _ in 0..3 {
        assert_eq!(get(&c, &s, "a", "only").await, answer);
        let r = c
            .get(s.url("/archives/a/files/looks"))
            .header(
                "range",
                format!("bytes={}-", bytes.len() - 17 * piece - answer.len()),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        let got = r.bytes().await.unwrap();
        assert_eq!(got.len(), 17 * piece + answer.len());
        assert!(got.ends_with(answer));
    }
    s.stop().await;
}

/// Two names that are one in NFC (precomposed `é`, and `e` with a combining
/// accent) cannot both be live: each way round, in one batch, and after a
/// restart; a deleted name frees its spelling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_one_in_nfc_are_refused() {
    let s = Server::start(|_| {}).await;
    let c = client();
    create(&c, &s, "u", false).await;
    let (composed, decomposed) = ("caf%C3%A9", "cafe%CC%81");
    let put_status = |path: &'static str| {
        let (c, url) = (c.clone(), s.url(&format!("/archives/u/files/{path}")));
        async move { c.put(url).body("x").send().await.unwrap() }
    };
    assert_eq!(put_status(composed).await.status(), StatusCode::OK);
    let r = put_status(decomposed).await;
    assert_eq!(error_code(r, StatusCode::CONFLICT).await, "path_conflict");
    let batch = reqwest::multipart::Form::new()
        .part(
            "f",
            reqwest::multipart::Part::bytes(b"1".to_vec()).file_name("d/x\u{e9}"),
        )
        .part(
            "f",
            reqwest::multipart::Part::bytes(b"2".to_vec()).file_name("d/xe\u{301}"),
        );
    let r = c
        .post(s.url("/archives/u/files"))
        .multipart(batch)
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(r, StatusCode::CONFLICT).await, "path_conflict");
    let r = c
        .delete(s.url(&format!("/archives/u/files/{composed}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(put_status(decomposed).await.status(), StatusCode::OK);
    let s = s.restart(|_| {}).await;
    let r = c
        .put(s.url(&format!("/archives/u/files/{composed}")))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(r, StatusCode::CONFLICT).await, "path_conflict");
    let files: Vec<String> = list_all(&c, &s, "u", 100)
        .await
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(files, vec!["cafe\u{301}".to_string()]);
    s.stop().await;
}
