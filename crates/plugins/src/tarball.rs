//! Members of a tar stream, plain or under gzip, xz, zstd or bzip2, walked
//! as its bytes are pushed: a tarball plugin follows its file from the first
//! byte to the member it wants, however large the file, and decodes nothing
//! after it.
//!
//! The tar is read by hand, as the format is 512-byte headers of fixed
//! fields: a header's size is taken as a count of bytes to pass, never as
//! one to allocate. Long names and pax headers are members to pass, like any
//! other; the names looked for are short.

use std::io::{self, Write};

use znippy_format::{Follow, Outcome};

use crate::bounded::{MAX_DECODED, MAX_MEMBER};

/// Most memory an xz decoder may take (a dictionary of up to 32 MiB, what
/// `xz -8` writes), and the largest zstd window (32 MiB): a header that
/// asks for more is refused, not allocated.
const MAX_XZ_MEMORY: u64 = 40 << 20;
const MAX_ZSTD_WINDOW_LOG: u32 = 25;

/// A tar block: headers and members' padding.
const BLOCK: usize = 512;

/// The first member `want` named, with its path (`None` when the stream
/// ended without one), or why the stream could not be read that far.
pub(crate) type Found = Result<Option<(String, Vec<u8>)>, String>;

/// What a walk found, and whether `mark` named a member before that point.
pub(crate) struct Walked {
    pub(crate) found: Found,
    pub(crate) marked: bool,
}

/// Compressed bytes a decoder is given per write, at offsets that are
/// multiples of it.
const STEP: usize = 64 << 10;

/// A walk over one tar stream, fed its bytes in order.
///
/// The decoders are written the stream in steps of [`STEP`] bytes from its
/// start, whatever the pieces it is fed in: a decoder that meets damage
/// passes on what it decoded before it or not depending on where its writes
/// began, and a walk's outcome is to depend on the bytes alone.
pub(crate) struct Walk {
    decoder: Decoder,
    /// The current step's bytes, until it is whole.
    step: Vec<u8>,
}

enum Decoder {
    Plain(Tar),
    Gz(flate2::write::GzDecoder<Tar>),
    Xz(liblzma::write::XzDecoder<Tar>),
    Zstd(zstd::stream::write::Decoder<'static, Tar>),
    Bz(bzip2::write::BzDecoder<Tar>),
}

impl Walk {
    /// A walk over the stream that starts with `head` (compressed, by its
    /// magic number, or plain tar), for the first regular file whose path
    /// (without a leading `./`) passes `want`; `mark` is asked of every
    /// regular file before it.
    pub(crate) fn new(head: &[u8], want: fn(&str) -> bool, mark: fn(&str) -> bool) -> Self {
        let tar = Tar::new(want, mark);
        let decoder = match head {
            [0x1f, 0x8b, ..] => Decoder::Gz(flate2::write::GzDecoder::new(tar)),
            [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => {
                match liblzma::stream::Stream::new_stream_decoder(MAX_XZ_MEMORY, 0) {
                    Ok(s) => Decoder::Xz(liblzma::write::XzDecoder::new_stream(tar, s)),
                    Err(e) => Decoder::Plain(tar.ended(Err(format!("xz: {e}")))),
                }
            }
            [0x28, 0xb5, 0x2f, 0xfd, ..] => {
                let made = zstd::stream::write::Decoder::new(tar).and_then(|mut d| {
                    d.window_log_max(MAX_ZSTD_WINDOW_LOG)?;
                    Ok(d)
                });
                match made {
                    Ok(d) => Decoder::Zstd(d),
                    Err(e) => Decoder::Plain(Tar::new(want, mark).ended(Err(format!("zstd: {e}")))),
                }
            }
            [b'B', b'Z', b'h', ..] => Decoder::Bz(bzip2::write::BzDecoder::new(tar)),
            _ => Decoder::Plain(tar),
        };
        Walk {
            decoder,
            step: Vec::new(),
        }
    }

    fn tar(&self) -> &Tar {
        match &self.decoder {
            Decoder::Plain(t) => t,
            Decoder::Gz(d) => d.get_ref(),
            Decoder::Xz(d) => d.get_ref(),
            Decoder::Zstd(d) => d.get_ref(),
            Decoder::Bz(d) => d.get_ref(),
        }
    }

    fn tar_mut(&mut self) -> &mut Tar {
        match &mut self.decoder {
            Decoder::Plain(t) => t,
            Decoder::Gz(d) => d.get_mut(),
            Decoder::Xz(d) => d.get_mut(),
            Decoder::Zstd(d) => d.get_mut(),
            Decoder::Bz(d) => d.get_mut(),
        }
    }

    /// Takes the stream's next bytes; once the walk has ended, passes them.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.tar().end.is_none() {
            if self.step.is_empty() && bytes.len() >= STEP {
                self.write(&bytes[..STEP]);
                bytes = &bytes[STEP..];
                continue;
            }
            let n = bytes.len().min(STEP - self.step.len());
            self.step.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.step.len() == STEP {
                let step = std::mem::take(&mut self.step);
                self.write(&step);
                self.step = step;
                self.step.clear();
            }
        }
    }

