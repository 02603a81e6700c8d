//! Signature sections (docs/format.md, 6.6): added after the signed part
//! without changing a byte of it, read back in order, checked by `verify`,
//! dropped by an append, refused when they lie.
//!
//! The format stores a signature's bytes and never reads them as CMS; the
//! signatures here are plain bytes (crates/sign and the CLI tests make
//! real ones).

mod common;

use common::{archive_of, small_props, text, Recording};
use sha2::{Digest, Sha256};
use znippy_format::{
    add_signature, append, signed_content, Archive, Error, InputFile, MetaUpdate, Metadata,
    MAX_SIGNATURE_LEN,
};

fn files() -> Vec<(String, Vec<u8>)> {
    (0..30)
        .map(|i| (format!("d/f{i}"), text(i, 100 + i as usize * 301)))
        .collect()
}

fn signed(sigs: &[&[u8]]) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let plain = archive_of(&files(), small_props(), &Metadata::Absent);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.znippy");
    std::fs::write(&path, &plain).unwrap();
    let identity = Archive::open(plain.as_slice()).unwrap().identity().unwrap();
    for (i, sig) in sigs.iter().enumerate() {
        assert_eq!(
            add_signature(&path, &identity, sig.to_vec()).unwrap(),
            i + 1
        );
    }
    (dir, path, plain)
}

#[test]
fn signing_keeps_every_byte_it_signs_and_adds_in_order() {
    let (_dir, path, plain) = signed(&[b"first", &[7u8; 5000], b"third"]);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..plain.len()], plain.as_slice());
    let a = Archive::open(bytes.as_slice()).unwrap();
    let unsigned = Archive::open(plain.as_slice()).unwrap();
    assert_eq!(a.identity().unwrap(), unsigned.identity().unwrap());
    assert_eq!(a.signed_len(), plain.len() as u64);
    assert_eq!(
        a.signatures().unwrap(),
        vec![b"first".to_vec(), vec![7u8; 5000], b"third".to_vec()]
    );
    assert_eq!(a.sections(), unsigned.sections());
    assert_eq!(a.verify(2).unwrap(), unsigned.verify(2).unwrap());
    let mut out = Vec::new();
    a.read_file("d/f3", &mut out).unwrap();
    assert_eq!(out, text(3, 100 + 3 * 301));
    // The layout is a function of the signed part and the signatures.
    assert_eq!(
        format!("{:x}", Sha256::digest(&bytes)),
        "9d0ad886537cd64dd7259743d61df9c1f2d50633de4415b69cc13fc93ff77939",
        "signed archive bytes changed"
    );
}

#[test]
fn the_signed_content_names_the_identity() {
    let content = signed_content(&[0xab; 32]);
    assert_eq!(content.len(), 91);
    assert_eq!(
        content,
        format!("znippy-identity v1 blake3 {}\n", "ab".repeat(32)).into_bytes()
    );
}

#[test]
fn a_signature_for_another_identity_or_too_large_is_refused_and_changes_nothing() {
    let (_dir, path, _) = signed(&[b"one"]);
    let before = std::fs::read(&path).unwrap();
    let err = add_signature(&path, &[0; 32], b"x".to_vec()).unwrap_err();
    assert!(matches!(err, Error::Changed(_)), "{err}");
    let identity = Archive::open(before.as_slice())
        .unwrap()
        .identity()
        .unwrap();
    let big = vec![0x30; MAX_SIGNATURE_LEN as usize + 1];
    let err = add_signature(&path, &identity, big).unwrap_err();
    assert!(err.to_string().contains("more than"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(!znippy_format::undo_path(&path).exists());
}

#[test]
fn an_append_drops_the_signatures_of_the_identity_it_changes() {
    let (_dir, path, _) = signed(&[b"one", b"two"]);
    let batch = vec![Ok(InputFile::from_bytes("new", b"new".to_vec(), None))];
    append(&path, batch, MetaUpdate::default(), 2, &mut |_| {}).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let a = Archive::open(bytes.as_slice()).unwrap();
    assert!(a.signatures().unwrap().is_empty());
    assert_eq!(a.signed_len(), a.archive_len());
    a.verify(2).unwrap();
    assert!(a.contains("new").unwrap() && a.contains("d/f0").unwrap());
}

#[test]
fn signatures_that_lie_are_refused() {
    let (_dir, path, plain) = signed(&[b"one", b"two"]);
    let bytes = std::fs::read(&path).unwrap();
    let a = Archive::open(bytes.as_slice()).unwrap();
    let sig = a.signature_sections()[1].clone();

    // A byte of a signature: its section hash.
    let mut bad = bytes.clone();
    bad[sig.index_offset as usize] ^= 1;
    let a = Archive::open(bad.as_slice()).unwrap();
    assert!(matches!(a.signatures(), Err(Error::Checksum(_))));
    assert!(a.verify(2).is_err());

    // Every byte of the signed part's manifest and footer: the manifest
    // after the signatures no longer repeats it (or it does not decode);
    // where the byte carries no meaning, the identity the signatures sign
    // is another, and `verify` finds the index is not what its rows make.
    let unsigned = Archive::open(plain.as_slice()).unwrap();
    let identity = unsigned.identity().unwrap();
    for at in unsigned.manifest_offset() as usize..plain.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        match Archive::open(bad.as_slice()) {
            Err(e) => assert!(
                matches!(e, Error::Corrupt(_) | Error::NotAnArchive(_)),
                "{at}: {e}"
            ),
            Ok(a) => {
                assert_ne!(a.identity().unwrap(), identity, "{at}");
                assert!(a.verify(1).is_err(), "{at}");
            }
        }
    }

    // Cut inside the signatures: no footer ends the file.
    let cut = &bytes[..sig.index_offset as usize + 1];
    assert!(Archive::open(cut).is_err());
}

#[test]
fn signing_reads_the_index_only() {
    // What `add_signature` reads is the tail: opening, the identity, the
    // undo copy. A hundred times the payload reads about the same.
    let cost = |n: usize| {
        let files: Vec<(String, Vec<u8>)> = (0..8)
            .map(|i| (format!("f{i}"), common::noise(i, n)))
            .collect();
        let bytes = archive_of(&files, small_props(), &Metadata::Absent);
        let rec = Recording::new(bytes);
        let a = Archive::open(rec.clone()).unwrap();
        a.identity().unwrap();
        a.signatures().unwrap();
        rec.total()
    };
    let (small, large) = (cost(10_000), cost(1_000_000));
    assert!(
        large <= 2 * small,
        "{small} bytes read for 80 KB, {large} for 8 MB"
    );
}
