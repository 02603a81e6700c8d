//! Real trees: symbolic links (relative, absolute, dangling, to directories),
//! empty directories, hard links and special files are archived the way tar
//! archives them, and extraction of a hostile archive never writes outside its
//! target or through a link.

mod common;

use std::fs::{self, File};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::*;
use znippy_format::{
    append, compress, extract_all, scan_dir, walk, Archive, Error, Found, InputFile, Kind,
    MetaUpdate, Metadata, ScanOptions, ScannedFile, S_IFLNK,
};
use znippy_testkit::data::Rng;

fn compress_tree(dir: &Path, out: &Path, opts: ScanOptions) -> znippy_format::Result<()> {
    let scan = scan_dir(dir, opts)?;
    let mut f = std::io::BufWriter::new(File::create(out).unwrap());
    let inputs = scan.files.iter().map(|f| Ok(f.input()));
    compress(
        &mut f,
        [inputs],
        small_props(),
        2,
        &Metadata::Absent,
        &mut |_| {},
    )?;
    Ok(())
}

/// Entry by entry, as `tar --compare` checks: path, kind, mode, link target,
/// and the bytes of regular files.
fn assert_same_tree(a: &Path, b: &Path) {
    let scan =
        |p: &Path| -> Vec<ScannedFile> { scan_dir(p, ScanOptions::default()).unwrap().files };
    let (fa, fb) = (scan(a), scan(b));
    let names = |v: &[ScannedFile]| v.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    assert_eq!(names(&fa), names(&fb), "the same entries");
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x.kind(), y.kind(), "kind of {}", x.path);
        assert_eq!(x.mode, y.mode, "mode of {}", x.path);
        assert_eq!(x.target, y.target, "target of {}", x.path);
        if x.kind() == Kind::File {
            assert!(
                fs::read(&x.disk_path).unwrap() == fs::read(&y.disk_path).unwrap(),
                "bytes of {}",
                x.path
            );
        }
    }
}

