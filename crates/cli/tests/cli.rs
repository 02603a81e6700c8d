//! The `znippy` binary end to end: real processes, real files, exit codes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

fn znippy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args(args)
        .output()
        .expect("run znippy")
}

fn ok(args: &[&str]) -> Output {
    ok_in(Path::new("."), args)
}

/// `znippy args` run in `dir` (relative paths are taken from there), which
/// must succeed.
fn ok_in(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run znippy");
    assert!(
        out.status.success(),
        "znippy {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The cargo registry's source cache: the crates this project builds against.
fn registry_src() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let src = home.join("registry/src");
    let mut dirs: Vec<_> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs.pop().expect("a registry index directory")
}

fn files_under(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let ft = std::fs::symlink_metadata(&p).unwrap().file_type();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                out.push((rel, p));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_cargo_registry_round_trips_byte_for_byte_with_modes() {
    let src = registry_src();
    let tmp = tempfile::tempdir().unwrap();
    let arc = tmp.path().join("reg.znippy");
    let out = tmp.path().join("out");
    ok(&["compress", s(&src), "-o", s(&arc)]);
    ok(&["verify", s(&arc)]);
    ok(&["decompress", s(&arc), "-o", s(&out)]);
    let want = files_under(&src);
    let got = files_under(&out);
    assert!(want.len() > 1000, "a real tree: {} files", want.len());
    assert_eq!(
        want.iter().map(|w| &w.0).collect::<Vec<_>>(),
        got.iter().map(|g| &g.0).collect::<Vec<_>>()
    );
    for ((rel, a), (_, b)) in want.iter().zip(&got) {
        let (ma, mb) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
        assert_eq!(
            ma.permissions().mode() & 0o7777,
            mb.permissions().mode() & 0o7777,
            "mode of {rel}"
        );
        assert!(
            std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
            "bytes of {rel}"
        );
    }
    let listed = ok(&["list", s(&arc)]).stdout;
    assert_eq!(
        String::from_utf8(listed).unwrap().lines().count(),
        want.len()
    );

    // Same archive bytes whatever the thread count.
    let digest = |threads: &str| {
        let p = tmp.path().join(format!("t{threads}.znippy"));
        ok(&["compress", s(&src), "-o", s(&p), "--threads", threads]);
        Sha256::digest(std::fs::read(&p).unwrap())
    };
    let one = digest("1");
    assert_eq!(one, digest("2"));
    assert_eq!(one, digest("8"));
    assert_eq!(one, Sha256::digest(std::fs::read(&arc).unwrap()));
}

fn tree(root: &Path) {
    let files: [(&str, &[u8], u32); 5] = [
        ("a.txt", b"alpha", 0o644),
        ("dir/b.txt", b"beta", 0o600),
        ("dir/run.sh", b"#!/bin/sh\necho hi\n", 0o755),
        ("empty", b"", 0o644),
        ("ünï/ç.txt", b"unicode", 0o644),
    ];
    for (p, b, m) in files {
        let full = root.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(&full, b).unwrap();
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(m)).unwrap();
    }
}

/// `tree` under `dir/src`, compressed to `dir/a.znippy`: (src, archive).
fn compressed_tree(dir: &Path) -> (PathBuf, PathBuf) {
    let (src, arc) = (dir.join("src"), dir.join("a.znippy"));
    tree(&src);
    ok(&["compress", s(&src), "-o", s(&arc)]);
    (src, arc)
}

#[test]
fn get_list_info_and_help() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, arc) = compressed_tree(tmp.path());
    assert_eq!(ok(&["get", s(&arc), "dir/b.txt"]).stdout, b"beta");
    let dest = tmp.path().join("got.txt");
    ok(&["get", s(&arc), "ünï/ç.txt", "-o", s(&dest)]);
    assert_eq!(std::fs::read(&dest).unwrap(), b"unicode");
    let missing = znippy(&["get", s(&arc), "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such file"));
    // A directory is not "no such file": the error says what it is.
    let dir = znippy(&["get", s(&arc), "dir", "-o", s(&tmp.path().join("d"))]);
    assert_eq!(dir.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&dir.stderr),
        "znippy: dir is a directory in the archive; get takes a file \
         (`znippy list ARCHIVE --prefix dir/` lists what it holds)\n"
    );
    assert!(!tmp.path().join("d").exists() && !tmp.path().join("d.partial").exists());
    // The archive itself as the output, by its name or through a link, is
    // refused before a byte is written (it was replaced by the file).
    let before = std::fs::read(&arc).unwrap();
    let link = tmp.path().join("to-archive");
    std::os::unix::fs::symlink(&arc, &link).unwrap();
    for dest in [&arc, &link] {
        let own = znippy(&["get", s(&arc), "a.txt", "-o", s(dest)]);
        assert_eq!(own.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&own.stderr).contains("is the archive being read"),
            "{}",
            String::from_utf8_lossy(&own.stderr)
        );
    }
    assert_eq!(
        std::fs::read(&arc).unwrap(),
        before,
        "the archive is untouched"
    );
    let long =
        String::from_utf8(ok(&["list", s(&arc), "--prefix", "dir/", "--long"]).stdout).unwrap();
    assert_eq!(
        long.lines().collect::<Vec<_>>(),
        [
            "-0600            4 dir/b.txt",
            "-0755           18 dir/run.sh"
        ]
    );
    let info = String::from_utf8(ok(&["info", s(&arc)]).stdout).unwrap();
    for want in [
        "files          5",
        "level=3",
        "__znippy_batch_trie__",
        "ratio",
    ] {
        assert!(info.contains(want), "info lacks {want:?}:\n{info}");
    }
    for cmd in [
        "compress",
        "decompress",
        "list",
        "get",
        "verify",
        "info",
        "meta",
        "append",
    ] {
        let help = ok(&[cmd, "--help"]);
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("Usage"),
            "{cmd}"
        );
    }
    // Summary line on stderr, no progress bar when stderr is not a terminal.
    let out = ok(&["compress", s(&src), "-o", s(&arc)]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("compressed 5 files") && err.contains("MB/s"),
        "{err}"
    );

    // One file is an archive of one file, under the path given.
    let one = tmp.path().join("one.znippy");
    ok_in(&src, &["compress", "dir/run.sh", "-o", s(&one)]);
    let long = String::from_utf8(ok(&["list", s(&one), "--long"]).stdout).unwrap();
    assert_eq!(long, "-0755           18 dir/run.sh\n");
    assert_eq!(
        ok(&["get", s(&one), "dir/run.sh"]).stdout,
        b"#!/bin/sh\necho hi\n"
    );
    let absolute = znippy(&["compress", s(&src.join("a.txt")), "-o", s(&one)]);
    assert_eq!(absolute.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&absolute.stderr).contains("give a relative path"));

    // An error says each of its causes once, and leaves no partial archive.
    let gone = tmp.path().join("gone");
    let out = znippy(&["compress", s(&gone), "-o", s(&tmp.path().join("g.znippy"))]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "znippy: opening {}: No such file or directory (os error 2)\n",
            gone.display()
        )
    );
    assert!(!tmp.path().join("g.znippy.partial").exists());
}

