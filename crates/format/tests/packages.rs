//! Package sections (docs/format.md, 6.5) through a plugin of the test's own:
//! written by compress and append alike, byte for byte, whatever the thread
//! count; carried forward, replaced and dropped with their files; verified;
//! absent (and the archive version 5, as before) when no file is a package.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use znippy_format::{
    append_with, compress, compress_with, Archive, ArchiveProps, Column, ColumnType, InputFile,
    MetaUpdate, Metadata, Outcome, Plugin, Plugins, Value, Window,
};

/// Claims `*.pkg`: `name=N version=V` gives a row, `bad` a damaged one,
/// `none` no row; `twice` two rows.
struct Text;

impl Plugin for Text {
    fn name(&self) -> &'static str {
        "text"
    }
    fn pkg_type(&self) -> i8 {
        7
    }
    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("name", ColumnType::Str),
            Column::new("size_hint", ColumnType::I64),
            Column::new("words", ColumnType::StrList),
            Column::new("pairs", ColumnType::StrMap),
        ]
    }
    fn matches_path(&self, path: &str) -> bool {
        path.ends_with(".pkg")
    }
    fn extract(&self, file: &Window) -> Outcome {
        let text = String::from_utf8_lossy(file.head()).to_string();
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let pairs: Vec<(String, String)> = words
            .iter()
            .filter_map(|w| w.split_once('=').map(|(k, v)| (k.into(), v.into())))
            .collect();
        match text.as_str() {
            "bad" => Outcome::Damaged("bad by design".into()),
            "panic" => panic!("a plugin bug"),
            "none" => Outcome::NotAPackage,
            "twice" => Outcome::Package(vec![
                vec![
                    Value::Str("one".into()),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                ],
                vec![
                    Value::Str("two".into()),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                ],
            ]),
            _ => Outcome::Package(vec![vec![
                Value::opt_str(
                    pairs
                        .iter()
                        .find(|(k, _)| k == "name")
                        .map(|(_, v)| v.clone()),
                ),
                Value::I64(file.len() as i64),
                Value::List(words),
                Value::Map(pairs),
            ]]),
        }
    }
}

fn plugins(repo: &str) -> Plugins {
    Plugins::new(vec![Arc::new(Text)], repo).unwrap()
}

fn file(path: &str, bytes: &[u8]) -> znippy_format::Result<InputFile> {
    Ok(InputFile::from_bytes(path, bytes.to_vec(), Some(0o644)))
}

fn batch1() -> Vec<znippy_format::Result<InputFile>> {
    vec![
        file("a.pkg", b"name=a version=1"),
        file("b.txt", b"plain"),
        file("c.pkg", b"bad"),
        file("d.pkg", b"none"),
        file("e.pkg", b"twice"),
    ]
}

fn batch2() -> Vec<znippy_format::Result<InputFile>> {
    vec![
        file("a.pkg", b"name=a version=2"),
        file("e.pkg", b"no longer twice"),
        file("f.pkg", b"name=f"),
    ]
}

fn compressed(batches: Vec<Vec<znippy_format::Result<InputFile>>>, threads: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let p = plugins("central");
    compress_with(
        &mut out,
        batches,
        ArchiveProps::default(),
        threads,
        &Metadata::Absent,
        &p,
        &mut |_| {},
    )
    .unwrap();
    out
}

fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

#[test]
fn package_rows_are_written_read_and_verified() {
    let bytes = compressed(vec![batch1()], 2);
    let a = Archive::open(bytes).unwrap();
    assert_eq!(a.format_version(), 9);
    a.verify(2).unwrap();
    let packages = a.packages().unwrap();
    let rows: Vec<_> = packages.rows().collect();
    let paths: Vec<&str> = rows.iter().map(|(_, _, r)| r.path.as_str()).collect();
    // Write order; no row for the file that was no package after all.
    assert_eq!(paths, ["a.pkg", "c.pkg", "e.pkg", "e.pkg"]);
    let (key, table, a_row) = rows[0];
    assert_eq!(key, &(7, "central".to_string()));
    assert_eq!(table.name, "text");
    assert_eq!(a_row.values[0], Value::Str("a".into()));
    assert_eq!(a_row.values[1], Value::I64(16));
    assert_eq!(
        a_row.values[3],
        Value::Map(vec![
            ("name".into(), "a".into()),
            ("version".into(), "1".into())
        ])
    );
    assert_eq!(rows[1].2.error.as_deref(), Some("bad by design"));
    assert!(rows[1].2.values.iter().all(|v| *v == Value::Null));
}

/// SHA-256 of the two batches compressed with the test's plugin: a change
/// to the package sections' bytes shows here first.
const PINNED: &str = "a4f792951a397e24b153a55de102b0372eab3a0b9f610b370a30638a42d13472";

