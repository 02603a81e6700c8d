//! The compression engine: cuts files into slices, packs the small ones, hashes,
//! deduplicates, compresses on a worker pool and writes blobs in order.
//!
//! ```text
//!  producer (caller's thread)      workers (N threads)         writer (1 thread)
//!  read, cut, hash, dedupe   ──►   zstd into reused buffers ──►  reorder by job id,
//!  pack small files                keep raw if it won't shrink    write, note offsets
//!        ▲                                                              │
//!        └──────────────── buffers come back through the pool ◄─────────┘
//! ```
//!
//! Every decision that shapes the output (slicing, packing, dedupe, job numbering)
//! is made by the single producer from the ordered input, and the writer places
//! blobs strictly in job order, so the archive bytes do not depend on the number
//! of workers or on timing. Memory is bounded by the pool: at most
//! `2 × workers + 2` buffer pairs of about `chunk_size + pack_threshold` and
//! `chunk_size` bytes, made as they are first needed, whatever the size of the
//! input, plus a zstd context per worker: [`Engine::memory_bound`] adds it up,
//! so a service can budget appends before it starts them. The threads start
//! when a batch closes its second job: a batch of one job (one small file, as
//! an HTTP PUT sends) is compressed and written on the caller's thread, and
//! leaves its buffers and context to the next such batch (`spare.rs`).
//!
//! Each byte is copied as few times as the pipeline allows: a file is read
//! straight into the open pack's buffer (it only moves when it turns out to be
//! large, or to overflow the pack), hashed there, and written from there or from
//! its compressed form.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use crate::error::{Error, Result};
use crate::kind::Kind;
use crate::layout::{BlobLoc, Closed, Layout, Piece, SliceLoc, Small};
use crate::package::{Packages, Plugin, Plugins, Window};
use crate::pages::{PageBuf, HUGE_PAGE};
use crate::path;
use crate::probe::Probes;
use crate::props::ArchiveProps;
use crate::row::SliceRow;
use crate::spare;

/// Where the bytes of one input file come from.
pub enum Source {
    /// A file on disk, opened when the engine reaches it.
    Path {
        /// Where it is.
        path: PathBuf,
        /// Its length when it was found: a read that ends short exactly
        /// there is its last, with no read after it to hear the end.
        size: u64,
    },
    /// Any byte stream, read to its end.
    Reader(Box<dyn Read + Send>),
    /// The same bytes as the file at this archive path, earlier in the same
    /// batch (a hard link): its slices are pointed at, not read again.
    SameAs(String),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Path { path, size } => f
                .debug_struct("Path")
                .field("path", path)
                .field("size", size)
                .finish(),
            Source::Reader(_) => f.write_str("Reader(..)"),
            Source::SameAs(p) => f.debug_tuple("SameAs").field(p).finish(),
        }
    }
}

/// One file of a batch.
#[derive(Debug)]
pub struct InputFile {
    /// The archive path (validated by the engine).
    pub path: String,
    /// Unix permission bits, when known.
    pub mode: Option<u32>,
    /// Where its bytes come from.
    pub source: Source,
}

impl InputFile {
    /// A file whose bytes are in memory.
    pub fn from_bytes(path: impl Into<String>, bytes: Vec<u8>, mode: Option<u32>) -> Self {
        InputFile {
            path: path.into(),
            mode,
            source: Source::Reader(Box::new(io::Cursor::new(bytes))),
        }
    }
}

/// A file found by a walk, read to its end. A regular file's read comes up
/// short of the buffer only at the file's end, so one that does so exactly
/// where the walk saw the file end is taken at its word: a small file costs
/// one read, not a second that returns nothing (on 100,000 tiny files, 6%
/// of a compress). A file that changed since the walk is read on to
/// whatever end it has now, as before.
struct Scanned<R = File> {
    file: R,
    size: u64,
    read: u64,
    ended: bool,
}

impl<R: Read> Read for Scanned<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ended {
            return Ok(0);
        }
        let n = self.file.read(buf)?;
        self.read += n as u64;
        self.ended = n < buf.len() && self.read == self.size;
        Ok(n)
    }
}

/// One unit of work: the bytes of one future blob.
struct Job {
    id: u64,
    input: PageBuf,
    output: PageBuf,
    try_compress: bool,
    compressed: bool,
}

/// A job's input and output buffers, which travel together through the pool.
type Buffers = (PageBuf, PageBuf);

/// What one batch wrote.
#[derive(Debug)]
pub struct Batch {
    /// Its slice rows, in chunk_seq order.
    pub rows: Vec<SliceRow>,
    /// What the plugins read from the files they claimed.
    pub packages: Packages,
    /// Its statistics.
    pub stats: BatchStats,
    /// The files whose size when read was not their size when listed.
    pub changed: Vec<Changed>,
}

