//! The path from a signer's certificate to a trusted CA.
//!
//! What `openssl cms -verify -CAfile ca.pem -purpose any` checks, and no
//! more: each certificate is signed by the next, every issuer is a CA (its
//! basic constraints say so, or it is a version-1 certificate, which cannot
//! say), each is valid at the time of the check, none has a critical
//! extension this code does not understand, and the path ends at a
//! certificate of the CA file. Certificates the signature carries may serve
//! as intermediates; only the CA file's are trusted. Revocation is not
//! checked (openssl does not either without `-crl_check`).

use std::time::SystemTime;

use der::{Decode, Encode};
use spki::ObjectIdentifier;
use x509_cert::ext::pkix::BasicConstraints;
use x509_cert::Certificate;

use crate::key;
use crate::Error;

/// Longest path walked, the signer included.
const MAX_DEPTH: usize = 8;

const BASIC_CONSTRAINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.19");
/// Critical extensions a path may carry: basic constraints, key usage,
/// extended key usage, subject alternative name, subject and authority key
/// identifiers. With `-purpose any` none of them but the first restricts a
/// signature.
const UNDERSTOOD: [&str; 6] = [
    "2.5.29.19",
    "2.5.29.15",
    "2.5.29.37",
    "2.5.29.17",
    "2.5.29.14",
    "2.5.29.35",
];

/// Finds a path from `leaf` through `pool` to one of `anchors`, checking
/// every link at time `now`.
pub(crate) fn check(
    leaf: &Certificate,
    pool: &[Certificate],
    anchors: &[Certificate],
    now: SystemTime,
) -> Result<(), Error> {
    let mut current = leaf.clone();
    for depth in 0..MAX_DEPTH {
        check_alone(&current, now)?;
        if anchors.iter().any(|a| a == &current) {
            return Ok(());
        }
        let issuer = &current.tbs_certificate.issuer;
        let signed_by =
            |c: &&Certificate| &c.tbs_certificate.subject == issuer && signed(&current, c).is_ok();
        if let Some(anchor) = anchors.iter().find(signed_by) {
            check_alone(anchor, now)?;
            return is_ca(anchor);
        }
        let Some(next) = pool.iter().find(signed_by) else {
            return Err(Error::Untrusted(format!(
                "no certificate of the CA file or the signature issued {:?}{}",
                current.tbs_certificate.subject.to_string(),
                if depth == 0 {
                    ""
                } else {
                    " (in the signer's chain)"
                }
            )));
        };
        is_ca(next)?;
        current = next.clone();
    }
    Err(Error::Untrusted(format!(
        "no CA within {MAX_DEPTH} certificates of the signer"
    )))
}

/// Whether `cert` is signed by `issuer`'s key.
fn signed(cert: &Certificate, issuer: &Certificate) -> Result<(), Error> {
    let tbs = cert
        .tbs_certificate
        .to_der()
        .map_err(Error::der("a certificate"))?;
    let sig = cert.signature.as_bytes().ok_or_else(|| {
        Error::BadSignature("a certificate's signature is not whole bytes".into())
    })?;
    key::verify(
        &issuer.tbs_certificate.subject_public_key_info,
        &cert.signature_algorithm,
        None,
        &tbs,
        sig,
    )
}

/// The checks of one certificate on its own: its validity period and its
/// critical extensions.
fn check_alone(cert: &Certificate, now: SystemTime) -> Result<(), Error> {
    let tbs = &cert.tbs_certificate;
    let name = || tbs.subject.to_string();
    let validity = &tbs.validity;
    if now < validity.not_before.to_system_time() {
        return Err(Error::Untrusted(format!(
            "the certificate {:?} is not valid before {}",
            name(),
            validity.not_before
        )));
    }
    if now > validity.not_after.to_system_time() {
        return Err(Error::Untrusted(format!(
            "the certificate {:?} expired at {}",
            name(),
            validity.not_after
        )));
    }
    for ext in tbs.extensions.iter().flatten() {
        if ext.critical && !UNDERSTOOD.contains(&ext.extn_id.to_string().as_str()) {
            return Err(Error::Untrusted(format!(
                "the certificate {:?} has a critical extension {} this verifier does not know",
                name(),
                ext.extn_id
            )));
        }
    }
    Ok(())
}

/// An issuer must be a CA: its basic constraints say so, or it is a
/// version-1 certificate, which has no extensions to say it with.
fn is_ca(cert: &Certificate) -> Result<(), Error> {
    let tbs = &cert.tbs_certificate;
    let constraints = tbs
        .extensions
        .iter()
        .flatten()
        .find(|e| e.extn_id == BASIC_CONSTRAINTS);
    let ca = match constraints {
        Some(ext) => {
            BasicConstraints::from_der(ext.extn_value.as_bytes())
                .map_err(Error::der("basic constraints"))?
                .ca
        }
        None => tbs.version == x509_cert::Version::V1,
    };
    if !ca {
        return Err(Error::Untrusted(format!(
            "the certificate {:?} issued another but is not a CA",
            tbs.subject.to_string()
        )));
    }
    Ok(())
}
