//! Detached CMS signatures over a znippy archive's identity.
//!
//! A sealed archive proves its own integrity: every slice has its BLAKE3 in
//! the tail, and the tail's BLAKE3 is the archive's identity. It does not say
//! who made it. This crate adds that, in the one form every verifier already
//! speaks: CMS `SignedData` (RFC 5652), DER, detached, over a few bytes of
//! content that name the identity (the format crate's `signed_content`). So
//!
//! ```text
//! openssl cms -verify -binary -inform DER -in sig.der -content content.bin -CAfile ca.pem -purpose any
//! ```
//!
//! accepts what [`Signer::sign`] makes, and [`verify`] accepts what
//! `openssl cms -sign -binary` makes. The crate knows nothing of archives:
//! where a signature lives is the format crate's business.
//!
//! - [`Signer`]: a private key (ECDSA P-256 or Ed25519, PEM) and its
//!   certificate (and chain). Each signature carries the certificates, a
//!   signing time, and the content's digest as a signed attribute.
//! - [`verify`]: each signer's signature over the content, and with CA
//!   certificates, the path from its certificate to one of them (`chain.rs`).
//!   Without them, a signature is checked but its signer is not trusted.
//! - `key.rs`: the key algorithms, the one place that knows them.
//!
//! The types come from RustCrypto's `cms`, `x509-cert` and `der`: no ASN.1 is
//! written by hand. Everything read is bounded: a signature is at most
//! [`MAX_SIGNATURE_LEN`] bytes, with at most [`MAX_CERTIFICATES`]
//! certificates and [`MAX_SIGNERS`] signers.

mod chain;
mod key;

use std::path::Path;
use std::time::SystemTime;

use cms::builder::{create_signing_time_attribute, SignedDataBuilder, SignerInfoBuilder};
use cms::cert::{CertificateChoices, IssuerAndSerialNumber};
use cms::content_info::ContentInfo;
use cms::signed_data::{EncapsulatedContentInfo, SignedData, SignerIdentifier, SignerInfo};
use der::asn1::{ObjectIdentifier, OctetString};
use der::{Decode, Encode};
use signature::Keypair;
use spki::{AlgorithmIdentifierOwned, DynSignatureAlgorithmIdentifier, SignatureBitStringEncoding};
use x509_cert::Certificate;

use key::{Hash, PrivateKey};

/// Largest signature accepted, certificates included.
pub const MAX_SIGNATURE_LEN: usize = 1 << 20;
/// Most certificates one signature may carry.
pub const MAX_CERTIFICATES: usize = 32;
/// Most signers one signature may have.
pub const MAX_SIGNERS: usize = 8;
/// Largest PEM file (key, certificate, chain, CA file) read.
pub const MAX_PEM_LEN: u64 = 1 << 20;

const ID_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.1");
const ID_SIGNED_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.2");
const ID_CONTENT_TYPE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.3");
const ID_MESSAGE_DIGEST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.4");
const ID_SIGNING_TIME: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.5");
const SUBJECT_KEY_ID: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.14");

/// What can go wrong making or checking a signature.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A key, certificate or CA file is not what it should be.
    #[error("{0}")]
    Key(String),
    /// Bytes that should be DER are not.
    #[error("{what} is not valid DER: {source}")]
    Der {
        /// What was being read.
        what: &'static str,
        /// The decoder's complaint.
        source: der::Error,
    },
    /// A signature is not CMS SignedData as this crate reads it, or is too large.
    #[error("not a signature this verifier reads: {0}")]
    Malformed(String),
    /// An algorithm this crate does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The signature does not sign the content.
    #[error("the signature does not sign this content: {0}")]
    WrongContent(String),
    /// A signature could not be made.
    #[error("signing failed: {0}")]
    Build(String),
    /// The signature's bytes do not check out against its signer's key.
    #[error("bad signature: {0}")]
    BadSignature(String),
    /// The signer does not lead to a trusted CA.
    #[error("signer not trusted: {0}")]
    Untrusted(String),
}