/// A file whose size when it was read differs from its size when the walk
/// listed it: it changed while the batch ran, and is stored as it was read,
/// which may be no version of it that was ever whole on disk (`tar`'s "file
/// changed as we read it"). A change that keeps the size is not seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// Its path in the archive.
    pub path: String,
    /// Its size when listed.
    pub listed: u64,
    /// The bytes stored.
    pub read: u64,
}

impl std::fmt::Display for Changed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} changed as it was read: {} bytes when listed, {} stored",
            self.path, self.listed, self.read
        )
    }
}

/// Statistics of one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Files in the batch.
    pub files: u64,
    /// Bytes of input read.
    pub bytes_in: u64,
    /// Blob bytes written.
    pub bytes_written: u64,
    /// Slices that pointed at an existing identical slice instead of being written.
    pub deduped_slices: u64,
}

/// The engine's state across batches: the dedupe map, the next chunk number and
/// the end of the blob region.
#[derive(Debug)]
pub struct Engine {
    props: ArchiveProps,
    workers: usize,
    layout: Layout,
    next_seq: u64,
    blob_end: u64,
    plugins: Plugins,
}

impl Engine {
    /// An engine for a new archive, with `workers` compression threads (at least 1).
    pub fn new(props: ArchiveProps, workers: usize) -> Result<Self> {
        props.validate()?;
        Ok(Engine {
            props,
            workers: workers.max(1),
            layout: Layout::new(props.pack_size),
            next_seq: 0,
            blob_end: 0,
            plugins: Plugins::none(),
        })
    }

    /// Runs `plugins` on the files they claim, from the next batch on.
    pub fn with_plugins(mut self, plugins: Plugins) -> Self {
        self.plugins = plugins;
        self
    }

    /// An engine that continues an archive whose live rows are `rows` and whose
    /// blob region ends at `blob_end`: new slices dedupe against the old ones.
    pub fn resume(
        props: ArchiveProps,
        workers: usize,
        rows: &[SliceRow],
        blob_end: u64,
    ) -> Result<Self> {
        let mut e = Engine::new(props, workers)?;
        e.forget_all_but(rows);
        e.next_seq = rows.iter().map(|r| r.chunk_seq + 1).max().unwrap_or(0);
        e.blob_end = blob_end;
        Ok(e)
    }

    /// Rebuilds the dedupe map from `live`: slices of replaced or deleted files
    /// are no longer dedupe targets, exactly as if the archive had been reopened.
    pub fn forget_all_but(&mut self, live: &[SliceRow]) {
        self.layout.forget_all_but(live);
    }

    /// The archive properties.
    pub fn props(&self) -> ArchiveProps {
        self.props
    }

    /// End of the blob region after everything written so far.
    pub fn blob_end(&self) -> u64 {
        self.blob_end
    }

    /// The next `chunk_seq` to be assigned.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The most memory one batch of an engine with `props` and `workers`
    /// threads can hold, in bytes: every buffer pair its pool may make (each
    /// buffer rounded up to whole huge pages, as it is mapped) and one zstd
    /// context per worker, as zstd itself sizes a context for a `chunk_size`
    /// input. The dedupe map and the rows grow with the index, not with the
    /// payload, and are not counted; nor are the light pairs kept between
    /// batches (`spare.rs`), a few MiB per process whatever the appends.
    pub fn memory_bound(props: ArchiveProps, workers: usize) -> u64 {
        let workers = workers.max(1) as u64;
        let round = |n: u64| n.div_ceil(HUGE_PAGE as u64) * HUGE_PAGE as u64;
        let pair = round(props.chunk_size + props.pack_threshold + 1) + round(props.chunk_size);
        (2 * workers + 2) * pair + workers * zstd_context_bytes(props.level, props.chunk_size)
    }

