//! A tar stream as a batch: each entry one [`InputFile`], in the stream's
//! order, a file's bytes read straight from the stream.
//!
//! Reads ustar, GNU (long names and link names) and pax (`path`, `linkpath`,
//! `size`) headers. The engine reads each file to its end before it asks for
//! the next, so one pass over the stream suffices and nothing is buffered but
//! one 512-byte header and at most one extension header
//! ([`MAX_TAR_EXTENSION`]). Entries become what `compress` makes of a tree:
//!
//! * a regular file, with the header's permission bits;
//! * a symbolic link, its target as written;
//! * a hard link, a copy of the file it names (which must come earlier in the
//!   stream): its slices point at that file's, no byte is read twice;
//! * a directory that holds no other entry of the stream, after every other
//!   entry, in stream order (one that holds entries comes back as their
//!   parent); global pax headers are skipped;
//! * devices, FIFOs, GNU sparse files and unknown entry types are refused
//!   with an error naming the entry and what it is.
//!
//! The HTTP service's tar uploads and the CLI's `compress --tar` /
//! `append --tar` read through this one reader, so a tar stream gives the same
//! archive bytes on either path.

use std::collections::HashSet;
use std::io::{self, Read};
use std::sync::{Arc, Mutex};

use crate::engine::{InputFile, Source};
use crate::error::{Error, Result};
use crate::kind::Kind;

/// Largest pax header or GNU long name read from a tar stream.
pub const MAX_TAR_EXTENSION: u64 = 64 << 10;

