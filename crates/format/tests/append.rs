//! Append and metadata: a new batch after the existing blobs, replacement, the
//! metadata carried forward, and "no metadata" kept distinct from "empty".

mod common;

use std::fs::File;
use std::path::Path;

use common::*;
use znippy_format::{
    append, recover, undo_path, Archive, Error, InputFile, MetaSearch, MetaTable, MetaUpdate,
    MetaValue, Metadata, Recovery, Source,
};

fn write_archive(path: &Path, files: &[(String, Vec<u8>)], meta: &Metadata) {
    std::fs::write(path, archive_of(files, small_props(), meta)).unwrap();
}

fn inputs(files: &[(&str, Vec<u8>)]) -> Vec<znippy_format::Result<InputFile>> {
    files
        .iter()
        .map(|(p, b)| Ok(InputFile::from_bytes(*p, b.clone(), Some(0o600))))
        .collect()
}

fn open(path: &Path) -> Archive<File> {
    Archive::open(File::open(path).unwrap()).unwrap()
}

fn read(a: &Archive<File>, p: &str) -> Vec<u8> {
    let mut v = Vec::new();
    a.read_file(p, &mut v).unwrap();
    v
}

#[test]
fn append_adds_replaces_and_carries_metadata_forward() {
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("a.znippy");
    let first = vec![
        ("keep".to_string(), text(1, 5000)),
        ("replace".to_string(), text(2, 200_000)),
    ];
    write_archive(
        &arc,
        &first,
        &meta_with(&[(Some("keep"), "lic", "MIT"), (None, "owner", "team")]),
    );
    let before = open(&arc);
    let old_blob_end = before.blob_end();
    drop(before);

    let s = append(
        &arc,
        inputs(&[
            ("replace", text(3, 1000)),
            ("new", noise(4, 100_000)),
            ("dup_of_keep", text(1, 5000)),
        ]),
        MetaUpdate::default(),
        2,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(s.files, 3);
    assert_eq!(s.archive_files, 4);
    assert_eq!(
        s.deduped_slices, 1,
        "dup_of_keep dedupes against the old archive"
    );

    let a = open(&arc);
    assert_eq!(
        a.list("").unwrap(),
        ["dup_of_keep", "keep", "new", "replace"]
    );
    assert_eq!(
        read(&a, "replace"),
        text(3, 1000),
        "readers see the new bytes"
    );
    assert_eq!(read(&a, "keep"), text(1, 5000));
    assert_eq!(read(&a, "new"), noise(4, 100_000));
    assert!(a.blob_end() > old_blob_end, "new blobs follow the old ones");
    let new_rows = a.slices("new").unwrap();
    assert!(new_rows.iter().all(|r| r.blob_offset >= old_blob_end));
    let seqs: Vec<u64> = a.data_rows().unwrap().iter().map(|r| r.chunk_seq).collect();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "chunk_seq stays dense"
    );
    assert_eq!(a.verify(2).unwrap(), a.row_count());
    // The append said nothing about metadata: it is carried forward untouched.
    let md = a.metadata().unwrap();
    assert_eq!(
        md,
        meta_with(&[(Some("keep"), "lic", "MIT"), (None, "owner", "team")])
    );
}

#[test]
fn append_with_metadata_sets_and_overrides() {
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("a.znippy");
    write_archive(&arc, &[("x".to_string(), b"x".to_vec())], &Metadata::Absent);
    let mut set = MetaTable::new();
    set.set(Some("x"), "stars", MetaValue::infer("42")).unwrap();
    set.set(Some("x"), "blob", MetaValue::Bytes(vec![0, 1, 2]))
        .unwrap();
    append(
        &arc,
        inputs(&[]),
        MetaUpdate { set: Some(set) },
        1,
        &mut |_| {},
    )
    .unwrap();
    let md = open(&arc).metadata().unwrap();
    let MetaSearch::Hits(h) = md.by_key("stars") else {
        panic!("{md:?}")
    };
    assert_eq!(h[0].value, MetaValue::I64(42));
    let mut set = MetaTable::new();
    set.set(Some("x"), "stars", MetaValue::infer("43")).unwrap();
    append(
        &arc,
        inputs(&[]),
        MetaUpdate { set: Some(set) },
        1,
        &mut |_| {},
    )
    .unwrap();
    let md = open(&arc).metadata().unwrap();
    let MetaSearch::Hits(h) = md.by_key("stars") else {
        panic!()
    };
    assert_eq!(
        (h.len(), &h[0].value),
        (1, &MetaValue::I64(43)),
        "latest wins"
    );
    assert!(
        matches!(md.by_key("blob"), MetaSearch::Hits(h) if h[0].value == MetaValue::Bytes(vec![0, 1, 2]))
    );
}