/// `--pack-size` is taken as given, or defaults to 512 KiB within the
/// threshold and the chunk size; out of those bounds it is refused before
/// the output is made.
#[test]
fn the_pack_size_is_asked_for_or_fits_the_other_properties() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    tree(&src);
    let arc = tmp.path().join("a.znippy");
    for (args, want) in [
        (
            &[][..],
            "chunk_size=1572864 pack_threshold=524288 pack_size=524288",
        ),
        (
            &["--chunk-size", "262144", "--pack-threshold", "65536"][..],
            "chunk_size=262144 pack_threshold=65536 pack_size=262144",
        ),
        (
            &["--chunk-size", "4194304", "--pack-threshold", "1048576"][..],
            "chunk_size=4194304 pack_threshold=1048576 pack_size=1048576",
        ),
        (
            &["--pack-size", "700000"][..],
            "chunk_size=1572864 pack_threshold=524288 pack_size=700000",
        ),
    ] {
        ok(&[&["compress", s(&src), "-o", s(&arc)][..], args].concat());
        let info = String::from_utf8(ok(&["info", s(&arc)]).stdout).unwrap();
        assert!(info.contains(want), "{args:?}: {info}");
        std::fs::remove_file(&arc).unwrap();
    }
    for bad in ["100", "2000000"] {
        let out = znippy(&["compress", s(&src), "-o", s(&arc), "--pack-size", bad]);
        assert_eq!(out.status.code(), Some(1), "--pack-size {bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("pack_size"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!arc.exists(), "--pack-size {bad}");
    }
}