/// The files of a tar stream, as an iterator the engine takes as a batch.
pub struct TarEntries {
    shared: Arc<Mutex<TarStream>>,
    done: bool,
    /// Directories seen, with their permission bits, in stream order.
    dirs: Vec<(String, u32)>,
    /// Every directory some entry lies in.
    parents: HashSet<String>,
    /// Once the stream has ended: the empty directories still to hand out.
    empty: Option<std::vec::IntoIter<(String, u32)>>,
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

/// Notes that the directories above `path` hold an entry.
fn note_parents(parents: &mut HashSet<String>, path: &str) {
    let mut p = path;
    while let Some((parent, _)) = p.rsplit_once('/') {
        if !parents.insert(parent.to_string()) {
            break;
        }
        p = parent;
    }
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
            dirs: Vec::new(),
            parents: HashSet::new(),
            empty: None,
        }
    }

    fn next_entry(&mut self) -> Result<Option<InputFile>> {
        let (shared, dirs, parents) = (&self.shared, &mut self.dirs, &mut self.parents);
        let mut s = shared
            .lock()
            .map_err(|_| tar_error("tar reader poisoned"))?;
        let rest = s.left + s.pad;
        skip(&mut s.src, rest).map_err(|e| tar_error(format!("skipping an entry: {e}")))?;
        s.left = 0;
        s.pad = 0;
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax_path: Option<Vec<u8>> = None;
        let mut pax_link: Option<Vec<u8>> = None;
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
            if kind.is_gnu_longname() || kind.is_gnu_longlink() {
                let mut name = read_extension(&mut s.src, size)?;
                while name.last() == Some(&0) {
                    name.pop();
                }
                match kind.is_gnu_longname() {
                    true => long_name = Some(name),
                    false => long_link = Some(name),
                }
                continue;
            }
            if kind.is_pax_local_extensions() {
                let data = read_extension(&mut s.src, size)?;
                for ext in tar::PaxExtensions::new(&data) {
                    let ext = ext.map_err(|e| tar_error(format!("pax header: {e}")))?;
                    match ext.key() {
                        Ok("path") => pax_path = Some(ext.value_bytes().to_vec()),
                        Ok("linkpath") => pax_link = Some(ext.value_bytes().to_vec()),
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
            let path = path.trim_end_matches('/').to_string();
            let perms = header.mode().ok().map_or(0o644, |m| m & 0o7777);
            if kind.is_pax_global_extensions() || kind.is_dir() {
                skip(&mut s.src, size + padding(size))
                    .map_err(|e| tar_error(format!("skipping {name}: {e}")))?;
                if kind.is_dir() && !path.is_empty() {
                    note_parents(parents, &path);
                    dirs.push((path, perms));
                }
                continue;
            }
            let link = || -> Result<Vec<u8>> {
                pax_link
                    .clone()
                    .or(long_link.clone())
                    .or_else(|| header.link_name_bytes().map(|l| l.into_owned()))
                    .ok_or_else(|| tar_error(format!("{name}: a link with no target")))
            };
            let (mode, source) = if kind.is_symlink() {
                let target = Source::Reader(Box::new(io::Cursor::new(link()?)));
                (Kind::Symlink.mode(0o777), target)
            } else if kind.is_hard_link() {
                let to = String::from_utf8(link()?)
                    .map_err(|_| tar_error(format!("{name}: a link name that is not UTF-8")))?;
                let to = to.trim_start_matches("./").to_string();
                (perms, Source::SameAs(to))
            } else if kind.is_file() || kind.is_contiguous() {
                s.left = size;
                s.pad = padding(size);
                (
                    perms,
                    Source::Reader(Box::new(TarEntry(Arc::clone(shared)))),
                )
            } else {
                let what = match kind.as_byte() {
                    b'3' | b'4' => "a device, which is not archived".to_string(),
                    b'6' => "a FIFO, which is not archived".to_string(),
                    b'S' => "a GNU sparse file, which is not read: write the tar without \
                             --sparse"
                        .to_string(),
                    t => format!("a tar entry of type {:?}, which is not read", t as char),
                };
                return Err(Error::Input {
                    path: name.clone(),
                    reason: what,
                });
            };
            if !kind.is_file() && !kind.is_contiguous() {
                // Links carry no data, but a writer may pad a size anyway.
                s.left = 0;
                s.pad = size + padding(size);
            }
            note_parents(parents, &path);
            return Ok(Some(InputFile {
                path,
                mode: Some(mode),
                source,
            }));
        }
    }

    /// The directories of the stream that hold no entry, once it has ended.
    fn next_empty_dir(&mut self) -> Option<InputFile> {
        let parents = &self.parents;
        let dirs = &mut self.dirs;
        let empty = self.empty.get_or_insert_with(|| {
            let mut seen = HashSet::new();
            std::mem::take(dirs)
                .into_iter()
                .filter(|(p, _)| !parents.contains(p) && seen.insert(p.clone()))
                .collect::<Vec<_>>()
                .into_iter()
        });
        empty.next().map(|(path, perms)| InputFile {
            path,
            mode: Some(Kind::Dir.mode(perms)),
            source: Source::Reader(Box::new(io::empty())),
        })
    }
}

impl Iterator for TarEntries {
    type Item = Result<InputFile>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return self.next_empty_dir().map(Ok);
        }
        match self.next_entry() {
            Ok(Some(f)) => Some(Ok(f)),
            Ok(None) => {
                self.done = true;
                self.next_empty_dir().map(Ok)
            }
            Err(e) => {
                // An error ends the batch: nothing more, not even directories.
                self.done = true;
                self.empty = Some(Vec::new().into_iter());
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry the reader does not take is refused by what it is: a tar
    /// made with `--sparse` says how to write one that is read.
    #[test]
    fn entries_not_read_say_what_they_are() {
        for (kind, says) in [
            (tar::EntryType::Char, "a device"),
            (tar::EntryType::Fifo, "a FIFO"),
            (tar::EntryType::GNUSparse, "without --sparse"),
            (tar::EntryType::new(b'V'), "of type 'V'"),
        ] {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(0);
            b.append_data(&mut h, "e", io::empty()).unwrap();
            let bytes = b.into_inner().unwrap();
            let mut entries = TarEntries::new(Box::new(io::Cursor::new(bytes)));
            match entries.next() {
                Some(Err(Error::Input { path, reason })) => {
                    assert_eq!(path, "e");
                    assert!(reason.contains(says), "{kind:?}: {reason}");
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
    }
}
