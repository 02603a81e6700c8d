//! A mutation fuzzer for every plugin's parser, bounded in time like the
//! reader's (`ZNIPPY_FUZZ_SECS`): real packages of each kind (and stored,
//! uncompressed ones, whose structure mutations reach) are mutated and read
//! by the plugin that claims them. A case must not panic, hang or allocate
//! past the cap; and its oracle: the window fed in one piece and fed in
//! small pieces, and a following plugin's reader fed in odd pieces, must
//! give the same outcome (what a plugin reads is a function of the file's
//! bytes, however the engine cuts them).

use std::alloc::System;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use znippy_format::{Plugin, Window};
use znippy_testkit::fuzz;

#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, 1 << 30);

fn packages() -> PathBuf {
    let dir = std::env::var_os("ZNIPPY_PACKAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.packages"));
    assert!(dir.join(".stamp").exists(), "run ./scripts/packages");
    dir
}

/// A stored (uncompressed) jar with a manifest and two poms, and a plain
/// tar crate: mutations land in the structure, not in a deflate stream.
fn plain_seeds() -> Vec<(Vec<u8>, String)> {
    let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, body) in [
        (
            "META-INF/MANIFEST.MF",
            "Manifest-Version: 1.0\r\nBundle-SymbolicName: a.b;x=y\r\n\r\n",
        ),
        (
            "META-INF/maven/g/a/pom.properties",
            "groupId=g\nartifactId=a\nversion=1\n",
        ),
        ("A.class", "x"),
        (
            "META-INF/maven/h/b/pom.properties",
            "groupId=h\nartifactId=b\nversion=2\n",
        ),
    ] {
        z.start_file(name, stored).unwrap();
        z.write_all(body.as_bytes()).unwrap();
    }
    let jar = z.finish().unwrap().into_inner();
    let mut tar = tar::Builder::new(Vec::new());
    let toml = b"[package]\nname = \"x\"\nversion = \"1.0.0\"\n[dependencies]\ny = \"1\"\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(toml.len() as u64);
    h.set_mode(0o644);
    tar.append_data(&mut h, "x-1.0.0/Cargo.toml", &toml[..])
        .unwrap();
    vec![
        (jar, "plain.jar".into()),
        (tar.into_inner().unwrap(), "x-1.0.0.crate".into()),
    ]
}

fn seeds() -> Vec<(Vec<u8>, String)> {
    let dir = packages();
    let mut seeds = plain_seeds();
    for name in [
        "py4j.jar",
        "idna-3.7-py3-none-any.whl",
        "idna-3.7.tar.gz",
        "is-number-7.0.0.tgz",
        "semver-7.6.0.tgz",
        "hello_2.10-3_amd64.deb",
    ] {
        seeds.push((std::fs::read(dir.join(name)).unwrap(), name.to_string()));
    }
    seeds
}

fn plugin_for(name: &str) -> Arc<dyn Plugin> {
    znippy_plugins::builtin()
        .into_iter()
        .find(|p| p.matches_path(name))
        .unwrap()
}

#[test]
fn every_plugin_survives_mutated_packages() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/fuzz_plugins.txt");
    fuzz::run(&corpus, &seeds(), false, |input, name, _, _| {
        let plugin = plugin_for(name);
        let mut whole = Window::for_plugin(&plugin);
        whole.feed(input);
        let outcome = whole.outcome();
        let mut cut = Window::for_plugin(&plugin);
        for piece in input.chunks(4_093) {
            cut.feed(piece);
        }
        assert_eq!(cut.outcome(), outcome, "{name}: cut differently");
        // A plugin's reader, as it follows a file larger than a window,
        // fed in odd pieces: what it makes of the file is the same.
        if let Some(mut follow) = plugin.follow(&input[..input.len().min(64)]) {
            for piece in input.chunks(509) {
                follow.feed(piece);
            }
            assert_eq!(follow.finish(), outcome, "{name}: followed in pieces");
        }
        format!("{name}: {}", fuzz::class(&format!("{outcome:?}")))
    });
}