/// Every kind of entry a tree holds.
fn real_tree(root: &Path) {
    write_tree(
        root,
        &[
            ("src/main.rs".into(), text(1, 5000), 0o644),
            ("src/big.bin".into(), noise(2, 200_000), 0o755),
            ("docs/readme".into(), text(3, 900), 0o600),
        ],
    );
    symlink("main.rs", root.join("src/link-to-file")).unwrap();
    symlink("../docs", root.join("src/link-to-dir")).unwrap();
    symlink("/etc/hostname", root.join("absolute")).unwrap();
    symlink("nowhere/at/all", root.join("dangling")).unwrap();
    fs::create_dir_all(root.join("empty/nested")).unwrap();
    fs::create_dir(root.join("private")).unwrap();
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::hard_link(root.join("docs/readme"), root.join("docs/hardlink")).unwrap();
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

#[test]
fn a_real_tree_round_trips_entry_by_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    real_tree(&src);
    mkfifo(&src.join("pipe"));
    let arc = tmp.path().join("a.znippy");
    let scan = scan_dir(&src, ScanOptions::default()).unwrap();
    assert_eq!(scan.skipped.len(), 1, "the FIFO is skipped and reported");
    assert!(scan.skipped[0].reason.contains("FIFO"));
    compress_tree(&src, &arc, ScanOptions::default()).unwrap();

    let a = Archive::open(File::open(&arc).unwrap()).unwrap();
    a.verify(2).unwrap();
    let mut target = Vec::new();
    let e = a.read_entry("dangling", &mut target).unwrap();
    assert_eq!(
        (e.kind().unwrap(), &target[..]),
        (Kind::Symlink, &b"nowhere/at/all"[..])
    );
    assert!(
        a.contains("empty/nested").unwrap(),
        "an empty directory is an entry"
    );
    assert!(
        !a.contains("empty").unwrap(),
        "a directory with entries is not"
    );

    let out = tmp.path().join("out");
    extract_all(&a, &out, 2, &|_| {}).unwrap();
    fs::remove_file(src.join("pipe")).unwrap();
    assert_same_tree(&src, &out);
    assert_eq!(
        fs::metadata(out.join("private"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o700
    );
    assert_eq!(
        fs::read_link(out.join("absolute")).unwrap(),
        Path::new("/etc/hostname")
    );
}

#[test]
fn strict_refuses_special_files_and_dereference_follows_links() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    real_tree(&src);
    mkfifo(&src.join("pipe"));
    let strict = ScanOptions {
        strict: true,
        ..ScanOptions::default()
    };
    let err = scan_dir(&src, strict).unwrap_err();
    assert!(
        matches!(&err, Error::Input { path, .. } if path.ends_with("pipe")),
        "{err}"
    );
    fs::remove_file(src.join("pipe")).unwrap();

    let follow = ScanOptions {
        dereference: true,
        ..ScanOptions::default()
    };
    let err = scan_dir(&src, follow).unwrap_err();
    assert!(
        matches!(&err, Error::Input { path, .. } if path.ends_with("dangling")),
        "{err}"
    );
    fs::remove_file(src.join("dangling")).unwrap();
    fs::remove_file(src.join("absolute")).unwrap();
    let files = scan_dir(&src, follow).unwrap().files;
    let link = files.iter().find(|f| f.path == "src/link-to-file").unwrap();
    assert_eq!(
        (link.kind(), link.size),
        (Kind::File, 5000),
        "stored as its target's bytes"
    );
    assert!(
        files.iter().any(|f| f.path == "src/link-to-dir/readme"),
        "a linked directory is walked"
    );

    symlink("..", src.join("docs/up")).unwrap();
    let err = scan_dir(&src, follow).unwrap_err();
    assert!(
        matches!(&err, Error::Input { reason, .. } if reason.contains("loop")),
        "{err}"
    );
}

/// Names that sort on both sides of `a/`: a directory `a` holding nothing
/// sorts before `a.rs`, one holding something after it.
const CLOSE_NAMES: [&str; 9] = ["a", "a.rs", "a-b", "a b", "a0", "a!", "b", "ab", "b.d"];

/// A random tree of [`CLOSE_NAMES`]: files, links, FIFOs (skipped) and
/// directories, some of them empty or holding only a FIFO.
fn close_names_tree(rng: &mut Rng, dir: &Path, depth: usize) {
    fs::create_dir_all(dir).unwrap();
    for name in CLOSE_NAMES {
        let p = dir.join(name);
        match rng.below(if depth == 0 { 4 } else { 7 }) {
            0 => {}
            1 => fs::write(&p, name).unwrap(),
            2 => symlink(name, &p).unwrap(),
            3 if rng.below(4) == 0 => mkfifo(&p),
            3 => {}
            _ => close_names_tree(rng, &p, depth - 1),
        }
    }
}

/// The oracle: what a walk records below `dir`, sorted afterwards, the way
/// a scan that collects everything first would order it.
fn recorded_below(dir: &Path, rel: &str, out: &mut Vec<String>) -> usize {
    let mut recorded = 0;
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let p = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            if recorded_below(&e.path(), &p, out) == 0 {
                out.push(p);
            }
            recorded += 1;
        } else if ft.is_file() || ft.is_symlink() {
            out.push(p);
            recorded += 1;
        }
    }
    recorded
}

