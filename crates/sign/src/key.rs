//! Keys: the private keys znippy signs with, and the public-key checks a
//! verification makes (a signer's signature, a certificate's issuer).
//!
//! Signing takes ECDSA P-256 (with SHA-256) and Ed25519 (RFC 8419: SHA-512
//! for the message digest, pure Ed25519 over the signed attributes).
//! Verifying takes those and RSA PKCS #1 v1.5, the key `openssl req -newkey
//! rsa` makes, so that a signature made by openssl with its default key is
//! accepted too.

use der::asn1::BitString;
use der::{Decode, Encode};
use sha2::{Digest, Sha256, Sha384, Sha512};
use signature::{Keypair, Signer, Verifier};
use spki::{
    AlgorithmIdentifierOwned, DynSignatureAlgorithmIdentifier, ObjectIdentifier,
    SignatureBitStringEncoding, SubjectPublicKeyInfoOwned,
};

use crate::Error;

pub(crate) const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
pub(crate) const SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.2");
pub(crate) const SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.3");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const PRIME256V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const ECDSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ECDSA_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const RSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const RSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const RSA_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");

/// A digest algorithm a signature may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    pub(crate) fn from_oid(oid: ObjectIdentifier) -> Result<Self, Error> {
        match oid {
            SHA256 => Ok(Hash::Sha256),
            SHA384 => Ok(Hash::Sha384),
            SHA512 => Ok(Hash::Sha512),
            other => Err(Error::Unsupported(format!("digest algorithm {other}"))),
        }
    }

    pub(crate) fn oid(self) -> ObjectIdentifier {
        match self {
            Hash::Sha256 => SHA256,
            Hash::Sha384 => SHA384,
            Hash::Sha512 => SHA512,
        }
    }

    pub(crate) fn digest(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(bytes).to_vec(),
            Hash::Sha384 => Sha384::digest(bytes).to_vec(),
            Hash::Sha512 => Sha512::digest(bytes).to_vec(),
        }
    }
}

/// A private key to sign with.
pub(crate) enum PrivateKey {
    P256(p256::ecdsa::SigningKey),
    Ed25519(Ed25519Key),
}

impl PrivateKey {
    /// Reads a PEM private key: PKCS #8 (`PRIVATE KEY`, what `openssl req
    /// -newkey` and `openssl genpkey` write) or SEC1 (`EC PRIVATE KEY`).
    pub(crate) fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let text = std::str::from_utf8(pem).map_err(|_| Error::Key("the key is not PEM".into()))?;
        let (label, der) = der::pem::decode_vec(text.as_bytes())
            .map_err(|e| Error::Key(format!("the key is not PEM: {e}")))?;
        match label {
            "EC PRIVATE KEY" => p256::SecretKey::from_sec1_der(&der)
                .map(|k| PrivateKey::P256(k.into()))
                .map_err(|e| Error::Key(format!("not a P-256 key: {e}"))),
            "PRIVATE KEY" => {
                let info = pkcs8_info(&der)?;
                match info {
                    EC_PUBLIC_KEY => {
                        use p256::pkcs8::DecodePrivateKey;
                        p256::ecdsa::SigningKey::from_pkcs8_der(&der)
                            .map(PrivateKey::P256)
                            .map_err(|e| Error::Key(format!("not a P-256 key: {e}")))
                    }
                    ED25519 => {
                        use ed25519_dalek::pkcs8::DecodePrivateKey;
                        ed25519_dalek::SigningKey::from_pkcs8_der(&der)
                            .map(|k| PrivateKey::Ed25519(Ed25519Key(k)))
                            .map_err(|e| Error::Key(format!("not an Ed25519 key: {e}")))
                    }
                    other => Err(Error::Unsupported(format!(
                        "signing with a key of algorithm {other} (znippy signs with P-256 or Ed25519)"
                    ))),
                }
            }
            other => Err(Error::Key(format!(
                "a PEM block {other:?} is not a private key (PRIVATE KEY or EC PRIVATE KEY)"
            ))),
        }
    }

    /// The public key, as a certificate holds it.
    pub(crate) fn public_key_info(&self) -> Result<SubjectPublicKeyInfoOwned, Error> {
        let der = match self {
            PrivateKey::P256(k) => {
                use p256::pkcs8::EncodePublicKey;
                k.verifying_key().to_public_key_der()
            }
            PrivateKey::Ed25519(k) => {
                use ed25519_dalek::pkcs8::EncodePublicKey;
                k.0.verifying_key().to_public_key_der()
            }
        }
        .map_err(|e| Error::Key(format!("encoding the public key: {e}")))?;
        SubjectPublicKeyInfoOwned::from_der(der.as_bytes()).map_err(Error::der("the public key"))
    }

    /// The digest the signed attributes carry: SHA-512 for Ed25519 (RFC 8419),
    /// SHA-256 for P-256.
    pub(crate) fn hash(&self) -> Hash {
        match self {
            PrivateKey::P256(_) => Hash::Sha256,
            PrivateKey::Ed25519(_) => Hash::Sha512,
        }
    }
}

/// The algorithm of a PKCS #8 private key.
fn pkcs8_info(der: &[u8]) -> Result<ObjectIdentifier, Error> {
    let info = p256::pkcs8::PrivateKeyInfo::from_der(der)
        .map_err(|e| Error::Key(format!("not a PKCS #8 key: {e}")))?;
    Ok(info.algorithm.oid)
}

