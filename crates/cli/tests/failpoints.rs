//! Crashes at named points (`znippy_format::failpoint`): each test runs one
//! change in a child process that aborts at one step of its commit, checks that
//! the abort happened there, and asserts the exact state the protocol of
//! docs/store.md (live appends, seal) or docs/format.md (native append)
//! promises after a restart: the change fully there or fully absent, never in
//! between, and the archive taking changes again.
//!
//! Each test runs twice: once as a process crash (the page cache keeps what
//! was written), once as a power cut (`znippy_format::powerloss`: every write
//! not synced is lost, and names not made durable by a directory sync are
//! undone). The last tests show the power cut has teeth: with one sync left
//! out, an acknowledged change is lost.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use iceberg::spec::ManifestList;
use sha2::{Digest, Sha256};
use znippy_format::{MetaSearch, MetaValue};
use znippy_store::{Store, StoreError, TableKind};
use znippy_testkit::data::text;

/// How a test's changes die, and what they leave.
#[derive(Clone, Copy)]
enum Crash<'a> {
    /// The process dies; what it wrote stays.
    Process,
    /// The machine loses power: the changes run recording their syncs in
    /// `shadow`, and the test then cuts the data back to what they synced,
    /// except that files named `*.kept` (if given) keep what was written to
    /// them. Syncs of paths containing `unsynced`, if given, are left out.
    Power {
        shadow: &'a Path,
        kept: Option<&'a str>,
        unsynced: Option<&'a str>,
    },
}

impl Crash<'_> {
    fn command(self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_znippy"));
        cmd.args(args);
        if let Crash::Power {
            shadow, unsynced, ..
        } = self
        {
            cmd.env("ZNIPPY_POWERLOSS", shadow);
            if let Some(text) = unsynced {
                cmd.env("ZNIPPY_UNSYNCED", text);
            }
        }
        cmd
    }

    /// Puts `dir` into the state the crash leaves it in.
    fn aftermath(self, dir: &Path) {
        if let Crash::Power { shadow, kept, .. } = self {
            let kept = |p: &Path| kept.is_some() && p.extension().and_then(|e| e.to_str()) == kept;
            znippy_format::powerloss::power_cut(shadow, dir, &kept).unwrap();
        }
    }
}

fn znippy(args: &[&str]) -> Output {
    Crash::Process.command(args).output().unwrap()
}

fn ok(args: &[&str]) {
    ok_in(Crash::Process, args);
}

