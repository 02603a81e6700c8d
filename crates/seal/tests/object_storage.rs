//! Seal on object storage (SeaweedFS's REST catalog and S3 API): the sealed
//! object holds the same bytes as the CLI's reference and as a seal in a
//! data directory; it is published once, whichever node seals, and every
//! node reads from it; a seal that loses to another node's commit leaves
//! nothing behind; a node that signs its seals signs that same archive.

mod common;

use std::sync::Arc;

use common::{append_of, cli_reference, play_on, text, Step};
use futures::TryStreamExt;
use object_store::ObjectStore;
use sha2::{Digest, Sha256};
use znippy_format::{
    signed_content, Archive, ArchiveProps, InputFile, MetaSearch, MetaTable, MetaValue, ReadAt,
};
use znippy_seal::seal;
use znippy_sign::Signer;
use znippy_store::{Remote, RemoteConfig, SealedAt, State, Store, StoreError, StoreOptions};
use znippy_testkit::pki::Pki;
use znippy_testkit::seaweed::{self, Seaweed};

fn props() -> ArchiveProps {
    ArchiveProps {
        chunk_size: 64 << 10,
        pack_threshold: 16 << 10,
        pack_size: 64 << 10,
        level: 3,
    }
}

fn config(server: &Seaweed) -> RemoteConfig {
    RemoteConfig {
        catalog_uri: server.catalog.clone(),
        catalog_credential: Some(format!("{}:{}", seaweed::KEY_ID, seaweed::SECRET)),
        catalog_warehouse: Some(seaweed::TABLE_BUCKET.into()),
        warehouse: format!("s3://{}/sealing", seaweed::BUCKET),
        s3_endpoint: Some(server.s3.clone()),
        s3_credentials: Some((seaweed::KEY_ID.into(), seaweed::SECRET.into())),
    }
}

async fn node(remote: &Remote) -> Arc<Store> {
    Arc::new(
        Store::open_remote(remote.clone(), StoreOptions::new(2))
            .await
            .unwrap(),
    )
}

/// The sealed archive's bytes, as the store serves them.
async fn sealed_bytes(store: &Store, id: &str) -> Vec<u8> {
    let sealed = store.open_sealed(id).await.unwrap().expect("sealed");
    let mut out = vec![0; sealed.len as usize];
    tokio::task::block_in_place(|| sealed.source.read_exact_at(&mut out, 0)).unwrap();
    out
}

/// The objects under archive `id`'s prefix: its segments and sealed files.
async fn objects(remote: &Remote, id: &str) -> (usize, Vec<String>) {
    let listed: Vec<_> = remote
        .blobs
        .list(Some(&remote.prefix.clone().join(id)))
        .try_collect()
        .await
        .unwrap();
    let names: Vec<String> = listed
        .iter()
        .filter_map(|o| o.location.filename().map(str::to_string))
        .collect();
    let sealed = names
        .iter()
        .filter(|n| n.starts_with("sealed-"))
        .cloned()
        .collect();
    (names.len(), sealed)
}