    /// Compresses one batch, writing its blobs to `sink` (which must be positioned at
    /// [`Engine::blob_end`]) and returning its rows in chunk_seq order, and
    /// what the plugins read from the files they claimed.
    /// `progress` is told how many input bytes were consumed, as they are.
    pub fn write_batch<I>(
        &mut self,
        files: I,
        sink: &mut (dyn Write + Send),
        progress: &mut dyn FnMut(u64),
    ) -> Result<Batch>
    where
        I: IntoIterator<Item = Result<InputFile>>,
    {
        let pool_size = 2 * self.workers + 2;
        // Room for every buffer pair there will be: the writer's returns never block.
        let (pool_tx, pool_rx) = mpsc::sync_channel::<Buffers>(pool_size);
        let (level, workers, start) = (self.props.level, self.workers, self.blob_end);
        self.layout.start_batch();

        std::thread::scope(|scope| {
            let mut producer = Producer {
                engine: self,
                pool: pool_rx,
                made: 0,
                bound: pool_size,
                lanes: Lanes {
                    scope,
                    level,
                    zstd: None,
                    workers,
                    start,
                    state: Lane::Idle {
                        sink,
                        pool: pool_tx,
                        first: None,
                    },
                },
                rows: Vec::new(),
                pack: None,
                stats: BatchStats::default(),
                changed: Vec::new(),
                probe: None,
                probes: None,
            };
            let produced = producer.run(files, progress);
            let Producer {
                rows,
                mut stats,
                changed,
                lanes,
                probes,
                ..
            } = producer;
            // A writer error explains a producer that stopped for lack of buffers.
            let blobs = lanes.finish();
            // Joined before any error returns: a thread left running would
            // turn the error into a panic at the end of the scope.
            let packages = probes.map_or(Ok(Packages::default()), Probes::finish);
            let blobs = blobs?;
            let packages = packages?;
            produced?;
            stats.bytes_written = blobs.iter().map(|b| b.size).sum();
            let rows = self.finish_batch(rows, blobs, stats)?;
            Ok(Batch {
                rows,
                packages,
                stats,
                changed,
            })
        })
    }

    fn finish_batch(
        &mut self,
        pending: Vec<PendingRow>,
        blobs: Vec<BlobLoc>,
        stats: BatchStats,
    ) -> Result<Vec<SliceRow>> {
        let mut rows = Vec::with_capacity(pending.len());
        for p in pending {
            let b = Layout::resolve(p.loc, &blobs)?;
            rows.push(SliceRow {
                relative_path: p.path,
                chunk_seq: p.seq,
                fdata_offset: p.fdata_offset,
                uncompressed_size: p.size,
                blob_offset: b.offset,
                blob_size: b.size,
                blob_inner_offset: p.loc.inner,
                compressed: b.compressed,
                checksum: p.checksum,
                mode: p.mode,
            });
        }
        self.layout.finish_batch(&blobs)?;
        self.blob_end += stats.bytes_written;
        Ok(rows)
    }
}

struct PendingRow {
    path: String,
    seq: u64,
    fdata_offset: u64,
    size: u64,
    loc: SliceLoc,
    checksum: [u8; 32],
    mode: Option<u32>,
}

struct Producer<'e, 'scope, 'env> {
    engine: &'e mut Engine,
    pool: Receiver<Buffers>,
    /// Buffer pairs made so far, and the most there may be.
    made: usize,
    bound: usize,
    lanes: Lanes<'scope, 'env>,
    rows: Vec<PendingRow>,
    /// The open pack's buffers. They also receive the next file's first bytes,
    /// before it is known whether that file is small.
    pack: Option<Buffers>,
    stats: BatchStats,
    changed: Vec<Changed>,
    /// The plugin that claimed the file being read, and what it will see.
    probe: Option<(Arc<dyn Plugin>, Window)>,
    /// The plugins' threads, once a file is claimed.
    probes: Option<Probes<'scope>>,
}

