//! RedbCatalog against iceberg's `Catalog` contract: every method, concurrent
//! commits that must all land through retries, and a reopen from disk by a
//! process other than the one that wrote it.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use znippy_store::RedbCatalog;

fn schema() -> Schema {
    Schema::builder()
        .with_fields(vec![NestedField::required(
            1,
            "x",
            Type::Primitive(PrimitiveType::Long),
        )
        .into()])
        .build()
        .unwrap()
}

fn creation(name: &str) -> TableCreation {
    TableCreation::builder()
        .name(name.to_string())
        .schema(schema())
        .properties(HashMap::from([
            ("commit.retry.num-retries".to_string(), "50".to_string()),
            ("commit.retry.min-wait-ms".to_string(), "1".to_string()),
            ("commit.retry.max-wait-ms".to_string(), "20".to_string()),
        ]))
        .build()
}

async fn open(dir: &std::path::Path) -> RedbCatalog {
    RedbCatalog::open(&dir.join("catalog.redb"), &dir.join("warehouse"))
        .await
        .unwrap()
}

/// Checks that `ident`'s metadata directory is what a path-based reader
/// (Spark's HadoopCatalog, pyiceberg's StaticTable) follows to the current
/// version: `version-hint.text` holding `version`, and `v<version>.metadata.json`
/// the very file the catalog's pointer names.
async fn assert_path_layout(c: &RedbCatalog, ident: &TableIdent, version: u64) {
    use std::os::unix::fs::MetadataExt;
    let location = c.metadata_location(ident).await.unwrap();
    let pointer = std::path::PathBuf::from(location.trim_start_matches("file://"));
    let dir = pointer.parent().unwrap();
    let hint = std::fs::read_to_string(dir.join("version-hint.text")).unwrap();
    assert_eq!(hint, version.to_string());
    let link = std::fs::metadata(dir.join(format!("v{hint}.metadata.json"))).unwrap();
    assert_eq!(link.ino(), std::fs::metadata(&pointer).unwrap().ino());
}

