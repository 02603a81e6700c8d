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
    /// Size of the pieces a large file is cut into, and the most a blob holds.
    pub chunk_size: u64,
    /// Files up to this size are packed together into shared blobs.
    pub pack_threshold: u64,
    /// The most a pack block holds: a `get` decodes its pack up to the file it
    /// wants, so this bounds the work of reading a small file. From format
    /// version 9; before it a pack held up to `chunk_size`.
    pub pack_size: u64,
    /// zstd compression level.
    pub level: i32,
}

impl Default for ArchiveProps {
    fn default() -> Self {
        ArchiveProps::new(1536 << 10, 512 << 10, None, 3)
    }
}

/// The pack size when none is asked for, within the other properties'
/// bounds (docs/benchmarks.md, "Packs of 512 KiB, and format version 9").
const DEFAULT_PACK_SIZE: u64 = 512 << 10;

/// The first format version that records `pack_size`.
const PACK_SIZE_SINCE: u32 = 9;

pub(crate) const KEY_CHUNK_SIZE: &str = "znippy.chunk_size";
pub(crate) const KEY_PACK_THRESHOLD: &str = "znippy.pack_threshold";
pub(crate) const KEY_PACK_SIZE: &str = "znippy.pack_size";
pub(crate) const KEY_CODEC: &str = "znippy.codec";
pub(crate) const KEY_LEVEL: &str = "znippy.level";

impl ArchiveProps {
    /// Properties with `pack_size` as asked or, when it is not, 512 KiB
    /// within `pack_threshold..=chunk_size`; [`ArchiveProps::validate`] checks
    /// them.
    pub fn new(chunk_size: u64, pack_threshold: u64, pack_size: Option<u64>, level: i32) -> Self {
        ArchiveProps {
            chunk_size,
            pack_threshold,
            pack_size: pack_size
                .unwrap_or_else(|| DEFAULT_PACK_SIZE.max(pack_threshold).min(chunk_size)),
            level,
        }
    }

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
        if !(self.pack_threshold..=self.chunk_size).contains(&self.pack_size) {
            return Err(Error::Property(format!(
                "pack_size {} must lie between pack_threshold {} and chunk_size {}",
                self.pack_size, self.pack_threshold, self.chunk_size
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

    /// Records the properties as format `version` did: `pack_size` from
    /// version 9.
    pub(crate) fn to_metadata(self, md: &mut HashMap<String, String>, version: u32) {
        md.insert(KEY_CHUNK_SIZE.into(), self.chunk_size.to_string());
        md.insert(KEY_PACK_THRESHOLD.into(), self.pack_threshold.to_string());
        if version >= PACK_SIZE_SINCE {
            md.insert(KEY_PACK_SIZE.into(), self.pack_size.to_string());
        }
        md.insert(KEY_CODEC.into(), CODEC.into());
        md.insert(KEY_LEVEL.into(), self.level.to_string());
    }

    /// Reads the properties of a format `version` manifest.
    pub(crate) fn from_metadata(md: &HashMap<String, String>, version: u32) -> Result<Self> {
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
        let chunk_size = num(md, KEY_CHUNK_SIZE)?;
        let props = ArchiveProps {
            chunk_size,
            pack_threshold: num(md, KEY_PACK_THRESHOLD)?,
            pack_size: match version >= PACK_SIZE_SINCE {
                true => num(md, KEY_PACK_SIZE)?,
                false => chunk_size,
            },
            level: num(md, KEY_LEVEL)?,
        };
        props
            .validate()
            .map_err(|e| Error::corrupt(format!("manifest properties: {e}")))?;
        Ok(props)
    }
}