/// Two histories: one with nothing replaced (a data directory seals it in
/// place), one with replacements, a delete and a copy (both re-pack).
fn histories() -> [(&'static str, Vec<Step>); 2] {
    let clean = vec![
        append_of(&[
            ("big", text(1, 200_000)),
            ("small/x", text(2, 3000)),
            ("small/y", text(3, 5000)),
        ]),
        append_of(&[("copy-of-big", text(1, 200_000)), ("z", text(4, 70_000))]),
    ];
    let edited = vec![
        append_of(&[
            ("big", text(5, 200_000)),
            ("small/x", text(6, 3000)),
            ("gone", text(7, 9000)),
        ]),
        append_of(&[("small/x", text(8, 4000)), ("more", text(9, 40_000))]),
        Step::Delete("gone".into()),
        append_of(&[("big", text(10, 120_000))]),
    ];
    [("clean", clean), ("edited", edited)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_on_object_storage_is_the_canonical_archive() {
    let Some(server) = Seaweed::start() else {
        return;
    };
    let remote = config(&server).connect().await.unwrap();
    let nodes = [node(&remote).await, node(&remote).await];
    let tmp = tempfile::tempdir().unwrap();
    let local = Store::open(&tmp.path().join("store"), 2).await.unwrap();

    for (id, steps) in histories() {
        play_on(&nodes[0], id, props(), &steps).await;
        play_on(&local, id, props(), &steps).await;
        let reference = cli_reference(tmp.path(), props(), &steps);

        let embedded = seal(&local, id, None).await.unwrap();
        let r = seal(&nodes[0], id, None).await.unwrap();
        assert!(!r.in_place, "{id}: a segment takes no tail");
        if id == "clean" {
            assert_eq!(
                r.repack.blobs_rebuilt, 0,
                "{id}: every blob is copied: {:?}",
                r.repack
            );
        }
        assert!(
            matches!(&r.at, SealedAt::Object(k) if k.filename().is_some_and(|n| n.starts_with("sealed-")))
        );
        let bytes = sealed_bytes(&nodes[0], id).await;
        assert_eq!(
            Sha256::digest(&bytes),
            Sha256::digest(&reference),
            "{id}: the sealed object is what compress then append make"
        );
        assert_eq!(
            bytes,
            sealed_bytes(&local, id).await,
            "{id}: as in a data directory"
        );
        assert_eq!((r.size, r.identity), (embedded.size, embedded.identity));

        // Sealed once: again, or from the other node, the same object.
        assert_eq!(seal(&nodes[0], id, None).await.unwrap().at, r.at);
        let other = seal(&nodes[1], id, None).await.unwrap();
        assert_eq!((other.at, other.identity), (r.at.clone(), r.identity));
        assert_eq!(objects(&remote, id).await.1.len(), 1);

        // Every node reads from it, and takes no change.
        for store in &nodes {
            assert_eq!(store.info(id).await.unwrap().state, State::Sealed);
            let mut out = Vec::new();
            store.read_file(id, "small/x", &mut out).await.unwrap();
            assert_eq!(
                out,
                if id == "clean" {
                    text(2, 3000)
                } else {
                    text(8, 4000)
                }
            );
            let more = vec![InputFile::from_bytes("late", b"late".to_vec(), None)];
            assert!(matches!(
                store.append(id, more, None).await,
                Err(StoreError::Sealed(_))
            ));
            assert!(matches!(
                store.delete_file(id, "small/x").await,
                Err(StoreError::Sealed(_))
            ));
        }
        assert_eq!(sealed_bytes(&nodes[1], id).await, bytes);
    }

    // Once sealed, the segments are garbage and the sealed object is not;
    // a drop removes it.
    assert!(objects(&remote, "edited").await.0 > 1);
    nodes[1].gc(std::time::Duration::ZERO).await.unwrap();
    for id in ["clean", "edited"] {
        let (all, sealed) = objects(&remote, id).await;
        assert_eq!((all, sealed.len()), (1, 1), "{id}");
    }
    let mut out = Vec::new();
    nodes[0].read_file("edited", "big", &mut out).await.unwrap();
    assert_eq!(out, text(10, 120_000));
    nodes[0].drop_archive("edited").await.unwrap();
    assert_eq!(objects(&remote, "edited").await.0, 0);
}

/// A node that signs its seals (`serve --sign-key`), on object storage: the
/// sealed object is the canonical archive up to its signed length, then its
/// signature, which znippy and openssl both check against the CA; sealed
/// again, the receipt read back from the object names the same signer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_seal_on_object_storage_signs_the_canonical_archive() {
    let Some(server) = Seaweed::start() else {
        return;
    };
    let pki = Pki::new();
    let signer = Signer::from_files(&pki.path("p256.key"), &pki.path("p256.pem"), None).unwrap();
    let signer = Some(Arc::new(signer));
    let ca = std::fs::read(pki.path("ca.pem")).unwrap();
    let anchors = znippy_sign::certificates_from_pem(&ca).unwrap();
    let remote = config(&server).connect().await.unwrap();
    let store = node(&remote).await;
    let tmp = tempfile::tempdir().unwrap();

    for (id, steps) in histories() {
        play_on(&store, id, props(), &steps).await;
        let reference = cli_reference(tmp.path(), props(), &steps);
        let r = seal(&store, id, signer.clone()).await.unwrap();
        assert_eq!(r.signer.as_deref(), Some("CN=p256 signer"), "{id}");

        let bytes = sealed_bytes(&store, id).await;
        let archive = Archive::open(&bytes[..]).unwrap();
        assert_eq!(archive.signed_len(), reference.len() as u64, "{id}");
        assert_eq!(
            Sha256::digest(&bytes[..reference.len()]),
            Sha256::digest(&reference),
            "{id}: what is signed is what compress then append make"
        );
        assert_eq!(r.size, bytes.len() as u64);
        let identity = archive.identity().unwrap();
        assert_eq!(identity, r.identity);
        assert_eq!(
            identity,
            Archive::open(&reference[..]).unwrap().identity().unwrap()
        );
        let content = signed_content(&identity);
        let signatures = archive.signatures().unwrap();
        assert_eq!(signatures.len(), 1, "{id}");
        let checked = znippy_sign::verify(
            &signatures[0],
            &content,
            Some(&anchors),
            std::time::SystemTime::now(),
        )
        .unwrap();
        assert!(checked[0].trusted, "{id}");
        assert!(pki.openssl_accepts(&signatures[0], &content), "{id}");

        let again = seal(&store, id, None).await.unwrap();
        assert_eq!((again.at, again.signer), (r.at, r.signer), "{id}");
    }
}

/// Two nodes seal at once: one object is published and both return it. A
/// seal planned before another node's append does not commit, removes what
/// it wrote, and the next seal holds the append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seals_race_on_a_shared_catalog() {
    let Some(server) = Seaweed::start() else {
        return;
    };
    let remote = config(&server).connect().await.unwrap();
    let nodes = [node(&remote).await, node(&remote).await];
    let steps = vec![append_of(&[("a", text(1, 90_000)), ("b", text(2, 5000))])];
    play_on(&nodes[0], "race", props(), &steps).await;
    let (one, two) = tokio::join!(seal(&nodes[0], "race", None), seal(&nodes[1], "race", None));
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!((&one.at, one.identity), (&two.at, two.identity));
    assert_eq!(
        objects(&remote, "race").await.1.len(),
        1,
        "the loser's copy went"
    );

    play_on(&nodes[0], "late", props(), &steps).await;
    let (guard, plan) = nodes[0].begin_seal("late").await.unwrap();
    let late = vec![InputFile::from_bytes("c", text(3, 7000), Some(0o644))];
    nodes[1].append("late", late, None).await.unwrap();
    let mut out = plan.create_sealed().unwrap();
    std::io::Write::write_all(&mut out, b"a seal planned before the append").unwrap();
    let stale = tokio::task::block_in_place(|| out.finish()).unwrap();
    let e = nodes[0].finish_seal(guard, &plan, stale).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert!(objects(&remote, "late").await.1.is_empty());
    let mut facts = MetaTable::new();
    facts.set(Some("a"), "k", MetaValue::I64(1)).unwrap();
    nodes[0]
        .append("late", Vec::new(), Some(facts))
        .await
        .unwrap();
    seal(&nodes[0], "late", None).await.unwrap();
    // Node 1 learns of the seal on a read of a file, and of node 0's facts
    // with it: they are final.
    let mut c = Vec::new();
    nodes[1].read_file("late", "c", &mut c).await.unwrap();
    assert_eq!(c, text(3, 7000));
    assert!(matches!(
        nodes[1].meta_by_key("late", "k").await.unwrap(),
        MetaSearch::Hits(h) if h.len() == 1
    ));
    assert_eq!(nodes[1].info("late").await.unwrap().files, 3);
}