impl<'scope> Producer<'_, 'scope, '_> {
    fn run<I>(&mut self, files: I, progress: &mut dyn FnMut(u64)) -> Result<()>
    where
        I: IntoIterator<Item = Result<InputFile>>,
    {
        let threshold = self.engine.props.pack_threshold as usize;
        // Each file's rows in `self.rows`, for hard links and to refuse a path
        // that comes twice.
        let mut spans: HashMap<String, Range<usize>> = HashMap::new();
        for file in files {
            let file = file?;
            path::validate(&file.path)?;
            if spans.contains_key(&file.path) {
                return Err(Error::Input {
                    path: file.path,
                    reason: "it comes twice in one batch".into(),
                });
            }
            let first_row = self.rows.len();
            let kind = Kind::of(file.mode).map_err(|_| Error::Input {
                path: file.path.clone(),
                reason: "only regular files, symbolic links and directories are archived".into(),
            })?;
            let mode = file.mode.map(|m| kind.mode(m));
            let listed = match file.source {
                Source::Path { size, .. } => Some(size),
                _ => None,
            };
            let what = || format!("reading {}", file.path);
            let mut reader: Box<dyn Read + Send> = match file.source {
                Source::Path { ref path, size } => Box::new(Scanned {
                    file: File::open(path).map_err(|e| Error::io(what(), e))?,
                    size,
                    read: 0,
                    ended: false,
                }),
                Source::Reader(r) => r,
                Source::SameAs(ref to) => {
                    let span = spans.get(to).cloned().ok_or_else(|| Error::Input {
                        path: file.path.clone(),
                        reason: format!("a hard link to {to}, which is not earlier in the batch"),
                    })?;
                    self.link(&file.path, mode, span);
                    self.link_package(&file.path, to);
                    spans.insert(file.path, first_row..self.rows.len());
                    continue;
                }
            };
            if kind == Kind::File {
                let claim = self.engine.plugins.claim(&file.path);
                self.probe = claim.map(|p| (Arc::clone(p), Window::for_plugin(p)));
            }
            self.stats.files += 1;
            let mut pack = match self.pack.take() {
                Some(p) => p,
                None => self.take_buffers()?,
            };
            let start = pack.0.len();
            let n = pack
                .0
                .fill_from(&mut reader, threshold + 1)
                .map_err(|e| Error::io(what(), e))?;
            progress(n as u64);
            self.stats.bytes_in += n as u64;
            if kind != Kind::File {
                // A link's target or a directory's nothing: always one small slice.
                kind.check_content(&file.path, &pack.0[start..])?;
                if n > threshold {
                    return Err(Error::Input {
                        path: file.path,
                        reason: "a link target longer than pack_threshold".into(),
                    });
                }
            }
            if n <= threshold {
                self.add_small(pack, &file.path, mode, start)?;
            } else {
                self.add_large(pack, &file.path, mode, start, &mut reader, progress)?;
            }
            if let Some((plugin, window)) = self.probe.take() {
                self.probes().read(plugin, file.path.clone(), window);
            }
            if let Some(listed) = listed {
                let read = self.rows[first_row..].iter().map(|r| r.size).sum();
                if read != listed {
                    self.changed.push(Changed {
                        path: file.path.clone(),
                        listed,
                        read,
                    });
                }
            }
            spans.insert(file.path, first_row..self.rows.len());
        }
        match (self.pack.take(), self.engine.layout.close()) {
            (Some(pack), Some(closed)) => self.dispatch(closed, pack),
            // Only the first pair was made and no job closed (every file
            // was a duplicate, empty or a link): it is as light as it gets.
            (Some(pack), None) if self.made == 1 => {
                spare::give(pack, self.lanes.zstd.take(), self.engine.props.level);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A cleared buffer pair: a returned one, a new one while the pool is
    /// below its bound, or else the next to come back from the writer.
    fn take_buffers(&mut self) -> Result<Buffers> {
        let stopped = || {
            Error::io(
                "compression pool",
                io::Error::other("the blob writer stopped"),
            )
        };
        let (mut input, mut output) = match self.pool.try_recv() {
            Ok(bufs) => bufs,
            Err(TryRecvError::Empty) if self.made < self.bound => {
                // The first pair stays on small pages: a batch of a few small
                // files (one HTTP PUT) touches a few KiB of it, where huge pages
                // cost a 2 MiB clear each (measured: 0.2 ms against 0.5 ms a
                // batch). A batch that needs a second pair fills them.
                let huge = self.made > 0;
                self.made += 1;
                let props = self.engine.props;
                let chunk = props.chunk_size as usize;
                // A pack holds up to chunk_size bytes and then receives up to
                // pack_threshold + 1 bytes of the next file.
                let capacity = chunk + props.pack_threshold as usize + 1;
                let spare = match huge {
                    true => None,
                    false => spare::take(capacity, chunk, props.level),
                };
                match spare {
                    Some(spare) => {
                        self.lanes.zstd = spare.zstd;
                        spare.buffers
                    }
                    None => {
                        let input = PageBuf::new(capacity, huge);
                        let made = input.and_then(|i| Ok((i, PageBuf::new(chunk, huge)?)));
                        made.map_err(|e| Error::io("allocating compression buffers", e))?
                    }
                }
            }
            Err(TryRecvError::Empty) => self.pool.recv().map_err(|_| stopped())?,
            Err(TryRecvError::Disconnected) => return Err(stopped()),
        };
        input.clear();
        output.clear();
        Ok((input, output))
    }

    fn dispatch(&mut self, to: Closed, (input, output): Buffers) -> Result<()> {
        self.lanes.send(Job {
            id: to.id,
            input,
            output,
            try_compress: to.try_compress,
            compressed: false,
        })
    }

    fn push_row(
        &mut self,
        path: &str,
        mode: Option<u32>,
        fdata_offset: u64,
        size: u64,
        loc: SliceLoc,
        checksum: [u8; 32],
    ) {
        let seq = self.engine.next_seq;
        self.engine.next_seq += 1;
        self.rows.push(PendingRow {
            path: path.to_string(),
            seq,
            fdata_offset,
            size,
            loc,
            checksum,
            mode,
        });
    }

    /// A hard link: `path` gets the slices of the file whose rows are `span`,
    /// as dedupe would give them, without a byte read. Its mode is the
    /// linked file's, which it shares an inode with: a tar's hard link to
    /// a symbolic link is a symbolic link, whatever its own header says.
    fn link(&mut self, path: &str, mode: Option<u32>, span: Range<usize>) {
        self.stats.files += 1;
        for i in span {
            let r = &self.rows[i];
            let (offset, size, loc, checksum) = (r.fdata_offset, r.size, r.loc, r.checksum);
            let mode = r.mode.or(mode);
            self.stats.deduped_slices += 1;
            self.push_row(path, mode, offset, size, loc, checksum);
        }
    }

    /// A hard link to a package: the rows its plugin made of the file it
    /// names, under its own path.
    fn link_package(&mut self, path: &str, to: &str) {
        let Some(plugin) = self.engine.plugins.claim(path).cloned() else {
            return;
        };
        self.probes().link(plugin, path.to_string(), to.to_string());
    }

    /// The plugins' threads, as many as the compression workers, started
    /// on first use.
    fn probes(&mut self) -> &mut Probes<'scope> {
        let (scope, plugins) = (self.lanes.scope, &self.engine.plugins);
        let threads = self.engine.workers;
        self.probes
            .get_or_insert_with(|| Probes::start(scope, plugins.clone(), threads))
    }

    /// Takes the file just read into `pack` at `start` as a small one: its row
    /// points at an identical earlier slice, or at its bytes, left in the pack.
    fn add_small(
        &mut self,
        mut pack: Buffers,
        path: &str,
        mode: Option<u32>,
        start: usize,
    ) -> Result<()> {
        let bytes = &pack.0[start..];
        if let Some((_, window)) = &mut self.probe {
            window.feed(bytes);
        }
        let (hash, len) = (*blake3::hash(bytes).as_bytes(), bytes.len() as u64);
        match self.engine.layout.small(hash, len, path) {
            Small::Known(loc) => {
                self.stats.deduped_slices += 1;
                pack.0.truncate(start);
                self.push_row(path, mode, 0, len, loc, hash);
            }
            Small::Packed { loc, closed } => {
                if let Some(closed) = closed {
                    // It overflowed the pack: it opens the next.
                    pack = self.split_off(pack, start, closed)?;
                }
                self.push_row(path, mode, 0, len, loc, hash);
            }
        }
        self.pack = Some(pack);
        Ok(())
    }

    /// Moves the bytes from `start` on out of `pack` into a fresh buffer pair,
    /// then sends the pack, which holds the files before them, to the workers.
    fn split_off(&mut self, mut pack: Buffers, start: usize, closed: Closed) -> Result<Buffers> {
        let mut bufs = self.take_buffers()?;
        bufs.0.extend_from_slice(&pack.0[start..]);
        pack.0.truncate(start);
        self.dispatch(closed, pack)?;
        Ok(bufs)
    }

    /// Takes a file whose first `pack_threshold + 1` bytes were read into
    /// `pack` at `start` and whose rest is still in `reader`, slice by slice.
    fn add_large(
        &mut self,
        pack: Buffers,
        path: &str,
        mode: Option<u32>,
        start: usize,
        reader: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        // A pack that holds files goes out first, and this file takes its head
        // along; an empty pack's buffers are this file's own.
        let mut bufs = match self.engine.layout.large() {
            Some(closed) => self.split_off(pack, start, closed)?,
            None => pack,
        };
        let chunk = self.engine.props.chunk_size as usize;
        let mut offset = 0u64;
        loop {
            let want = chunk - bufs.0.len();
            let n = bufs
                .0
                .fill_from(reader, want)
                .map_err(|e| Error::io(format!("reading {path}"), e))?;
            progress(n as u64);
            self.stats.bytes_in += n as u64;
            if bufs.0.is_empty() {
                break;
            }
            if let Some((_, window)) = &mut self.probe {
                window.feed(&bufs.0);
            }
            let len = bufs.0.len() as u64;
            let hash = *blake3::hash(&bufs.0).as_bytes();
            let full = bufs.0.len() == chunk;
            match self.engine.layout.piece(hash, path) {
                Piece::Known(loc) => {
                    self.stats.deduped_slices += 1;
                    self.push_row(path, mode, offset, len, loc, hash);
                    bufs.0.clear();
                }
                Piece::New(job) => {
                    self.push_row(path, mode, offset, len, SliceLoc::job(job.id, 0), hash);
                    self.dispatch(job, bufs)?;
                    bufs = self.take_buffers()?;
                }
            }
            offset += len;
            if !full {
                break;
            }
        }
        self.pack = Some(bufs);
        Ok(())
    }
}

static CODEC_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many blobs this process has handed to the compressor so far. Lets tests
/// prove that a path (the store's seal) never recompresses.
pub fn codec_calls() -> u64 {
    CODEC_CALLS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Compresses one blob's bytes into `out`: the frame's length, or `None` when
/// the blob is to be stored raw. The one codec call of the crate.
pub(crate) fn encode(
    z: &mut zstd::bulk::Compressor<'_>,
    input: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    if input.is_empty() {
        return None;
    }
    CODEC_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A blob that does not shrink is stored raw, so the frame gets one byte
    // less than the input: one that does not fit is no loss.
    let room = (input.len() - 1).min(out.len());
    z.compress_to_buffer(input, &mut out[..room]).ok()
}

/// What zstd allocates for a context at `level` given inputs of up to
/// `input` bytes: measured, not modelled, by starting a stream of that
/// pledged size and asking the context its size. Two things make it an upper
/// bound: a streaming context holds a window-sized input buffer that the
/// engine's one-shot calls do not, and the size is measured for `input`
/// rounded up to a power of two (zstd sizes its tables by powers of two
/// anyway). The rounding also means a process measures at most one context
/// per level and power of two, one at a time: an ultra level's measurement
/// briefly holds what one such context holds, up to about 1 GiB.
fn zstd_context_bytes(level: i32, input: u64) -> u64 {
    let input = input.next_power_of_two();
    use zstd::zstd_safe::{zstd_sys::ZSTD_EndDirective, CCtx, CParameter, InBuffer, OutBuffer};
    static SEEN: Mutex<BTreeMap<(i32, u64), u64>> = Mutex::new(BTreeMap::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    *seen.entry((level, input)).or_insert_with(|| {
        let mut c = CCtx::create();
        let _ = c.set_parameter(CParameter::CompressionLevel(level));
        let _ = c.set_pledged_src_size(Some(input));
        let mut out = [0u8; 64];
        let mut out = OutBuffer::around(&mut out[..]);
        let mut one = InBuffer::around(&[0u8][..]);
        let _ = c.compress_stream2(&mut out, &mut one, ZSTD_EndDirective::ZSTD_e_flush);
        c.sizeof() as u64
    })
}

/// Where the producer's closed jobs go: to the worker threads and the writer,
/// started when a batch closes its second job. A batch that closes one (an
/// HTTP PUT of a small file, one file of up to `chunk_size`) has nothing to
/// run in parallel, and compresses and writes it on the caller's thread:
/// starting and joining the three threads cost 0.5-0.6 ms a batch on the
/// development machine (a probe with the same channels and no work), more
/// than compressing a few KiB.
struct Lanes<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    level: i32,
    /// The context that came with a spare first pair, for a batch of one job.
    zstd: Option<zstd::bulk::Compressor<'static>>,
    workers: usize,
    /// Where the batch's first blob goes in the archive.
    start: u64,
    state: Lane<'scope, 'env>,
}

enum Lane<'scope, 'env> {
    /// No thread yet: the sink, the pool's return path, and the first job.
    Idle {
        sink: &'env mut (dyn Write + Send),
        pool: SyncSender<Buffers>,
        first: Option<Job>,
    },
    Running {
        jobs: SyncSender<Job>,
        writer: ScopedJoinHandle<'scope, Result<Vec<BlobLoc>>>,
    },
    /// Only inside `Lanes::send`, while the threads start.
    Starting,
}

impl<'scope, 'env> Lanes<'scope, 'env> {
    fn send(&mut self, job: Job) -> Result<()> {
        let lost = || Error::io("compression pool", io::Error::other("the workers stopped"));
        match &mut self.state {
            Lane::Running { jobs, .. } => return jobs.send(job).map_err(|_| lost()),
            Lane::Idle {
                first: first @ None,
                ..
            } => {
                *first = Some(job);
                return Ok(());
            }
            Lane::Idle { .. } | Lane::Starting => {}
        }
        // A second job: the batch has work for the pool.
        let Lane::Idle { sink, pool, first } = std::mem::replace(&mut self.state, Lane::Starting)
        else {
            return Err(lost());
        };
        self.state = self.spawn(sink, pool);
        first
            .into_iter()
            .chain([job])
            .try_for_each(|job| self.send(job))
    }

    /// Starts the workers and the writer, which takes the sink.
    fn spawn(
        &self,
        sink: &'env mut (dyn Write + Send),
        pool: SyncSender<Buffers>,
    ) -> Lane<'scope, 'env> {
        let depth = 2 * self.workers + 2;
        let (job_tx, job_rx) = mpsc::sync_channel::<Job>(depth);
        // Owned by the workers alone: when they all stop, the producer's sends fail
        // instead of blocking on a queue nobody drains.
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (done_tx, done_rx) = mpsc::sync_channel::<Job>(depth);
        for _ in 0..self.workers {
            let (done_tx, job_rx, level) = (done_tx.clone(), Arc::clone(&job_rx), self.level);
            self.scope
                .spawn(move || compress_worker(level, job_rx, done_tx));
        }
        let start = self.start;
        let writer = self
            .scope
            .spawn(move || write_in_order(sink, start, done_rx, pool));
        Lane::Running {
            jobs: job_tx,
            writer,
        }
    }

    /// The batch's blobs, once all are written: the writer's, or the one job
    /// done here.
    fn finish(self) -> Result<Vec<BlobLoc>> {
        match self.state {
            Lane::Idle { sink, first, .. } => {
                let Some(mut job) = first else {
                    return Ok(Vec::new());
                };
                let mut zstd = self
                    .zstd
                    .or_else(|| zstd::bulk::Compressor::new(self.level).ok());
                compress(&mut zstd, &mut job);
                let mut blobs = Vec::with_capacity(1);
                place(sink, &job, self.start, &mut blobs)?;
                sink.flush().map_err(|e| Error::io("writing blobs", e))?;
                spare::give((job.input, job.output), zstd, self.level);
                Ok(blobs)
            }
            Lane::Running { jobs, writer } => {
                drop(jobs);
                writer.join().map_err(|_| {
                    Error::io("blob writer", io::Error::other("writer thread panicked"))
                })?
            }
            Lane::Starting => Err(Error::io(
                "compression pool",
                io::Error::other("the workers did not start"),
            )),
        }
    }
}

/// Compresses a job that is to be tried, keeping its raw bytes when zstd
/// cannot make a context or the frame would not shrink them.
fn compress(zstd: &mut Option<zstd::bulk::Compressor<'_>>, job: &mut Job) {
    job.compressed = false;
    if job.try_compress {
        if let Some(z) = zstd.as_mut() {
            job.output.clear();
            if let Some(n) = encode(z, &job.input, job.output.spare_mut()) {
                job.output.commit(n);
                job.compressed = true;
            }
        }
    }
}

fn compress_worker(level: i32, jobs: Arc<Mutex<Receiver<Job>>>, done: SyncSender<Job>) {
    let mut zstd = zstd::bulk::Compressor::new(level).ok();
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(mut job) = job else { return };
        compress(&mut zstd, &mut job);
        if done.send(job).is_err() {
            return;
        }
    }
}

/// Writes `job`'s blob, compressed or raw, at the end of `blobs`, which end
/// at `start` plus their sizes.
fn place(out: &mut dyn Write, job: &Job, start: u64, blobs: &mut Vec<BlobLoc>) -> Result<()> {
    let bytes = if job.compressed {
        &job.output
    } else {
        &job.input
    };
    out.write_all(bytes)
        .map_err(|e| Error::io("writing blobs", e))?;
    let offset = blobs.last().map_or(start, |b| b.offset + b.size);
    blobs.push(BlobLoc {
        offset,
        size: bytes.len() as u64,
        compressed: job.compressed,
    });
    Ok(())
}

fn write_in_order(
    sink: &mut (dyn Write + Send),
    start: u64,
    done: Receiver<Job>,
    pool: SyncSender<Buffers>,
) -> Result<Vec<BlobLoc>> {
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let mut waiting: BTreeMap<u64, Job> = BTreeMap::new();
    let mut blobs = Vec::new();
    for job in done {
        waiting.insert(job.id, job);
        while let Some(job) = waiting.remove(&(blobs.len() as u64)) {
            place(&mut out, &job, start, &mut blobs)?;
            // The producer may have finished; a closed pool is not an error.
            let _ = pool.try_send((job.input, job.output));
        }
    }
    out.flush().map_err(|e| Error::io("writing blobs", e))?;
    if !waiting.is_empty() {
        return Err(Error::io(
            "blob writer",
            io::Error::other("a compression job was lost"),
        ));
    }
    Ok(blobs)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::thread::ThreadId;

    use super::*;

    /// A file that gives at most `step` bytes a read, and counts the reads.
    struct Pieces {
        bytes: io::Cursor<Vec<u8>>,
        step: usize,
        reads: usize,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            let n = buf.len().min(self.step);
            self.bytes.read(&mut buf[..n])
        }
    }

    /// Reads `bytes` through a `Scanned` that was told `size`, in a 64-byte
    /// buffer as `fill_from` does: what it gave, and the reads it made.
    fn scanned(bytes: &[u8], step: usize, size: u64) -> (Vec<u8>, usize) {
        let file = Pieces {
            bytes: io::Cursor::new(bytes.to_vec()),
            step,
            reads: 0,
        };
        let mut r = Scanned {
            file,
            size,
            read: 0,
            ended: false,
        };
        let mut buf = PageBuf::new(64, false).unwrap();
        buf.fill_from(&mut r, 64).unwrap();
        (buf.to_vec(), r.file.reads)
    }

    #[test]
    fn a_scanned_file_ends_at_a_short_read_only_where_the_walk_saw_its_end() {
        let ten = b"0123456789";
        assert_eq!(scanned(ten, 64, 10), (ten.to_vec(), 1), "one read");
        // Short reads before the end are not the end.
        assert_eq!(scanned(ten, 3, 10), (ten.to_vec(), 4));
        // Grown or shrunk since the walk: read on until a read gives nothing.
        assert_eq!(scanned(ten, 64, 4), (ten.to_vec(), 2));
        assert_eq!(scanned(ten, 64, 20), (ten.to_vec(), 2));
        assert_eq!(scanned(b"", 64, 0), (vec![], 1));
    }

    /// A sink that notes every thread it is written from.
    #[derive(Default)]
    struct Watched {
        bytes: Vec<u8>,
        threads: HashSet<ThreadId>,
    }

    impl Write for Watched {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.threads.insert(std::thread::current().id());
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn batch(files: Vec<(&str, Vec<u8>)>) -> (Vec<SliceRow>, Watched) {
        let props = ArchiveProps {
            chunk_size: 8 << 10,
            pack_threshold: 2 << 10,
            pack_size: 8 << 10,
            level: 3,
        };
        let mut engine = Engine::new(props, 2).unwrap();
        let mut sink = Watched::default();
        let inputs = files
            .into_iter()
            .map(|(p, b)| Ok(InputFile::from_bytes(p, b, None)));
        let rows = engine
            .write_batch(inputs, &mut sink, &mut |_| {})
            .unwrap()
            .rows;
        (rows, sink)
    }

    #[test]
    fn a_batch_of_one_job_is_done_on_the_callers_thread() {
        let text = b"a line of text, again and again\n".repeat(40);
        let (rows, sink) = batch(vec![("a", text.clone()), ("b", text[..100].to_vec())]);
        let here = std::thread::current().id();
        assert_eq!(sink.threads, HashSet::from([here]));
        // One pack, compressed, holding both files.
        assert!(rows.iter().all(|r| r.blob_offset == 0 && r.compressed));
        assert_eq!(rows[0].blob_size, sink.bytes.len() as u64);
        let packed = zstd::bulk::decompress(&sink.bytes, 8 << 10).unwrap();
        assert_eq!(packed, [&text[..], &text[..100]].concat());

        // Three slices of a large file are three jobs: the pool's writer writes them.
        let lines: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        let (rows, sink) = batch(vec![("big", lines.as_bytes()[..24 << 10].to_vec())]);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.iter().filter(|r| r.blob_inner_offset == 0).count(), 3);
        assert_eq!(sink.threads.len(), 1);
        assert!(!sink.threads.contains(&here));
    }

    /// A batch of one job leaves its buffers and context to the next, which
    /// writes what a fresh context writes, whatever the first left in them.
    #[test]
    fn a_one_job_batch_leaves_its_buffers_to_the_next() {
        // Props no other test uses, so no parallel test takes the pair.
        let props = ArchiveProps {
            chunk_size: 16 << 10,
            pack_threshold: 4 << 10,
            pack_size: 16 << 10,
            level: 5,
        };
        let (input, output) = (20 << 10, 16 << 10);
        let write = |bytes: Vec<u8>| {
            let mut engine = Engine::new(props, 2).unwrap();
            let mut sink = Watched::default();
            let file = Ok(InputFile::from_bytes("a", bytes, None));
            engine.write_batch([file], &mut sink, &mut |_| {}).unwrap();
            sink.bytes
        };
        let long = b"the first batch's bytes\n".repeat(160);
        write(long.clone());
        let kept = spare::take(input, output, 5).expect("the first batch's pair");
        assert!(kept.zstd.is_some());
        assert!(kept.buffers.0.high_water() >= long.len());
        spare::give(kept.buffers, kept.zstd, 5);

        let short = b"the second, shorter\n".repeat(30);
        let written = write(short.clone());
        assert_eq!(written, zstd::bulk::compress(&short, 5).unwrap());
        // One pair, given back again: the second batch took the first's.
        assert!(spare::take(input, output, 5).is_some(), "given back again");
        assert!(
            spare::take(input, output, 5).is_none(),
            "a second pair made"
        );
    }
}