#[test]
fn the_walk_hands_entries_over_in_path_order_as_it_goes() {
    let tmp = tempfile::tempdir().unwrap();
    // Round 0: a directory holding only a FIFO records itself, as an empty
    // one does, before its sibling `a.rs`.
    let fixed = tmp.path().join("0");
    fs::create_dir_all(fixed.join("a")).unwrap();
    mkfifo(&fixed.join("a/pipe"));
    fs::create_dir_all(fixed.join("b")).unwrap();
    fs::write(fixed.join("a.rs"), "x").unwrap();
    fs::write(fixed.join("b.d"), "x").unwrap();
    let mut rng = Rng::new(7);
    for round in 0..16 {
        let root = tmp.path().join(round.to_string());
        if round > 0 {
            close_names_tree(&mut rng, &root, 2);
        }
        let mut want = Vec::new();
        recorded_below(&root, "", &mut want);
        want.sort();
        let scan = scan_dir(&root, ScanOptions::default()).unwrap();
        let got: Vec<&str> = scan.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(got, want, "round {round}: byte order of paths, as walked");
    }

    // An error from the receiver ends the walk at once, with that error.
    let mut seen = 0;
    let err = walk(tmp.path(), ScanOptions::default(), &mut |_| {
        seen += 1;
        Err(Error::Input {
            path: "receiver".into(),
            reason: "gone".into(),
        })
    })
    .unwrap_err();
    assert!(matches!(&err, Error::Input { path, .. } if path == "receiver"));
    assert_eq!(seen, 1);

    // The first entry is handed over before the directories after it are
    // listed: a file made on receiving it, in a directory further on, is found.
    let live = tmp.path().join("live");
    fs::create_dir_all(live.join("a")).unwrap();
    fs::create_dir_all(live.join("z")).unwrap();
    fs::write(live.join("a/first"), "x").unwrap();
    let mut got = Vec::new();
    walk(&live, ScanOptions::default(), &mut |found| {
        if let Found::Entry(f) = found {
            if got.is_empty() {
                fs::write(live.join("z/late"), "x").unwrap();
            }
            got.push(f.path);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(got, ["a/first", "z/late"]);
}

fn file(path: &str, bytes: &[u8], mode: u32) -> znippy_format::Result<InputFile> {
    Ok(InputFile::from_bytes(path, bytes.to_vec(), Some(mode)))
}

fn archive(batches: Vec<Vec<znippy_format::Result<InputFile>>>) -> Vec<u8> {
    let mut out = Vec::new();
    compress(
        &mut out,
        batches,
        small_props(),
        1,
        &Metadata::Absent,
        &mut |_| {},
    )
    .unwrap();
    out
}

/// Every file below `dir`, links not followed.
fn everything(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.display().to_string());
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(everything(&p));
        }
    }
    out
}

/// An archive with these entries, made by hand: our writers refuse some of
/// them, a hostile one would not.
fn crafted(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut sorted = entries.to_vec();
    sorted.sort_by_key(|e| e.0);
    let (mut blobs, mut rows) = (Vec::new(), Vec::new());
    for (i, (path, bytes, mode)) in sorted.iter().enumerate() {
        let mut r = raw_row(path, i as u64, blobs.len() as u64, bytes);
        r.mode = Some(*mode);
        rows.push(r);
        blobs.extend_from_slice(bytes);
    }
    craft(&blobs, &rows, small_props())
}

#[test]
fn hostile_archives_never_write_outside_or_through_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let link = S_IFLNK | 0o777;
    let target = outside.to_str().unwrap().as_bytes();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a link, then an entry through it",
            crafted(&[("a", target, link), ("a/x", b"pwned", 0o644)]),
        ),
        (
            "a relative link up and out, then an entry through it",
            crafted(&[("up", b"../..", link), ("up/outside/y", b"pwned", 0o644)]),
        ),
        (
            "a file, then an entry below it",
            crafted(&[("f", b"x", 0o644), ("f/y", b"pwned", 0o644)]),
        ),
    ];
    for (name, bytes) in cases {
        let a = Archive::open(bytes).unwrap();
        let out = tmp.path().join("out");
        let err = extract_all(&a, &out, 2, &|_| {}).unwrap_err();
        assert!(matches!(err, Error::PathConflict { .. }), "{name}: {err}");
        assert_eq!(
            everything(&outside),
            Vec::<String>::new(),
            "{name}: nothing outside"
        );
        let _ = fs::remove_dir_all(&out);
    }

    // A link whose target leaves the output is made as a link, and nothing
    // is written through it: links come last.
    let a = Archive::open(archive(vec![vec![
        file("esc", b"../outside", link),
        file("z", b"fine", 0o644),
    ]]))
    .unwrap();
    let out = tmp.path().join("out");
    extract_all(&a, &out, 2, &|_| {}).unwrap();
    assert_eq!(
        fs::read_link(out.join("esc")).unwrap(),
        Path::new("../outside")
    );
    assert_eq!(everything(&outside), Vec::<String>::new());
    fs::remove_dir_all(&out).unwrap();

    // A link already on disk where the archive has a directory is not followed.
    fs::create_dir(&out).unwrap();
    symlink(&outside, out.join("sub")).unwrap();
    let a = Archive::open(archive(vec![vec![file("sub/file", b"pwned", 0o644)]])).unwrap();
    let err = extract_all(&a, &out, 2, &|_| {}).unwrap_err();
    assert!(err.to_string().contains("not followed"), "{err}");
    assert_eq!(everything(&outside), Vec::<String>::new());
}