#[test]
fn no_metadata_and_empty_metadata_stay_different_across_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let none = tmp.path().join("none.znippy");
    let empty = tmp.path().join("empty.znippy");
    let files = [("x".to_string(), b"x".to_vec())];
    write_archive(&none, &files, &Metadata::Absent);
    write_archive(&empty, &files, &Metadata::Present(MetaTable::new()));
    for p in [&none, &empty] {
        append(
            p,
            inputs(&[("y", b"y".to_vec())]),
            MetaUpdate::default(),
            1,
            &mut |_| {},
        )
        .unwrap();
    }
    let (n, e) = (open(&none), open(&empty));
    assert_eq!(n.metadata().unwrap(), Metadata::Absent);
    assert_eq!(e.metadata().unwrap(), Metadata::Present(MetaTable::new()));
    assert_eq!(n.metadata().unwrap().by_key("k"), MetaSearch::NoSection);
    assert_eq!(e.metadata().unwrap().by_key("k"), MetaSearch::NoMatch);
    assert!(e
        .sections()
        .iter()
        .any(|s| s.module_name == znippy_format::META));
    assert!(!n
        .sections()
        .iter()
        .any(|s| s.module_name == znippy_format::META));
}

/// An archive of one 300 KB file `x` with archive metadata, and its bytes.
fn archive_of_x(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let arc = dir.join("a.znippy");
    write_archive(
        &arc,
        &[("x".to_string(), text(1, 300_000))],
        &meta_with(&[(None, "k", "v")]),
    );
    let bytes = std::fs::read(&arc).unwrap();
    (arc, bytes)
}

/// A reader that fails halfway, like a file that vanishes mid-read.
struct Failing(usize);
impl std::io::Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0 == 0 {
            return Err(std::io::Error::other("disk went away"));
        }
        let n = buf.len().min(self.0);
        buf[..n].fill(7);
        self.0 -= n;
        Ok(n)
    }
}

#[test]
fn a_failed_append_leaves_the_archive_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let (arc, before) = archive_of_x(tmp.path());
    // Failing inside a small file, and several pieces into a large one, with
    // files before and after it.
    for fail_after in [150_000, 5_000_000] {
        let batch = vec![
            Ok(InputFile::from_bytes("ok", noise(1, 200_000), None)),
            Ok(InputFile {
                path: "broken".into(),
                mode: None,
                source: znippy_format::Source::Reader(Box::new(Failing(fail_after))),
            }),
            Ok(InputFile::from_bytes("after", noise(2, 3_000_000), None)),
        ];
        let err = append(&arc, batch, MetaUpdate::default(), 2, &mut |_| {}).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        assert!(err.to_string().contains("broken"), "{err}");
        assert_eq!(
            std::fs::read(&arc).unwrap(),
            before,
            "byte for byte as before"
        );
    }
    let bad_path = vec![Ok(InputFile::from_bytes("../escape", vec![1], None))];
    assert!(matches!(
        append(&arc, bad_path, MetaUpdate::default(), 2, &mut |_| {}),
        Err(Error::InvalidPath { .. })
    ));
    assert_eq!(std::fs::read(&arc).unwrap(), before);
}

