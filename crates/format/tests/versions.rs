//! Format versions: this writer writes version 9 (no lookup; a batch trie
//! for rows in path order; the pack size recorded) in every section, and
//! archives written by earlier versions still read and verify.
//!
//! `data/v1.znippy` and `data/v2.znippy` are archives written by the version-2
//! writer (`znippy compress --threads 1`, 2026-12-03) from the tree that
//! `old_tree` describes; v2 adds a link `l -> a.txt` and an empty directory `e`.
//! `data/v3.znippy` is the version-2 tree written by the version-3 writer
//! (2026-12-04), and `data/v4.znippy` the same tree by the version-4 writer
//! (`znippy compress DIR --threads 1 --chunk-size 2097152 --meta
//! a.txt=lang=en --meta-archive built=42`, 2026-12-05). `data/v5.znippy` is
//! that tree and command by the version-5 writer, and `data/v6.znippy` the
//! same with a wheel beside it, `--repo pypi` (2026-12-06); `data/v7.znippy`
//! is that tree and command by the version-7 writer, `data/v8.znippy` by the
//! version-8 writer (2026-12-07). Their bytes are pinned, so a test that
//! still passes reads the real thing.

mod common;

use std::fs;

use common::small_props;
use sha2::{Digest, Sha256};
use znippy_format::{
    append, compress, Archive, InputFile, Kind, MetaTable, MetaUpdate, MetaValue, Metadata,
    TrieState, BATCH_TRIE, LOOKUP, S_IFDIR, S_IFLNK, TRIE,
};

