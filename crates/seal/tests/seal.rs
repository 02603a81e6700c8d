//! Seal: byte identity with a one-shot compress (in place and re-packed), the
//! ordinary reader on the result, immutability, and a crash in the middle.

mod common;

use std::path::Path;

use common::text;

use sha2::{Digest, Sha256};
use znippy_format::{compress, Archive, ArchiveProps, InputFile, MetaTable, MetaValue, Metadata};
use znippy_seal::seal;
use znippy_store::{CreateOptions, State, Store, StoreError};

fn props() -> ArchiveProps {
    ArchiveProps {
        chunk_size: 64 << 10,
        pack_threshold: 16 << 10,
        pack_size: 64 << 10,
        level: 3,
    }
}

type Batch = Vec<(&'static str, Vec<u8>)>;

fn inputs(b: &Batch) -> Vec<InputFile> {
    b.iter()
        .map(|(p, d)| InputFile::from_bytes(*p, d.clone(), Some(0o644)))
        .collect()
}

fn one_shot(batches: &[Batch], meta: &Metadata) -> Vec<u8> {
    let mut out = Vec::new();
    let b: Vec<Vec<_>> = batches
        .iter()
        .map(|b| inputs(b).into_iter().map(Ok).collect())
        .collect();
    compress(&mut out, b, props(), 2, meta, &mut |_| {}).unwrap();
    out
}

fn sha(p: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(p).unwrap()).to_vec()
}