#[test]
fn compressing_batches_in_one_go_equals_compress_then_append() {
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("a.znippy");
    let a = vec![
        ("p".to_string(), text(1, 100_000)),
        ("q".to_string(), text(2, 10)),
    ];
    let b = [("r", noise(3, 70_000)), ("s", text(2, 10))];
    write_archive(&arc, &a, &Metadata::Absent);
    append(&arc, inputs(&b), MetaUpdate::default(), 2, &mut |_| {}).unwrap();

    let to_inputs =
        |v: Vec<(String, Vec<u8>, Option<u32>)>| -> Vec<znippy_format::Result<InputFile>> {
            v.into_iter()
                .map(|(p, b, m)| Ok(InputFile::from_bytes(p, b, m)))
                .collect()
        };
    let first = to_inputs(
        a.iter()
            .map(|(p, b)| (p.clone(), b.clone(), Some(0o644)))
            .collect(),
    );
    let second = to_inputs(
        b.iter()
            .map(|(p, b)| (p.to_string(), b.clone(), Some(0o600)))
            .collect(),
    );
    let mut one_go = Vec::new();
    znippy_format::compress(
        &mut one_go,
        [first, second],
        small_props(),
        1,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    assert!(std::fs::read(&arc).unwrap() == one_go, "byte-identical");
}

#[test]
fn three_batches_in_one_go_equal_two_then_an_append_even_when_replaced_content_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("a.znippy");
    let b1 = [("p", text(1, 50_000)), ("q", text(2, 100))];
    let b2 = [("p", text(3, 50_000))];
    // The old bytes of `p` come back under another name: no longer a live slice.
    let b3 = [("r", text(1, 50_000))];
    let mut one_go = Vec::new();
    znippy_format::compress(
        &mut one_go,
        [inputs(&b1), inputs(&b2), inputs(&b3)],
        small_props(),
        2,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    let mut two = Vec::new();
    znippy_format::compress(
        &mut two,
        [inputs(&b1), inputs(&b2)],
        small_props(),
        2,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    std::fs::write(&arc, two).unwrap();
    append(&arc, inputs(&b3), MetaUpdate::default(), 2, &mut |_| {}).unwrap();
    assert!(std::fs::read(&arc).unwrap() == one_go, "byte-identical");
    assert_eq!(read(&open(&arc), "r"), text(1, 50_000));
}

/// A reader that gives `n` bytes and then panics: the append stops dead in the
/// middle, its blobs already over the old tail and no error path run, as when
/// the process is killed.
struct Dies(usize);
impl std::io::Read for Dies {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        assert!(self.0 > 0, "the process dies here");
        let n = buf.len().min(self.0);
        buf[..n].copy_from_slice(&noise(self.0 as u64, n));
        self.0 -= n;
        Ok(n)
    }
}

fn die_appending(arc: &Path) {
    let batch = vec![
        Ok(InputFile::from_bytes("small", text(9, 1000), None)),
        Ok(InputFile {
            path: "big".into(),
            mode: None,
            source: Source::Reader(Box::new(Dies(3_000_000))),
        }),
    ];
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        append(arc, batch, MetaUpdate::default(), 2, &mut |_| {})
    }));
    assert!(died.is_err(), "the append was meant to die");
}

#[test]
fn an_append_that_dies_midway_is_undone() {
    let tmp = tempfile::tempdir().unwrap();
    let (arc, before) = archive_of_x(tmp.path());

    die_appending(&arc);
    assert!(undo_path(&arc).exists());
    let torn = std::fs::read(&arc).unwrap();
    assert!(
        torn.len() > before.len(),
        "blobs were written over the old tail"
    );
    assert!(Archive::open(File::open(&arc).unwrap()).is_err());

    assert_eq!(recover(&arc).unwrap(), Recovery::RolledBack);
    assert_eq!(
        std::fs::read(&arc).unwrap(),
        before,
        "byte for byte as before"
    );
    assert!(!undo_path(&arc).exists());
    assert_eq!(recover(&arc).unwrap(), Recovery::Clean);

    // The next append puts the archive back by itself before it starts.
    die_appending(&arc);
    let batch = inputs(&[("y", text(2, 5000))]);
    append(&arc, batch, MetaUpdate::default(), 2, &mut |_| {}).unwrap();
    assert!(!undo_path(&arc).exists());
    let a = open(&arc);
    a.verify(1).unwrap();
    assert_eq!(read(&a, "x"), text(1, 300_000));
    assert_eq!(read(&a, "y"), text(2, 5000));
    assert!(a.read_file("big", &mut Vec::new()).is_err());
}

