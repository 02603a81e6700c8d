//! The live store through its public API: append, read, list, replace, delete,
//! metadata, and everything surviving a restart.

use std::collections::BTreeSet;
use std::sync::Arc;

use znippy_format::{ArchiveProps, InputFile, MetaSearch, MetaTable, MetaValue, Metadata};
use znippy_store::{ArchiveInfo, CreateOptions, State, Store, StoreError, TableKind};
use znippy_testkit::data::text;

fn file(path: &str, bytes: &[u8]) -> InputFile {
    InputFile::from_bytes(path, bytes.to_vec(), Some(0o644))
}

fn props() -> ArchiveProps {
    ArchiveProps {
        chunk_size: 64 << 10,
        pack_threshold: 16 << 10,
        pack_size: 64 << 10,
        level: 3,
    }
}

async fn create(store: &Store, id: &str, with_meta: bool) -> ArchiveInfo {
    let opts = CreateOptions {
        props: props(),
        with_meta,
        ..Default::default()
    };
    store.create(id, opts).await.unwrap()
}

async fn read(store: &Store, id: &str, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    store.read_file(id, path, &mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_read_replace_delete_and_restart() {
    let tmp = tempfile::tempdir().unwrap();
    append_read_replace_delete_and_restart_on(|| async {
        Store::open(tmp.path(), 2).await.unwrap()
    })
    .await;
}

/// The same with the tables in SeaweedFS's Iceberg REST catalog and the
/// blobs as segment objects in its S3 bucket; the archive's objects go
/// with a drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_read_replace_delete_and_restart_on_object_storage() {
    use object_store::{ObjectStore, ObjectStoreExt};
    use znippy_store::StoreOptions;
    use znippy_testkit::seaweed::Seaweed;

    let Some(server) = Seaweed::start() else {
        return;
    };
    let config = remote_config(&server);
    let open = || async {
        let remote = config.connect().await.unwrap();
        Store::open_remote(remote, StoreOptions::new(2))
            .await
            .unwrap()
    };
    append_read_replace_delete_and_restart_on(open).await;

    let remote = config.connect().await.unwrap();
    let segments = || {
        use futures::TryStreamExt;
        let prefix = remote.prefix.clone().join("a1");
        remote.blobs.list(Some(&prefix)).try_collect::<Vec<_>>()
    };
    let before = segments().await.unwrap();
    assert_eq!(before.len(), 3, "one segment per append that wrote blobs");

    // What a failed append and a half-done drop leave: objects no row
    // names. gc removes them once old enough, and nothing a row names.
    let store = open().await;
    let orphans = [
        remote.prefix.clone().join("a1").join("orphan.blobs"),
        remote.prefix.clone().join("dropped").join("x.blobs"),
    ];
    for key in &orphans {
        remote
            .blobs
            .put(key, b"lost".to_vec().into())
            .await
            .unwrap();
    }
    // And what is not the store's: a catalog whose warehouse is the blobs'
    // prefix keeps its tables below `znippy/<id>/`, beside the archives'
    // ids, and anyone may leave a file beside an archive's segments.
    let foreign = [
        remote
            .prefix
            .clone()
            .join("znippy")
            .join("a1")
            .join("files")
            .join("00001.metadata.json"),
        remote.prefix.clone().join("a1").join("notes.txt"),
    ];
    for key in &foreign {
        remote.blobs.put(key, b"{}".to_vec().into()).await.unwrap();
    }
    let young = store
        .gc(std::time::Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(young.objects, 0, "an append in flight keeps its segment");
    let old = store.gc(std::time::Duration::ZERO).await.unwrap();
    assert_eq!((old.objects, old.bytes), (2, 8));
    assert_eq!(segments().await.unwrap().len(), 4, "3 segments, notes.txt");
    for key in &foreign {
        remote.blobs.head(key).await.unwrap();
    }
    assert_eq!(read(&store, "a1", "copy").await, text(7, 300_000));

    store.drop_archive("a1").await.unwrap();
    let left: Vec<_> = segments().await.unwrap();
    assert_eq!(left.len(), 1, "the drop removed only segments: {left:?}");
    assert_eq!(left[0].location, foreign[1]);
    assert!(store.list().await.unwrap().is_empty());
    // An archive whose id is the catalog's namespace takes only its own
    // objects with it.
    create(&store, "znippy", false).await;
    store
        .append("znippy", vec![file("f", b"x")], None)
        .await
        .unwrap();
    store.drop_archive("znippy").await.unwrap();
    for key in &foreign {
        remote.blobs.head(key).await.unwrap();
    }

    // An archive made without metadata takes its first facts (the REST
    // catalog's namespace cannot record it; the meta table's snapshot does).
    create(&store, "m", false).await;
    let mut facts = MetaTable::new();
    facts.set(Some("f"), "k", MetaValue::I64(7)).unwrap();
    store
        .append("m", vec![file("f", b"x")], Some(facts))
        .await
        .unwrap();
    let reopened = open().await;
    for s in [&store, &reopened] {
        assert!(s.info("m").await.unwrap().with_meta);
        assert!(matches!(
            s.meta_by_key("m", "k").await.unwrap(),
            MetaSearch::Hits(h) if h.len() == 1
        ));
    }
}

/// The tables in SeaweedFS's catalog, the blobs in its plain bucket.
fn remote_config(server: &znippy_testkit::seaweed::Seaweed) -> znippy_store::RemoteConfig {
    use znippy_testkit::seaweed;
    znippy_store::RemoteConfig {
        catalog_uri: server.catalog.clone(),
        catalog_credential: Some(format!("{}:{}", seaweed::KEY_ID, seaweed::SECRET)),
        catalog_warehouse: Some(seaweed::TABLE_BUCKET.into()),
        warehouse: format!("s3://{}/znippy", seaweed::BUCKET),
        s3_endpoint: Some(server.s3.clone()),
        s3_credentials: Some((seaweed::KEY_ID.into(), seaweed::SECRET.into())),
    }
}

async fn append_read_replace_delete_and_restart_on<F, O>(open: F)
where
    F: Fn() -> O,
    O: std::future::Future<Output = Store>,
{
    let big = text(7, 300_000);
    {
        let store = open().await;
        let info = create(&store, "a1", false).await;
        assert_eq!((info.files, info.state), (0, State::Live));
        assert!(matches!(
            store.create("a1", CreateOptions::default()).await,
            Err(StoreError::Exists(_))
        ));
        let r = store
            .append(
                "a1",
                vec![
                    file("x.txt", b"one"),
                    file("dir/big", &big),
                    file("gone", b"bye"),
                ],
                None,
            )
            .await
            .unwrap();
        assert_eq!((r.files, r.append_seq), (3, 1));
        assert_eq!(read(&store, "a1", "dir/big").await, big);
        let r2 = store
            .append("a1", vec![file("x.txt", b"two"), file("copy", &big)], None)
            .await
            .unwrap();
        assert_eq!(r2.append_seq, 2);
        assert!(
            r2.blob_end < r.blob_end + 1000,
            "the copy of big was deduplicated"
        );
        store.delete_file("a1", "gone").await.unwrap();
        assert_eq!(read(&store, "a1", "x.txt").await, b"two");
        let names: Vec<_> = store
            .list_files("a1", "")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(names, ["copy", "dir/big", "x.txt"]);
        assert_eq!(store.stat("a1", "dir/big").await.unwrap().size, 300_000);
        assert!(matches!(
            store.stat("a1", "gone").await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(store.metadata("a1").await.unwrap(), Metadata::Absent);
    }
    // A new process would see exactly the same archive.
    let store = open().await;
    assert_eq!(store.list().await.unwrap(), ["a1"]);
    let info = store.info("a1").await.unwrap();
    assert_eq!((info.files, info.appends), (3, 3));
    assert_eq!(read(&store, "a1", "x.txt").await, b"two");
    assert_eq!(read(&store, "a1", "copy").await, big);
    assert!(matches!(
        store.stat("a1", "gone").await,
        Err(StoreError::NotFound(_))
    ));
    let r = store
        .append("a1", vec![file("after", &text(3, 50_000))], None)
        .await
        .unwrap();
    assert_eq!(r.append_seq, 4);
    assert_eq!(read(&store, "a1", "after").await, text(3, 50_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_absent_empty_and_set() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 2).await.unwrap();
    create(&store, "none", false).await;
    create(&store, "empty", true).await;
    assert_eq!(
        store.meta_by_key("none", "k").await.unwrap(),
        MetaSearch::NoSection
    );
    assert_eq!(
        store.meta_by_key("empty", "k").await.unwrap(),
        MetaSearch::NoMatch
    );
    let mut t = MetaTable::new();
    t.set(Some("f"), "lic", MetaValue::infer("MIT")).unwrap();
    t.set(None, "owner", MetaValue::infer("team")).unwrap();
    store
        .append("none", vec![file("f", b"x")], Some(t))
        .await
        .unwrap();
    let MetaSearch::Hits(h) = store.meta_by_key("none", "lic").await.unwrap() else {
        panic!()
    };
    assert_eq!(h[0].value, MetaValue::Str("MIT".into()));
    let mut t = MetaTable::new();
    t.set(Some("f"), "lic", MetaValue::infer("Apache-2.0"))
        .unwrap();
    store.append("none", vec![], Some(t)).await.unwrap();
    drop(store);
    let store = Store::open(tmp.path(), 2).await.unwrap();
    let MetaSearch::Hits(h) = store.meta_by_prefix("none", "").await.unwrap() else {
        panic!()
    };
    assert_eq!(h.len(), 2, "latest wins per (key, path)");
    assert_eq!(h[0].value, MetaValue::Str("Apache-2.0".into()));
    assert_eq!(
        store.meta_by_key("empty", "k").await.unwrap(),
        MetaSearch::NoMatch
    );
}

/// A deleted file's facts go with it: searches stop finding them, before and
/// after a restart, and the path added again later starts without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_file_removes_its_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 2).await.unwrap();
    create(&store, "m", true).await;
    let mut t = MetaTable::new();
    t.set(Some("gone"), "lic", MetaValue::infer("MIT")).unwrap();
    t.set(Some("gone"), "stars", MetaValue::infer("5")).unwrap();
    t.set(Some("kept"), "lic", MetaValue::infer("BSD")).unwrap();
    t.set(None, "owner", MetaValue::infer("team")).unwrap();
    store
        .append("m", vec![file("gone", b"1"), file("kept", b"2")], Some(t))
        .await
        .unwrap();
    store.delete_file("m", "gone").await.unwrap();
    let paths = |h: MetaSearch| match h {
        MetaSearch::Hits(h) => h.into_iter().map(|r| (r.path, r.key)).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let expect = vec![
        (None, "owner".to_string()),
        (Some("kept".to_string()), "lic".to_string()),
    ];
    let mut live = paths(store.meta_by_prefix("m", "").await.unwrap());
    live.sort();
    assert_eq!(live, expect);
    drop(store);
    let store = Store::open(tmp.path(), 2).await.unwrap();
    let mut reopened = paths(store.meta_by_prefix("m", "").await.unwrap());
    reopened.sort();
    assert_eq!(reopened, expect, "after a restart");
    store
        .append("m", vec![file("gone", b"3")], None)
        .await
        .unwrap();
    assert_eq!(
        store.meta_by_key("m", "stars").await.unwrap(),
        MetaSearch::NoMatch,
        "the path comes back bare"
    );
}

/// Found by review: a metadata step that failed after its `files` snapshot
/// committed was completed only by the next open, and a change before that
/// replaced the snapshot that named its data files, so the facts were lost
/// for good. The next change completes it first now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_metadata_step_is_completed_by_the_next_change() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    create(&store, "m", true).await;
    let fact = |v: i64| {
        let mut t = MetaTable::new();
        t.set(Some("g"), "k", MetaValue::I64(v)).unwrap();
        Some(t)
    };
    store
        .append("m", vec![file("f", b"x")], fact(1))
        .await
        .unwrap();
    // The meta table's metadata directory made unwritable, after the append
    // has loaded the table: its manifest cannot be written there.
    let dir = tmp.path().join("warehouse/znippy/m/meta/metadata");
    let aside = tmp.path().join("aside");
    std::fs::rename(&dir, &aside).unwrap();
    std::fs::write(&dir, b"").unwrap();
    let failed = store.append("m", vec![file("g", b"y")], fact(2)).await;
    assert!(matches!(failed, Err(StoreError::Commit(_))), "{failed:?}");
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&aside, &dir).unwrap();

    store
        .append("m", vec![file("h", b"z")], None)
        .await
        .unwrap();
    async fn facts(store: &Store) -> Vec<MetaValue> {
        match store.meta_by_key("m", "k").await.unwrap() {
            MetaSearch::Hits(h) => h.into_iter().map(|r| r.value).collect(),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(facts(&store).await, [MetaValue::I64(2)]);
    assert_eq!(read(&store, "m", "g").await, b"y");
    drop(store);
    let store = Store::open(tmp.path(), 1).await.unwrap();
    assert_eq!(facts(&store).await, [MetaValue::I64(2)], "after a restart");
}

/// A store that runs the built-in plugins on archives created with them.
async fn with_plugins(dir: &std::path::Path) -> Store {
    let opts = znippy_store::StoreOptions {
        plugins: znippy_plugins::builtin(),
        ..znippy_store::StoreOptions::new(1)
    };
    Store::open_with(dir, opts).await.unwrap()
}

/// A real npm tarball (`scripts/packages` downloads it).
fn npm_package(name: &str) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.packages");
    std::fs::read(dir.join(name)).expect("run ./scripts/packages")
}

/// The names of the current npm packages of archive `id`.
async fn npm_names(store: &Store, id: &str) -> Vec<String> {
    let p = store.packages(id).await.unwrap();
    p.rows()
        .map(|(_, _, r)| format!("{}={:?}", r.path, r.values[0]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_rows_commit_with_their_append_and_a_failed_step_rolls_forward() {
    let tmp = tempfile::tempdir().unwrap();
    let store = with_plugins(tmp.path()).await;
    // A second create with other options makes no table the first did not.
    let plain = CreateOptions {
        props: props(),
        ..Default::default()
    };
    store.create("p", plain.clone()).await.unwrap();
    let again = CreateOptions {
        plugins: true,
        ..plain.clone()
    };
    assert!(matches!(
        store.create("p", again.clone()).await,
        Err(StoreError::Exists(_))
    ));
    assert_eq!(store.table_names("p").await.unwrap(), ["files", "meta"]);
    store.drop_archive("p").await.unwrap();

    store.create("q", again).await.unwrap();
    let names = store.table_names("q").await.unwrap();
    assert!(names.contains(&"packages_npm".to_string()), "{names:?}");
    let tgz = |name: &str| InputFile::from_bytes(name, npm_package(name), Some(0o644));
    store
        .append("q", vec![tgz("semver-7.6.0.tgz")], None)
        .await
        .unwrap();
    // The package table's metadata directory made unwritable: the files
    // snapshot commits, the package step fails, and the append is not
    // acknowledged.
    let dir = tmp.path().join("warehouse/znippy/q/packages_npm/metadata");
    let aside = tmp.path().join("aside");
    std::fs::rename(&dir, &aside).unwrap();
    std::fs::write(&dir, b"").unwrap();
    let failed = store
        .append("q", vec![tgz("is-number-7.0.0.tgz")], None)
        .await;
    assert!(matches!(failed, Err(StoreError::Commit(_))), "{failed:?}");
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&aside, &dir).unwrap();
    // The next change rolls the rows the files snapshot named forward.
    store
        .append("q", vec![file("notes.txt", b"x")], None)
        .await
        .unwrap();
    let want = [
        r#"is-number-7.0.0.tgz=Str("is-number")"#,
        r#"semver-7.6.0.tgz=Str("semver")"#,
    ];
    assert_eq!(npm_names(&store, "q").await, want);
    // A delete retires a package's rows without a write to its table.
    store.delete_file("q", "semver-7.6.0.tgz").await.unwrap();
    assert_eq!(npm_names(&store, "q").await, want[..1]);
    drop(store);
    let store = with_plugins(tmp.path()).await;
    assert_eq!(npm_names(&store, "q").await, want[..1], "after a restart");
    // A store without the plugins reads the archive, and refuses to append.
    drop(store);
    let bare = Store::open(tmp.path(), 1).await.unwrap();
    assert_eq!(read(&bare, "q", "notes.txt").await, b"x");
    let refused = bare.append("q", vec![file("y", b"y")], None).await;
    assert!(
        matches!(refused, Err(StoreError::MissingPlugin(_))),
        "{refused:?}"
    );
}

/// A store in `dir` holding archive `a` with one file, `x`, closed again.
async fn one_file_in_a(dir: &std::path::Path) {
    let store = Store::open(dir, 1).await.unwrap();
    create(&store, "a", false).await;
    store
        .append("a", vec![file("x", &text(1, 40_000))], None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_sidecar_bytes_are_cut_off_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    one_file_in_a(tmp.path()).await;
    let sidecar = tmp.path().join("blobs/a.znippy");
    let committed = std::fs::metadata(&sidecar).unwrap().len();
    // What a crash between the blob fsync and the commit leaves behind.
    let mut bytes = std::fs::read(&sidecar).unwrap();
    bytes.extend_from_slice(&[0xAB; 5000]);
    std::fs::write(&sidecar, bytes).unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    assert_eq!(store.info("a").await.unwrap().bytes_stored, committed);
    assert_eq!(std::fs::metadata(&sidecar).unwrap().len(), committed);
    assert_eq!(read(&store, "a", "x").await, text(1, 40_000));
}

/// A data directory whose catalog is gone (removed, or cut to nothing)
/// does not open as an empty store, which would disown its tables and cut
/// a recreated id's sidecar; a damaged catalog is an error, not an abort
/// (redb's own page lengths are checked against the file before a read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_damaged_catalog_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    one_file_in_a(tmp.path()).await;
    let (db, sidecar) = (
        tmp.path().join("catalog.redb"),
        tmp.path().join("blobs/a.znippy"),
    );
    let (saved, blobs) = (
        std::fs::read(&db).unwrap(),
        std::fs::read(&sidecar).unwrap(),
    );
    for gone in [false, true] {
        if gone {
            std::fs::remove_file(&db).unwrap();
        } else {
            std::fs::write(&db, b"").unwrap();
        }
        let refused = Store::open(tmp.path(), 1).await;
        assert!(
            matches!(&refused, Err(StoreError::CatalogMissing { holding, .. }) if holding.ends_with("warehouse")),
            "{refused:?}"
        );
        assert_eq!(std::fs::read(&sidecar).unwrap(), blobs);
    }
    // A length field of redb's header made enormous.
    let mut damaged = saved.clone();
    damaged[200..208].fill(0xFF);
    std::fs::write(&db, &damaged).unwrap();
    assert!(Store::open(tmp.path(), 1).await.is_err());
    std::fs::write(&db, &saved).unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    assert_eq!(read(&store, "a", "x").await, text(1, 40_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    for bad in ["", "a.b", "../x", "a/b", &"x".repeat(65)] {
        assert!(
            matches!(
                store.create(bad, CreateOptions::default()).await,
                Err(StoreError::BadId(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        store.info("nope").await,
        Err(StoreError::NoArchive(_))
    ));
    create(&store, "a", false).await;
    store
        .append("a", vec![file("ok", b"fine")], None)
        .await
        .unwrap();
    let before = store.info("a").await.unwrap();
    let err = store
        .append("a", vec![file("new", b"n"), file("../evil", b"x")], None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Format(znippy_format::Error::InvalidPath { .. })
        ),
        "{err}"
    );
    assert_eq!(store.info("a").await.unwrap(), before, "nothing committed");
    assert!(matches!(
        store.stat("a", "new").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.delete_file("a", "missing").await,
        Err(StoreError::NotFound(_))
    ));
    let sidecar_len = std::fs::metadata(tmp.path().join("blobs/a.znippy"))
        .unwrap()
        .len();
    assert_eq!(
        sidecar_len, before.bytes_stored,
        "blobs of the failed append were cut back"
    );
}

/// Appends that arrive while a commit runs queue up and share the next one:
/// each keeps its own append number, all land, and there are fewer
/// snapshots than appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_commit_in_groups_and_all_land() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(tmp.path(), 2).await.unwrap());
    create(&store, "a", false).await;
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            store
                .append(
                    "a",
                    vec![file(&format!("f{i}"), &text(i, 20_000 + i as usize))],
                    None,
                )
                .await
        }));
    }
    let (mut seqs, mut snapshots) = (Vec::new(), std::collections::BTreeSet::new());
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        seqs.push(r.append_seq);
        snapshots.insert(r.snapshot_id);
    }
    seqs.sort();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert!(
        snapshots.len() < 8,
        "8 concurrent appends took {} commits",
        snapshots.len()
    );
    assert_eq!(store.info("a").await.unwrap().appends, 8);
    for i in 0..8u64 {
        assert_eq!(
            read(&store, "a", &format!("f{i}")).await,
            text(i, 20_000 + i as usize)
        );
    }

    // Replacing files while others commit: a replace makes the engine stale
    // while later appends are queued or committing, and none of their blobs
    // may be written over.
    let version = |i: u64, round: u64| text(100 * round + i, 5_000 + i as usize);
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for round in 1..=4 {
                let f = file(&format!("f{i}"), &version(i, round));
                store.append("a", vec![f], None).await?;
            }
            Ok::<_, StoreError>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(store.info("a").await.unwrap().appends, 8 + 32);
    for i in 0..8u64 {
        assert_eq!(read(&store, "a", &format!("f{i}")).await, version(i, 4));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_touch_no_iceberg_file() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    create(&store, "a", false).await;
    store
        .append(
            "a",
            vec![file("x", &text(1, 100_000)), file("y", b"small")],
            None,
        )
        .await
        .unwrap();
    store.info("a").await.unwrap();
    // With every table file out of reach, reads still work: they use the derived
    // lookup and the sidecar only.
    let warehouse = tmp.path().join("warehouse");
    let hidden = tmp.path().join("hidden");
    std::fs::rename(&warehouse, &hidden).unwrap();
    assert_eq!(read(&store, "a", "x").await, text(1, 100_000));
    assert_eq!(read(&store, "a", "y").await, b"small");
    assert_eq!(store.list_files("a", "").await.unwrap().len(), 2);
    assert_eq!(store.stat("a", "x").await.unwrap().size, 100_000);
    std::fs::rename(&hidden, &warehouse).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_archive_removes_its_tables_and_sidecar() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    create(&store, "a", false).await;
    store
        .append("a", vec![file("x", b"bytes")], None)
        .await
        .unwrap();
    store.drop_archive("a").await.unwrap();
    assert!(store.list().await.unwrap().is_empty());
    assert!(matches!(
        store.info("a").await,
        Err(StoreError::NoArchive(_))
    ));
    assert!(!tmp.path().join("blobs/a.znippy").exists());
    create(&store, "a", false).await;
    assert_eq!(
        store.info("a").await.unwrap().files,
        0,
        "a new archive of the same id starts empty"
    );
}

/// A drop and a create of the same id at once happen one after the other:
/// either the drop, then a new empty archive, or a create refused as
/// existing, then the drop. Before creates and drops took one lock, the
/// create remade the tables the drop was purging and answered with the old
/// archive, and the drop failed on a namespace not empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_and_a_create_of_one_id_at_once_happen_in_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 1).await.unwrap();
    let mut expected = Vec::new();
    for round in 0..8 {
        let id = format!("r{round}");
        create(&store, &id, false).await;
        store
            .append(&id, vec![file("old", b"old")], None)
            .await
            .unwrap();
        let again = CreateOptions {
            props: ArchiveProps {
                level: 9,
                ..props()
            },
            ..Default::default()
        };
        let (dropped, created) = tokio::join!(store.drop_archive(&id), store.create(&id, again));
        dropped.unwrap();
        match created {
            Ok(info) => {
                assert_eq!((info.files, info.props.level), (0, 9), "{id}: {info:?}");
                expected.push((id.clone(), true));
            }
            Err(StoreError::Exists(_)) => {
                assert!(matches!(
                    store.info(&id).await,
                    Err(StoreError::NoArchive(_))
                ));
                expected.push((id.clone(), false));
            }
            Err(e) => panic!("{id}: {e}"),
        }
        let mut out = Vec::new();
        assert!(store.read_file(&id, "old", &mut out).await.is_err(), "{id}");
    }
    drop(store);
    let store = Store::open(tmp.path(), 1).await.unwrap();
    for (id, exists) in expected {
        match store.info(&id).await {
            Ok(info) => assert!(exists && info.files == 0, "{id}: {info:?}"),
            Err(StoreError::NoArchive(_)) => assert!(!exists, "{id} is gone"),
            Err(e) => panic!("{id}: {e}"),
        }
    }
}

/// The data files and manifests `scan` of the current snapshot reads.
async fn table_files(store: &Store, id: &str, table: TableKind) -> (usize, usize, usize) {
    use futures::TryStreamExt;
    let t = store.table(id, table).await.unwrap();
    let md = t.metadata();
    let list = manifest_list(&t, md.current_snapshot().unwrap()).await;
    let mut data_files = 0;
    for m in list.entries() {
        let manifest = m.load_manifest(t.file_io()).await.unwrap();
        data_files += manifest.entries().iter().filter(|e| e.is_alive()).count();
    }
    let scan = t.scan().select_all().build().unwrap();
    let batches: Vec<_> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    (list.entries().len(), data_files, rows)
}

async fn manifest_list(
    t: &iceberg::table::Table,
    snap: &iceberg::spec::Snapshot,
) -> iceberg::spec::ManifestList {
    let bytes = t
        .file_io()
        .new_input(snap.manifest_list())
        .unwrap()
        .read()
        .await
        .unwrap();
    iceberg::spec::ManifestList::parse_with_version(&bytes, t.metadata().format_version()).unwrap()
}

/// The files a `files` table's snapshots name, by file name.
struct Kept {
    snapshots: usize,
    /// Every data file a manifest of a kept snapshot lists.
    data: BTreeSet<String>,
    /// The kept snapshots' manifest lists and the manifests they list.
    avro: BTreeSet<String>,
    /// The current metadata file and those its log names.
    logged: BTreeSet<String>,
}

async fn kept_files(store: &Store, id: &str) -> Kept {
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    let t = store.table(id, TableKind::Files).await.unwrap();
    let md = t.metadata();
    let mut kept = Kept {
        snapshots: md.snapshots().count(),
        data: BTreeSet::new(),
        avro: BTreeSet::new(),
        logged: md
            .metadata_log()
            .iter()
            .map(|m| name(&m.metadata_file))
            .chain(t.metadata_location().map(name))
            .collect(),
    };
    for snap in md.snapshots() {
        kept.avro.insert(name(snap.manifest_list()));
        let list = manifest_list(&t, snap).await;
        for m in list.entries() {
            kept.avro.insert(name(&m.manifest_path));
            let manifest = m.load_manifest(t.file_io()).await.unwrap();
            for e in manifest.entries() {
                kept.data.insert(name(e.data_file().file_path()));
            }
        }
    }
    kept
}

/// 150 appends (with replaces, deletes and metadata) leave the tables with a
/// bounded number of manifests and data files, every row still there, and the
/// same live state before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_appends_keep_the_tables_compact() {
    let tmp = tempfile::tempdir().unwrap();
    let mut want: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    // What `n` each live path holds: the last append's value; a delete takes
    // the file's facts with it.
    let mut want_n: std::collections::BTreeMap<String, i64> = Default::default();
    let mut rows_appended = 0;
    {
        let store = Store::open(tmp.path(), 2).await.unwrap();
        create(&store, "c", true).await;
        for i in 0..150u64 {
            if i % 10 == 9 {
                let victim = want.keys().nth(i as usize % want.len()).cloned().unwrap();
                store.delete_file("c", &victim).await.unwrap();
                want.remove(victim.as_str());
                want_n.remove(victim.as_str());
                rows_appended += 1;
                continue;
            }
            // Every third append replaces an earlier path.
            let path = if i % 3 == 2 {
                format!("f{}", i - 2)
            } else {
                format!("f{i}")
            };
            let bytes = text(i, 100 + i as usize);
            let mut meta = MetaTable::new();
            meta.set(Some(&path), "n", MetaValue::I64(i as i64))
                .unwrap();
            store
                .append("c", vec![file(&path, &bytes)], Some(meta))
                .await
                .unwrap();
            want_n.insert(path.clone(), i as i64);
            want.insert(path, bytes);
            rows_appended += 1;
        }
        // The tables are kept small on a task of their own: closing waits
        // for it.
        store.close().await;
        let store = Store::open(tmp.path(), 2).await.unwrap();
        let (manifests, data_files, rows) = table_files(&store, "c", TableKind::Files).await;
        assert!(manifests <= 33, "{manifests} manifests");
        assert!(data_files <= 33, "{data_files} data files");
        assert_eq!(rows, rows_appended, "compaction keeps every row");
        let (manifests, data_files, _) = table_files(&store, "c", TableKind::Meta).await;
        assert!(
            manifests <= 33 && data_files <= 33,
            "meta: {manifests} / {data_files}"
        );
        // Expiry deletes what only the dropped snapshots reached: what is
        // on disk is exactly what the snapshots kept name, and those are
        // few once nothing is due. (How many files that is depends on how
        // far the maintenance thread, below the appends' priority, fell
        // behind them; what it may leave does not.)
        let on_disk = |dir: &str, named: &dyn Fn(&str) -> bool| -> BTreeSet<String> {
            std::fs::read_dir(tmp.path().join("warehouse/znippy/c/files").join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| named(n))
                .collect()
        };
        let kept = kept_files(&store, "c").await;
        assert!(kept.snapshots <= 32, "{} snapshots kept", kept.snapshots);
        let parquet = on_disk("data", &|n| n.ends_with(".parquet"));
        assert_eq!(parquet, kept.data, "data files on disk");
        let avro = on_disk("metadata", &|n| n.ends_with(".avro"));
        assert_eq!(avro, kept.avro, "manifests and lists on disk");
        // `vN.metadata.json` are links to the metadata files for path-based
        // readers, one per version kept.
        let links = on_disk("metadata", &|n| {
            n.starts_with('v') && n.ends_with(".metadata.json")
        });
        let json = on_disk("metadata", &|n| {
            n.ends_with(".metadata.json") && !links.contains(n)
        });
        assert!(links.len() <= json.len(), "{links:?} for {json:?}");
        // More than 150 versions were written. Expiry keeps the current one
        // and the metadata log; every version written since it last ran is
        // a snapshot it has not dropped.
        assert!(
            kept.logged.is_subset(&json),
            "{:?} not on disk",
            kept.logged
        );
        assert!(
            json.len() - kept.logged.len() <= kept.snapshots,
            "{} metadata files on disk, {} logged, {} snapshots",
            json.len(),
            kept.logged.len(),
            kept.snapshots
        );
        let (parquet, avro, json) = (parquet.len(), avro.len(), json.len());
        eprintln!("on disk after 150 appends: {parquet} data files, {avro} avro, {json} metadata");
        store.close().await;
    }
    let store = Store::open(tmp.path(), 2).await.unwrap();
    let listed: Vec<String> = store
        .list_files("c", "")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(listed, want.keys().cloned().collect::<Vec<_>>());
    for (path, bytes) in &want {
        assert_eq!(&read(&store, "c", path).await, bytes, "{path}");
    }
    let MetaSearch::Hits(hits) = store.meta_by_key("c", "n").await.unwrap() else {
        panic!("metadata lost");
    };
    let mut got: Vec<(String, i64)> = hits
        .into_iter()
        .map(|h| match (h.path, h.value) {
            (Some(p), MetaValue::I64(n)) => (p, n),
            other => panic!("unexpected fact {other:?}"),
        })
        .collect();
    got.sort();
    assert_eq!(got, want_n.into_iter().collect::<Vec<_>>());
    let info = store.info("c").await.unwrap();
    assert_eq!(info.appends, 150);
}

/// Appends share one engine-memory budget: an archive whose one append could
/// never fit is refused at creation, and an append that does not fit beside
/// another waits for it (its input is not even pulled) instead of allocating,
/// up to `budget_wait`, then is refused to be sent again. A batch of facts
/// alone takes no share: it goes ahead while the budget is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_wait_for_the_engine_memory_budget() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use znippy_format::Engine;
    use znippy_store::StoreOptions;

    let tmp = tempfile::tempdir().unwrap();
    let one = Engine::memory_bound(props(), 2);
    let opts = StoreOptions {
        engine_memory: one + one / 2,
        budget_wait: std::time::Duration::from_secs(2),
        ..StoreOptions::new(2)
    };
    let store = Arc::new(Store::open_with(tmp.path(), opts).await.unwrap());
    create(&store, "a", false).await;
    create(&store, "b", false).await;
    // Level 22 with 64 MiB chunks needs far more than this budget.
    let huge = CreateOptions {
        props: ArchiveProps {
            chunk_size: 64 << 20,
            pack_threshold: 1 << 20,
            pack_size: 1 << 20,
            level: 22,
        },
        with_meta: false,
        ..Default::default()
    };
    let err = store.create("huge", huge).await.unwrap_err();
    assert!(err.to_string().contains("engine memory"), "{err}");
    assert!(matches!(
        store.info("huge").await,
        Err(StoreError::NoArchive(_))
    ));

    // `a` holds the budget while its input blocks on `release`.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let a_pulled = Arc::new(AtomicBool::new(false));
    let pulled = a_pulled.clone();
    let a_input = std::iter::once_with(move || {
        pulled.store(true, Ordering::SeqCst);
        let _ = held.recv();
        Ok(file("a.txt", b"a"))
    });
    let s = store.clone();
    let a = tokio::spawn(async move { s.append_stream("a", a_input, async { Ok(None) }).await });
    while !a_pulled.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let b_pulled = Arc::new(AtomicBool::new(false));
    let pulled = b_pulled.clone();
    let b_input = std::iter::once_with(move || {
        pulled.store(true, Ordering::SeqCst);
        Ok(file("b.txt", b"b"))
    });
    let s = store.clone();
    let b = tokio::spawn(async move { s.append_stream("b", b_input, async { Ok(None) }).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !b_pulled.load(Ordering::SeqCst),
        "b started past the budget"
    );
    assert!(!b.is_finished());
    release.send(()).unwrap();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert!(b_pulled.load(Ordering::SeqCst));
    assert_eq!(read(&store, "b", "b.txt").await, b"b");

    // `a` holds the budget again, past `b`'s patience.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let a_input = std::iter::once_with(move || {
        let _ = held.recv();
        Ok(file("a2.txt", b"a"))
    });
    let s = store.clone();
    let a = tokio::spawn(async move { s.append_stream("a", a_input, async { Ok(None) }).await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut facts = MetaTable::new();
    facts.set(Some("b.txt"), "k", MetaValue::I64(1)).unwrap();
    store.append("b", Vec::new(), Some(facts)).await.unwrap();
    let pulled = Arc::new(AtomicBool::new(false));
    let b_pulled = pulled.clone();
    let b_input = std::iter::once_with(move || {
        pulled.store(true, Ordering::SeqCst);
        Ok(file("b2.txt", b"b"))
    });
    let refused = store.append_stream("b", b_input, async { Ok(None) }).await;
    assert!(
        matches!(refused, Err(StoreError::MemoryBusy(_))),
        "{refused:?}"
    );
    assert!(
        !b_pulled.load(Ordering::SeqCst),
        "a refused input is not read"
    );
    release.send(()).unwrap();
    a.await.unwrap().unwrap();
    let MetaSearch::Hits(hits) = store.meta_by_key("b", "k").await.unwrap() else {
        panic!("the facts were not committed");
    };
    assert_eq!(hits.len(), 1);
    let mut out = Vec::new();
    assert!(store.read_file("b", "b2.txt", &mut out).await.is_err());
}

/// The path view (`version-hint.text`, `vN.metadata.json`) is derived from
/// the catalog: one left behind, as a power cut can leave it, is laid out
/// again when the archive next opens, a `vN` that names another file
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_version_hint_is_laid_out_again_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let metadata = tmp.path().join("warehouse/znippy/h/files/metadata");
    let current = {
        let store = Store::open(tmp.path(), 2).await.unwrap();
        create(&store, "h", false).await;
        for i in 0..3 {
            let name = format!("f{i}");
            store
                .append("h", vec![file(&name, b"x")], None)
                .await
                .unwrap();
        }
        store.close().await;
        std::fs::read_to_string(metadata.join("version-hint.text")).unwrap()
    };
    let stale = current.parse::<u64>().unwrap() - 1;
    std::fs::write(metadata.join("version-hint.text"), stale.to_string()).unwrap();
    let link = metadata.join(format!("v{current}.metadata.json"));
    let named = std::fs::read(&link).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::fs::write(&link, b"not the current metadata").unwrap();

    let store = Store::open(tmp.path(), 2).await.unwrap();
    assert_eq!(store.info("h").await.unwrap().files, 3);
    let hint = std::fs::read_to_string(metadata.join("version-hint.text")).unwrap();
    assert_eq!(hint, current);
    assert_eq!(std::fs::read(&link).unwrap(), named);
    store.close().await;
}

/// Two nodes, one archive: two stores on the same REST catalog and bucket
/// (as two `znippy serve` processes would be), eight clients each, all
/// appending at once. Commits that lose the race to the other node are
/// moved past it and committed again: every acknowledged file reads back
/// identical from both nodes at once, the append numbers are exactly 1..N,
/// and a delete or a fact committed on one node is what the other sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_append_to_one_archive_on_object_storage() {
    use std::collections::BTreeMap;
    use znippy_store::StoreOptions;
    use znippy_testkit::seaweed::Seaweed;

    const CLIENTS: usize = 8;
    const APPENDS: usize = 4;

    let Some(server) = Seaweed::start() else {
        return;
    };
    let config = remote_config(&server);
    let node = || async {
        let remote = config.connect().await.unwrap();
        Arc::new(
            Store::open_remote(remote, StoreOptions::new(1))
                .await
                .unwrap(),
        )
    };
    let nodes = [node().await, node().await];
    create(&nodes[0], "shared", true).await;

    let mut clients = Vec::new();
    for c in 0..2 * CLIENTS {
        let store = Arc::clone(&nodes[c % 2]);
        clients.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for a in 0..APPENDS {
                let path = format!("c{c}/a{a}");
                // Some bodies repeat across clients: dedupe across nodes.
                let body = text((c % 3 * 100 + a) as u64, 1000 + 5000 * (c % 4));
                let mut facts = MetaTable::new();
                facts
                    .set(Some(&path), "client", MetaValue::I64(c as i64))
                    .unwrap();
                let files = vec![file(&path, &body)];
                let r = store.append("shared", files, Some(facts)).await.unwrap();
                acked.push((r.append_seq, path, body));
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for c in clients {
        acked.extend(c.await.unwrap());
    }
    let mut seqs: Vec<u64> = acked.iter().map(|(s, _, _)| *s).collect();
    seqs.sort();
    let n = (2 * CLIENTS * APPENDS) as u64;
    assert_eq!(
        seqs,
        (1..=n).collect::<Vec<_>>(),
        "append numbers are dense"
    );

    for store in &nodes {
        let info = store.info("shared").await.unwrap();
        assert_eq!((info.files, info.appends), (n, n));
        for (_, path, body) in &acked {
            assert_eq!(read(store, "shared", path).await, *body, "{path}");
        }
        let MetaSearch::Hits(hits) = store.meta_by_key("shared", "client").await.unwrap() else {
            panic!("no facts");
        };
        assert_eq!(hits.len(), acked.len());
    }

    // Expiry keeps the metadata every node loads small (it runs after the
    // commits that cross its threshold, so a few may have landed since).
    let files = nodes[0].table("shared", TableKind::Files).await.unwrap();
    let snapshots = files.metadata().snapshots().count();
    assert!(snapshots <= 48, "{snapshots} snapshots after {n} appends");

    // A delete on one node, a replacement on the other: each sees both.
    nodes[0].delete_file("shared", "c0/a0").await.unwrap();
    nodes[1]
        .append("shared", vec![file("c1/a0", b"replaced")], None)
        .await
        .unwrap();
    for store in &nodes {
        let listed: BTreeMap<String, u64> = store
            .list_files("shared", "")
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.path, e.size))
            .collect();
        assert_eq!(listed.len() as u64, n - 1);
        assert!(!listed.contains_key("c0/a0"));
        assert_eq!(read(store, "shared", "c1/a0").await, b"replaced");
        assert!(matches!(
            store.meta_by_key("shared", "client").await.unwrap(),
            MetaSearch::Hits(h) if h.len() == acked.len() - 1
        ));
    }
}

/// After a restart, first uses of different archives open them side by
/// side (a listing opens them all), and first uses of one archive share
/// its one open: appends racing with the listing and with each other all
/// land, each read back whole, before and after the next restart. Two
/// opens of one archive would be two writers of one sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_uses_after_a_restart_open_each_archive_once() {
    let tmp = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..6).map(|i| format!("a{i}")).collect();
    let store = Store::open(tmp.path(), 2).await.unwrap();
    for id in &ids {
        create(&store, id, false).await;
        store
            .append(id, vec![file("first", id.as_bytes())], None)
            .await
            .unwrap();
    }
    store.close().await;

    let store = Arc::new(Store::open(tmp.path(), 2).await.unwrap());
    let mut tasks = Vec::new();
    for id in &ids {
        for n in 0..3 {
            let (store, id) = (Arc::clone(&store), id.clone());
            tasks.push(tokio::spawn(async move {
                let bytes = format!("{id}/{n}").repeat(1000);
                let f = file(&format!("f{n}"), bytes.as_bytes());
                store.append(&id, vec![f], None).await.map(|_| ())
            }));
        }
    }
    let listed = store.infos().await.unwrap();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ids
    );
    let check = |store: Arc<Store>| {
        let ids = ids.clone();
        async move {
            for info in store.infos().await.unwrap() {
                assert_eq!(info.files, 4, "{}", info.id);
            }
            for id in &ids {
                assert_eq!(read(&store, id, "first").await, id.as_bytes());
                for n in 0..3 {
                    let want = format!("{id}/{n}").repeat(1000);
                    assert_eq!(read(&store, id, &format!("f{n}")).await, want.as_bytes());
                }
            }
        }
    };
    check(Arc::clone(&store)).await;
    Arc::into_inner(store).unwrap().close().await;
    let store = Arc::new(Store::open(tmp.path(), 2).await.unwrap());
    check(Arc::clone(&store)).await;
}
