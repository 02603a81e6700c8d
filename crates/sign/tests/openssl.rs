//! Round trips with an outside implementation: openssl verifies what
//! znippy signs, znippy verifies what openssl signs, with a CA made by
//! `openssl req` and `openssl x509` here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use znippy_sign::{certificates_from_pem, verify, Error, Signer};

fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    out
}

fn ok(dir: &Path, args: &[&str]) {
    let out = openssl(dir, args);
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, an intermediate CA, and signers with P-256, Ed25519 and RSA keys.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ok(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=test ca",
            ],
        );
        std::fs::write(d.join("ca.ext"), "basicConstraints=critical,CA:TRUE\n").unwrap();
        ok(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "mid.key",
                "-out",
                "mid.csr",
                "-subj",
                "/CN=test intermediate",
            ],
        );
        ok(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "mid.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "mid.pem",
                "-days",
                "2",
                "-extfile",
                "ca.ext",
            ],
        );
        for (name, newkey, issuer) in [
            ("p256", "ec", "ca"),
            ("ed25519", "ed25519", "ca"),
            ("rsa", "rsa:2048", "ca"),
            ("chained", "ec", "mid"),
        ] {
            let mut args = vec!["req", "-newkey", newkey];
            if newkey == "ec" {
                args.extend(["-pkeyopt", "ec_paramgen_curve:P-256"]);
            }
            let (key, csr, cert) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            let subj = format!("/CN={name} signer");
            args.extend(["-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj]);
            ok(d, &args);
            let (ca, ca_key) = (format!("{issuer}.pem"), format!("{issuer}.key"));
            ok(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    &ca,
                    "-CAkey",
                    &ca_key,
                    "-CAcreateserial",
                    "-out",
                    &cert,
                    "-days",
                    "2",
                ],
            );
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn signer(&self, name: &str) -> Signer {
        let chain = (name == "chained").then(|| self.path("mid.pem"));
        Signer::from_files(
            &self.path(&format!("{name}.key")),
            &self.path(&format!("{name}.pem")),
            chain.as_deref(),
        )
        .unwrap()
    }

    fn anchors(&self) -> Vec<x509_cert::Certificate> {
        certificates_from_pem(&std::fs::read(self.path("ca.pem")).unwrap()).unwrap()
    }

    /// Whether `openssl cms -verify` accepts `sig` over `content`.
    fn openssl_accepts(&self, sig: &[u8], content: &[u8]) -> bool {
        std::fs::write(self.path("sig.der"), sig).unwrap();
        std::fs::write(self.path("content.bin"), content).unwrap();
        openssl(
            self.dir.path(),
            &[
                "cms",
                "-verify",
                "-binary",
                "-inform",
                "DER",
                "-in",
                "sig.der",
                "-content",
                "content.bin",
                "-CAfile",
                "ca.pem",
                "-purpose",
                "any",
                "-out",
                "/dev/null",
            ],
        )
        .status
        .success()
    }

    /// The signers this openssl signs and verifies CMS with. OpenSSL 3.0
    /// (Debian 12's) has no Ed25519 in CMS ("no default digest" for it);
    /// 3.2 added it, and the tests then hold openssl to Ed25519 too.
    fn openssl_signers(&self) -> Vec<&'static str> {
        std::fs::write(self.path("probe.bin"), b"probe").unwrap();
        let ed25519 = openssl(
            self.dir.path(),
            &[
                "cms",
                "-sign",
                "-binary",
                "-in",
                "probe.bin",
                "-signer",
                "ed25519.pem",
                "-inkey",
                "ed25519.key",
                "-outform",
                "DER",
                "-out",
                "probe.der",
            ],
        )
        .status
        .success();
        let mut names = vec!["p256", "chained", "rsa"];
        if ed25519 {
            names.push("ed25519");
        } else {
            eprintln!("this openssl has no Ed25519 in CMS: Ed25519 is checked by znippy alone");
        }
        names
    }
}

const CONTENT: &[u8] =
    b"znippy-identity v1 blake3 0000000000000000000000000000000000000000000000000000000000000000\n";

#[test]
fn openssl_accepts_what_znippy_signs_and_refuses_it_changed() {
    let pki = Pki::new();
    let anchors = pki.anchors();
    let outside = pki.openssl_signers();
    for name in ["p256", "ed25519", "chained"] {
        let sig = pki.signer(name).sign(CONTENT).unwrap();
        let openssl_checks = outside.contains(&name);
        assert!(
            !openssl_checks || pki.openssl_accepts(&sig, CONTENT),
            "{name}"
        );
        let signed = verify(&sig, CONTENT, Some(&anchors), SystemTime::now()).unwrap();
        assert_eq!(signed.len(), 1);
        assert_eq!(signed[0].signer, format!("CN={name} signer"));
        assert!(signed[0].trusted && signed[0].signing_time.is_some());

        let mut other = CONTENT.to_vec();
        other[30] ^= 1;
        assert!(
            !openssl_checks || !pki.openssl_accepts(&sig, &other),
            "{name}"
        );
        assert!(matches!(
            verify(&sig, &other, Some(&anchors), SystemTime::now()),
            Err(Error::WrongContent(_))
        ));
        // Each byte of the signature's last 64 (the signature value) changed
        // alone: both refuse.
        for i in sig.len() - 64..sig.len() {
            let mut bad = sig.clone();
            bad[i] ^= 0x40;
            let ours = verify(&bad, CONTENT, Some(&anchors), SystemTime::now());
            assert!(ours.is_err(), "{name}: byte {i}");
            if openssl_checks && i % 16 == 0 {
                assert!(!pki.openssl_accepts(&bad, CONTENT), "{name}: byte {i}");
            }
        }
    }
}