fn batch_a() -> Batch {
    vec![
        ("big1", text(1, 200_000)),
        ("big2", text(2, 150_000)),
        ("small/x", text(3, 3000)),
        ("small/y", text(4, 5000)),
        ("same", text(3, 3000)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_seal_equals_one_shot_compress() {
    let tmp = tempfile::tempdir().unwrap();
    let b: Batch = vec![
        ("c/new", text(5, 90_000)),
        ("dup-of-big1", text(1, 200_000)),
    ];
    let mut meta = MetaTable::new();
    meta.set(Some("big1"), "lic", MetaValue::infer("MIT"))
        .unwrap();
    {
        let store = Store::open(tmp.path(), 2).await.unwrap();
        store
            .create(
                "a",
                CreateOptions {
                    props: props(),
                    with_meta: false,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        store
            .append("a", inputs(&batch_a()), Some(meta.clone()))
            .await
            .unwrap();
    }
    let store = Store::open(tmp.path(), 2).await.unwrap();
    store.append("a", inputs(&b), None).await.unwrap();
    let r = seal(&store, "a", None).await.unwrap();
    assert!(r.in_place);
    assert_eq!(r.repack, znippy_format::RepackStats::default());
    let expected = one_shot(&[batch_a(), b.clone()], &Metadata::Present(meta));
    assert_eq!(
        sha(r.at.file().unwrap()),
        Sha256::digest(&expected).to_vec(),
        "byte-identical"
    );
    let a = Archive::open(std::fs::File::open(r.at.file().unwrap()).unwrap()).unwrap();
    assert_eq!(a.verify(2).unwrap(), a.row_count());
    let mut got = Vec::new();
    a.read_file("dup-of-big1", &mut got).unwrap();
    assert_eq!(got, text(1, 200_000));
}

/// A live archive created before `pack_size` existed has no
/// `znippy.pack_size` in its namespace; it packs up to `chunk_size` as it
/// did then, so its seal is what compress made of its files then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_archive_from_before_pack_size_packs_up_to_chunk_size() {
    use iceberg::{Catalog, NamespaceIdent};

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Chunks above the default pack size, so that packing up to chunk_size
    // and taking the default tell apart.
    let then = ArchiveProps {
        chunk_size: 1 << 20,
        pack_size: 1 << 20,
        ..props()
    };
    let small_packs = ArchiveProps {
        pack_size: 32 << 10,
        ..then
    };
    let store = Store::open(dir, 2).await.unwrap();
    let opts = CreateOptions {
        props: small_packs,
        with_meta: false,
        ..Default::default()
    };
    store.create("a", opts).await.unwrap();
    store.close().await;
    {
        let catalog =
            znippy_store::RedbCatalog::open(&dir.join("catalog.redb"), &dir.join("warehouse"))
                .await
                .unwrap();
        let ns = NamespaceIdent::from_strs(["znippy", "a"]).unwrap();
        let mut p = catalog
            .get_namespace(&ns)
            .await
            .unwrap()
            .properties()
            .clone();
        assert_eq!(p.remove("znippy.pack_size"), Some((32 << 10).to_string()));
        catalog.update_namespace(&ns, p).await.unwrap();
    }
    let store = Store::open(dir, 2).await.unwrap();
    assert_eq!(store.info("a").await.unwrap().props, then);
    // 600,000 bytes: one pack up to chunk_size, two of the default 512 KiB.
    let files: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("s{i:02}"), text(60 + i, 15_000)))
        .collect();
    let batch = || -> Vec<InputFile> {
        files
            .iter()
            .map(|(p, d)| InputFile::from_bytes(p.as_str(), d.clone(), Some(0o644)))
            .collect()
    };
    store.append("a", batch(), None).await.unwrap();
    let r = seal(&store, "a", None).await.unwrap();
    let sealed = std::fs::read(r.at.file().unwrap()).unwrap();
    let mut then_compressed = Vec::new();
    let b = vec![batch().into_iter().map(Ok).collect::<Vec<_>>()];
    compress(
        &mut then_compressed,
        b,
        then,
        2,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    assert!(sealed == then_compressed, "as compress packed then");
    let a = Archive::open(sealed.as_slice()).unwrap();
    assert_eq!(a.props().pack_size, 1 << 20);
    let rows = a.data_rows().unwrap();
    assert!(
        rows.iter().all(|r| r.blob_offset == rows[0].blob_offset),
        "one pack"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repacked_seal_after_replace_and_delete_equals_one_shot_of_the_live_files() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 2).await.unwrap();
    store
        .create(
            "a",
            CreateOptions {
                props: props(),
                with_meta: false,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store.append("a", inputs(&batch_a()), None).await.unwrap();
    let b: Batch = vec![("big1", text(9, 120_000)), ("z", text(8, 70_000))];
    store.append("a", inputs(&b), None).await.unwrap();
    store.delete_file("a", "big2").await.unwrap();
    let r = seal(&store, "a", None).await.unwrap();
    assert!(!r.in_place, "dead rows force a re-pack");
    let live_a: Batch = batch_a()
        .into_iter()
        .filter(|(p, _)| *p != "big1" && *p != "big2")
        .collect();
    let expected = one_shot(&[live_a, b], &Metadata::Absent);
    assert_eq!(
        sha(r.at.file().unwrap()),
        Sha256::digest(&expected).to_vec(),
        "byte-identical"
    );
    assert!(
        !tmp.path().join("blobs/a.znippy").exists(),
        "the old sidecar is gone"
    );
    let mut got = Vec::new();
    store.read_file("a", "big1", &mut got).await.unwrap();
    assert_eq!(got, text(9, 120_000), "reads now come from the sealed file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_archive_is_immutable_and_sealing_again_is_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), 2).await.unwrap();
    for (id, with_meta) in [("none", false), ("empty", true)] {
        store
            .create(
                id,
                CreateOptions {
                    props: props(),
                    with_meta,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        store.append(id, inputs(&batch_a()), None).await.unwrap();
        let first = seal(&store, id, None).await.unwrap();
        assert_eq!(
            seal(&store, id, None).await.unwrap(),
            first,
            "a second seal returns the same result"
        );
        assert!(matches!(
            store.append(id, inputs(&batch_a()), None).await,
            Err(StoreError::Sealed(_))
        ));
        assert!(matches!(
            store.delete_file(id, "big1").await,
            Err(StoreError::Sealed(_))
        ));
        assert_eq!(store.info(id).await.unwrap().state, State::Sealed);
        let a = Archive::open(std::fs::File::open(first.at.file().unwrap()).unwrap()).unwrap();
        let md = a.metadata().unwrap();
        match with_meta {
            false => assert_eq!(md, Metadata::Absent, "no metadata stays no metadata"),
            true => assert_eq!(md, Metadata::Present(MetaTable::new()), "empty stays empty"),
        }
    }
    drop(store);
    let store = Store::open(tmp.path(), 2).await.unwrap();
    assert_eq!(
        store.info("none").await.unwrap().state,
        State::Sealed,
        "sealed survives a restart"
    );
    let mut got = Vec::new();
    store.read_file("none", "small/y", &mut got).await.unwrap();
    assert_eq!(got, text(4, 5000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_cut_short_is_redone_with_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let expected = one_shot(&[batch_a()], &Metadata::Absent);
    {
        let store = Store::open(tmp.path(), 2).await.unwrap();
        store
            .create(
                "a",
                CreateOptions {
                    props: props(),
                    with_meta: false,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        store.append("a", inputs(&batch_a()), None).await.unwrap();
    }
    // What a crash halfway through writing the tail leaves: half a tail after
    // the committed blobs, and the catalog still saying "live".
    let sidecar = tmp.path().join("blobs/a.znippy");
    let blob_end = std::fs::metadata(&sidecar).unwrap().len() as usize;
    let mut partial = std::fs::read(&sidecar).unwrap();
    partial.extend_from_slice(&expected[blob_end..blob_end + (expected.len() - blob_end) / 2]);
    std::fs::write(&sidecar, partial).unwrap();
    let store = Store::open(tmp.path(), 2).await.unwrap();
    assert_eq!(store.info("a").await.unwrap().state, State::Live);
    let r = seal(&store, "a", None).await.unwrap();
    assert_eq!(std::fs::read(r.at.file().unwrap()).unwrap(), expected);
}

/// A re-packing seal killed at any point leaves a partial file, or a complete
/// one the catalog does not know of yet: the archive stays live and readable,
/// and sealing again writes the canonical bytes over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repack_cut_short_is_redone_with_the_same_bytes() {
    use common::{append_of, cli_reference, play, Step};
    let tmp = tempfile::tempdir().unwrap();
    let steps = vec![
        append_of(&[
            ("a", text(1, 3000)),
            ("d", text(2, 3000)),
            ("b", text(3, 3000)),
        ]),
        Step::Delete("d".into()),
    ];
    let expected = cli_reference(tmp.path(), props(), &steps);
    drop(play(tmp.path(), props(), &steps).await);
    let sealed = tmp.path().join("store/sealed");
    std::fs::create_dir_all(&sealed).unwrap();
    std::fs::write(
        sealed.join("a.znippy.partial"),
        &expected[..expected.len() / 3],
    )
    .unwrap();
    std::fs::write(
        sealed.join("a.znippy"),
        b"a seal that renamed but never committed",
    )
    .unwrap();
    let store = Store::open(&tmp.path().join("store"), 2).await.unwrap();
    assert_eq!(store.info("a").await.unwrap().state, State::Live);
    let mut got = Vec::new();
    store.read_file("a", "b", &mut got).await.unwrap();
    assert_eq!(
        got,
        text(3, 3000),
        "the live archive reads from its sidecar"
    );
    let r = seal(&store, "a", None).await.unwrap();
    assert!(!r.in_place);
    assert_eq!(std::fs::read(r.at.file().unwrap()).unwrap(), expected);
    assert!(!sealed.join("a.znippy.partial").exists());
}
