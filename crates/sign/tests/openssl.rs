//! Round trips with an outside implementation: openssl verifies what
//! znippy signs, znippy verifies what openssl signs, with a CA made by
//! `openssl req` and `openssl x509` here.

use std::time::SystemTime;

use znippy_sign::{certificates_from_pem, verify, Error, Signer};
use znippy_testkit::pki::{ok, Pki};

fn signer(pki: &Pki, name: &str) -> Signer {
    let chain = (name == "chained").then(|| pki.path("mid.pem"));
    Signer::from_files(
        &pki.path(&format!("{name}.key")),
        &pki.path(&format!("{name}.pem")),
        chain.as_deref(),
    )
    .unwrap()
}

fn anchors(pki: &Pki) -> Vec<x509_cert::Certificate> {
    certificates_from_pem(&std::fs::read(pki.path("ca.pem")).unwrap()).unwrap()
}

const CONTENT: &[u8] =
    b"znippy-identity v1 blake3 0000000000000000000000000000000000000000000000000000000000000000\n";

#[test]
fn openssl_accepts_what_znippy_signs_and_refuses_it_changed() {
    let pki = Pki::new();
    let anchors = anchors(&pki);
    let outside = pki.openssl_signers();
    for name in ["p256", "ed25519", "chained"] {
        let sig = signer(&pki, name).sign(CONTENT).unwrap();
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
        args.extend(Pki::md(name));
        ok(pki.dir.path(), &args);
        let sig = std::fs::read(pki.path("theirs.der")).unwrap();
        let signed = verify(&sig, CONTENT, Some(&anchors(&pki)), SystemTime::now()).unwrap();
        assert_eq!(signed[0].signer, format!("CN={name} signer"), "{name}");
        assert!(verify(&sig, b"other", Some(&anchors(&pki)), SystemTime::now()).is_err());
    }
}

#[test]
fn a_signer_outside_the_ca_is_untrusted_but_its_signature_checks() {
    let pki = Pki::new();
    let sig = signer(&pki, "p256").sign(CONTENT).unwrap();
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
        verify(&sig, CONTENT, Some(&anchors(&pki)), later),
        Err(Error::Untrusted(m)) if m.contains("expired")
    ));
    // The chained signer without its intermediate does not reach the CA.
    let bare =
        Signer::from_files(&pki.path("chained.key"), &pki.path("chained.pem"), None).unwrap();
    let sig = bare.sign(CONTENT).unwrap();
    assert!(matches!(
        verify(&sig, CONTENT, Some(&anchors(&pki)), SystemTime::now()),
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
    let sig = signer(&pki, "p256").sign(CONTENT).unwrap();
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
        let _ = verify(&bad, CONTENT, Some(&anchors(&pki)), SystemTime::now());
    }
}