fn data(name: &str) -> Vec<u8> {
    fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The regular files of both old archives, in the byte order `compress` scans.
fn old_tree() -> Vec<(&'static str, Vec<u8>)> {
    let text: String = (0..3000)
        .map(|i| format!("line {i} of a text that compresses\n"))
        .collect();
    vec![
        ("a.txt", b"hello\n".to_vec()),
        ("d/b.txt", text.into_bytes()),
        ("d/dup.txt", b"hello\n".to_vec()),
        ("empty", Vec::new()),
    ]
}

fn old_meta() -> MetaTable {
    let mut meta = MetaTable::new();
    meta.set(Some("a.txt"), "lang", MetaValue::infer("en"))
        .unwrap();
    meta.set(None, "built", MetaValue::infer("42")).unwrap();
    meta
}

/// The `znippy_format_version` of every Arrow section; they must agree.
fn section_version(bytes: &[u8]) -> String {
    let a = Archive::open(bytes).unwrap();
    let mut v = None;
    let tries = [TRIE, BATCH_TRIE];
    for s in a
        .sections()
        .iter()
        .filter(|s| !tries.contains(&s.module_name.as_str()))
    {
        let sec = &bytes[s.index_offset as usize..(s.index_offset + s.index_len) as usize];
        let r = arrow_ipc::reader::FileReader::try_new(std::io::Cursor::new(sec), None).unwrap();
        let found = r.schema().metadata().get("znippy_format_version").cloned();
        assert!(v.is_none() || v == found, "every section has one version");
        v = found;
    }
    v.unwrap()
}

fn read(a: &Archive<&[u8]>, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    a.read_file(path, &mut out).unwrap();
    out
}

#[test]
fn this_writer_writes_version_9_with_or_without_links() {
    for extra in [None, Some(("l", b"a".to_vec(), S_IFLNK | 0o777))] {
        let mut files = vec![InputFile::from_bytes("a", b"x".to_vec(), Some(0o644))];
        if let Some((p, b, m)) = extra {
            files.push(InputFile::from_bytes(p, b, Some(m)));
        }
        let mut out = Vec::new();
        compress(
            &mut out,
            [files.into_iter().map(Ok)],
            small_props(),
            1,
            &Metadata::Present(old_meta()),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(section_version(&out), "9");
        let a = Archive::open(out.as_slice()).unwrap();
        assert_eq!(a.format_version(), 9);
        assert_eq!(a.props(), small_props(), "the pack size is read back");
        assert!(a.sections().iter().all(|s| s.module_name != LOOKUP));
        assert_eq!(a.trie_state(), TrieState::Batches);
    }
}

#[test]
fn archives_of_earlier_versions_read_and_verify() {
    for (name, version, sha) in [
        (
            "v1.znippy",
            1,
            "310af2d24cf9b33c027b6d06654e011f5525ae20beec5d41df397013c6b9ae18",
        ),
        (
            "v2.znippy",
            2,
            "b4aef927e1cb8828b338ba18bb49027fa4b49a007429c9b1547d12455a575b2e",
        ),
        (
            "v3.znippy",
            3,
            "fe424d6770333d162c8dc862d3cfc6444e960b2d243c987976ace094a12df8df",
        ),
        (
            "v4.znippy",
            4,
            "9e724aabae33128ef118dbdc33b5be72091b4f35417eff89e80eba503c2508ae",
        ),
        (
            "v5.znippy",
            5,
            "c156e4a86f7c35078dc19a15e1c94b6777978bb02e55f3df7768b5240d46cd52",
        ),
        (
            "v6.znippy",
            6,
            "b571dee163dfb8d2ac367f0a1d9fc4e9511ef1edb4419a50a8c48c3011f9efab",
        ),
        (
            "v7.znippy",
            7,
            "7bdc71803d7a58d25814466359ca349371079c2e76de95f98410b10602206f68",
        ),
        (
            "v8.znippy",
            8,
            "05d5c7e7a4e8f0e573a6906ed8fdb50f189575a01ccd37e38bf628ff88da784f",
        ),
    ] {
        let bytes = data(name);
        assert_eq!(format!("{:x}", Sha256::digest(&bytes)), sha, "{name}");
        let a = Archive::open(bytes.as_slice()).unwrap();
        assert_eq!(a.format_version(), version, "{name}");
        assert_eq!(section_version(&bytes), version.to_string());
        // `verify` rebuilds the tail in the archive's own version: a version-1
        // tail rebuilt as version 9 would have no lookup, a version-7 one a
        // batch trie, a version-8 one the pack size.
        let slices = match version {
            1 => 4,
            6.. => 7,
            _ => 6,
        };
        let trie = match version {
            8 => TrieState::Batches,
            _ => TrieState::Used,
        };
        assert_eq!(a.trie_state(), trie, "{name}");
        // Before version 9 a pack held up to chunk_size.
        assert_eq!(a.props().pack_size, a.props().chunk_size, "{name}");
        assert_eq!(a.verify(2).unwrap(), slices, "{name}");
        for (path, content) in old_tree() {
            assert_eq!(read(&a, path), content, "{name}: {path}");
        }
        assert_eq!(a.metadata().unwrap(), Metadata::Present(old_meta()));
        let kinds: Vec<(String, Kind)> = a
            .entries("")
            .unwrap()
            .into_iter()
            .map(|e| (e.path.clone(), e.kind().unwrap()))
            .collect();
        let mut want: Vec<(String, Kind)> = old_tree()
            .into_iter()
            .map(|(p, _)| (p.to_string(), Kind::File))
            .collect();
        if version >= 2 {
            want.insert(3, ("e".into(), Kind::Dir));
            want.push(("l".into(), Kind::Symlink));
            assert_eq!(read(&a, "l"), b"a.txt");
        }
        if version >= 6 {
            let wheel = "demo-1.0-py3-none-any.whl";
            want.insert(3, (wheel.into(), Kind::File));
            let rows: Vec<_> = a
                .packages()
                .unwrap()
                .rows()
                .map(|(k, _, r)| (k.clone(), r.path.clone()))
                .collect();
            assert_eq!(rows, [((2, "pypi".to_string()), wheel.to_string())]);
        }
        assert_eq!(kinds, want, "{name}");
    }
}

/// An append rewrites the whole tail, so a version-1 archive grown by one
/// batch is byte for byte the version-9 archive of both batches, packed as
/// the version-1 archive was.
#[test]
fn an_append_to_a_version_1_archive_writes_version_9() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("a.znippy");
    fs::write(&p, data("v1.znippy")).unwrap();
    let second = || {
        [
            Ok(InputFile::from_bytes(
                "e",
                Vec::new(),
                Some(S_IFDIR | 0o755),
            )),
            Ok(InputFile::from_bytes(
                "f.txt",
                b"new\n".to_vec(),
                Some(0o644),
            )),
        ]
    };
    // The fixture keeps the properties it was written with, whatever the
    // defaults are now, and so does the append.
    let props = Archive::open(data("v1.znippy").as_slice()).unwrap().props();
    append(&p, second(), MetaUpdate::default(), 1, &mut |_| {}).unwrap();
    let appended = fs::read(&p).unwrap();
    assert_eq!(section_version(&appended), "9");

    let first = old_tree()
        .into_iter()
        .map(|(path, b)| Ok(InputFile::from_bytes(path, b, Some(0o644))));
    let mut reference = Vec::new();
    compress(
        &mut reference,
        [first.collect::<Vec<_>>(), second().into_iter().collect()],
        props,
        2,
        &Metadata::Present(old_meta()),
        &mut |_| {},
    )
    .unwrap();
    assert!(
        appended == reference,
        "append to v1 = compress of both batches"
    );
    let a = Archive::open(appended.as_slice()).unwrap();
    assert_eq!(a.verify(1).unwrap(), 6);
    assert_eq!(read(&a, "f.txt"), b"new\n");
}