#[test]
fn bad_link_and_directory_entries_are_refused_by_name() {
    for (path, bytes, mode) in [
        ("l", &b""[..], S_IFLNK | 0o777),
        ("l", &b"a\0b"[..], S_IFLNK | 0o777),
        ("d", &b"content"[..], znippy_format::S_IFDIR | 0o755),
        ("dev", &b""[..], 0o020_644),
    ] {
        let mut out = Vec::new();
        let err = compress(
            &mut out,
            [vec![file(path, bytes, mode)]],
            small_props(),
            1,
            &Metadata::Absent,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::Input { path: p, .. } if p == path),
            "{err}"
        );
    }
}

/// The system's documentation tree (77 links on Debian, many dangling or
/// absolute) round-trips as `tar -cf - | tar -xf -` copies it.
#[test]
fn usr_share_doc_round_trips_like_tar() {
    let doc = Path::new("/usr/share/doc");
    if !doc.is_dir() {
        eprintln!("skipped: {} does not exist here", doc.display());
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("doc.znippy");
    let opts = ScanOptions {
        skip_unreadable: true,
        ..ScanOptions::default()
    };
    compress_tree(doc, &arc, opts).unwrap();
    let a = Archive::open(File::open(&arc).unwrap()).unwrap();
    let ours = tmp.path().join("ours");
    extract_all(&a, &ours, 2, &|_| {}).unwrap();
    let theirs = tmp.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C /usr/share -cf - doc | tar -C {} -xpf -",
            theirs.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    assert_same_tree(&theirs.join("doc"), &ours);
}

#[test]
fn writers_refuse_a_path_below_a_file_or_a_link() {
    let link = S_IFLNK | 0o777;
    let batches: Vec<(&str, Vec<Vec<znippy_format::Result<InputFile>>>)> = vec![
        (
            "one batch",
            vec![vec![file("x", b"1", 0o644), file("x/y", b"2", 0o644)]],
        ),
        (
            "the file after",
            vec![vec![file("x/y", b"2", 0o644)], vec![file("x", b"1", 0o644)]],
        ),
        (
            "below a link",
            vec![vec![file("l", b"x", link)], vec![file("l/y", b"2", 0o644)]],
        ),
        (
            "one name in NFC, one batch",
            vec![vec![
                file("caf\u{e9}", b"1", 0o644),
                file("cafe\u{301}", b"2", 0o644),
            ]],
        ),
        (
            "one name in NFC, two batches",
            vec![
                vec![file("cafe\u{301}", b"1", 0o644)],
                vec![file("caf\u{e9}", b"2", 0o644)],
            ],
        ),
    ];
    for (name, b) in batches {
        let mut out = Vec::new();
        let err = compress(
            &mut out,
            b,
            small_props(),
            1,
            &Metadata::Absent,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::PathConflict { .. } | Error::UnicodeTwin { .. }),
            "{name}: {err}"
        );
    }
    // A directory entry may hold others, and a replaced file frees its name.
    archive(vec![vec![
        file("d", b"", znippy_format::S_IFDIR | 0o755),
        file("d/x", b"1", 0o644),
    ]]);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("a.znippy");
    fs::write(&p, archive(vec![vec![file("x", b"1", 0o644)]])).unwrap();
    let err = append(
        &p,
        [file("x/y", b"2", 0o644)],
        MetaUpdate::default(),
        1,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, Error::PathConflict { .. }), "{err}");
    assert_eq!(
        Archive::open(fs::read(&p).unwrap())
            .unwrap()
            .list("")
            .unwrap(),
        ["x"]
    );
}

#[test]
fn set_uid_set_gid_and_sticky_bits_come_back_only_when_asked() {
    let a = Archive::open(archive(vec![vec![
        file("suid", b"#!/bin/sh\n", 0o4755),
        file("sticky", b"", znippy_format::S_IFDIR | 0o1777),
    ]]))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let out = tmp.path().join("masked");
    extract_all(&a, &out, 1, &|_| {}).unwrap();
    assert_eq!(
        (mode(&out.join("suid")), mode(&out.join("sticky"))),
        (0o755, 0o777)
    );
    let out = tmp.path().join("same");
    let opts = znippy_format::ExtractOptions {
        threads: 1,
        same_permissions: true,
    };
    znippy_format::extract_all_with(&a, &out, opts, &|_| {}).unwrap();
    assert_eq!(
        (mode(&out.join("suid")), mode(&out.join("sticky"))),
        (0o4755, 0o1777)
    );
}
