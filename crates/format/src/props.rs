//! Archive properties: chunking, packing and codec settings.
//!
//! They are recorded in the manifest's schema metadata so an append or a seal
//! reproduces them exactly; a reader validates them before sizing anything by them.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// The only codec, in every format version.
pub const CODEC: &str = "zstd";

/// Smallest chunk size accepted (4 KiB).
pub const MIN_CHUNK_SIZE: u64 = 4 << 10;
/// Largest chunk size accepted (64 MiB): bounds every buffer sized by a blob.
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;

/// How an archive cuts, packs and compresses its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveProps {
    /// Size of the pieces a large file is cut into, and the most a pack block holds.
    pub chunk_size: u64,
    /// Files up to this size are packed together into shared blobs.
    pub pack_threshold: u64,
    /// zstd compression level.
    pub level: i32,
}

impl Default for ArchiveProps {
    fn default() -> Self {
        ArchiveProps {
            chunk_size: 1536 << 10,
            pack_threshold: 512 << 10,
            level: 3,
        }
    }
}

pub(crate) const KEY_CHUNK_SIZE: &str = "znippy.chunk_size";
pub(crate) const KEY_PACK_THRESHOLD: &str = "znippy.pack_threshold";
pub(crate) const KEY_CODEC: &str = "znippy.codec";
pub(crate) const KEY_LEVEL: &str = "znippy.level";

impl ArchiveProps {
    /// Checks every property against its allowed range.
    pub fn validate(&self) -> Result<()> {
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&self.chunk_size) {
            return Err(Error::Property(format!(
                "chunk_size {} is outside {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}",
                self.chunk_size
            )));
        }
        if self.pack_threshold >= self.chunk_size {
            return Err(Error::Property(format!(
                "pack_threshold {} must be smaller than chunk_size {}",
                self.pack_threshold, self.chunk_size
            )));
        }
        let levels = zstd::compression_level_range();
        if !levels.contains(&self.level) {
            return Err(Error::Property(format!(
                "zstd level {} is outside {}..={}",
                self.level,
                levels.start(),
                levels.end()
            )));
        }
        Ok(())
    }

    pub(crate) fn to_metadata(self, md: &mut HashMap<String, String>) {
        md.insert(KEY_CHUNK_SIZE.into(), self.chunk_size.to_string());
        md.insert(KEY_PACK_THRESHOLD.into(), self.pack_threshold.to_string());
        md.insert(KEY_CODEC.into(), CODEC.into());
        md.insert(KEY_LEVEL.into(), self.level.to_string());
    }

    pub(crate) fn from_metadata(md: &HashMap<String, String>) -> Result<Self> {
        fn get<'a>(md: &'a HashMap<String, String>, key: &str) -> Result<&'a str> {
            md.get(key)
                .map(String::as_str)
                .ok_or_else(|| Error::corrupt(format!("manifest lacks {key}")))
        }
        fn num<T: std::str::FromStr>(md: &HashMap<String, String>, key: &str) -> Result<T> {
            let v = get(md, key)?;
            v.parse()
                .map_err(|_| Error::corrupt(format!("manifest {key} = {v:?} is not a number")))
        }
        let codec = get(md, KEY_CODEC)?;
        if codec != CODEC {
            return Err(Error::corrupt(format!("unknown codec {codec:?}")));
        }
        let props = ArchiveProps {
            chunk_size: num(md, KEY_CHUNK_SIZE)?,
            pack_threshold: num(md, KEY_PACK_THRESHOLD)?,
            level: num(md, KEY_LEVEL)?,
        };
        props
            .validate()
            .map_err(|e| Error::corrupt(format!("manifest properties: {e}")))?;
        Ok(props)
    }
}