/// `-o` onto something that is not a regular file writes through it: a
/// rename over `/dev/null` would, as root, leave a regular file there. A
/// FIFO and a link stand in for the device here.
#[test]
fn an_output_that_is_not_a_regular_file_is_written_through() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let (src, arc) = compressed_tree(tmp.path());

    let fifo = tmp.path().join("fifo");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    ok(&["get", s(&arc), "dir/b.txt", "-o", s(&fifo)]);
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "{kind:?}");
    assert_eq!(reader.join().unwrap(), b"beta");

    let (target, link) = (tmp.path().join("target.znippy"), tmp.path().join("link"));
    std::fs::write(&target, b"old").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ok(&["compress", s(&src), "-o", s(&link)]);
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    let listed = String::from_utf8(ok(&["list", s(&target)]).stdout).unwrap();
    assert_eq!(listed.lines().count(), 5, "{listed}");

    let out = znippy(&["get", s(&arc), "a.txt", "-o", s(tmp.path())]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a directory; name a file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An archive written into the tree it is made of leaves itself out, as
/// tar does ("file is the archive; not dumped"), in `compress` and in
/// `append`: it would otherwise hold a copy of itself half written.
#[test]
fn an_archive_inside_its_own_tree_is_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    tree(&src);
    let arc = src.join("self.znippy");
    let out = ok(&["compress", s(&src), "-o", s(&arc)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("self.znippy.partial: the archive being written"),
        "{err}"
    );
    let listed = String::from_utf8(ok(&["list", s(&arc)]).stdout).unwrap();
    assert_eq!(listed.lines().count(), 5, "{listed}");
    assert!(!listed.contains("self.znippy"), "{listed}");

    std::fs::write(src.join("new.txt"), b"new").unwrap();
    let out = ok(&["append", s(&arc), s(&src)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("self.znippy: the archive being written"),
        "{err}"
    );
    let listed = String::from_utf8(ok(&["list", s(&arc)]).stdout).unwrap();
    assert_eq!(listed.lines().count(), 6, "{listed}");
    assert!(!listed.contains("self.znippy"), "{listed}");

    let out = znippy(&["append", s(&arc), s(&arc)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is the archive itself"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `znippy args` with its stdout a pipe whose reader is gone before
/// it writes: what `znippy list a.znippy | head` does once head has its lines.
fn znippy_into_closed_pipe(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run znippy");
    drop(child.stdout.take());
    child.wait_with_output().expect("wait for znippy")
}

#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, arc) = (tmp.path().join("src"), tmp.path().join("a.znippy"));
    // Outputs past a pipe's 64 KiB buffer, so the write that finds the
    // reader gone is certain to happen: a listing of 3,000 long names, and
    // one 1 MiB file.
    for i in 0..3_000 {
        let p = src.join(format!(
            "{:02}/a-name-long-enough-to-fill-a-pipe-{i:05}.txt",
            i % 30
        ));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, i.to_string()).unwrap();
    }
    std::fs::write(src.join("big.bin"), vec![7u8; 1 << 20]).unwrap();
    ok(&["compress", s(&src), "-o", s(&arc)]);
    for args in [
        vec!["list", s(&arc)],
        vec!["list", "--long", s(&arc)],
        vec!["get", s(&arc), "big.bin"],
        vec!["info", s(&arc)],
    ] {
        let out = znippy_into_closed_pipe(&args);
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).as_ref()
            ),
            (Some(0), ""),
            "znippy {args:?}"
        );
    }
    // A failure is still one, pipe or not.
    let out = znippy_into_closed_pipe(&["get", s(&arc), "no/such/file"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"));
}

#[test]
fn meta_search_exit_codes_and_typing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    tree(&src);
    let blob = tmp.path().join("blob.bin");
    std::fs::write(&blob, [0u8, 159, 146, 150]).unwrap();
    let with = tmp.path().join("with.znippy");
    let at_blob = format!("a.txt=sig=@{}", s(&blob));
    ok(&[
        "compress",
        s(&src),
        "-o",
        s(&with),
        "--meta",
        "a.txt=version=1.0.2",
        "--meta",
        "a.txt=stars=42",
        "--meta",
        "dir/b.txt=ratio=0.5",
        "--meta",
        "dir/b.txt=ok=true",
        "--meta",
        &at_blob,
        "--meta-archive",
        "owner=team=x",
        "--meta-archive",
        "colour=\u{1b}[31mred\tcell",
    ]);
    let hits = ok(&["meta", s(&with), "-k", "version"]);
    assert_eq!(
        String::from_utf8(hits.stdout).unwrap(),
        "a.txt\tversion\tstr\t1.0.2\n"
    );
    let typed = |k: &str| String::from_utf8(ok(&["meta", s(&with), "-k", k]).stdout).unwrap();
    assert_eq!(typed("stars"), "a.txt\tstars\ti64\t42\n");
    assert_eq!(typed("ratio"), "dir/b.txt\tratio\tf64\t0.5\n");
    assert_eq!(typed("ok"), "dir/b.txt\tok\tbool\ttrue\n");
    assert_eq!(typed("sig"), "a.txt\tsig\tbytes\t<4 bytes>\n");
    assert_eq!(typed("owner"), "-\towner\tstr\tteam=x\n");
    // Escaped, as a path is by `list`: no escape sequence reaches the
    // terminal, and no tab splits a column.
    assert_eq!(typed("colour"), "-\tcolour\tstr\t\\u{1b}[31mred\\tcell\n");
    let prefix = ok(&["meta", s(&with), "-p", "s", "--paths-only"]);
    assert_eq!(String::from_utf8(prefix.stdout).unwrap(), "a.txt\na.txt\n");
    assert_eq!(
        znippy(&["meta", s(&with), "-k", "nothing"]).status.code(),
        Some(1)
    );

    let without = tmp.path().join("without.znippy");
    ok(&["compress", s(&src), "-o", s(&without)]);
    let none = znippy(&["meta", s(&without), "-k", "version"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no metadata section"));
    assert_eq!(
        znippy(&["meta", "/nonexistent.znippy", "-k", "x"])
            .status
            .code(),
        Some(3)
    );
}

#[test]
fn append_replaces_adds_and_keeps_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    tree(&src);
    let arc = tmp.path().join("a.znippy");
    ok(&[
        "compress",
        s(&src),
        "-o",
        s(&arc),
        "--meta",
        "a.txt=lic=MIT",
    ]);
    let more = tmp.path().join("more");
    std::fs::create_dir_all(more.join("dir")).unwrap();
    std::fs::write(more.join("dir/b.txt"), b"beta v2").unwrap();
    std::fs::write(more.join("new.txt"), b"new").unwrap();
    let single = tmp.path().join("single.txt");
    std::fs::write(&single, b"one file").unwrap();
    ok_in(tmp.path(), &["append", s(&arc), s(&more), "single.txt"]);
    let list = String::from_utf8(ok(&["list", s(&arc)]).stdout).unwrap();
    assert_eq!(
        list.lines().collect::<Vec<_>>(),
        [
            "a.txt",
            "dir/b.txt",
            "dir/run.sh",
            "empty",
            "new.txt",
            "single.txt",
            "ünï/ç.txt"
        ]
    );
    assert_eq!(ok(&["get", s(&arc), "dir/b.txt"]).stdout, b"beta v2");
    assert_eq!(ok(&["get", s(&arc), "single.txt"]).stdout, b"one file");
    assert_eq!(
        ok(&["meta", s(&arc), "-k", "lic", "--paths-only"]).stdout,
        b"a.txt\n"
    );
    ok(&["append", s(&arc), "--meta", "new.txt=lic=Apache-2.0"]);
    assert_eq!(
        ok(&["meta", s(&arc), "-k", "lic", "--paths-only"]).stdout,
        b"a.txt\nnew.txt\n"
    );
    ok(&["verify", s(&arc)]);
    // A missing input fails before anything is written.
    let before = std::fs::read(&arc).unwrap();
    assert_eq!(
        znippy(&["append", s(&arc), "/nonexistent/x"]).status.code(),
        Some(1)
    );
    assert_eq!(std::fs::read(&arc).unwrap(), before);
}

#[test]
fn hostile_inputs_fail_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, arc) = compressed_tree(tmp.path());
    let good = std::fs::read(&arc).unwrap();
    let bad = tmp.path().join("bad.znippy");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"this is not an archive at all".to_vec()),
        ("empty", vec![]),
        ("truncated", good[..good.len() - 5].to_vec()),
        ("half", good[..good.len() / 2].to_vec()),
        ("flipped", {
            let mut g = good.clone();
            let n = g.len();
            g[n - 100] ^= 0xff;
            g
        }),
    ];
    for (what, bytes) in cases {
        std::fs::write(&bad, &bytes).unwrap();
        for args in [
            vec!["list", s(&bad)],
            vec!["verify", s(&bad)],
            vec!["info", s(&bad)],
            vec!["get", s(&bad), "a.txt"],
            vec!["decompress", s(&bad), "-o", s(&tmp.path().join("o"))],
        ] {
            let out = znippy(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("panicked"), "{what} {args:?}: {err}");
            if what != "flipped" || args[0] == "verify" {
                assert!(!out.status.success(), "{what} {args:?} succeeded");
                assert!(err.starts_with("znippy: "), "{what} {args:?}: {err}");
            }
        }
    }
    // A FIFO under --strict is refused by name, and no archive is left.
    let fifo = src.join("pipe");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let target = tmp.path().join("x.znippy");
    let out = znippy(&["compress", s(&src), "-o", s(&target), "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pipe"));
    assert!(!target.exists());
    // Without it the FIFO is skipped with a warning line and a count.
    let out = ok(&["compress", s(&src), "-o", s(&target)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("skipped") && err.contains("a FIFO") && err.contains("1 entries skipped"),
        "{err}"
    );
    std::fs::remove_file(&fifo).unwrap();
    let props = znippy(&["compress", s(&src), "-o", s(&target), "--chunk-size", "1"]);
    assert!(String::from_utf8_lossy(&props.stderr).contains("chunk_size"));
}

