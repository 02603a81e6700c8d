//! `znippy sign`, `verify --ca`, `identity` and `signature` against an
//! outside verifier: `openssl cms -verify` over what `znippy identity` and
//! `znippy signature` write, with a CA made here by openssl.

use std::path::Path;
use std::process::{Command, Output};

use znippy_testkit::pki::{ok, Pki};

fn znippy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args(args)
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn succeeds(args: &[&str]) -> String {
    let out = znippy(args);
    assert!(
        out.status.success(),
        "znippy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A signed archive of a small tree, signed by each of `signers`.
fn signed_archive(pki: &Pki, signers: &[&str]) -> std::path::PathBuf {
    let tree = pki.path("tree");
    std::fs::create_dir_all(&tree).unwrap();
    for i in 0..40 {
        std::fs::write(
            tree.join(format!("f{i}")),
            format!("file {i} ").repeat(i * 50),
        )
        .unwrap();
    }
    let arc = pki.path("a.znippy");
    succeeds(&["compress", s(&tree), "-o", s(&arc)]);
    for name in signers {
        let (key, cert) = (
            pki.path(&format!("{name}.key")),
            pki.path(&format!("{name}.pem")),
        );
        let mut args = vec!["sign", s(&arc), "--key", s(&key), "--cert", s(&cert)];
        let mid = pki.path("mid.pem");
        if *name == "chained" {
            args.extend(["--chain", s(&mid)]);
        }
        succeeds(&args);
    }
    arc
}

/// Whether openssl accepts signature `n` of `arc` over what `znippy
/// identity` writes of it.
fn openssl_accepts(pki: &Pki, arc: &Path, n: usize) -> bool {
    let (sig, content) = (pki.path("sig.der"), pki.path("content.bin"));
    succeeds(&["signature", s(arc), "-n", &n.to_string(), "-o", s(&sig)]);
    succeeds(&["identity", s(arc), "-o", s(&content)]);
    pki.openssl_accepts(
        &std::fs::read(&sig).unwrap(),
        &std::fs::read(&content).unwrap(),
    )
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 1;
    std::fs::write(path, b).unwrap();
}

/// `(blob_end, signed_len, offset of the last signature)` from `info`.
fn layout(arc: &Path) -> (u64, u64) {
    let info = succeeds(&["info", s(arc)]);
    let field = |k: &str| -> u64 {
        let line = info.lines().find(|l| l.starts_with(k)).unwrap();
        line.split(['(', ' ', ','])
            .filter_map(|w| w.parse().ok())
            .next_back()
            .unwrap()
    };
    (field("blob region"), field("signatures"))
}

#[test]
fn openssl_and_verify_agree_on_every_signature_and_every_change() {
    let pki = Pki::new();
    let outside = pki.openssl_signers();
    let signers = ["p256", "ed25519", "chained"];
    let arc = signed_archive(&pki, &signers);
    let out = succeeds(&["verify", s(&arc), "--ca", s(&pki.path("ca.pem"))]);
    for name in signers {
        assert!(
            out.contains(&format!("signed by CN={name} signer")),
            "{out}"
        );
    }
    assert_eq!(out.matches("leads to the CA").count(), 3, "{out}");
    let unchecked = succeeds(&["verify", s(&arc)]);
    assert_eq!(unchecked.matches("not checked against a CA").count(), 3);
    for (i, name) in signers.iter().enumerate() {
        if outside.contains(name) {
            assert!(openssl_accepts(&pki, &arc, i + 1), "{name}");
        }
    }
    let ca = pki.path("ca.pem");
    let verify_ca = |arc: &Path| znippy(&["verify", s(arc), "--ca", s(&ca)]).status.success();

    // One byte of the tail: the identity is another, so openssl refuses the
    // signature over it, and so does verify.
    let (blob_end, signed_len) = layout(&arc);
    // The signatures are not index: `info` counts the tail up to them.
    let info = succeeds(&["info", s(&arc)]);
    // And its bytes per file with and without the BLAKE3 of each slice.
    let index = signed_len - blob_end;
    let count = |k: &str| -> u64 {
        let line = info.lines().find(|l| l.starts_with(k)).unwrap();
        line[k.len()..].trim().parse().unwrap()
    };
    let (files, slices) = (count("files"), count("slices"));
    let figures = format!(
        "({index} bytes, {:.0} per file; {:.0} without the 32-byte BLAKE3",
        index as f64 / files as f64,
        (index - 32 * slices) as f64 / files as f64
    );
    assert!(
        info.lines()
            .any(|l| l.starts_with("index") && l.contains(&figures)),
        "{figures}\n{info}"
    );
    let pristine = std::fs::read(&arc).unwrap();
    flip(&arc, blob_end + 200);
    assert!(!verify_ca(&arc));
    if znippy(&["identity", s(&arc)]).status.success() {
        assert!(!openssl_accepts(&pki, &arc, 1));
    }

    // One byte of a blob: the tail, and so the identity, is unchanged, and
    // openssl accepts the signature over it; the slice's BLAKE3, which the
    // signed tail holds, no longer matches, and verify refuses the archive.
    std::fs::write(&arc, &pristine).unwrap();
    flip(&arc, blob_end / 2);
    assert!(openssl_accepts(&pki, &arc, 1));
    let out = znippy(&["verify", s(&arc), "--ca", s(&ca)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("checksum"));

    // One byte of a signature: its section hash, and openssl on the
    // changed signature.
    std::fs::write(&arc, &pristine).unwrap();
    let sig = pki.path("sig1.der");
    succeeds(&["signature", s(&arc), "-o", s(&sig)]);
    flip(&arc, signed_len + 64 + 100);
    assert!(!verify_ca(&arc));
    flip(&sig, 100);
    let content = succeeds(&["identity", s(&arc)]);
    assert!(!pki.openssl_accepts(&std::fs::read(&sig).unwrap(), content.as_bytes()));
}

#[test]
fn a_signature_made_by_openssl_is_added_and_accepted() {
    let pki = Pki::new();
    let arc = signed_archive(&pki, &[]);
    let content = pki.path("content.bin");
    succeeds(&["identity", s(&arc), "-o", s(&content)]);
    ok(
        pki.dir.path(),
        &[
            "cms",
            "-sign",
            "-binary",
            "-in",
            "content.bin",
            "-signer",
            "rsa.pem",
            "-inkey",
            "rsa.key",
            "-outform",
            "DER",
            "-out",
            "theirs.der",
        ],
    );
    let theirs = pki.path("theirs.der");
    let out = succeeds(&["sign", s(&arc), "--signature", s(&theirs)]);
    assert!(out.contains("CN=rsa signer"), "{out}");
    let out = succeeds(&["verify", s(&arc), "--ca", s(&pki.path("ca.pem"))]);
    assert!(
        out.contains("signed by CN=rsa signer") && out.contains("leads to the CA"),
        "{out}"
    );

    // A signature over another archive's identity is refused, and nothing changes.
    let before = std::fs::read(&arc).unwrap();
    std::fs::write(&content, b"znippy-identity v1 blake3 00\n").unwrap();
    ok(
        pki.dir.path(),
        &[
            "cms",
            "-sign",
            "-binary",
            "-in",
            "content.bin",
            "-signer",
            "p256.pem",
            "-inkey",
            "p256.key",
            "-outform",
            "DER",
            "-out",
            "other.der",
        ],
    );
    let out = znippy(&["sign", s(&arc), "--signature", s(&pki.path("other.der"))]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not sign"));
    // Truncated DER and a 100 MB chain file: refused with a reason.
    std::fs::write(pki.path("cut.der"), &std::fs::read(&theirs).unwrap()[..50]).unwrap();
    let out = znippy(&["sign", s(&arc), "--signature", s(&pki.path("cut.der"))]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid DER"));
    let big = pki.path("big.pem");
    std::fs::write(&big, vec![b'A'; 100 << 20]).unwrap();
    let (key, cert) = (pki.path("p256.key"), pki.path("p256.pem"));
    let out = znippy(&[
        "sign",
        s(&arc),
        "--key",
        s(&key),
        "--cert",
        s(&cert),
        "--chain",
        s(&big),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("larger than"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&arc).unwrap(), before);
    // Not signed: verify --ca says so.
    let unsigned = pki.path("u.znippy");
    succeeds(&["compress", s(&pki.path("tree")), "-o", s(&unsigned)]);
    let out = znippy(&["verify", s(&unsigned), "--ca", s(&pki.path("ca.pem"))]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not signed"));
}

/// `curl` against the service; returns the status and body.
fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let mut body = out.stdout;
    let at = body.iter().rposition(|&b| b == b'\n').unwrap();
    let status = std::str::from_utf8(&body[at + 1..])
        .unwrap()
        .parse()
        .unwrap();
    body.truncate(at);
    (status, body)
}

#[test]
fn the_service_signs_its_seals() {
    use std::io::BufRead;
    let pki = Pki::new();
    let (key, cert) = (pki.path("p256.key"), pki.path("p256.pem"));
    let data = pki.path("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_znippy"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--threads",
            "2",
            "--data",
            s(&data),
        ])
        .args(["--sign-key", s(&key), "--sign-cert", s(&cert)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let url = |p: &str| format!("{base}{p}");
    for id in ["a", "b"] {
        let (st, _) = curl(&[
            "-X",
            "POST",
            &url("/archives"),
            "-d",
            &format!(r#"{{"id":"{id}"}}"#),
        ]);
        assert_eq!(st, 201);
        for i in 0..5 {
            let (st, _) = curl(&[
                "-X",
                "PUT",
                &url(&format!("/archives/{id}/files/f{i}")),
                "--data-binary",
                &format!("file {i}"),
            ]);
            assert_eq!(st, 200);
        }
    }
    // A replaced file: this seal re-packs; the other is in place.
    let (st, _) = curl(&[
        "-X",
        "PUT",
        &url("/archives/b/files/f1"),
        "--data-binary",
        "again",
    ]);
    assert_eq!(st, 200, "a replaced file");
    let (st, _) = curl(&[&url("/archives/a/archive.znippy.sig")]);
    assert_eq!(st, 409, "a live archive has no signature yet");
    for id in ["a", "b"] {
        let (st, body) = curl(&["-X", "POST", &url(&format!("/archives/{id}/seal"))]);
        let receipt = String::from_utf8(body).unwrap();
        assert_eq!(st, 200, "{receipt}");
        assert!(
            receipt.contains(r#""signer":"CN=p256 signer""#),
            "{receipt}"
        );
        assert!(receipt.contains(&format!(
            r#""signature":"/archives/{id}/archive.znippy.sig""#
        )));

        // The signature the route serves, over the identity read remotely,
        // by range requests, is one openssl accepts.
        let remote = url(&format!("/archives/{id}/archive.znippy"));
        let content = succeeds(&["identity", &remote]);
        let (st, sig) = curl(&[&url(&format!("/archives/{id}/archive.znippy.sig"))]);
        assert_eq!(st, 200);
        assert!(pki.openssl_accepts(&sig, content.as_bytes()), "{id}");
        let local = pki.path(&format!("{id}.znippy"));
        let (st, bytes) = curl(&[&remote]);
        assert_eq!(st, 200);
        std::fs::write(&local, bytes).unwrap();
        let out = succeeds(&["verify", s(&local), "--ca", s(&pki.path("ca.pem"))]);
        assert!(out.contains("signed by CN=p256 signer"), "{out}");
        let remote_sig = pki.path("remote.der");
        succeeds(&["signature", &remote, "-o", s(&remote_sig)]);
        assert_eq!(std::fs::read(&remote_sig).unwrap(), sig);
        // The archive's own description names the signer, read from the
        // sealed file.
        let (st, body) = curl(&[&url(&format!("/archives/{id}"))]);
        assert_eq!(st, 200);
        let about = String::from_utf8(body).unwrap();
        assert!(about.contains(r#""signer":"CN=p256 signer""#), "{about}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