#[test]
fn a_torn_undo_file_is_removed_and_the_archive_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("a.znippy");
    write_archive(&arc, &[("x".to_string(), text(1, 5000))], &Metadata::Absent);
    let before = std::fs::read(&arc).unwrap();
    // The crash came while the undo file was being written: the append had not
    // touched the archive yet.
    let mut undo = b"ZNPYUNDO".to_vec();
    undo.extend_from_slice(&(before.len() as u64).to_le_bytes());
    std::fs::write(undo_path(&arc), &undo).unwrap();
    assert_eq!(recover(&arc).unwrap(), Recovery::DiscardedTorn);
    assert_eq!(std::fs::read(&arc).unwrap(), before);
    assert!(!undo_path(&arc).exists());
    // Created, and nothing written yet.
    std::fs::write(undo_path(&arc), b"").unwrap();
    assert_eq!(recover(&arc).unwrap(), Recovery::DiscardedTorn);
    // Somebody else's file of that name is not ours to remove.
    std::fs::write(undo_path(&arc), b"my notes").unwrap();
    let err = recover(&arc).unwrap_err();
    assert!(err.to_string().contains("not an undo file"), "{err}");
    assert_eq!(std::fs::read(undo_path(&arc)).unwrap(), b"my notes");
    assert_eq!(std::fs::read(&arc).unwrap(), before);
}

#[test]
fn an_undo_file_of_another_archive_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.znippy"), tmp.path().join("b.znippy"));
    write_archive(
        &a,
        &[("x".to_string(), text(1, 300_000))],
        &Metadata::Absent,
    );
    write_archive(
        &b,
        &[("x".to_string(), text(2, 300_000))],
        &Metadata::Absent,
    );
    let b_before = std::fs::read(&b).unwrap();
    die_appending(&a);
    std::fs::rename(undo_path(&a), undo_path(&b)).unwrap();
    let err = recover(&b).unwrap_err();
    assert!(matches!(err, Error::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("does not fit"), "{err}");
    assert_eq!(std::fs::read(&b).unwrap(), b_before, "b is left alone");
    assert!(
        undo_path(&b).exists(),
        "the undo file is kept for a person to judge"
    );
}

#[test]
fn one_append_or_recover_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("a.znippy");
    write_archive(&arc, &[("x".to_string(), text(1, 5000))], &Metadata::Absent);
    let held = File::open(&arc).unwrap();
    held.lock().unwrap();
    let batch = inputs(&[("y", text(2, 5000))]);
    let err = append(&arc, batch, MetaUpdate::default(), 2, &mut |_| {}).unwrap_err();
    assert!(
        err.to_string().contains("another append or recover"),
        "{err}"
    );
    assert!(recover(&arc).is_err());
    drop(held);
    let batch = inputs(&[("y", text(2, 5000))]);
    append(&arc, batch, MetaUpdate::default(), 2, &mut |_| {}).unwrap();
}

#[test]
fn a_planted_undo_symlink_or_fifo_is_refused_and_followed_nowhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (arc, before) = archive_of_x(tmp.path());
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, undo_path(&arc)).unwrap();
    let batch = inputs(&[("y", text(2, 5000))]);
    let err = append(&arc, batch, MetaUpdate::default(), 2, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains(".undo"), "{err}");
    assert!(recover(&arc).is_err());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(&arc).unwrap(), before);

    std::fs::remove_file(undo_path(&arc)).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(undo_path(&arc))
        .status()
        .unwrap();
    assert!(made.success());
    let err = recover(&arc).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    assert_eq!(std::fs::read(&arc).unwrap(), before);
}