#[test]
fn the_archiver_links_none_of_the_service_and_hands_it_over() {
    // `znippy` must start like a small tool: the service's crates (and their
    // relocation tables) live in znippy-server, reached through `znippy serve`.
    let bin = std::fs::read(env!("CARGO_BIN_EXE_znippy")).unwrap();
    // Every function of a crate is a symbol whose mangled name begins with
    // the crate's (`_ZN4axum7routing...`). A bare name would also match by
    // chance inside the hashes of other symbols (`...vaxum9y...`).
    let text = String::from_utf8_lossy(&bin);
    let links = |name: &str| text.contains(&format!("_ZN{}{name}", name.len()));
    assert!(links("znippy_format"), "the search sees crate names");
    for name in ["znippy_store", "znippy_http", "iceberg", "axum", "tokio"] {
        assert!(!links(name), "the znippy binary links {name}");
    }
    let help = ok(&["serve", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: znippy serve"));
    // Exit status and messages come from znippy-server, in this process.
    let tmp = tempfile::tempdir().unwrap();
    let not_a_dir = tmp.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let out = znippy(&["live", "--data", s(&not_a_dir), "archives"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("znippy: "));
}

/// Starts `znippy append ARC INPUT`, waits until its blobs have begun to
/// overwrite the old tail (the archive grew past `old_len`), and SIGKILLs it.
fn kill_appending(arc: &Path, input: &Path, old_len: u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args(["append", s(arc), s(input)])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run znippy");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(arc).unwrap().len() <= old_len {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the append ended before it could be killed"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the append never wrote"
        );
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "killed mid-append, not finished: {status}"
    );
}

#[test]
fn a_killed_append_is_undone_by_recover_or_by_the_next_append() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, arc) = compressed_tree(tmp.path());
    let before = std::fs::read(&arc).unwrap();

    // 256 MiB that neither compresses nor dedupes: the append is still busy
    // long after its first blob lands on the old tail.
    let big = tmp.path().join("big");
    std::fs::create_dir(&big).unwrap();
    let bytes = znippy_testkit::data::noise(1, 256 << 20);
    std::fs::write(big.join("big.bin"), bytes).unwrap();

    kill_appending(&arc, &big, before.len() as u64);
    let list = znippy(&["list", s(&arc)]);
    assert!(!list.status.success());
    let said = String::from_utf8_lossy(&list.stderr);
    assert!(
        said.contains("did not finish") && said.contains("znippy recover"),
        "{said}"
    );
    let out = ok(&["recover", s(&arc)]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("back as it was"));
    assert_eq!(
        Sha256::digest(std::fs::read(&arc).unwrap()),
        Sha256::digest(&before),
        "byte for byte as before the killed append"
    );
    ok(&["verify", s(&arc)]);
    let out = ok(&["recover", s(&arc)]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to recover"));

    kill_appending(&arc, &big, before.len() as u64);
    let more = tmp.path().join("more");
    std::fs::create_dir(&more).unwrap();
    std::fs::write(more.join("late.txt"), b"after the crash").unwrap();
    let out = ok(&["append", s(&arc), s(&more)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not finish"));
    ok(&["verify", s(&arc)]);
    let listed = String::from_utf8(ok(&["list", s(&arc)]).stdout).unwrap();
    assert!(
        listed.contains("late.txt") && !listed.contains("big.bin"),
        "{listed}"
    );
    let got = ok(&["get", s(&arc), "late.txt"]).stdout;
    assert_eq!(got, b"after the crash");
}

#[test]
fn links_are_listed_got_and_extracted_as_links() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/real"), b"real bytes").unwrap();
    std::os::unix::fs::symlink("real", src.join("d/link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("abs")).unwrap();
    let arc = tmp.path().join("a.znippy");
    ok(&["compress", s(&src), "-o", s(&arc)]);
    let long = String::from_utf8(ok(&["list", s(&arc), "--long"]).stdout).unwrap();
    assert!(
        long.lines()
            .any(|l| l.starts_with("l0777") && l.ends_with("abs -> /etc/passwd")),
        "{long}"
    );
    let got = ok(&["get", s(&arc), "abs"]);
    assert_eq!(
        got.stdout, b"/etc/passwd",
        "the target, never /etc/passwd's content"
    );
    assert!(String::from_utf8_lossy(&got.stderr).contains("symbolic link"));
    let dest = tmp.path().join("got-link");
    ok(&["get", s(&arc), "d/link", "-o", s(&dest)]);
    assert_eq!(std::fs::read_link(&dest).unwrap(), Path::new("real"));
    let out = tmp.path().join("out");
    ok(&["decompress", s(&arc), "-o", s(&out)]);
    assert_eq!(std::fs::read(out.join("d/link")).unwrap(), b"real bytes");
    assert_eq!(
        std::fs::read_link(out.join("abs")).unwrap(),
        Path::new("/etc/passwd")
    );
    // --dereference stores what the links point to.
    let deref = tmp.path().join("deref.znippy");
    ok(&["compress", s(&src), "-o", s(&deref), "--dereference"]);
    let long = String::from_utf8(ok(&["list", s(&deref), "--long"]).stdout).unwrap();
    assert!(long.lines().all(|l| l.starts_with('-')), "{long}");
}

/// Found by review: the directory walk recurses once per level, on a thread
/// of its own, and a tree 600 levels deep overflowed a spawned thread's
/// 2 MiB of stack in the test build (an abort, not an error). A path may be
/// 4,096 bytes, so a tree may be 2,000 levels deep: such a tree compresses.
#[test]
fn a_tree_as_deep_as_a_path_allows_compresses() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let deep = "d/".repeat(2_000);
    std::fs::create_dir_all(src.join(&deep)).unwrap();
    let last = format!("{deep}f");
    std::fs::write(src.join(&last), b"at the bottom").unwrap();
    let arc = tmp.path().join("a.znippy");
    ok(&["compress", s(&src), "-o", s(&arc)]);
    assert_eq!(ok(&["get", s(&arc), &last]).stdout, b"at the bottom");
}

/// `znippy` run without the power to read past permission bits: as root that
/// means without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (dropped from the
/// bounding set, so the exec'd process has neither), else as it is.
fn znippy_unprivileged(args: &[&str]) -> Output {
    // SAFETY: geteuid has no preconditions.
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args([
            "--inh-caps=-all",
            "--bounding-set=-dac_override,-dac_read_search",
            "--",
            env!("CARGO_BIN_EXE_znippy"),
        ]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_znippy"))
    };
    cmd.args(args)
        .output()
        .expect("run znippy (setpriv is in util-linux)")
}

#[test]
fn unreadable_files_fail_by_name_unless_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("locked")).unwrap();
    std::fs::write(src.join("ok.txt"), b"readable\n").unwrap();
    std::fs::write(src.join("secret"), b"hidden\n").unwrap();
    std::fs::write(src.join("locked/inner"), b"hidden too\n").unwrap();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(&src.join("secret"), 0o000).unwrap();
    let arc = tmp.path().join("a.znippy");

    // The unreadable file is an error naming it, and no archive is left.
    let out = znippy_unprivileged(&["compress", s(&src), "-o", s(&arc)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("secret") && err.contains("ermission denied"),
        "{err}"
    );
    assert!(!arc.exists());

    // --skip-unreadable leaves out the file and an unlistable directory, one
    // warning line each, and archives the rest.
    mode(&src.join("locked"), 0o000).unwrap();
    let out = znippy_unprivileged(&["compress", s(&src), "-o", s(&arc), "--skip-unreadable"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for name in ["secret", "locked"] {
        let line = err
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.contains("skipped") && line.contains("unreadable"),
            "{line}"
        );
    }
    assert!(err.contains("2 entries skipped"), "{err}");
    mode(&src.join("locked"), 0o755).unwrap();
    let listed = ok(&["list", s(&arc)]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "ok.txt\n");
}

/// A file that is not the size it was listed at when it is read (a file
/// in /proc says 0 bytes and holds more) is named on standard error, the
/// archive is written with what was read, and the exit status is 1, as
/// `tar` does for "file changed as we read it". An append says the same.
#[test]
fn a_file_that_changed_as_it_was_read_is_named_and_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("steady.txt"), "steady").unwrap();
    std::os::unix::fs::symlink("/proc/self/status", src.join("status")).unwrap();
    let arc = tmp.path().join("a.znippy");
    let out = znippy(&["compress", s(&src), "-o", s(&arc), "--dereference"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("znippy: status changed as it was read: 0 bytes when listed, "),
        "{stderr}"
    );
    assert!(!stderr.contains("steady.txt"), "{stderr}");
    ok(&["verify", s(&arc)]);
    let got = ok(&["get", s(&arc), "status"]).stdout;
    assert!(
        got.starts_with(b"Name:"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(ok(&["get", s(&arc), "steady.txt"]).stdout, b"steady");

    let more = tmp.path().join("more");
    std::fs::create_dir(&more).unwrap();
    std::os::unix::fs::symlink("/proc/self/status", more.join("again")).unwrap();
    let out = znippy(&["append", s(&arc), s(&more), "--dereference"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("changed as it was read"), "{stderr}");
    ok(&["verify", s(&arc)]);
}