#[test]
fn the_bytes_do_not_depend_on_the_thread_count() {
    let one = sha(&compressed(vec![batch1(), batch2()], 1));
    assert_eq!(one, PINNED);
    for threads in [2, 8] {
        assert_eq!(sha(&compressed(vec![batch1(), batch2()], threads)), one);
    }
}

#[test]
fn compress_of_two_batches_is_compress_then_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.znippy");
    std::fs::write(&path, compressed(vec![batch1()], 2)).unwrap();
    append_with(
        &path,
        batch2(),
        MetaUpdate::default(),
        2,
        &plugins("central"),
        &mut |_| {},
    )
    .unwrap();
    let appended = std::fs::read(&path).unwrap();
    assert_eq!(
        sha(&appended),
        sha(&compressed(vec![batch1(), batch2()], 2))
    );

    // The new a.pkg's row replaced the old one, e.pkg's two became one, and
    // c.pkg's carried forward.
    let a = Archive::open(appended).unwrap();
    a.verify(2).unwrap();
    let p = a.packages().unwrap();
    let rows: Vec<(String, Value)> = p
        .rows()
        .map(|(_, _, r)| (r.path.clone(), r.values[0].clone()))
        .collect();
    assert_eq!(
        rows,
        [
            ("c.pkg".into(), Value::Null),
            ("a.pkg".into(), Value::Str("a".into())),
            ("e.pkg".into(), Value::Null),
            ("f.pkg".into(), Value::Str("f".into())),
        ]
    );
}

#[test]
fn a_package_replaced_by_a_plain_file_loses_its_row_and_without_packages_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.znippy");
    std::fs::write(
        &path,
        compressed(vec![vec![file("a.pkg", b"name=a"), file("b.txt", b"x")]], 1),
    )
    .unwrap();
    append_with(
        &path,
        vec![file("a.pkg", b"none")],
        MetaUpdate::default(),
        1,
        &plugins("central"),
        &mut |_| {},
    )
    .unwrap();
    let a = Archive::open(std::fs::read(&path).unwrap()).unwrap();
    assert!(a.packages().unwrap().is_empty());
    // No package left: the bytes compress without plugins writes.
    assert_eq!(a.format_version(), 9);
    let plain = |batches: Vec<Vec<znippy_format::Result<InputFile>>>| {
        let mut out = Vec::new();
        compress(
            &mut out,
            batches,
            ArchiveProps::default(),
            1,
            &Metadata::Absent,
            &mut |_| {},
        )
        .unwrap();
        out
    };
    let expected = plain(vec![
        vec![file("a.pkg", b"name=a"), file("b.txt", b"x")],
        vec![file("a.pkg", b"none")],
    ]);
    assert_eq!(sha(&std::fs::read(&path).unwrap()), sha(&expected));
}

#[test]
fn plugins_are_refused_when_their_sections_could_not_be_read_back() {
    struct Named(&'static str, i8, &'static str);
    impl Plugin for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn pkg_type(&self) -> i8 {
            self.1
        }
        fn columns(&self) -> Vec<Column> {
            vec![Column::new(self.2, ColumnType::Str)]
        }
        fn matches_path(&self, _: &str) -> bool {
            false
        }
        fn extract(&self, _: &Window) -> Outcome {
            Outcome::NotAPackage
        }
    }
    let try_one = |p: Named| Plugins::new(vec![Arc::new(p)], "").map(|_| ());
    assert!(try_one(Named("ok", 1, "col")).is_ok());
    assert!(try_one(Named("Bad Name", 1, "col")).is_err());
    assert!(try_one(Named("ok", 0, "col")).is_err());
    assert!(try_one(Named("ok", 1, "relative_path")).is_err());
    assert!(try_one(Named("files", 1, "col")).is_err());
    assert!(Plugins::new(vec![Arc::new(Text), Arc::new(Text)], "").is_err());
    assert!(Plugins::new(vec![], "a\nb").is_err());
}

#[test]
fn an_archive_of_packages_reads_as_before_for_everything_else() {
    let bytes = compressed(vec![batch1()], 1);
    let a = Archive::open(bytes).unwrap();
    let mut out = Vec::new();
    a.read_file("a.pkg", &mut out).unwrap();
    assert_eq!(out, b"name=a version=1");
    assert_eq!(
        a.list("").unwrap(),
        ["a.pkg", "b.txt", "c.pkg", "d.pkg", "e.pkg"]
    );
}

