//! Hostile packages: each is recorded as that file's plugin error (or read
//! for what it honestly is) within bounded memory, whatever its headers
//! claim. One test, so that the allocator's cap measures it alone: every
//! case runs under a cap of [`BOUND`] bytes above what was allocated before
//! it, and a case that allocates past it aborts the run.

use std::alloc::System;
use std::io::{Cursor, Write};
use std::sync::Arc;

use zip::write::SimpleFileOptions;
use zip::CompressionMethod;
use znippy_format::{Outcome, Plugin, Value, Window};

#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// What one package may cost a plugin: its window (8 MiB), its kept zip
/// members (16 MiB), a member (1 MiB) and the decoders' state, with room.
const BOUND: usize = 64 << 20;

/// Runs the plugin that claims `name` on `bytes`, fed in 1.5 MiB pieces as
/// the engine feeds them, under the cap.
fn extract(name: &str, bytes: &[u8]) -> Outcome {
    let plugins = znippy_plugins::builtin();
    let plugin: &Arc<dyn Plugin> = plugins.iter().find(|p| p.matches_path(name)).unwrap();
    ALLOC.set_limit(ALLOC.allocated() + BOUND).unwrap();
    let mut window = Window::for_plugin(plugin);
    for piece in bytes.chunks(1_572_864) {
        window.feed(piece);
    }
    let outcome = window.outcome();
    ALLOC.set_limit(usize::MAX).unwrap();
    outcome
}

fn damaged(name: &str, bytes: &[u8], says: &str) {
    match extract(name, bytes) {
        Outcome::Damaged(e) => assert!(e.contains(says), "{name}: {e}"),
        other => panic!("{name}: {other:?}"),
    }
}

fn zip_of(members: &[(&str, &[u8], CompressionMethod)]) -> Vec<u8> {
    let mut z = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes, method) in members {
        z.start_file(
            *name,
            SimpleFileOptions::default().compression_method(*method),
        )
        .unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap().into_inner()
}

/// A gzip'd tar of `entries`, each `(path, claimed size, bytes)`.
fn tgz_of(entries: &[(&str, u64, &[u8])]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar_of(entries)).unwrap();
    gz.finish().unwrap()
}

/// A tar of `entries`, each `(path, claimed size, bytes)`.
fn tar_of(entries: &[(&str, u64, &[u8])]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (path, size, bytes) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_path(path).unwrap();
        h.set_size(*size);
        h.set_mode(0o644);
        h.set_cksum();
        tar.extend_from_slice(h.as_bytes());
        tar.extend_from_slice(bytes);
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    tar
}

/// Every u32 little-endian `from` at the end of a zip's headers for `name`
/// (local and central) set to `to`: sizes that lie.
fn lie_about_size(zip: &mut [u8], name: &str, to: u32) {
    let name = name.as_bytes();
    let mut at = 0;
    while let Some(i) = zip[at..].windows(name.len()).position(|w| w == name) {
        let n = at + i;
        // A local header is 30 bytes before its name, a central one 46.
        for (sig, back, field) in [(b"PK\x03\x04", 30, 22), (b"PK\x01\x02", 46, 24)] {
            if n >= back && &zip[n - back..n - back + 4] == sig {
                zip[n - back + field..n - back + field + 4].copy_from_slice(&to.to_le_bytes());
            }
        }
        at = n + 1;
    }
}

