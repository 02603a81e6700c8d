//! Uploads: a multipart form, a tar stream or one raw body, each one append.
//!
//! The request body is read on the async side by a *driver*, which hands the
//! bytes to the engine's blocking producer through bounded channels: one
//! channel of files, and per file one channel of chunks. The engine reads each
//! file to its end before it asks for the next, so a driver only ever waits
//! for the file being compressed, and memory stays at a few chunks.
//!
//! A file ends only with an explicit end marker. A body that stops early (a
//! client that hangs up, a limit hit, a malformed part) is an error on the
//! engine's side, never a short file, and the batch commits nothing.

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use znippy_format::{InputFile, MetaTable, MetaValue, Source};
use znippy_store::{AppendReceipt, StoreError};

use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::AppState;

/// Chunks buffered per file between the driver and the engine.
const CHUNKS_IN_FLIGHT: usize = 8;
/// Largest form field (a metadata fact) held in memory.
const MAX_FIELD: usize = 1 << 20;
/// Largest pax header or GNU long name read from a tar stream.
const MAX_TAR_EXTENSION: u64 = 64 << 10;

/// An upload whose bytes are not what they claim (cut short, malformed),
/// carried through the engine's I/O errors so that it answers 400, not 500.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadUpload(String);

impl BadUpload {
    fn io(message: impl Into<String>) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, BadUpload(message.into()))
    }
}

enum Piece {
    Data(Bytes),
    End,
}

/// One file's bytes, as the engine reads them (blocking).
struct BodyReader {
    rx: mpsc::Receiver<io::Result<Piece>>,
    cur: Bytes,
    done: bool,
}

impl BodyReader {
    fn new(rx: mpsc::Receiver<io::Result<Piece>>) -> Self {
        BodyReader {
            rx,
            cur: Bytes::new(),
            done: false,
        }
    }
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if !self.cur.is_empty() {
                let n = buf.len().min(self.cur.len());
                buf[..n].copy_from_slice(&self.cur.split_to(n));
                return Ok(n);
            }
            if self.done {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Ok(Piece::Data(b))) => self.cur = b,
                Some(Ok(Piece::End)) => self.done = true,
                Some(Err(e)) => return Err(e),
                None => return Err(BadUpload::io("the upload stopped before this file ended")),
            }
        }
    }
}

/// Why a driver stopped.
enum Stop {
    /// The engine stopped reading: the append's own error says why.
    Engine,
    /// The request itself is at fault.
    Api(ApiError),
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        Stop::Api(e)
    }
}

/// Counts body bytes against the limit and the metrics.
struct Budget<'a> {
    app: &'a AppState,
    left: u64,
}

impl Budget<'_> {
    fn take(&mut self, n: usize) -> Result<(), ApiError> {
        self.left = self
            .left
            .checked_sub(n as u64)
            .ok_or_else(|| ApiError::too_large(self.app.config.max_body))?;
        self.app
            .metrics
            .bytes_in
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Sends a byte stream as one file's pieces, then its end marker. On failure
/// the engine is told, so it stops with an error instead of seeing an end.
async fn forward<S, E>(
    mut stream: S,
    tx: &mpsc::Sender<io::Result<Piece>>,
    budget: &mut Budget<'_>,
    broken: impl Fn(E) -> ApiError,
) -> Result<(), Stop>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let result = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(&broken)?;
            budget.take(chunk.len())?;
            if tx.send(Ok(Piece::Data(chunk))).await.is_err() {
                return Err(Stop::Engine);
            }
        }
        tx.send(Ok(Piece::End)).await.map_err(|_| Stop::Engine)
    }
    .await;
    if let Err(Stop::Api(e)) = &result {
        let _ = tx.send(Err(BadUpload::io(e.message.clone()))).await;
    }
    result
}

/// Runs one append fed by `drive`, which sends the batch's files and returns
/// its metadata once the body is read.
async fn append_from<F, D>(
    app: &AppState,
    id: &str,
    files: F,
    drive: D,
) -> Result<Json<Value>, ApiError>
where
    F: Iterator<Item = znippy_format::Result<InputFile>> + Send + 'static,
    D: std::future::Future<Output = Result<Option<MetaTable>, Stop>>,
{
    let start = Instant::now();
    let (meta_tx, meta_rx) = oneshot::channel();
    let meta = async move {
        meta_rx
            .await
            .map_err(|_| StoreError::Aborted("the upload failed".into()))
    };
    let driver = async move {
        let meta = drive.await?;
        let _ = meta_tx.send(meta);
        Ok::<_, Stop>(())
    };
    let (driven, appended) = tokio::join!(driver, app.store.append_stream(id, files, meta));
    let receipt: AppendReceipt = match (driven, appended) {
        (Err(Stop::Api(e)), _) => return Err(e),
        (_, Err(e)) => return Err(e.into()),
        (Err(Stop::Engine), Ok(_)) => {
            return Err(ApiError::internal("the engine stopped reading the upload"))
        }
        (Ok(()), Ok(r)) => r,
    };
    app.metrics.append_latency.observe(start.elapsed());
    app.metrics.commit_latency.observe(receipt.commit_time);
    Ok(Json(json!({
        "files": receipt.files,
        "bytes": receipt.bytes,
        "append_seq": receipt.append_seq,
        "snapshot_id": receipt.snapshot_id,
        "blob_end": receipt.blob_end,
    })))
}

/// The engine's side of a channel of files.
fn files_from(
    mut rx: mpsc::Receiver<InputFile>,
) -> impl Iterator<Item = znippy_format::Result<InputFile>> {
    std::iter::from_fn(move || rx.blocking_recv().map(Ok))
}

