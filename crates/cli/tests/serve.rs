//! `znippy serve` as a real process: SIGKILLed while clients upload, then
//! restarted, every acknowledged upload is there and reads back verified;
//! SIGTERM lets an upload in flight finish and commit before the process exits.
//!
//! The client is a few lines of HTTP/1.1 over std's TcpStream, so the bytes on
//! the wire are exactly what the test says.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use znippy_testkit::data::text;

struct Serve {
    child: Child,
    addr: String,
}

fn serve(data: &Path) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--threads",
            "2",
            "--data",
        ])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Serve { child, addr }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// One request; returns the status and body.
fn http(addr: &str, method: &str, target: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    http_typed(addr, method, target, "application/octet-stream", body)
}

/// One request with a body of `content_type`.
fn http_typed(
    addr: &str,
    method: &str,
    target: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    read_response(s)
}

fn read_response(mut s: TcpStream) -> std::io::Result<(u16, Vec<u8>)> {
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    let body = resp[split + 4..].to_vec();
    // Content-Length framing: a body cut short by a dying server is an error.
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .and_then(|v| v.trim().parse::<usize>().ok())
        })
        .ok_or_else(|| std::io::Error::other("no content-length"))?;
    if body.len() != len {
        return Err(std::io::Error::other("short body"));
    }
    Ok((status, body))
}

fn list(addr: &str, id: &str) -> Vec<String> {
    let (status, body) = http(
        addr,
        "GET",
        &format!("/archives/{id}/files?limit=10000"),
        b"",
    )
    .unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    // {"files":[{"mode":..,"path":"..",...}],"next":null}
    text.split("\"path\":\"")
        .skip(1)
        .map(|p| p.split('"').next().unwrap().to_string())
        .collect()
}