#[test]
fn hostile_packages_are_refused_within_bounded_memory() {
    let zeros = vec![0u8; 300 << 20];

    // A zip bomb: 300 MiB of zeros as the manifest, honestly sized, then
    // claiming 100 bytes.
    let mut bomb = zip_of(&[("META-INF/MANIFEST.MF", &zeros, CompressionMethod::Deflated)]);
    damaged("bomb.jar", &bomb, "larger than 1024 KiB");
    lie_about_size(&mut bomb, "META-INF/MANIFEST.MF", 100);
    damaged("bomb.jar", &bomb, "MANIFEST");

    // A central directory that lies about its size and place.
    let mut lying = zip_of(&[("a.class", b"x", CompressionMethod::Stored)]);
    let n = lying.len();
    lying[n - 22 + 10..n - 22 + 16].copy_from_slice(&[0xff; 6]);
    damaged("lying.jar", &lying, "central directory claims");

    // A 100 MB pom.properties.
    let pom = b"version=1\n".repeat(10 << 20);
    let big = zip_of(&[(
        "META-INF/maven/g/a/pom.properties",
        &pom,
        CompressionMethod::Deflated,
    )]);
    damaged("big-pom.jar", &big, "larger than 1024 KiB");

    // A tar.gz whose first member claims gigabytes, before its Cargo.toml.
    let claims = tgz_of(&[
        ("x-1.0/big", 8 << 30, b"short"),
        ("x-1.0/Cargo.toml", 5, b"[x]\n"),
    ]);
    damaged("x-1.0.crate", &claims, "tar");

    // A gzip bomb: 300 MiB of zeros before package.json.
    let tgz_bomb = tgz_of(&[
        ("package/zeros", zeros.len() as u64, &zeros),
        ("package/package.json", 2, b"{}"),
    ]);
    damaged("bomb.tgz", &tgz_bomb, "more than 256 MiB decoded");

    // Decoders that would allocate what their headers ask: an xz stream
    // with a 64 MiB dictionary, a zstd frame with a 128 MiB window.
    let toml: &[u8] = b"[package]\nname = \"x\"\nversion = \"1.0.0\"\n";
    let tar = tar_of(&[("x-1.0.0/Cargo.toml", toml.len() as u64, toml)]);
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 9);
    xz.write_all(&tar).unwrap();
    damaged("xz-1.0.0.crate", &xz.finish().unwrap(), "memory");
    let mut zst = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    zst.window_log(27).unwrap();
    zst.write_all(&tar).unwrap();
    damaged("zst-1.0.0.crate", &zst.finish().unwrap(), "too much memory");

    // An sdist whose PKG-INFO lies after 10 MB of noise, past what a
    // window keeps of the file: followed to it.
    let noise = znippy_testkit::data::noise(7, 10 << 20);
    let pkg_info: &[u8] = b"Name: x\nVersion: 1\n";
    let sdist = tgz_of(&[
        ("x-1/pyproject.toml", 0, b""),
        ("x-1/data.bin", noise.len() as u64, &noise),
        ("x-1/PKG-INFO", pkg_info.len() as u64, pkg_info),
    ]);
    let Outcome::Package(rows) = extract("x-1.tar.gz", &sdist) else {
        panic!("a 10 MB sdist is read to its end");
    };
    assert_eq!(
        rows[0][..2],
        [Value::Str("x".into()), Value::Str("1".into())]
    );
    // One whose stream ends inside a member before its PKG-INFO: said, and
    // not taken for a tarball that is no package, which the same tarball
    // without its build files is.
    let cut = tgz_of(&[
        ("x-1/pyproject.toml", 0, b""),
        ("x-1/data.bin", 1 << 20, b"short"),
    ]);
    damaged("x-1.tar.gz", &cut, "ends inside a member");
    let plain = tgz_of(&[("x-1/data.bin", 1 << 20, b"short")]);
    assert_eq!(extract("x-1.tar.gz", &plain), Outcome::NotAPackage);

    // A jar nested 50 deep: the outer jar is read, no nested one is opened.
    let mut jar = zip_of(&[("Inner.class", b"x", CompressionMethod::Stored)]);
    for _ in 0..50 {
        jar = zip_of(&[
            ("A.class", b"x", CompressionMethod::Stored),
            ("inner.jar", &jar, CompressionMethod::Stored),
        ]);
    }
    let Outcome::Package(rows) = extract("nested.jar", &jar) else {
        panic!("a nested jar is a jar");
    };
    assert_eq!(rows[0].last(), Some(&Value::I64(1)));

    // A .deb that is no ar archive, and one whose control.tar is noise.
    damaged("x.deb", b"!<arch>\nnot really", "ar");
    let mut deb = b"!<arch>\n".to_vec();
    deb.extend_from_slice(
        format!(
            "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            "control.tar.gz", 0, 0, 0, 644, 8
        )
        .as_bytes(),
    );
    deb.extend_from_slice(b"\x1f\x8bnoise!");
    damaged("y.deb", &deb, "tar");
    // GNU long-name members: a name table entry with none, and a table
    // claiming 10 GB. Neither is read as a long name.
    let ar = |name: &str, size: u64| {
        let mut d = b"!<arch>\n".to_vec();
        d.extend_from_slice(
            format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{size:<10}`\n", 0, 0, 0, 644).as_bytes(),
        );
        d.extend_from_slice(b"xx");
        d
    };
    damaged("long.deb", &ar("/5", 2), "without control.tar");
    damaged("table.deb", &ar("//", 9_999_999_999), "without control.tar");

    // A zip64 record that claims a size for its extensible data as large
    // as the file.
    let mut zip64 = vec![0u8; 100];
    zip64.extend_from_slice(b"PK\x06\x06");
    zip64.extend_from_slice(&(1u64 << 40).to_le_bytes());
    zip64.extend_from_slice(&[0u8; 44]);
    zip64.extend_from_slice(b"PK\x06\x07");
    zip64.extend_from_slice(&0u32.to_le_bytes());
    zip64.extend_from_slice(&100u64.to_le_bytes());
    zip64.extend_from_slice(&1u32.to_le_bytes());
    zip64.extend_from_slice(b"PK\x05\x06");
    zip64.extend_from_slice(&[0xff; 18]);
    damaged("zip64.jar", &zip64, "zip64");
}
