//! A test PKI made by `openssl req` and `openssl x509`, and openssl's CMS
//! verifier: the outside implementation the signing tests hold znippy to.
//!
//! The openssl is `$ZNIPPY_OPENSSL`, or the one on `PATH`. `./scripts/test`
//! sets it to one that has Ed25519 in CMS (`scripts/openssl`), and then an
//! openssl without it fails the tests rather than skipping Ed25519.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs openssl in `dir`.
pub fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    let program = std::env::var_os("ZNIPPY_OPENSSL").unwrap_or_else(|| "openssl".into());
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs")
}

/// Runs openssl in `dir`, which must succeed.
pub fn ok(dir: &Path, args: &[&str]) {
    let out = openssl(dir, args);
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca`), an intermediate CA (`mid`), and signers with P-256
/// (`p256`), Ed25519 (`ed25519`) and RSA (`rsa`) keys issued by the CA, and
/// one with a P-256 key issued by the intermediate (`chained`).
pub struct Pki {
    /// The directory its keys and certificates are in.
    pub dir: tempfile::TempDir,
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

impl Pki {
    /// Makes the CA, the intermediate and the signers.
    pub fn new() -> Pki {
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
                // Said, not left to the openssl.cnf of the machine.
                "-addext",
                "basicConstraints=critical,CA:TRUE",
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

    /// A file of the PKI: `ca.pem`, `NAME.key`, `NAME.pem`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Whether `openssl cms -verify` accepts `sig` over `content`.
    pub fn openssl_accepts(&self, sig: &[u8], content: &[u8]) -> bool {
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
    /// (Debian 12's) has no Ed25519 in CMS; 3.2 added it, with the digest
    /// named (`-md sha512`, [`Pki::md`]).
    pub fn openssl_signers(&self) -> Vec<&'static str> {
        std::fs::write(self.path("probe.bin"), b"probe").unwrap();
        let mut args = vec![
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
        ];
        args.extend(Pki::md("ed25519"));
        let ed25519 = openssl(self.dir.path(), &args).status.success();
        let mut names = vec!["p256", "chained", "rsa"];
        if ed25519 {
            names.push("ed25519");
        } else if std::env::var_os("ZNIPPY_OPENSSL").is_some() {
            panic!("$ZNIPPY_OPENSSL has no Ed25519 in CMS: see scripts/openssl");
        } else {
            eprintln!("this openssl has no Ed25519 in CMS: Ed25519 is checked by znippy alone");
        }
        names
    }

    /// What `openssl cms -sign` needs told for signer `name`: EdDSA has no
    /// default digest there, and SHA-512 is the one RFC 8419 pairs with
    /// Ed25519.
    pub fn md(name: &str) -> &'static [&'static str] {
        match name {
            "ed25519" => &["-md", "sha512"],
            _ => &[],
        }
    }
}