fn ns(parts: &[&str]) -> NamespaceIdent {
    NamespaceIdent::from_strs(parts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_with_properties() {
    let tmp = tempfile::tempdir().unwrap();
    let c = open(tmp.path()).await;
    let a = ns(&["a"]);
    let props = HashMap::from([("owner".to_string(), "me".to_string())]);
    c.create_namespace(&a, props.clone()).await.unwrap();
    let err = c.create_namespace(&a, HashMap::new()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NamespaceAlreadyExists);
    assert_eq!(c.get_namespace(&a).await.unwrap().properties(), &props);
    c.create_namespace(&ns(&["a", "b"]), HashMap::new())
        .await
        .unwrap();
    c.create_namespace(&ns(&["c"]), HashMap::new())
        .await
        .unwrap();
    let err = c
        .create_namespace(&ns(&["x", "y"]), HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::NamespaceNotFound,
        "parent must exist"
    );
    assert_eq!(
        c.list_namespaces(None).await.unwrap(),
        vec![ns(&["a"]), ns(&["c"])]
    );
    assert_eq!(
        c.list_namespaces(Some(&a)).await.unwrap(),
        vec![ns(&["a", "b"])]
    );
    assert!(c.namespace_exists(&a).await.unwrap());
    assert!(!c.namespace_exists(&ns(&["zz"])).await.unwrap());
    let new_props = HashMap::from([("owner".to_string(), "you".to_string())]);
    c.update_namespace(&a, new_props.clone()).await.unwrap();
    assert_eq!(c.get_namespace(&a).await.unwrap().properties(), &new_props);
    let err = c.drop_namespace(&a).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "not empty");
    c.drop_namespace(&ns(&["a", "b"])).await.unwrap();
    c.drop_namespace(&a).await.unwrap();
    assert!(!c.namespace_exists(&a).await.unwrap());
    assert_eq!(
        c.get_namespace(&a).await.unwrap_err().kind(),
        ErrorKind::NamespaceNotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_create_load_list_rename_register_drop() {
    let tmp = tempfile::tempdir().unwrap();
    let c = open(tmp.path()).await;
    let a = ns(&["a"]);
    c.create_namespace(&a, HashMap::new()).await.unwrap();
    c.create_namespace(&ns(&["b"]), HashMap::new())
        .await
        .unwrap();
    let t = c.create_table(&a, creation("t")).await.unwrap();
    assert!(t.metadata_location().unwrap().ends_with(".metadata.json"));
    assert_path_layout(&c, &TableIdent::new(a.clone(), "t".into()), 0).await;
    let err = c.create_table(&a, creation("t")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TableAlreadyExists);
    c.create_table(&a, creation("u")).await.unwrap();
    let tid = TableIdent::new(a.clone(), "t".into());
    let uid = TableIdent::new(a.clone(), "u".into());
    assert_eq!(
        c.list_tables(&a).await.unwrap(),
        vec![tid.clone(), uid.clone()]
    );
    assert!(c.table_exists(&tid).await.unwrap());
    let loaded = c.load_table(&tid).await.unwrap();
    assert_eq!(loaded.metadata().uuid(), t.metadata().uuid());

    let moved = TableIdent::new(ns(&["b"]), "t2".into());
    c.rename_table(&tid, &moved).await.unwrap();
    assert!(!c.table_exists(&tid).await.unwrap());
    assert_eq!(
        c.load_table(&moved).await.unwrap().metadata().uuid(),
        t.metadata().uuid()
    );
    assert_eq!(
        c.rename_table(&tid, &moved).await.unwrap_err().kind(),
        ErrorKind::TableNotFound
    );

    let location = c
        .load_table(&uid)
        .await
        .unwrap()
        .metadata_location()
        .unwrap()
        .to_string();
    c.drop_table(&uid).await.unwrap();
    assert_eq!(
        c.load_table(&uid).await.unwrap_err().kind(),
        ErrorKind::TableNotFound
    );
    let registered = c.register_table(&uid, location.clone()).await.unwrap();
    assert_eq!(registered.metadata_location(), Some(location.as_str()));
    assert_eq!(
        c.register_table(&uid, location).await.unwrap_err().kind(),
        ErrorKind::TableAlreadyExists
    );
    c.purge_table(&uid).await.unwrap();
    assert!(!c.table_exists(&uid).await.unwrap());
    assert_eq!(
        c.drop_table(&uid).await.unwrap_err().kind(),
        ErrorKind::TableNotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_commits_all_land() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Arc::new(open(tmp.path()).await);
    let a = ns(&["a"]);
    c.create_namespace(&a, HashMap::new()).await.unwrap();
    c.create_table(&a, creation("t")).await.unwrap();
    let tid = TableIdent::new(a, "t".into());
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (c, tid) = (Arc::clone(&c), tid.clone());
        tasks.push(tokio::spawn(async move {
            let table = c.load_table(&tid).await.unwrap();
            let tx = Transaction::new(&table);
            let props = HashMap::from([("writer".to_string(), i.to_string())]);
            let action = tx.fast_append().set_snapshot_properties(props);
            action.apply(tx).unwrap().commit(c.as_ref()).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let table = c.load_table(&tid).await.unwrap();
    let snaps: Vec<_> = table.metadata().snapshots().collect();
    assert_eq!(snaps.len(), 8, "one snapshot per commit, none lost");
    let mut writers: Vec<String> = snaps
        .iter()
        .map(|s| s.summary().additional_properties["writer"].clone())
        .collect();
    writers.sort();
    assert_eq!(writers, (0..8).map(|i| i.to_string()).collect::<Vec<_>>());
    // Snapshots form one chain: every commit saw the one before it.
    let parents = snaps
        .iter()
        .filter(|s| s.parent_snapshot_id().is_none())
        .count();
    assert_eq!(parents, 1);
    assert_path_layout(&c, &tid, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_may_not_move_the_blob_end_back() {
    let tmp = tempfile::tempdir().unwrap();
    let c = open(tmp.path()).await;
    let a = ns(&["a"]);
    c.create_namespace(&a, HashMap::new()).await.unwrap();
    c.create_table(&a, creation("t")).await.unwrap();
    let tid = TableIdent::new(a, "t".into());
    let commit = |end: u64| {
        let c = &c;
        let tid = tid.clone();
        async move {
            let table = c.load_table(&tid).await.unwrap();
            let tx = Transaction::new(&table);
            let props = HashMap::from([(znippy_store::BLOB_END_KEY.to_string(), end.to_string())]);
            tx.fast_append()
                .set_snapshot_properties(props)
                .apply(tx)
                .unwrap()
                .commit(c)
                .await
        }
    };
    commit(100).await.unwrap();
    commit(100).await.unwrap();
    let err = commit(99).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DataInvalid);
    commit(200).await.unwrap();
    c.expire_snapshots(&tid, 2).await.unwrap();
    assert_eq!(
        c.load_table(&tid)
            .await
            .unwrap()
            .metadata()
            .snapshots()
            .count(),
        2
    );
    // The expiry is a version of its own, and keeps the layout current.
    assert_path_layout(&c, &tid, 4).await;
}

/// Writes a catalog in a child process, then reads it here after the child exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_reopens_after_its_writer_process_is_gone() {
    if let Ok(dir) = std::env::var("ZNIPPY_CATALOG_CHILD") {
        let c = open(std::path::Path::new(&dir)).await;
        let a = ns(&["child"]);
        c.create_namespace(&a, HashMap::from([("k".to_string(), "v".to_string())]))
            .await
            .unwrap();
        let t = c.create_table(&a, creation("t")).await.unwrap();
        let tx = Transaction::new(&t);
        let props = HashMap::from([("from".to_string(), "child".to_string())]);
        tx.fast_append()
            .set_snapshot_properties(props)
            .apply(tx)
            .unwrap()
            .commit(&c)
            .await
            .unwrap();
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_catalog_reopens_after_its_writer_process_is_gone",
            "--exact",
            "--quiet",
        ])
        .env("ZNIPPY_CATALOG_CHILD", tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    let c = open(tmp.path()).await;
    let a = ns(&["child"]);
    assert_eq!(c.get_namespace(&a).await.unwrap().properties()["k"], "v");
    let t = c.load_table(&TableIdent::new(a, "t".into())).await.unwrap();
    let snap = t.metadata().current_snapshot().unwrap();
    assert_eq!(snap.summary().additional_properties["from"], "child");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_removes_the_version_links_the_metadata_log_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let c = open(tmp.path()).await;
    let a = ns(&["a"]);
    c.create_namespace(&a, HashMap::new()).await.unwrap();
    let mut t = creation("t");
    t.properties
        .insert("write.metadata.previous-versions-max".into(), "2".into());
    c.create_table(&a, t).await.unwrap();
    let tid = TableIdent::new(a, "t".into());
    for i in 0..5 {
        let table = c.load_table(&tid).await.unwrap();
        let tx = Transaction::new(&table);
        let props = HashMap::from([("writer".to_string(), i.to_string())]);
        let action = tx.fast_append().set_snapshot_properties(props);
        action.apply(tx).unwrap().commit(&c).await.unwrap();
    }
    c.expire_snapshots(&tid, 1).await.unwrap();
    assert_path_layout(&c, &tid, 6).await;
    let dir = tmp.path().join("warehouse/a/t/metadata");
    let mut links: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('v') && n.ends_with(".metadata.json"))
        .collect();
    links.sort();
    // The current version and the two its log keeps.
    assert_eq!(
        links,
        ["v4.metadata.json", "v5.metadata.json", "v6.metadata.json"]
    );
}