/// The server's `znippy_http_bytes_in_total`: request body bytes taken in.
fn bytes_in(addr: &str) -> u64 {
    let (st, body) = http(addr, "GET", "/metrics", b"").unwrap();
    assert_eq!(st, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("znippy_http_bytes_in_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("bytes_in_total in /metrics")
}

#[test]
fn sigkill_during_uploads_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let acked: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
    let mut rng = 0x853c_49e6_748f_ea9bu64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    {
        let s = serve(&data);
        let (st, body) = http(&s.addr, "POST", "/archives", br#"{"id":"k"}"#).unwrap();
        assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
        let mut s = s;
        signal(&s.child, libc::SIGTERM);
        s.child.wait().unwrap();
    }
    let mut killed_mid_upload = 0;
    for round in 0..6 {
        let mut s = serve(&data);
        // Everything acknowledged so far is there, byte for byte.
        let listed = list(&s.addr, "k");
        for (path, want) in acked.lock().unwrap().iter() {
            assert!(
                listed.contains(path),
                "round {round}: acknowledged {path} is missing"
            );
            let (st, got) =
                http(&s.addr, "GET", &format!("/archives/k/files/{path}"), b"").unwrap();
            assert_eq!(st, 200, "{path}");
            assert!(
                got == *want,
                "round {round}: {path} reads back different bytes"
            );
        }
        // Anything else listed (committed, but the answer never reached the
        // client) reads back whole and verified, never half.
        for path in listed
            .iter()
            .filter(|p| !acked.lock().unwrap().contains_key(*p))
        {
            let (st, _) = http(&s.addr, "GET", &format!("/archives/k/files/{path}"), b"").unwrap();
            assert_eq!(st, 200, "{path}");
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut workers = Vec::new();
        for t in 0..4u64 {
            let (addr, acked, stop) = (s.addr.clone(), acked.clone(), stop.clone());
            workers.push(std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let path = format!("r{round}/t{t}/f{i}");
                    let size = if i.is_multiple_of(3) {
                        3_000_000
                    } else {
                        20_000 + (i as usize * 7919) % 50_000
                    };
                    let body = text(round * 1_000_000 + t * 10_000 + i, size);
                    match http(&addr, "PUT", &format!("/archives/k/files/{path}"), &body) {
                        Ok((200, _)) => {
                            acked.lock().unwrap().insert(path, body);
                        }
                        Ok((st, b)) => panic!("{path}: {st} {}", String::from_utf8_lossy(&b)),
                        Err(_) => return,
                    }
                    i += 1;
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(300 + next() % 1200));
        // Body bytes the server had taken in just before the kill: more than
        // the round's acknowledged uploads hold means an upload had reached
        // the server and was not acknowledged when the kill landed.
        let received = bytes_in(&s.addr);
        signal(&s.child, libc::SIGKILL);
        s.child.wait().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        let round_acked: u64 = acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p.starts_with(&format!("r{round}/")))
            .map(|(_, b)| b.len() as u64)
            .sum();
        if received > round_acked {
            killed_mid_upload += 1;
        }
    }
    assert!(killed_mid_upload > 0, "no kill landed during an upload");
    // Finally the whole archive seals and the sealed file verifies.
    let mut s = serve(&data);
    let (st, body) = http(&s.addr, "POST", "/archives/k/seal", b"").unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let (st, sealed) = http(&s.addr, "GET", "/archives/k/archive.znippy", b"").unwrap();
    assert_eq!(st, 200);
    signal(&s.child, libc::SIGTERM);
    s.child.wait().unwrap();
    let archive = znippy_format::Archive::open(sealed).unwrap();
    archive.verify(2).unwrap();
    for (path, want) in acked.lock().unwrap().iter() {
        let mut got = Vec::new();
        archive.read_file(path, &mut got).unwrap();
        assert!(got == *want, "{path} in the sealed archive");
    }
    eprintln!(
        "{} uploads acknowledged over 6 kills ({killed_mid_upload} during an upload)",
        acked.lock().unwrap().len()
    );
}

#[test]
fn sigterm_finishes_the_upload_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut s = serve(&data);
    let (st, _) = http(&s.addr, "POST", "/archives", br#"{"id":"g"}"#).unwrap();
    assert_eq!(st, 201);
    let body = text(7, 4_000_000);
    let mut conn = TcpStream::connect(&s.addr).unwrap();
    write!(
        conn,
        "PUT /archives/g/files/slow.bin HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    conn.write_all(&body[..1_000_000]).unwrap();
    // The upload is in flight once the server has taken its first megabyte.
    let start = Instant::now();
    while bytes_in(&s.addr) < 1_000_000 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the upload never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&s.child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    // The process is still there, waiting for this upload.
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "exited with an upload in flight"
    );
    conn.write_all(&body[1_000_000..]).unwrap();
    let (st, resp) = read_response(conn).unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&resp));
    let start = Instant::now();
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(start.elapsed() < Duration::from_secs(30));
    // New connections were refused meanwhile; after a restart the upload is there.
    let mut s = serve(&data);
    let (st, got) = http(&s.addr, "GET", "/archives/g/files/slow.bin", b"").unwrap();
    assert_eq!(st, 200);
    assert!(got == body);
    signal(&s.child, libc::SIGTERM);
    s.child.wait().unwrap();
}

/// Tar uploads in an order that is not the byte order of their paths seal to
/// the bytes `znippy compress --tar` and `append --tar` make of the same
/// streams: a user can rebuild a sealed archive from the tars they uploaded.
#[test]
fn tar_uploads_seal_to_what_compress_and_append_make_of_the_tars() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let long = format!("deep/{}/name.txt", "d".repeat(120));
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("z/last.txt", text(1, 3000)),
        ("a/first.txt", text(2, 5000)),
        ("m.bin", text(3, 900_000)),
        ("b.txt", text(4, 100)),
        ("aa/x", text(5, 70_000)),
        (long.as_str(), text(6, 4000)),
        ("again", text(2, 5000)),
        ("c/empty", Vec::new()),
    ];
    for (p, b) in &files {
        let path = src.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b).unwrap();
    }
    // A link, a hard link and an empty directory, as tar records them.
    std::os::unix::fs::symlink("z/last.txt", src.join("lnk")).unwrap();
    std::fs::hard_link(src.join("a/first.txt"), src.join("hard")).unwrap();
    std::fs::create_dir(src.join("emptydir")).unwrap();
    // Three streams, names in the order given: gnu (a long name), pax, ustar.
    let streams: [(&str, &[&str]); 3] = [
        (
            "gnu",
            &[
                "z/last.txt",
                "m.bin",
                "a/first.txt",
                long.as_str(),
                "hard",
                "lnk",
                "emptydir",
            ],
        ),
        ("pax", &["b.txt", "again", "aa/x"]),
        ("ustar", &["c/empty"]),
    ];
    let mut tars = Vec::new();
    for (i, (format, names)) in streams.iter().enumerate() {
        let tar = tmp.path().join(format!("t{i}.tar"));
        let st = Command::new("tar")
            .arg(format!("--format={format}"))
            .arg("-C")
            .arg(&src)
            .arg("-cf")
            .arg(&tar)
            .args(*names)
            .status()
            .unwrap();
        assert!(st.success());
        tars.push(tar);
    }

    let data = tmp.path().join("data");
    let mut server = serve(&data);
    let (st, body) = http(&server.addr, "POST", "/archives", br#"{"id": "t"}"#).unwrap();
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    for tar in &tars {
        let bytes = std::fs::read(tar).unwrap();
        let (st, body) = http_typed(
            &server.addr,
            "POST",
            "/archives/t/files",
            "application/x-tar",
            &bytes,
        )
        .unwrap();
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    }
    let (st, body) = http(&server.addr, "POST", "/archives/t/seal", b"").unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let (st, sealed) = http(&server.addr, "GET", "/archives/t/archive.znippy", b"").unwrap();
    assert_eq!(st, 200);
    signal(&server.child, libc::SIGTERM);
    server.child.wait().unwrap();

    let reference = tmp.path().join("ref.znippy");
    let cli = |args: &[&std::ffi::OsStr], stdin: Option<&Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_znippy"));
        c.args(args);
        if let Some(f) = stdin {
            c.stdin(std::fs::File::open(f).unwrap());
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    cli(
        &[
            &os("compress"),
            &os("--tar"),
            tars[0].as_os_str(),
            &os("-o"),
            reference.as_os_str(),
        ],
        None,
    );
    cli(
        &[
            &os("append"),
            reference.as_os_str(),
            &os("--tar"),
            tars[1].as_os_str(),
        ],
        None,
    );
    // The last one from standard input, as `zstd -dc x.tar.zst | znippy ...` gives it.
    cli(
        &[&os("append"), reference.as_os_str(), &os("--tar"), &os("-")],
        Some(&tars[2]),
    );
    let listed = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .arg("list")
        .arg(&reference)
        .output()
        .unwrap();
    let mut want: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
    want.extend(["lnk", "hard", "emptydir"]);
    want.sort();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .collect::<Vec<_>>(),
        want
    );
    let reference = std::fs::read(&reference).unwrap();
    assert!(
        sealed == reference,
        "the sealed archive differs from compress --tar + append --tar"
    );
}
