//! Signature sections: detached signatures over an archive's identity,
//! added after the part they sign (docs/format.md, 6.6).
//!
//! A signature must not change what it signs, and a second one must not
//! change what the first signed. So signing never rewrites the archive: it
//! keeps every byte up to the end of its footer (the *signed part*, whose
//! tail is the identity) and writes after it the signature sections and a
//! second manifest and footer:
//!
//! ```text
//! [ blobs ][ tail ... manifest | footer ][ pad | signature ]...[ pad | manifest' | footer' ]
//!          '------ identity -----------'
//! ```
//!
//! `manifest'` is the signed manifest's rows and metadata, plus a row per
//! signature (`pkg_type -128`, [`SIGNATURE`]) and `znippy.signed_len`, the
//! end of the signed part. A reader that knows nothing of signatures reads
//! `manifest'` and skips the rows it does not know; this one also reads the
//! signed manifest and requires `manifest'` to say exactly what it says, so
//! what a reader reads is what the identity covers. Signing again rewrites
//! only what follows the signed part.
//!
//! What is signed is not the tail's bytes but [`signed_content`], a line
//! naming the identity: a verifier rebuilds it from the archive with a
//! BLAKE3 tool and `printf`, and it is what `znippy identity` writes.

use std::io::Write;

use crate::error::{Error, Result};
use crate::io::ReadAt;
use crate::manifest::{self, SectionEntry};
use crate::schema::SIGNATURE;
use crate::tail::{Aligned, ALIGN};

/// Schema-metadata key of the manifest after the signatures: where the
/// signed part ends (20 digits, zero-padded).
pub(crate) const KEY_SIGNED_LEN: &str = "znippy.signed_len";

/// Largest signature section read. A CMS signature with a chain of a few
/// certificates is a few KiB.
pub const MAX_SIGNATURE_LEN: u64 = 1 << 20;

/// Most signature sections an archive may have.
pub const MAX_SIGNATURES: usize = 64;

/// The bytes a signature over an archive signs: one line of ASCII,
/// `znippy-identity v1 blake3 <64 lowercase hex digits>\n`, 91 bytes.
pub fn signed_content(identity: &[u8; 32]) -> Vec<u8> {
    let hex: String = identity.iter().map(|b| format!("{b:02x}")).collect();
    format!("znippy-identity v1 blake3 {hex}\n").into_bytes()
}

/// Where an archive's signatures are.
#[derive(Debug, Clone)]
pub(crate) struct Signed {
    /// End of the signed part: the archive's length when it has no signature.
    pub(crate) end: u64,
    /// The signature sections, in the order they were added.
    pub(crate) sections: Vec<SectionEntry>,
}

fn is_signature(s: &SectionEntry) -> bool {
    s.is_reserved() && s.module_name == SIGNATURE
}

/// Splits the manifest that ends an archive of `len` bytes into the signed
/// part's manifest and the signatures after it. An archive without
/// signatures is its own signed part.
pub(crate) fn split(
    src: &dyn ReadAt,
    outer: manifest::Read,
    len: u64,
) -> Result<(manifest::Read, Signed)> {
    let n = outer.sections.iter().filter(|s| is_signature(s)).count();
    if n == 0 {
        if outer.md.contains_key(KEY_SIGNED_LEN) {
            return Err(Error::corrupt(format!(
                "the manifest names a signed part ({KEY_SIGNED_LEN}) but no signature"
            )));
        }
        let signed = Signed {
            end: len,
            sections: Vec::new(),
        };
        return Ok((outer, signed));
    }
    if n > MAX_SIGNATURES {
        return Err(Error::corrupt(format!(
            "{n} signature sections, more than the {MAX_SIGNATURES} an archive may have"
        )));
    }
    let end: u64 = outer
        .md
        .get(KEY_SIGNED_LEN)
        .and_then(|v| v.parse().ok())
        .filter(|&end| end <= outer.offset)
        .ok_or_else(|| {
            Error::corrupt(format!(
                "an archive with signatures needs a {KEY_SIGNED_LEN} before its last manifest"
            ))
        })?;
    let inner = manifest::read(src, end)?;
    let (rows, signatures) = outer.sections.split_at(outer.sections.len() - n);
    let mut md = outer.md;
    md.remove(KEY_SIGNED_LEN);
    if rows != inner.sections || !signatures.iter().all(is_signature) || md != inner.md {
        return Err(Error::corrupt(
            "the manifest after the signatures does not repeat the signed one",
        ));
    }
    let mut at = end;
    for s in signatures {
        let fits = s
            .index_offset
            .checked_add(s.index_len)
            .is_some_and(|e| e <= outer.offset);
        if s.index_offset < at || s.index_offset % ALIGN != 0 || !fits || s.row_count != 1 {
            return Err(Error::corrupt(format!(
                "signature section at {}+{} lies outside the signatures' region",
                s.index_offset, s.index_len
            )));
        }
        at = s.index_offset + s.index_len;
    }
    let signed = Signed {
        end,
        sections: signatures.to_vec(),
    };
    Ok((inner, signed))
}

/// Writes what follows a signed part ending at `end`, whose manifest holds
/// `rows` and `md`: the signatures `sigs`, then the manifest of all. Returns
/// the archive's new length.
pub(crate) fn write_signatures(
    out: &mut dyn Write,
    signed: &manifest::Read,
    end: u64,
    version: u32,
    sigs: &[Vec<u8>],
) -> Result<u64> {
    if sigs.len() > MAX_SIGNATURES {
        return Err(Error::corrupt(format!(
            "an archive may have {MAX_SIGNATURES} signatures"
        )));
    }
    let mut w = Aligned::new(out, end);
    let mut sections = signed.sections.clone();
    for sig in sigs {
        if sig.len() as u64 > MAX_SIGNATURE_LEN {
            return Err(Error::corrupt(format!(
                "a signature of {} bytes, more than the {MAX_SIGNATURE_LEN} a section may hold",
                sig.len()
            )));
        }
        sections.push(w.reserved(SIGNATURE, sig, 1)?);
    }
    let mut md = signed.md.clone();
    md.insert(KEY_SIGNED_LEN.into(), format!("{end:020}"));
    w.manifest(&sections, md, version)?;
    Ok(w.pos)
}
