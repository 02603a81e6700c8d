//! A tar stream as a batch: each regular file one [`InputFile`], in the
//! stream's order, its bytes read straight from the stream.
//!
//! Reads ustar, GNU (long names) and pax (`path`, `size`) headers. The engine
//! reads each file to its end before it asks for the next, so one pass over the
//! stream suffices and nothing is buffered but one 512-byte header and at most
//! one extension header ([`MAX_TAR_EXTENSION`]). Directories and global pax
//! headers are skipped; any other entry type (links, devices, FIFOs) is refused
//! with an error naming it. The HTTP service's tar uploads and the CLI's
//! `compress --tar` / `append --tar` read through this one reader, so a tar
//! stream gives the same archive bytes on either path.

use std::io::{self, Read};
use std::sync::{Arc, Mutex};

use crate::engine::{InputFile, Source};
use crate::error::{Error, Result};

/// Largest pax header or GNU long name read from a tar stream.
pub const MAX_TAR_EXTENSION: u64 = 64 << 10;

/// The files of a tar stream, as an iterator the engine takes as a batch.
pub struct TarEntries {
    shared: Arc<Mutex<TarStream>>,
    done: bool,
}

struct TarStream {
    src: Box<dyn Read + Send>,
    /// Unread bytes of the current entry, then its padding.
    left: u64,
    pad: u64,
}

struct TarEntry(Arc<Mutex<TarStream>>);

impl Read for TarEntry {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s = self
            .0
            .lock()
            .map_err(|_| io::Error::other("tar reader poisoned"))?;
        if s.left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(s.left).unwrap_or(usize::MAX));
        let n = s.src.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                tar_error("the stream ends inside an entry"),
            ));
        }
        s.left -= n as u64;
        Ok(n)
    }
}

fn tar_error(reason: impl Into<String>) -> Error {
    Error::Input {
        path: "<tar stream>".into(),
        reason: reason.into(),
    }
}

fn skip(src: &mut dyn Read, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut src.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Reads `size` bytes of an extension entry, refusing absurd sizes.
fn read_extension(src: &mut dyn Read, size: u64) -> Result<Vec<u8>> {
    if size > MAX_TAR_EXTENSION {
        return Err(tar_error(format!(
            "a pax header or long name of {size} bytes (at most {MAX_TAR_EXTENSION})"
        )));
    }
    let mut data = vec![0u8; size as usize];
    src.read_exact(&mut data)
        .and_then(|_| skip(src, padding(size)))
        .map_err(|e| tar_error(format!("reading an extension header: {e}")))?;
    Ok(data)
}

fn padding(size: u64) -> u64 {
    (512 - size % 512) % 512
}

/// Whether a header block's checksum is right (sum of its bytes, the checksum
/// field counted as spaces).
fn checksum_ok(block: &[u8; 512], header: &tar::Header) -> bool {
    let sum: u32 = block
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u32::from(*b)
            }
        })
        .sum();
    header.cksum().is_ok_and(|c| c == sum)
}

impl TarEntries {
    /// Reads entries from `src` as the engine asks for them.
    pub fn new(src: Box<dyn Read + Send>) -> Self {
        TarEntries {
            shared: Arc::new(Mutex::new(TarStream {
                src,
                left: 0,
                pad: 0,
            })),
            done: false,
        }
    }

    fn next_entry(&mut self) -> Result<Option<InputFile>> {
        let mut s = self
            .shared
            .lock()
            .map_err(|_| tar_error("tar reader poisoned"))?;
        let rest = s.left + s.pad;
        skip(&mut s.src, rest).map_err(|e| tar_error(format!("skipping an entry: {e}")))?;
        s.left = 0;
        s.pad = 0;
        let mut long_name: Option<Vec<u8>> = None;
        let mut pax_path: Option<Vec<u8>> = None;
        let mut pax_size: Option<u64> = None;
        loop {
            let mut block = [0u8; 512];
            match s.src.read(&mut block[..1]) {
                Ok(0) => return Ok(None),
                Ok(_) => s.src.read_exact(&mut block[1..]),
                Err(e) => Err(e),
            }
            .map_err(|e| tar_error(format!("reading a header: {e}")))?;
            if block.iter().all(|b| *b == 0) {
                // End of archive: read what remains so the sender is not left
                // waiting, then stop.
                io::copy(&mut s.src, &mut io::sink())
                    .map_err(|e| tar_error(format!("after the end: {e}")))?;
                return Ok(None);
            }
            let header = tar::Header::from_byte_slice(&block);
            if !checksum_ok(&block, header) {
                return Err(tar_error("a header fails its checksum: not a tar stream?"));
            }
            let size = match pax_size.take() {
                Some(n) => n,
                None => header
                    .entry_size()
                    .map_err(|e| tar_error(format!("entry size: {e}")))?,
            };
            let kind = header.entry_type();
            if kind.is_gnu_longname() {
                let mut name = read_extension(&mut s.src, size)?;
                while name.last() == Some(&0) {
                    name.pop();
                }
                long_name = Some(name);
                continue;
            }
            if kind.is_pax_local_extensions() {
                let data = read_extension(&mut s.src, size)?;
                for ext in tar::PaxExtensions::new(&data) {
                    let ext = ext.map_err(|e| tar_error(format!("pax header: {e}")))?;
                    match ext.key() {
                        Ok("path") => pax_path = Some(ext.value_bytes().to_vec()),
                        Ok("size") => {
                            let v = ext.value().ok().and_then(|v| v.parse().ok());
                            pax_size =
                                Some(v.ok_or_else(|| tar_error("pax size is not a number"))?);
                        }
                        _ => {}
                    }
                }
                continue;
            }
            let raw = pax_path
                .take()
                .or(long_name.take())
                .unwrap_or_else(|| header.path_bytes().into_owned());
            let name =
                String::from_utf8(raw).map_err(|_| tar_error("an entry name is not UTF-8"))?;
            let mut path = name.as_str();
            while let Some(rest) = path.strip_prefix("./") {
                path = rest;
            }
            if kind.is_pax_global_extensions() || kind.is_dir() {
                skip(&mut s.src, size + padding(size))
                    .map_err(|e| tar_error(format!("skipping {name}: {e}")))?;
                continue;
            }
            if !(kind.is_file() || kind.is_contiguous()) {
                return Err(Error::Input {
                    path: name.clone(),
                    reason: format!(
                        "tar entry of type {:?}: only regular files are stored",
                        kind.as_byte() as char
                    ),
                });
            }
            let mode = header.mode().ok().map(|m| m & 0o7777);
            s.left = size;
            s.pad = padding(size);
            return Ok(Some(InputFile {
                path: path.to_string(),
                mode,
                source: Source::Reader(Box::new(TarEntry(Arc::clone(&self.shared)))),
            }));
        }
    }
}

impl Iterator for TarEntries {
    type Item = Result<InputFile>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_entry();
        self.done = !matches!(next, Ok(Some(_)));
        next.transpose()
    }
}
