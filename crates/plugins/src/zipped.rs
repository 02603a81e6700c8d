//! Members of a zip (a jar, a wheel), read through the `zip` crate from a
//! [`Window`].

use std::io::Read;

use znippy_format::{Window, WindowReader};

use crate::bounded::{read_member, Capped, MAX_MEMBER};

/// Most entries a zip may list: what a 4 MiB central directory of the
/// shortest entries holds.
const MAX_ENTRIES: u64 = (znippy_format::WINDOW_HALF as u64) / 46;

/// A zip opened from a window.
pub(crate) struct Zip<'a> {
    zip: zip::ZipArchive<WindowReader<'a>>,
}

impl<'a> Zip<'a> {
    /// Opens the zip in `file`: its central directory must lie in the window.
    pub(crate) fn open(file: &'a Window) -> Result<Self, String> {
        check_directories(file)?;
        let zip =
            zip::ZipArchive::new(file.reader()).map_err(|e| format!("not a readable zip: {e}"))?;
        Ok(Zip { zip })
    }

    /// The names of its entries, in central-directory order; a name that is
    /// not text is left out.
    pub(crate) fn names(&self) -> Vec<String> {
        self.zip
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .collect()
    }

    /// The bytes of member `name`, at most [`MAX_MEMBER`] of them, decoded
    /// through the [`Capped`] bound.
    pub(crate) fn member(&mut self, name: &str) -> Result<Vec<u8>, String> {
        let entry = self.zip.by_name(name).map_err(|e| format!("{name}: {e}"))?;
        if entry.size() > MAX_MEMBER {
            return Err(format!("{name} is larger than {} KiB", MAX_MEMBER >> 10));
        }
        read_member(Capped::new(entry).by_ref(), name)
    }
}

/// The `zip` crate sizes its entry table by what an end-of-central-directory
/// record claims before it reads the directory; a record that claims more
/// than the file holds is refused here first. Every candidate record is
/// checked, as the crate tries each of them.
fn check_directories(file: &Window) -> Result<(), String> {
    let len = file.len();
    let search = len.min(22 + 65_535);
    let mut tail = vec![0u8; search as usize];
    file.read_at(len - search, &mut tail)?;
    let base = len - search;
    let u16_at = |b: &[u8], i: usize| u64::from(u16::from_le_bytes([b[i], b[i + 1]]));
    let u32_at =
        |b: &[u8], i: usize| u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]));
    let u64_at = |b: &[u8], i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(x)
    };
    let mut found = false;
    for at in (0..tail.len().saturating_sub(21)).rev() {
        if tail[at..at + 4] != *b"PK\x05\x06" {
            continue;
        }
        found = true;
        let (mut entries, mut size, mut offset) = (
            u16_at(&tail, at + 10),
            u32_at(&tail, at + 12),
            u32_at(&tail, at + 16),
        );
        // A zip64 locator, 20 bytes before, names the zip64 record.
        if at >= 20 && tail[at - 20..at - 16] == *b"PK\x06\x07" {
            let record = u64_at(&tail, at - 12);
            let mut z = [0u8; 56];
            // The record's size past its first 12 bytes: 44 and its
            // extensible data, which the zip crate reads whole, so small.
            if record.checked_add(56).is_some_and(|e| e <= len)
                && file.read_at(record, &mut z).is_ok()
                && z[..4] == *b"PK\x06\x06"
                && u64_at(&z, 4) <= 64 << 10
            {
                (entries, size, offset) = (u64_at(&z, 32), u64_at(&z, 40), u64_at(&z, 48));
            } else {
                return Err("a zip64 locator names no zip64 record".into());
            }
        }
        let end = offset.checked_add(size);
        if end.is_none_or(|e| e > base + at as u64)
            || entries > MAX_ENTRIES
            || entries > size / 46 + 1
        {
            return Err(format!(
                "the central directory claims {entries} entries in {size} bytes at {offset} of a {len}-byte file"
            ));
        }
    }
    match found {
        true => Ok(()),
        false => Err("not a zip: no end of central directory".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_claims_more_than_the_file_is_refused() {
        // An empty zip: just the end record.
        let mut eocd = b"PK\x05\x06".to_vec();
        eocd.extend_from_slice(&[0u8; 18]);
        assert!(Zip::open(&Window::of(&eocd)).is_ok());
        let mut lying = eocd.clone();
        lying[10..12].copy_from_slice(&u16::MAX.to_le_bytes());
        lying[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = Zip::open(&Window::of(&lying)).err().unwrap();
        assert!(e.contains("central directory claims"), "{e}");
    }
}