impl Error {
    fn der(what: &'static str) -> impl Fn(der::Error) -> Error {
        move |source| Error::Der { what, source }
    }
}

/// Reads a PEM file of at most [`MAX_PEM_LEN`] bytes.
pub fn read_pem(path: &Path) -> Result<Vec<u8>, Error> {
    use std::io::Read;
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_PEM_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_PEM_LEN {
        return Err(Error::Key(format!(
            "{} is larger than the {MAX_PEM_LEN} bytes a key, certificate or chain file may be",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Reads the certificates of a PEM file (a CA file, a chain): at least one,
/// at most [`MAX_CERTIFICATES`].
pub fn certificates_from_pem(pem: &[u8]) -> Result<Vec<Certificate>, Error> {
    let certs = Certificate::load_pem_chain(pem)
        .map_err(|e| Error::Key(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Key("no certificate in the PEM file".into()));
    }
    if certs.len() > MAX_CERTIFICATES {
        return Err(Error::Key(format!(
            "{} certificates, more than the {MAX_CERTIFICATES} a chain may have",
            certs.len()
        )));
    }
    Ok(certs)
}

/// A private key and the certificate that names it, to sign with.
pub struct Signer {
    key: PrivateKey,
    cert: Certificate,
    chain: Vec<Certificate>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("subject", &self.subject())
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer from PEM: the private key, its certificate, and optionally
    /// the intermediate certificates between it and the CA, which every
    /// signature then carries.
    pub fn from_pem(key: &[u8], cert: &[u8], chain: Option<&[u8]>) -> Result<Self, Error> {
        let key = PrivateKey::from_pem(key)?;
        let mut certs = certificates_from_pem(cert)?;
        let cert = certs.remove(0);
        let chain = match chain {
            Some(pem) => certificates_from_pem(pem)?,
            None => certs,
        };
        if chain.len() + 1 > MAX_CERTIFICATES {
            return Err(Error::Key(format!(
                "a chain of {} certificates, more than a signature may carry",
                chain.len()
            )));
        }
        if key.public_key_info()? != cert.tbs_certificate.subject_public_key_info {
            return Err(Error::Key(format!(
                "the key is not the one the certificate {:?} names",
                cert.tbs_certificate.subject.to_string()
            )));
        }
        Ok(Signer { key, cert, chain })
    }

    /// [`Signer::from_pem`] of files.
    pub fn from_files(key: &Path, cert: &Path, chain: Option<&Path>) -> Result<Self, Error> {
        let chain = chain.map(read_pem).transpose()?;
        Signer::from_pem(&read_pem(key)?, &read_pem(cert)?, chain.as_deref())
    }

    /// The signer's subject, as RFC 4514 writes it (`CN=build,O=example`).
    pub fn subject(&self) -> String {
        self.cert.tbs_certificate.subject.to_string()
    }

    /// A detached CMS SignedData (DER) over `content`.
    pub fn sign(&self, content: &[u8]) -> Result<Vec<u8>, Error> {
        let hash = self.key.hash();
        let digest = hash.digest(content);
        let der = match &self.key {
            PrivateKey::P256(k) => self.build::<_, p256::ecdsa::DerSignature>(k, hash, &digest)?,
            PrivateKey::Ed25519(k) => self.build::<_, key::Ed25519Signature>(k, hash, &digest)?,
        };
        // A signature that does not verify must never reach an archive.
        verify(&der, content, None, SystemTime::now())?;
        Ok(der)
    }

    fn build<S, Sig>(&self, signer: &S, hash: Hash, digest: &[u8]) -> Result<Vec<u8>, Error>
    where
        S: Keypair + DynSignatureAlgorithmIdentifier + signature::Signer<Sig>,
        Sig: SignatureBitStringEncoding,
    {
        let failed =
            |what: &'static str| move |e: cms::builder::Error| Error::Build(format!("{what}: {e}"));
        let eci = EncapsulatedContentInfo {
            econtent_type: ID_DATA,
            econtent: None,
        };
        let digest_alg = AlgorithmIdentifierOwned {
            oid: hash.oid(),
            parameters: None,
        };
        let sid = SignerIdentifier::IssuerAndSerialNumber(IssuerAndSerialNumber {
            issuer: self.cert.tbs_certificate.issuer.clone(),
            serial_number: self.cert.tbs_certificate.serial_number.clone(),
        });
        let mut info = SignerInfoBuilder::new(signer, sid, digest_alg.clone(), &eci, Some(digest))
            .map_err(failed("a signer info"))?;
        info.add_signed_attribute(
            create_signing_time_attribute().map_err(failed("the signing time"))?,
        )
        .map_err(failed("the signing time"))?;
        let mut data = SignedDataBuilder::new(&eci);
        data.add_digest_algorithm(digest_alg)
            .map_err(failed("the digest algorithm"))?;
        for cert in std::iter::once(&self.cert).chain(&self.chain) {
            data.add_certificate(CertificateChoices::Certificate(cert.clone()))
                .map_err(failed("a certificate"))?;
        }
        data.add_signer_info::<S, Sig>(info)
            .map_err(failed("the signature"))?;
        data.build()
            .map_err(failed("the signed data"))?
            .to_der()
            .map_err(Error::der("the signed data"))
    }
}

/// One signer of a signature, as [`verify`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The signer certificate's subject (RFC 4514).
    pub signer: String,
    /// Its issuer.
    pub issuer: String,
    /// When the signer says it signed (its signing-time attribute), if it says.
    pub signing_time: Option<String>,
    /// Whether the signer's certificate leads to one of the CA certificates
    /// given; `false` when none were given (the signature is then checked,
    /// its signer is not).
    pub trusted: bool,
}

/// Checks the DER CMS SignedData `der` as a detached signature over
/// `content`: each signer's digest and signature, and with `anchors` (the CA
/// certificates to trust), the path from its certificate to one of them at
/// time `now`. Returns its signers.
pub fn verify(
    der: &[u8],
    content: &[u8],
    anchors: Option<&[Certificate]>,
    now: SystemTime,
) -> Result<Vec<Signed>, Error> {
    let data = signed_data(der)?;
    if data.encap_content_info.econtent_type != ID_DATA {
        return Err(Error::WrongContent(format!(
            "its content type is {}, not data",
            data.encap_content_info.econtent_type
        )));
    }
    if let Some(embedded) = &data.encap_content_info.econtent {
        let embedded: OctetString = embedded
            .decode_as()
            .map_err(Error::der("the embedded content"))?;
        if embedded.as_bytes() != content {
            return Err(Error::WrongContent("it embeds other content".into()));
        }
    }
    let certs: Vec<Certificate> = data
        .certificates
        .iter()
        .flat_map(|set| set.0.iter())
        .filter_map(|c| match c {
            CertificateChoices::Certificate(c) => Some(c.clone()),
            CertificateChoices::Other(_) => None,
        })
        .collect();
    if certs.len() > MAX_CERTIFICATES {
        return Err(Error::Malformed(format!(
            "{} certificates, more than {MAX_CERTIFICATES}",
            certs.len()
        )));
    }
    let signers = data.signer_infos.0.as_slice();
    if signers.is_empty() || signers.len() > MAX_SIGNERS {
        return Err(Error::Malformed(format!(
            "{} signers (1 to {MAX_SIGNERS} are read)",
            signers.len()
        )));
    }
    signers
        .iter()
        .map(|info| {
            let cert = signer_certificate(info, &certs)?;
            let signing_time = check_signer(info, cert, content)?;
            if let Some(anchors) = anchors {
                chain::check(cert, &certs, anchors, now)?;
            }
            Ok(Signed {
                signer: cert.tbs_certificate.subject.to_string(),
                issuer: cert.tbs_certificate.issuer.to_string(),
                signing_time,
                trusted: anchors.is_some(),
            })
        })
        .collect()
}

fn signed_data(der: &[u8]) -> Result<SignedData, Error> {
    if der.len() > MAX_SIGNATURE_LEN {
        return Err(Error::Malformed(format!(
            "{} bytes, more than the {MAX_SIGNATURE_LEN} a signature may be",
            der.len()
        )));
    }
    let info = ContentInfo::from_der(der).map_err(Error::der("the signature"))?;
    if info.content_type != ID_SIGNED_DATA {
        return Err(Error::Malformed(format!(
            "its content type is {}, not SignedData",
            info.content_type
        )));
    }
    info.content
        .decode_as()
        .map_err(Error::der("the signed data"))
}

/// The certificate among `certs` that `info` names as its signer.
fn signer_certificate<'c>(
    info: &SignerInfo,
    certs: &'c [Certificate],
) -> Result<&'c Certificate, Error> {
    certs
        .iter()
        .find(|c| {
            let tbs = &c.tbs_certificate;
            match &info.sid {
                SignerIdentifier::IssuerAndSerialNumber(id) => {
                    id.issuer == tbs.issuer && id.serial_number == tbs.serial_number
                }
                SignerIdentifier::SubjectKeyIdentifier(id) => tbs
                    .extensions
                    .iter()
                    .flatten()
                    .filter(|e| e.extn_id == SUBJECT_KEY_ID)
                    .any(|e| {
                        x509_cert::ext::pkix::SubjectKeyIdentifier::from_der(
                            e.extn_value.as_bytes(),
                        )
                        .is_ok_and(|k| k == *id)
                    }),
            }
        })
        .ok_or_else(|| Error::Malformed("it does not carry its signer's certificate".into()))
}

/// Checks one signer's digest of `content` and its signature, made by
/// `cert`'s key. Returns its signing time, if it gives one.
fn check_signer(
    info: &SignerInfo,
    cert: &Certificate,
    content: &[u8],
) -> Result<Option<String>, Error> {
    let hash = Hash::from_oid(info.digest_alg.oid)?;
    let digest = hash.digest(content);
    let sig = info.signature.as_bytes();
    let spki = &cert.tbs_certificate.subject_public_key_info;
    let Some(attrs) = &info.signed_attrs else {
        // Without signed attributes the signature is over the content itself.
        key::verify(spki, &info.signature_algorithm, Some(hash), content, sig)?;
        return Ok(None);
    };
    let one = |oid: ObjectIdentifier| {
        let mut found = attrs.iter().filter(|a| a.oid == oid);
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some(a), None) if a.values.len() == 1 => Ok(a.values.iter().next()),
            _ => Err(Error::Malformed(format!(
                "attribute {oid} is given more than once"
            ))),
        }
    };
    let content_type: ObjectIdentifier = one(ID_CONTENT_TYPE)?
        .ok_or_else(|| Error::Malformed("no content-type attribute".into()))?
        .decode_as()
        .map_err(Error::der("the content-type attribute"))?;
    if content_type != ID_DATA {
        return Err(Error::WrongContent(format!(
            "it signs content of type {content_type}"
        )));
    }
    let signed_digest: OctetString = one(ID_MESSAGE_DIGEST)?
        .ok_or_else(|| Error::Malformed("no message-digest attribute".into()))?
        .decode_as()
        .map_err(Error::der("the message-digest attribute"))?;
    if signed_digest.as_bytes() != digest.as_slice() {
        return Err(Error::WrongContent(
            "its message digest is not this content's".into(),
        ));
    }
    let signing_time = one(ID_SIGNING_TIME)?
        .map(|v| x509_cert::time::Time::from_der(&v.to_der()?))
        .transpose()
        .map_err(Error::der("the signing-time attribute"))?
        .map(|t| t.to_string());
    let message = attrs
        .to_der()
        .map_err(Error::der("the signed attributes"))?;
    key::verify(spki, &info.signature_algorithm, Some(hash), &message, sig)?;
    Ok(signing_time)
}