/// Runs `args` to success, recording its syncs if `crash` is a power cut.
fn ok_in(crash: Crash, args: &[&str]) {
    let out = crash.command(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `args` armed to abort at `point`, and checks that it died there.
fn die_at(crash: Crash, point: &str, args: &[&str]) {
    let out = crash
        .command(args)
        .env("ZNIPPY_FAILPOINT", point)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{args:?} should abort at {point}: {:?}, {stderr}",
        out.status
    );
    assert!(
        stderr.contains(&format!("failpoint {point} reached")),
        "{point} not reached: {stderr}"
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn sha(path: &Path) -> [u8; 32] {
    Sha256::digest(std::fs::read(path).unwrap()).into()
}

/// Batch `i`: a small file and one of 1 MiB, distinct per batch.
fn batch(root: &Path, i: u64) -> (PathBuf, BTreeMap<String, Vec<u8>>) {
    let dir = root.join(format!("batch{i}"));
    std::fs::create_dir_all(&dir).unwrap();
    let files = BTreeMap::from([
        (format!("x{i}"), text(2 * i, 5_000)),
        (format!("y{i}"), text(2 * i + 1, 1 << 20)),
    ]);
    for (name, b) in &files {
        std::fs::write(dir.join(name), b).unwrap();
    }
    (dir, files)
}

/// `znippy live --data DATA ARGS...`
fn live<'a>(data: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["live", "--data", s(data), "--threads", "2"];
    v.extend_from_slice(args);
    v
}

async fn read(store: &Store, path: &str) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    store.read_file("a", path, &mut out).await.map(|_| out)
}

/// The `znippy.append-seq` the current snapshot of table `kind` records.
async fn table_seq(store: &Store, kind: TableKind) -> u64 {
    let t = store.table("a", kind).await.unwrap();
    let snap = t.metadata().current_snapshot().unwrap();
    snap.summary().additional_properties["znippy.append-seq"]
        .parse()
        .unwrap()
}

/// The store after a crash in the append of batch 1 (batch 0 acknowledged
/// before it): batch 1 with its fact is there whole, or not at all, and
/// both tables record `appends` appends.
async fn check_live(data: &Path, root: &Path, batch1_there: bool, appends: u64) {
    let store = Store::open(data, 1).await.unwrap();
    let info = store.info("a").await.unwrap();
    assert_eq!(
        std::fs::metadata(data.join("blobs/a.znippy"))
            .unwrap()
            .len(),
        info.bytes_stored,
        "the sidecar is cut back to the committed blob end"
    );
    let (_, b0) = batch(root, 0);
    let (_, b1) = batch(root, 1);
    for (path, bytes) in &b0 {
        assert_eq!(&read(&store, path).await.unwrap(), bytes, "{path}");
    }
    for (path, bytes) in &b1 {
        match read(&store, path).await {
            Ok(got) if batch1_there => assert_eq!(&got, bytes, "{path}"),
            Err(StoreError::NotFound(_)) if !batch1_there => {}
            other => panic!("{path}: {:?}", other.map(|b| b.len())),
        }
    }
    assert_eq!(info.appends, appends);
    let MetaSearch::Hits(hits) = store.meta_by_key("a", "k").await.unwrap() else {
        panic!("the acknowledged fact is gone");
    };
    let facts: Vec<(String, MetaValue)> = hits
        .into_iter()
        .map(|h| (h.path.unwrap(), h.value))
        .collect();
    let mut want = vec![("x0".to_string(), MetaValue::Str("zero".into()))];
    if batch1_there {
        want.push(("x1".to_string(), MetaValue::Str("one".into())));
    }
    assert_eq!(facts, want);
    // Both tables at the same append: the metadata rolled forward if it had
    // to (a crash between the two commits).
    assert_eq!(table_seq(&store, TableKind::Files).await, appends);
    assert_eq!(table_seq(&store, TableKind::Meta).await, appends);
    store.close().await;
    assert_no_orphans(data).await;
}

/// Checks that every data file, manifest and manifest list below the
/// store's warehouse is named by a snapshot of its table: what a crash left
/// is gone once the archive has been opened and the store closed.
async fn assert_no_orphans(data: &Path) {
    let store = Store::open(data, 1).await.unwrap();
    let local = |p: &str| PathBuf::from(p.strip_prefix("file://").unwrap_or(p));
    let mut named = std::collections::HashSet::new();
    for kind in [TableKind::Files, TableKind::Meta] {
        let table = store.table("a", kind).await.unwrap();
        let metadata = table.metadata();
        for snapshot in metadata.snapshots() {
            let path = local(snapshot.manifest_list());
            let bytes = std::fs::read(&path).unwrap();
            let list = ManifestList::parse_with_version(&bytes, metadata.format_version()).unwrap();
            named.insert(path);
            for m in list.entries() {
                named.insert(local(&m.manifest_path));
                let manifest = m.load_manifest(table.file_io()).await.unwrap();
                for e in manifest.entries() {
                    named.insert(local(e.data_file().file_path()));
                }
            }
        }
    }
    let mut on_disk = Vec::new();
    let mut dirs = vec![data.join("warehouse")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            match path.extension().and_then(|e| e.to_str()) {
                _ if path.is_dir() => dirs.push(path),
                Some("parquet" | "avro") => on_disk.push(path),
                _ => {}
            }
        }
    }
    let orphans: Vec<_> = on_disk.iter().filter(|p| !named.contains(*p)).collect();
    assert!(orphans.is_empty(), "left by the crash: {orphans:?}");
    store.close().await;
}

/// A power cut whose syncs are recorded in `shadow`, losing every write
/// not synced.
fn power(shadow: &Path) -> Crash<'_> {
    Crash::Power {
        shadow,
        kept: None,
        unsynced: None,
    }
}