fn body_file(path: String, mode: Option<u32>) -> (InputFile, mpsc::Sender<io::Result<Piece>>) {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let file = InputFile {
        path,
        mode,
        source: Source::Reader(Box::new(BodyReader::new(rx))),
    };
    (file, tx)
}

fn broken_body(e: axum::Error) -> ApiError {
    ApiError::bad_request("broken_body", format!("reading the request body: {e}"))
}

/// `POST /archives/{id}/files`: multipart or tar.
pub(crate) async fn post_files(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    match mime {
        "multipart/form-data" => {
            let boundary = multer::parse_boundary(ct).map_err(|e| {
                ApiError::bad_request("bad_body", format!("multipart without a boundary: {e}"))
            })?;
            let (tx, rx) = mpsc::channel(1);
            let drive = drive_multipart(&app, body, boundary, tx);
            append_from(&app, &id, files_from(rx), drive).await
        }
        "application/x-tar" | "application/tar" => {
            let (file, tx) = body_file(String::new(), None);
            let Source::Reader(reader) = file.source else {
                unreachable!("body_file makes a reader")
            };
            let entries = TarEntries::new(reader);
            let drive = async {
                let mut budget = Budget {
                    app: &app,
                    left: app.config.max_body,
                };
                forward(body.into_data_stream(), &tx, &mut budget, broken_body).await?;
                Ok(None)
            };
            append_from(&app, &id, entries, drive).await
        }
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_media_type",
            format!(
                "POST a batch as multipart/form-data or application/x-tar (got {ct:?}); \
                 PUT /archives/{id}/files/PATH takes one raw file"
            ),
        )),
    }
}

/// `PUT /archives/{id}/files/{path}`: one file, the raw body. An optional
/// `X-Znippy-Mode` header (octal) gives its permission bits.
pub(crate) async fn put_file(
    State(app): State<AppState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let mode = match headers.get("x-znippy-mode") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| u32::from_str_radix(s, 8).ok())
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| {
                    ApiError::bad_request("bad_mode", "X-Znippy-Mode must be octal, at most 7777")
                })?,
        ),
    };
    let (file, tx) = body_file(path, mode);
    let drive = async {
        let mut budget = Budget {
            app: &app,
            left: app.config.max_body,
        };
        forward(body.into_data_stream(), &tx, &mut budget, broken_body).await?;
        Ok(None)
    };
    append_from(&app, &id, std::iter::once(Ok(file)), drive).await
}

/// Reads a multipart body: each part with a filename is a file (the filename
/// is its archive path); a field `meta` is a fact `path=key=value`, a field
/// `meta-archive` a fact `key=value` about the archive, typed like the CLI's.
async fn drive_multipart(
    app: &AppState,
    body: Body,
    boundary: String,
    files: mpsc::Sender<InputFile>,
) -> Result<Option<MetaTable>, Stop> {
    let broken = |e: multer::Error| match e {
        multer::Error::StreamReadFailed(_) => {
            ApiError::bad_request("broken_body", format!("reading the request body: {e}"))
        }
        e => ApiError::bad_request("bad_body", format!("malformed multipart body: {e}")),
    };
    let mut form = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut budget = Budget {
        app,
        left: app.config.max_body,
    };
    let mut meta: Option<MetaTable> = None;
    while let Some(mut field) = form.next_field().await.map_err(broken)? {
        if let Some(path) = field.file_name() {
            let (file, tx) = body_file(path.to_string(), None);
            if files.send(file).await.is_err() {
                return Err(Stop::Engine);
            }
            let chunks = futures::stream::poll_fn(|cx| field.poll_next_unpin(cx));
            forward(chunks, &tx, &mut budget, broken).await?;
            continue;
        }
        let name = field.name().unwrap_or_default().to_string();
        let about_file = match name.as_str() {
            "meta" => true,
            "meta-archive" => false,
            _ => {
                return Err(ApiError::bad_request(
                    "bad_field",
                    format!(
                        "unknown form field {name:?}: file parts need a filename; \
                         facts go in 'meta' (path=key=value) or 'meta-archive' (key=value)"
                    ),
                )
                .into())
            }
        };
        let mut text = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(broken)? {
            budget.take(chunk.len())?;
            if text.len() + chunk.len() > MAX_FIELD {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!("form field {name:?} exceeds {MAX_FIELD} bytes"),
                )
                .into());
            }
            text.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(text).map_err(|_| {
            ApiError::bad_request("bad_meta", format!("field {name:?} is not UTF-8"))
        })?;
        meta.get_or_insert_with(MetaTable::new)
            .set_text(&text, about_file, |v| Ok(MetaValue::infer(v)))
            .map_err(|e| ApiError::bad_request("bad_meta", e.to_string()))?;
    }
    Ok(meta)
}

/// A tar stream as the engine's files: each regular file an [`InputFile`]
/// whose reader is a window on the stream.
struct TarEntries {
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
            return Err(BadUpload::io("the tar stream ends inside an entry"));
        }
        s.left -= n as u64;
        Ok(n)
    }
}

fn tar_error(reason: impl Into<String>) -> znippy_format::Error {
    znippy_format::Error::Input {
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
fn read_extension(src: &mut dyn Read, size: u64) -> znippy_format::Result<Vec<u8>> {
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
    fn new(src: Box<dyn Read + Send>) -> Self {
        TarEntries {
            shared: Arc::new(Mutex::new(TarStream {
                src,
                left: 0,
                pad: 0,
            })),
            done: false,
        }
    }

    fn next_entry(&mut self) -> znippy_format::Result<Option<InputFile>> {
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
                return Err(znippy_format::Error::Input {
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
    type Item = znippy_format::Result<InputFile>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_entry();
        self.done = !matches!(next, Ok(Some(_)));
        next.transpose()
    }
}