    /// Writes one step to the decoder.
    fn write(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.tar().end.is_none() {
            let wrote = match &mut self.decoder {
                Decoder::Plain(t) => t.write(bytes),
                Decoder::Gz(d) => d.write(bytes),
                Decoder::Xz(d) => d.write(bytes),
                Decoder::Zstd(d) => d.write(bytes),
                Decoder::Bz(d) => d.write(bytes),
            };
            match wrote {
                // The compressed stream ended: what follows it is not read.
                Ok(0) => return,
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.tar_mut().fail(e),
            }
        }
    }

    /// What the walk found, the stream fed to its end.
    pub(crate) fn end(mut self) -> Walked {
        let last = std::mem::take(&mut self.step);
        self.write(&last);
        if self.tar().end.is_none() {
            // The decoders' last output, and the check of their trailers.
            let finished = match &mut self.decoder {
                Decoder::Plain(_) => Ok(()),
                Decoder::Gz(d) => d.try_finish(),
                Decoder::Xz(d) => d.try_finish(),
                Decoder::Zstd(d) => d.flush(),
                Decoder::Bz(d) => d.try_finish(),
            };
            if let Err(e) = finished {
                self.tar_mut().fail(e);
            }
        }
        let tar = self.tar_mut();
        let found = match tar.end.take() {
            Some(end) => end,
            None if tar.filled == 0 && tar.pass == 0 && tar.member.is_none() => Ok(None),
            None => Err("not a readable tar: it ends inside a member".into()),
        };
        Walked {
            found,
            marked: tar.marked,
        }
    }
}

/// The tar walker the decoder writes into. It answers a write with an error
/// once it has ended (found its member, hit a cap, met a damaged header), so
/// that the decoder stops there.
struct Tar {
    want: fn(&str) -> bool,
    mark: fn(&str) -> bool,
    marked: bool,
    /// The header being gathered, and how much of it is.
    header: [u8; BLOCK],
    filled: usize,
    /// Bytes of a member (and its padding) still to pass.
    pass: u64,
    /// The wanted member being gathered: its path, its bytes, and how many
    /// of them are still to come.
    member: Option<(String, Vec<u8>, u64)>,
    decoded: u64,
    end: Option<Found>,
}

impl Tar {
    fn new(want: fn(&str) -> bool, mark: fn(&str) -> bool) -> Self {
        Tar {
            want,
            mark,
            marked: false,
            header: [0; BLOCK],
            filled: 0,
            pass: 0,
            member: None,
            decoded: 0,
            end: None,
        }
    }

    /// A walker that has ended before a byte: a decoder that could not be
    /// made.
    fn ended(mut self, end: Found) -> Self {
        self.end = Some(end);
        self
    }

    /// Ends the walk on a decoder's error, unless it ended before (the error
    /// is then the walker's own answer to a write).
    fn fail(&mut self, e: io::Error) {
        self.end
            .get_or_insert_with(|| Err(format!("not a readable tar: {e}")));
    }