/// Dies at `point` in the second append of a live archive, then checks the
/// store and that it takes the append again.
async fn live_append_dies_at(point: &str, batch1_there: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (root, shadow) = (tmp.path(), tmp.path().join("shadow"));
    live_append_crashes(Crash::Process, &root.join("process"), point, batch1_there).await;
    live_append_crashes(power(&shadow), &root.join("power"), point, batch1_there).await;
}

async fn live_append_crashes(crash: Crash<'_>, root: &Path, point: &str, batch1_there: bool) {
    let data = root.join("data");
    ok_in(crash, &live(&data, &["create", "a"]));
    let (b0, _) = batch(root, 0);
    let (b1, _) = batch(root, 1);
    ok_in(
        crash,
        &live(&data, &["append", "a", s(&b0), "--meta", "x0=k=zero"]),
    );
    die_at(
        crash,
        point,
        &live(&data, &["append", "a", s(&b1), "--meta", "x1=k=one"]),
    );
    crash.aftermath(&data);
    let appends = if batch1_there { 2 } else { 1 };
    check_live(&data, root, batch1_there, appends).await;
    ok(&live(&data, &["append", "a", s(&b1), "--meta", "x1=k=one"]));
    check_live(&data, root, true, appends + 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_append_blobs_written() {
    live_append_dies_at("store.blobs-written", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_append_meta_file_written() {
    live_append_dies_at("store.meta-file-written", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_append_files_file_written() {
    live_append_dies_at("store.files-file-written", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_append_catalog_metadata_written() {
    live_append_dies_at("catalog.metadata-written", false).await;
}

/// The files commit is the append's commit point: after it the metadata is
/// rolled forward on open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_append_files_committed_rolls_the_metadata_forward() {
    live_append_dies_at("store.files-committed", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_append_meta_committed() {
    live_append_dies_at("store.meta-committed", true).await;
}

/// Each way a change can die, with the directory below `tmp` its run uses:
/// a process crash, then a power cut recording its syncs in `shadow`.
fn both_ways<'a>(tmp: &Path, shadow: &'a Path) -> [(Crash<'a>, PathBuf); 2] {
    [
        (Crash::Process, tmp.join("process")),
        (power(shadow), tmp.join("power")),
    ]
}

/// Opens the store in `data` and checks that `a` is no archive there.
async fn assert_no_archive(data: &Path, why: &str) {
    let store = Store::open(data, 1).await.unwrap();
    assert!(
        matches!(store.info("a").await, Err(StoreError::NoArchive(_))),
        "{why}"
    );
    store.close().await;
}

/// A create that dies between its namespace and its tables leaves no
/// archive any read opens; creating the id again completes it, and it takes
/// appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_create_namespace_created() {
    let tmp = tempfile::tempdir().unwrap();
    let shadow = tmp.path().join("shadow");
    for (crash, root) in both_ways(tmp.path(), &shadow) {
        let data = root.join("data");
        // Another archive first, so the catalog exists before the crash.
        ok_in(crash, &live(&data, &["create", "other"]));
        die_at(
            crash,
            "store.namespace-created",
            &live(&data, &["create", "a"]),
        );
        crash.aftermath(&data);
        assert_no_archive(&data, "a half-made archive is no archive").await;
        ok(&live(&data, &["create", "a"]));
        let (b0, files) = batch(&root, 0);
        ok(&live(&data, &["append", "a", s(&b0)]));
        let store = Store::open(&data, 1).await.unwrap();
        for (path, want) in &files {
            assert_eq!(&read(&store, path).await.unwrap(), want, "{path}");
        }
        let again = live(&data, &["create", "a"]);
        store.close().await;
        let out = znippy(&again);
        assert!(
            !out.status.success(),
            "a whole archive is not created twice"
        );
    }
}

/// A drop that dies after purging `files` has dropped the archive: no read
/// opens it, and a create of the id clears what the drop left (the `meta`
/// table's facts among it) and makes a new, empty archive with its own
/// properties, not the dropped one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_drop_table_purged() {
    let tmp = tempfile::tempdir().unwrap();
    let shadow = tmp.path().join("shadow");
    for (crash, root) in both_ways(tmp.path(), &shadow) {
        let data = root.join("data");
        let (b0, _) = batch(&root, 0);
        ok_in(crash, &live(&data, &["create", "a", "--level", "5"]));
        ok_in(
            crash,
            &live(&data, &["append", "a", s(&b0), "--meta", "x0=old=1"]),
        );
        die_at(
            crash,
            "store.drop-table-purged",
            &live(&data, &["drop", "a"]),
        );
        crash.aftermath(&data);
        assert_no_archive(&data, "a half-dropped archive is no archive").await;
        ok(&live(&data, &["create", "a", "--level", "9"]));
        let (b1, files) = batch(&root, 1);
        ok(&live(&data, &["append", "a", s(&b1)]));
        let store = Store::open(&data, 1).await.unwrap();
        let info = store.info("a").await.unwrap();
        assert_eq!((info.files, info.props.level), (2, 9), "{info:?}");
        for (path, want) in &files {
            assert_eq!(&read(&store, path).await.unwrap(), want, "{path}");
        }
        assert!(
            read(&store, "x0").await.is_err(),
            "the dropped files stay dropped"
        );
        assert!(
            !matches!(
                store.meta_by_key("a", "old").await.unwrap(),
                MetaSearch::Hits(_)
            ),
            "the dropped archive's facts are gone"
        );
        store.close().await;
    }
}

/// Builds live archive `a` in `data` from batches 0 and 1, with batch 0's
/// small file deleted when `dead` (so the seal re-packs).
fn live_for_seal(crash: Crash, data: &Path, root: &Path, dead: bool) {
    ok_in(crash, &live(data, &["create", "a"]));
    for i in 0..2 {
        let (b, _) = batch(root, i);
        ok_in(crash, &live(data, &["append", "a", s(&b)]));
    }
    if dead {
        ok_in(crash, &live(data, &["rm", "a", "x0"]));
    }
}

/// Dies at `point` while sealing, then checks the archive is still live and
/// whole, and that sealing again gives the bytes an uninterrupted seal gives.
async fn seal_dies_at(point: &str, dead: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (root, shadow) = (tmp.path(), tmp.path().join("shadow"));
    seal_crashes(Crash::Process, &root.join("process"), point, dead).await;
    seal_crashes(power(&shadow), &root.join("power"), point, dead).await;
}

async fn seal_crashes(crash: Crash<'_>, root: &Path, point: &str, dead: bool) {
    let (data, twin) = (root.join("data"), root.join("twin"));
    live_for_seal(crash, &data, root, dead);
    live_for_seal(Crash::Process, &twin, root, dead);
    let want = root.join("want.znippy");
    ok(&["seal", "--data", s(&twin), "a", "-o", s(&want)]);

    die_at(crash, point, &["seal", "--data", s(&data), "a"]);
    crash.aftermath(&data);
    {
        let store = Store::open(&data, 1).await.unwrap();
        let info = store.info("a").await.unwrap();
        assert_eq!(info.state, znippy_store::State::Live);
        assert_eq!(
            std::fs::metadata(data.join("blobs/a.znippy"))
                .unwrap()
                .len(),
            info.bytes_stored,
            "a partial in-place tail is cut off"
        );
        for i in 0..2 {
            for (path, bytes) in batch(root, i).1 {
                match read(&store, &path).await {
                    Ok(got) => assert_eq!(got, bytes, "{path}"),
                    Err(StoreError::NotFound(_)) if dead && path == "x0" => {}
                    Err(e) => panic!("{path}: {e}"),
                }
            }
        }
        store.close().await;
    }
    let got = root.join("got.znippy");
    ok(&["seal", "--data", s(&data), "a", "-o", s(&got)]);
    assert_eq!(sha(&got), sha(&want), "sealing again gives the same bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seal_in_place_tail_written() {
    seal_dies_at("seal.tail-written", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seal_repack_copy_synced() {
    seal_dies_at("seal.copy-synced", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seal_repack_renamed_before_it_is_recorded() {
    seal_dies_at("seal.renamed", true).await;
}

/// Dies at `point` in `znippy append`, then checks what `znippy recover` (or
/// nothing, once the undo file is gone) leaves: the archive before the append,
/// byte for byte, or the archive after it.
fn native_append_dies_at(point: &str, appended: bool) {
    let tmp = tempfile::tempdir().unwrap();
    native_append_crashes(Crash::Process, &tmp.path().join("process"), point, appended);
    // The archive's new bytes reach the disk, those of its undo file do not:
    // the order of the two is what the undo file's sync must get right.
    let shadow = tmp.path().join("shadow");
    let power = Crash::Power {
        shadow: &shadow,
        kept: Some("znippy"),
        unsynced: None,
    };
    native_append_crashes(power, &tmp.path().join("power"), point, appended);
}

fn native_append_crashes(crash: Crash, root: &Path, point: &str, appended: bool) {
    let (b0, _) = batch(root, 0);
    let (b1, files1) = batch(root, 1);
    // The archive alone in its directory: what the power cut applies to.
    let dir = root.join("archive");
    std::fs::create_dir(&dir).unwrap();
    let (arc, twin) = (dir.join("a.znippy"), root.join("twin.znippy"));
    ok(&["compress", s(&b0), "-o", s(&arc), "--threads", "2"]);
    if let Crash::Power { shadow, .. } = crash {
        // `compress` does not sync (neither does tar): the test starts from
        // an archive the machine has flushed.
        znippy_format::powerloss::settle(shadow, &dir).unwrap();
    }
    let before = sha(&arc);
    std::fs::copy(&arc, &twin).unwrap();
    ok(&["append", s(&twin), s(&b1), "--threads", "2"]);
    let after = sha(&twin);

    die_at(crash, point, &["append", s(&arc), s(&b1), "--threads", "2"]);
    crash.aftermath(&dir);
    let undo = znippy_format::undo_path(&arc);
    assert_eq!(undo.exists(), !appended, "the undo file");
    if !appended {
        let refused = znippy(&["list", s(&arc)]);
        assert!(!refused.status.success(), "an unfinished append is refused");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("znippy recover"));
        ok(&["recover", s(&arc)]);
    }
    ok(&["verify", s(&arc)]);
    if appended {
        assert_eq!(sha(&arc), after);
    } else {
        assert_eq!(sha(&arc), before);
        // And it takes the append again.
        ok(&["append", s(&arc), s(&b1), "--threads", "2"]);
        assert_eq!(sha(&arc), after);
    }
    let out = znippy(&["get", s(&arc), "y1"]);
    assert_eq!(out.stdout, files1["y1"]);
}

#[test]
fn native_append_undo_written() {
    native_append_dies_at("append.undo-written", false);
}

/// The archive unreadable but for the undo file.
#[test]
fn native_append_blobs_written() {
    native_append_dies_at("append.blobs-written", false);
}

#[test]
fn native_append_tail_written() {
    native_append_dies_at("append.tail-written", false);
}

/// Synced but the undo file still there: recover undoes the append, as
/// docs/format.md says.
#[test]
fn native_append_synced() {
    native_append_dies_at("append.synced", false);
}

#[test]
fn native_append_undo_removed() {
    native_append_dies_at("append.undo-removed", true);
}

/// Dies at `point` in `znippy sign`: afterwards the archive is as it was
/// before, byte for byte, or signed; never half signed.
fn sign_dies_at(point: &str, signed: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&keys)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "k.pem",
        "-out",
        "c.pem",
        "-days",
        "2",
        "-subj",
        "/CN=signer",
    ]);
    let (key, cert) = (keys.join("k.pem"), keys.join("c.pem"));
    let shadow = tmp.path().join("shadow");
    let power = Crash::Power {
        shadow: &shadow,
        kept: Some("znippy"),
        unsynced: None,
    };
    for (crash, root) in [(Crash::Process, "process"), (power, "power")] {
        let root = tmp.path().join(root);
        let (b0, _) = batch(&root, 0);
        let dir = root.join("archive");
        std::fs::create_dir(&dir).unwrap();
        let arc = dir.join("a.znippy");
        ok(&["compress", s(&b0), "-o", s(&arc), "--threads", "2"]);
        if let Crash::Power { shadow, .. } = crash {
            znippy_format::powerloss::settle(shadow, &dir).unwrap();
        }
        let before = sha(&arc);
        die_at(
            crash,
            point,
            &["sign", s(&arc), "--key", s(&key), "--cert", s(&cert)],
        );
        crash.aftermath(&dir);
        ok(&["recover", s(&arc)]);
        ok(&["verify", s(&arc)]);
        let info = String::from_utf8(znippy(&["info", s(&arc)]).stdout).unwrap();
        assert_eq!(info.contains("signatures     1,"), signed, "{info}");
        if !signed {
            assert_eq!(sha(&arc), before);
        }
    }
}

#[test]
fn sign_undo_written() {
    sign_dies_at("sign.undo-written", false);
}

#[test]
fn sign_written() {
    sign_dies_at("sign.written", false);
}

#[test]
fn sign_synced() {
    sign_dies_at("sign.synced", false);
}

#[test]
fn sign_undo_removed() {
    sign_dies_at("sign.undo-removed", true);
}

/// Creates the live archive `a` under `root/data`, appends one batch, and
/// cuts the power with the syncs of paths containing `unsynced` left out.
/// Returns the data directory as the machine finds it.
fn append_then_power_cut(root: &Path, unsynced: &str) -> PathBuf {
    let (data, shadow) = (root.join("data"), root.join("shadow"));
    let crash = Crash::Power {
        shadow: &shadow,
        kept: None,
        unsynced: Some(unsynced),
    };
    ok_in(crash, &live(&data, &["create", "a"]));
    let (b0, _) = batch(root, 0);
    ok_in(crash, &live(&data, &["append", "a", s(&b0)]));
    crash.aftermath(&data);
    data
}

/// The power cut has teeth: without the sidecar's sync, a power cut after an
/// acknowledged append takes its blobs, and the store says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_sidecar_sync_a_power_cut_loses_an_acknowledged_append() {
    let tmp = tempfile::tempdir().unwrap();
    let data = append_then_power_cut(tmp.path(), "/blobs/");
    let store = Store::open(&data, 1).await.unwrap();
    match store.info("a").await {
        Err(
            e @ StoreError::SidecarShort {
                len: 0, committed, ..
            },
        ) if committed > 0 => {
            assert!(e.to_string().contains("sidecar has 0 bytes"), "{e}")
        }
        other => panic!("the lost blobs went unnoticed: {other:?}"),
    }
    store.close().await;
}

/// Nor without the syncs of the tables' own files: the metadata files,
/// manifests and manifest lists that the store's table storage syncs as it
/// closes them come back empty, and the store refuses the archive instead
/// of answering from a table it cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_table_file_syncs_a_power_cut_is_noticed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = append_then_power_cut(tmp.path(), "/files/metadata/");
    let lost = match Store::open(&data, 1).await {
        Err(e) => e,
        Ok(store) => {
            let info = store.info("a").await;
            store.close().await;
            info.expect_err("an archive whose table files are empty opened")
        }
    };
    assert!(matches!(lost, StoreError::Iceberg(_)), "{lost:?}");
}

/// And without the undo file's sync, a power cut in the middle of a native
/// append leaves an archive nothing can restore.
#[test]
fn without_the_undo_sync_a_power_cut_breaks_the_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, shadow) = (tmp.path(), tmp.path().join("shadow"));
    let crash = Crash::Power {
        shadow: &shadow,
        kept: Some("znippy"),
        unsynced: Some(".undo"),
    };
    let (b0, _) = batch(root, 0);
    let (b1, _) = batch(root, 1);
    let dir = root.join("archive");
    std::fs::create_dir(&dir).unwrap();
    let arc = dir.join("a.znippy");
    ok(&["compress", s(&b0), "-o", s(&arc), "--threads", "2"]);
    znippy_format::powerloss::settle(&shadow, &dir).unwrap();
    die_at(
        crash,
        "append.blobs-written",
        &["append", s(&arc), s(&b1), "--threads", "2"],
    );
    crash.aftermath(&dir);
    ok(&["recover", s(&arc)]);
    let verify = znippy(&["verify", s(&arc)]);
    assert!(
        !verify.status.success(),
        "the archive survived without its undo file"
    );
}