#[test]
fn znippy_accepts_what_openssl_signs() {
    let pki = Pki::new();
    std::fs::write(pki.path("content.bin"), CONTENT).unwrap();
    for name in pki.openssl_signers() {
        let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
        let mut args = vec![
            "cms",
            "-sign",
            "-binary",
            "-in",
            "content.bin",
            "-signer",
            &cert,
            "-inkey",
            &key,
            "-outform",
            "DER",
            "-out",
            "theirs.der",
        ];
        if name == "chained" {
            args.extend(["-certfile", "mid.pem"]);
        }
        ok(pki.dir.path(), &args);
        let sig = std::fs::read(pki.path("theirs.der")).unwrap();
        let signed = verify(&sig, CONTENT, Some(&pki.anchors()), SystemTime::now()).unwrap();
        assert_eq!(signed[0].signer, format!("CN={name} signer"), "{name}");
        assert!(verify(&sig, b"other", Some(&pki.anchors()), SystemTime::now()).is_err());
    }
}

#[test]
fn a_signer_outside_the_ca_is_untrusted_but_its_signature_checks() {
    let pki = Pki::new();
    let sig = pki.signer("p256").sign(CONTENT).unwrap();
    // Another CA: the signature is fine, its signer is not trusted.
    ok(
        pki.dir.path(),
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "other.key",
            "-out",
            "other.pem",
            "-days",
            "2",
            "-subj",
            "/CN=test ca",
        ],
    );
    let other = certificates_from_pem(&std::fs::read(pki.path("other.pem")).unwrap()).unwrap();
    assert!(matches!(
        verify(&sig, CONTENT, Some(&other), SystemTime::now()),
        Err(Error::Untrusted(_))
    ));
    let unchecked = verify(&sig, CONTENT, None, SystemTime::now()).unwrap();
    assert!(!unchecked[0].trusted);
    // A week on, every certificate has expired.
    let later = SystemTime::now() + std::time::Duration::from_secs(7 * 86_400);
    assert!(matches!(
        verify(&sig, CONTENT, Some(&pki.anchors()), later),
        Err(Error::Untrusted(m)) if m.contains("expired")
    ));
    // The chained signer without its intermediate does not reach the CA.
    let bare =
        Signer::from_files(&pki.path("chained.key"), &pki.path("chained.pem"), None).unwrap();
    let sig = bare.sign(CONTENT).unwrap();
    assert!(matches!(
        verify(&sig, CONTENT, Some(&pki.anchors()), SystemTime::now()),
        Err(Error::Untrusted(_))
    ));
    assert!(!pki.openssl_accepts(&sig, CONTENT));
}

#[test]
fn a_key_that_is_not_the_certificates_is_refused() {
    let pki = Pki::new();
    let err =
        Signer::from_files(&pki.path("ed25519.key"), &pki.path("p256.pem"), None).unwrap_err();
    assert!(
        err.to_string().contains("not the one the certificate"),
        "{err}"
    );
    let err = Signer::from_files(&pki.path("rsa.key"), &pki.path("rsa.pem"), None).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
}

#[test]
fn hostile_signatures_are_refused_with_a_reason() {
    let pki = Pki::new();
    let sig = pki.signer("p256").sign(CONTENT).unwrap();
    for cut in [0, 1, 2, 10, sig.len() / 2, sig.len() - 1] {
        let err = verify(&sig[..cut], CONTENT, None, SystemTime::now()).unwrap_err();
        assert!(
            matches!(err, Error::Der { .. } | Error::Malformed(_)),
            "{cut}: {err}"
        );
    }
    let big = vec![0x30; znippy_sign::MAX_SIGNATURE_LEN + 1];
    assert!(matches!(
        verify(&big, CONTENT, None, SystemTime::now()),
        Err(Error::Malformed(_))
    ));
    // Every byte flipped in turn: an error or, where DER does not care
    // (nowhere, for a signature this small), the same answer; never a panic.
    for i in 0..sig.len() {
        let mut bad = sig.clone();
        bad[i] ^= 0xff;
        let _ = verify(&bad, CONTENT, Some(&pki.anchors()), SystemTime::now());
    }
}