    /// Walks `bytes`, the next of the decoded stream; sets `end` when done.
    fn walk(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.end.is_none() {
            if let Some((_, got, left)) = &mut self.member {
                let n = bytes.len().min(*left as usize);
                got.extend_from_slice(&bytes[..n]);
                *left -= n as u64;
                bytes = &bytes[n..];
                if *left == 0 {
                    self.end = self
                        .member
                        .take()
                        .map(|(path, got, _)| Ok(Some((path, got))));
                }
            } else if self.pass > 0 {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.pass).unwrap_or(usize::MAX));
                self.pass -= n as u64;
                bytes = &bytes[n..];
            } else {
                let n = bytes.len().min(BLOCK - self.filled);
                self.header[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
                self.filled += n;
                bytes = &bytes[n..];
                if self.filled == BLOCK {
                    self.filled = 0;
                    let header = self.header;
                    self.next(&header);
                }
            }
        }
    }

    /// Takes in one whole header.
    fn next(&mut self, h: &[u8]) {
        if h.iter().all(|&b| b == 0) {
            // The end-of-archive marker.
            self.end = Some(Ok(None));
            return;
        }
        let Some(size) = header_size(h) else {
            self.end = Some(Err(
                "not a readable tar: a header's size is not a number".into()
            ));
            return;
        };
        let Some(padded) = size.checked_next_multiple_of(BLOCK as u64) else {
            self.end = Some(Err(format!(
                "not a readable tar: a member claims {size} bytes"
            )));
            return;
        };
        if !checksum_ok(h) {
            self.end = Some(Err(
                "not a readable tar: a header's checksum is wrong".into()
            ));
            return;
        }
        let path = header_path(h);
        let path = path.strip_prefix("./").unwrap_or(&path).to_string();
        // Regular files only: `0`, or NUL from before POSIX.
        if matches!(h[156], b'0' | 0) {
            if (self.want)(&path) {
                if size > MAX_MEMBER {
                    let e = format!("{path} is larger than {} KiB", MAX_MEMBER >> 10);
                    self.end = Some(Err(e));
                } else if size == 0 {
                    self.end = Some(Ok(Some((path, Vec::new()))));
                } else {
                    self.member = Some((path, Vec::with_capacity(size as usize), size));
                }
                return;
            }
            self.marked |= (self.mark)(&path);
        }
        self.pass = padded;
    }
}

impl Write for Tar {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.end.is_none() {
            // Past the cap, only the bytes up to it are walked: the walk
            // ends where the stream's bytes say, whatever the cuts.
            let room = MAX_DECODED - self.decoded;
            let n = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            self.decoded += n as u64;
            self.walk(&bytes[..n]);
            if self.end.is_none() && n < bytes.len() {
                self.end = Some(Err(format!(
                    "more than {} MiB decoded before the metadata was found",
                    MAX_DECODED >> 20
                )));
            }
        }
        match self.end {
            None => Ok(bytes.len()),
            Some(_) => Err(io::Error::other("the walk has ended")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A header's size field: octal digits, or GNU's base-256 for large ones.
fn header_size(h: &[u8]) -> Option<u64> {
    let field = &h[124..136];
    if field[0] & 0x80 != 0 {
        // Base-256, big-endian, the first byte's high bit the marker: more
        // than 8 bytes of it (or a negative size) is no size a tar holds.
        if field[0] != 0x80 || field[1..4].iter().any(|&b| b != 0) {
            return None;
        }
        return Some(field[4..].iter().fold(0u64, |n, &b| n << 8 | b as u64));
    }
    octal(field)
}

/// An octal field, spaces and NULs around it.
fn octal(field: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(field).ok()?;
    let s = s.trim_matches(|c| c == ' ' || c == '\0');
    match s.is_empty() {
        true => Some(0),
        false => u64::from_str_radix(s, 8).ok(),
    }
}

/// Whether the checksum field is the sum of the header's bytes, the field
/// itself taken as spaces.
fn checksum_ok(h: &[u8]) -> bool {
    let sum: u64 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| if (148..156).contains(&i) { b' ' } else { b } as u64)
        .sum();
    octal(&h[148..156]) == Some(sum)
}

/// A header's path: the name, after the prefix of a POSIX (ustar) header.
fn header_path(h: &[u8]) -> String {
    let field = |r: std::ops::Range<usize>| {
        let f = &h[r];
        let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
        String::from_utf8_lossy(&f[..end]).into_owned()
    };
    let name = field(0..100);
    match &h[257..263] == b"ustar\0" {
        true => match field(345..500) {
            prefix if prefix.is_empty() => name,
            prefix => format!("{prefix}/{name}"),
        },
        false => name,
    }
}

/// The first member of the whole tar stream `bytes` whose path passes
/// `want`, with its path; `None` when the stream ends without one.
pub(crate) fn find(bytes: &[u8], want: fn(&str) -> bool) -> Found {
    let mut walk = Walk::new(bytes, want, |_| false);
    walk.feed(bytes);
    walk.end().found
}

/// A tarball plugin's reader: a walk, then what the plugin makes of what it
/// found.
pub(crate) struct Follower {
    walk: Walk,
    read: fn(Walked) -> Outcome,
}

impl Follower {
    pub(crate) fn boxed(
        head: &[u8],
        want: fn(&str) -> bool,
        mark: fn(&str) -> bool,
        read: fn(Walked) -> Outcome,
    ) -> Box<dyn Follow> {
        Box::new(Follower {
            walk: Walk::new(head, want, mark),
            read,
        })
    }
}

impl Follow for Follower {
    fn feed(&mut self, bytes: &[u8]) {
        self.walk.feed(bytes);
    }

    fn finish(self: Box<Self>) -> Outcome {
        (self.read)(self.walk.end())
    }
}

/// Whether `path` is `name` one directory down (`pkg-1.0/PKG-INFO`).
pub(crate) fn one_down(path: &str, name: &str) -> bool {
    path.split_once('/')
        .is_some_and(|(dir, rest)| !dir.is_empty() && rest == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar header for `path` claiming `size` bytes in GNU's base-256
    /// (`base256`) or in octal, its checksum set.
    fn header(path: &str, size: u64, base256: bool) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        h[..path.len()].copy_from_slice(path.as_bytes());
        h[100..108].copy_from_slice(b"0000644\0");
        h[156] = b'0';
        h[257..265].copy_from_slice(b"ustar  \0");
        match base256 {
            true => {
                h[124] = 0x80;
                h[128..136].copy_from_slice(&size.to_be_bytes());
            }
            false => h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes()),
        }
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|&b| b as u64).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }

    fn want(path: &str) -> bool {
        path.ends_with("/want")
    }

    /// A tar of `(path, bytes)` members and its end-of-archive marker.
    fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut t = Vec::new();
        for (path, bytes) in members {
            t.extend(header(path, bytes.len() as u64, false));
            t.extend_from_slice(bytes);
            t.resize(t.len().next_multiple_of(BLOCK), 0);
        }
        t.resize(t.len() + 2 * BLOCK, 0);
        t
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_member_is_found_after_others_and_through_a_ustar_prefix() {
        let t = tar(&[("p/skip", b"xyz"), ("p/want", b"found")]);
        assert_eq!(
            find(&t, want),
            Ok(Some(("p/want".into(), b"found".to_vec())))
        );
        assert_eq!(
            find(&gz(&t), want),
            Ok(Some(("p/want".into(), b"found".to_vec())))
        );
        assert_eq!(find(&tar(&[("p/skip", b"x")]), want), Ok(None));
        // A POSIX header keeps a path past 100 bytes in its prefix field.
        let long = format!("{}/want", "d".repeat(120));
        let mut h = tar::Header::new_ustar();
        h.set_path(&long).unwrap();
        h.set_size(2);
        h.set_cksum();
        let mut t = h.as_bytes().to_vec();
        t.extend_from_slice(b"ok");
        t.resize(4 * BLOCK, 0);
        assert_eq!(find(&t, want), Ok(Some((long, b"ok".to_vec()))));
    }

    /// A size no tar holds (2^64 - 1, in base-256) is refused as such,
    /// never rounded up to its block past the end of a u64.
    #[test]
    fn a_size_past_any_file_is_refused() {
        let mut t = header("p/skip", u64::MAX, true);
        t.extend(tar(&[("p/want", b"x")]));
        let found = find(&t, want);
        assert!(
            matches!(&found, Err(e) if e.contains("claims")),
            "{found:?}"
        );
        let mut bad = tar(&[("p/want", b"x")]);
        bad[150] ^= 1;
        assert!(matches!(find(&bad, want), Err(e) if e.contains("checksum")));
    }

    /// A gzip stream damaged just after the member: the walk's outcome is
    /// the same whether it is fed whole or a byte at a time, as the decoder
    /// is written the same steps either way. (Written as it is fed, the
    /// decoder holds the member's bytes when it meets the damage in one
    /// write, and has passed them on when the bytes came one by one: found
    /// one way, damaged the other.)
    #[test]
    fn damage_after_the_member_reads_the_same_however_it_is_fed() {
        let text: Vec<u8> = (0..40_000u32)
            .flat_map(|i| format!("w{} ", i * 7919 % 1000).into_bytes())
            .collect();
        let mut z = gz(&tar(&[
            ("p/x", b"a"),
            ("p/want", b"found"),
            ("p/rest", &text),
        ]));
        z[150..166].fill(0xff);
        let whole = find(&z, want);
        let mut walk = Walk::new(&z, want, |_| false);
        for b in &z {
            walk.feed(std::slice::from_ref(b));
        }
        assert_eq!(walk.end().found, whole);
    }
}