/// Ed25519 signing for the CMS builder, which wants a signature that encodes
/// itself as a BIT STRING.
pub(crate) struct Ed25519Key(ed25519_dalek::SigningKey);

/// An Ed25519 signature as the CMS builder takes it.
pub(crate) struct Ed25519Signature(ed25519_dalek::Signature);

impl SignatureBitStringEncoding for Ed25519Signature {
    fn to_bitstring(&self) -> der::Result<BitString> {
        BitString::from_bytes(&self.0.to_bytes())
    }
}

impl Signer<Ed25519Signature> for Ed25519Key {
    fn try_sign(&self, msg: &[u8]) -> Result<Ed25519Signature, signature::Error> {
        self.0.try_sign(msg).map(Ed25519Signature)
    }
}

impl Keypair for Ed25519Key {
    type VerifyingKey = ed25519_dalek::VerifyingKey;

    fn verifying_key(&self) -> Self::VerifyingKey {
        self.0.verifying_key()
    }
}

impl DynSignatureAlgorithmIdentifier for Ed25519Key {
    fn signature_algorithm_identifier(&self) -> spki::Result<AlgorithmIdentifierOwned> {
        Ok(AlgorithmIdentifierOwned {
            oid: ED25519,
            parameters: None,
        })
    }
}

/// Checks that `signature` over `message` was made by the key `spki` with
/// the signature algorithm `alg`; `hash` is the digest a CMS signer names,
/// which `alg` may leave out (openssl names RSA signatures `rsaEncryption`).
pub(crate) fn verify(
    spki: &SubjectPublicKeyInfoOwned,
    alg: &AlgorithmIdentifierOwned,
    hash: Option<Hash>,
    message: &[u8],
    signature: &[u8],
) -> Result<(), Error> {
    let bad = || Error::BadSignature("the signature does not match the key".into());
    let spki_der = spki.to_der().map_err(Error::der("a public key"))?;
    let key_alg = spki.algorithm.oid;
    let pick = |named: Option<Hash>| named.or(hash).ok_or_else(|| unsupported_alg(alg));
    match (key_alg, alg.oid) {
        (EC_PUBLIC_KEY, ECDSA_SHA256 | ECDSA_SHA384 | ECDSA_SHA512 | EC_PUBLIC_KEY) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
            if curve != Some(PRIME256V1) {
                return Err(Error::Unsupported(
                    "an EC key on a curve other than P-256".into(),
                ));
            }
            let named = match alg.oid {
                ECDSA_SHA256 => Some(Hash::Sha256),
                ECDSA_SHA384 => Some(Hash::Sha384),
                ECDSA_SHA512 => Some(Hash::Sha512),
                _ => None,
            };
            use p256::pkcs8::DecodePublicKey;
            use signature::hazmat::PrehashVerifier;
            let key = p256::ecdsa::VerifyingKey::from_public_key_der(&spki_der)
                .map_err(|e| Error::Key(format!("a P-256 public key: {e}")))?;
            let sig = p256::ecdsa::DerSignature::from_bytes(signature).map_err(|_| bad())?;
            let sig = p256::ecdsa::Signature::try_from(sig).map_err(|_| bad())?;
            let prehash = pick(named)?.digest(message);
            key.verify_prehash(&prehash, &sig).map_err(|_| bad())
        }
        (ED25519, ED25519) => {
            use ed25519_dalek::pkcs8::DecodePublicKey;
            let key = ed25519_dalek::VerifyingKey::from_public_key_der(&spki_der)
                .map_err(|e| Error::Key(format!("an Ed25519 public key: {e}")))?;
            let sig = ed25519_dalek::Signature::from_slice(signature).map_err(|_| bad())?;
            key.verify_strict(message, &sig).map_err(|_| bad())
        }
        (RSA, RSA | RSA_SHA256 | RSA_SHA384 | RSA_SHA512) => {
            use rsa::pkcs8::DecodePublicKey;
            let key = rsa::RsaPublicKey::from_public_key_der(&spki_der)
                .map_err(|e| Error::Key(format!("an RSA public key: {e}")))?;
            let named = match alg.oid {
                RSA_SHA256 => Some(Hash::Sha256),
                RSA_SHA384 => Some(Hash::Sha384),
                RSA_SHA512 => Some(Hash::Sha512),
                _ => None,
            };
            let sig = rsa::pkcs1v15::Signature::try_from(signature).map_err(|_| bad())?;
            match pick(named)? {
                Hash::Sha256 => {
                    rsa::pkcs1v15::VerifyingKey::<Sha256>::new(key).verify(message, &sig)
                }
                Hash::Sha384 => {
                    rsa::pkcs1v15::VerifyingKey::<Sha384>::new(key).verify(message, &sig)
                }
                Hash::Sha512 => {
                    rsa::pkcs1v15::VerifyingKey::<Sha512>::new(key).verify(message, &sig)
                }
            }
            .map_err(|_| bad())
        }
        _ => Err(unsupported_alg(alg)),
    }
}

fn unsupported_alg(alg: &AlgorithmIdentifierOwned) -> Error {
    Error::Unsupported(format!("signature algorithm {}", alg.oid))
}