#[test]
fn a_hard_link_to_a_package_has_its_rows_under_its_own_name() {
    let link = Ok(InputFile {
        path: "z.pkg".into(),
        mode: Some(0o644),
        source: znippy_format::Source::SameAs("a.pkg".into()),
    });
    let bytes = compressed(
        vec![vec![file("a.pkg", b"name=a"), file("b.txt", b"x"), link]],
        2,
    );
    let a = Archive::open(bytes).unwrap();
    a.verify(1).unwrap();
    let p = a.packages().unwrap();
    let rows: Vec<(String, Value)> = p
        .rows()
        .map(|(_, _, r)| (r.path.clone(), r.values[0].clone()))
        .collect();
    let a_row = Value::Str("a".into());
    assert_eq!(
        rows,
        [("a.pkg".into(), a_row.clone()), ("z.pkg".into(), a_row)]
    );
}

#[test]
fn a_damaged_package_section_is_refused_not_carried_forward() {
    let mut bytes = compressed(vec![batch1()], 1);
    let s = Archive::open(bytes.as_slice())
        .unwrap()
        .sections()
        .iter()
        .find(|s| s.pkg_type == 7)
        .cloned()
        .unwrap();
    // A byte of the section's last batch, where a value lies.
    bytes[(s.index_offset + s.index_len / 2) as usize] ^= 0x20;
    let a = Archive::open(bytes.as_slice()).unwrap();
    assert!(
        matches!(a.packages(), Err(znippy_format::Error::Checksum(_))),
        "{:?}",
        a.packages()
    );
    assert!(a.verify(1).is_err());
    // Everything else reads as before.
    let mut out = Vec::new();
    a.read_file("a.pkg", &mut out).unwrap();
    assert_eq!(out, b"name=a version=1");
}

#[test]
fn a_plugin_that_panics_fails_its_package_not_the_archive() {
    let bytes = compressed(
        vec![vec![file("p.pkg", b"panic"), file("a.pkg", b"name=a")]],
        1,
    );
    let a = Archive::open(bytes).unwrap();
    a.verify(1).unwrap();
    let p = a.packages().unwrap();
    let rows: Vec<_> = p
        .rows()
        .map(|(_, _, r)| (r.path.clone(), r.error.clone()))
        .collect();
    assert_eq!(
        rows,
        [
            (
                "p.pkg".to_string(),
                Some("plugin text failed on it".to_string())
            ),
            ("a.pkg".to_string(), None)
        ]
    );
}

/// Claims `*.big` and follows it: its one row is the file's length and
/// SHA-256, from every byte the engine fed it.
struct Digest256;

struct Fed(u64, Sha256);

impl znippy_format::Follow for Fed {
    fn feed(&mut self, bytes: &[u8]) {
        self.0 += bytes.len() as u64;
        self.1.update(bytes);
    }
    fn finish(self: Box<Self>) -> Outcome {
        let hex = format!("{:x}", self.1.finalize());
        Outcome::Package(vec![vec![Value::I64(self.0 as i64), Value::Str(hex)]])
    }
}

impl Plugin for Digest256 {
    fn name(&self) -> &'static str {
        "digest"
    }
    fn pkg_type(&self) -> i8 {
        8
    }
    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("len", ColumnType::I64),
            Column::new("sha256", ColumnType::Str),
        ]
    }
    fn matches_path(&self, path: &str) -> bool {
        path.ends_with(".big")
    }
    fn follow(&self, _: &[u8]) -> Option<Box<dyn znippy_format::Follow>> {
        Some(Box::new(Fed(0, Sha256::new())))
    }
}

/// A following plugin through the engine: a file the window holds whole
/// and one fed past it in the engine's pieces (13 MiB, larger than a
/// chunk) each get the row of every byte they hold, and the archive's bytes
/// do not depend on the thread count.
#[test]
fn a_following_plugin_reads_every_byte_whatever_the_thread_count() {
    let small = znippy_testkit::data::noise(3, 3 << 20);
    let large = znippy_testkit::data::noise(4, 13 << 20);
    let plugins = Plugins::new(vec![Arc::new(Digest256)], "").unwrap();
    let run = |threads| {
        let mut out = Vec::new();
        let batch = vec![file("a.big", &small), file("b.big", &large)];
        compress_with(
            &mut out,
            vec![batch],
            ArchiveProps::default(),
            threads,
            &Metadata::Absent,
            &plugins,
            &mut |_| {},
        )
        .unwrap();
        out
    };
    let one = run(1);
    let archive = Archive::open(one.clone()).unwrap();
    let packages = archive.packages().unwrap();
    let rows: Vec<_> = packages
        .rows()
        .map(|(_, _, r)| (r.path.clone(), r.values.clone()))
        .collect();
    let want = |b: &[u8]| vec![Value::I64(b.len() as i64), Value::Str(sha(b))];
    assert_eq!(
        rows,
        [
            ("a.big".to_string(), want(&small)),
            ("b.big".to_string(), want(&large))
        ]
    );
    for threads in [2, 8] {
        assert_eq!(sha(&run(threads)), sha(&one), "{threads} threads");
    }
}
