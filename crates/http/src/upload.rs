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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use znippy_format::{InputFile, MetaTable, MetaValue, Source, TarEntries};
use znippy_store::{AppendReceipt, StoreError};

use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::AppState;

/// Chunks buffered per file between the driver and the engine.
const CHUNKS_IN_FLIGHT: usize = 8;
/// Largest form field (a metadata fact) held in memory.
const MAX_FIELD: usize = 1 << 20;
/// Most metadata fields in one multipart upload.
const MAX_FACTS: usize = 100_000;
/// Most body bytes the multipart parser may hold without making progress
/// (the preamble, or one part's headers: a 4 KiB path fits many times over),
/// before it is handed one more chunk.
const MAX_FRAMING: usize = 64 << 10;

/// A multipart preamble or part header that does not end.
#[derive(Debug, thiserror::Error)]
#[error("a multipart preamble or part header runs past {MAX_FRAMING} bytes")]
struct FramingTooLong;

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

impl<'a> Budget<'a> {
    /// The whole limit, or 413 at once when the declared `Content-Length`
    /// is already past it.
    fn new(app: &'a AppState, headers: &HeaderMap) -> Result<Self, ApiError> {
        let limit = app.config.max_body;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::too_large(limit));
        }
        Ok(Budget { app, left: limit })
    }

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
    crate::error::body_failed(&e)
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
            let drive = drive_multipart(Budget::new(&app, &headers)?, body, boundary, tx);
            append_from(&app, &id, files_from(rx), drive).await
        }
        "application/x-tar" | "application/tar" => {
            let (file, tx) = body_file(String::new(), None);
            let Source::Reader(reader) = file.source else {
                unreachable!("body_file makes a reader")
            };
            let entries = TarEntries::new(reader);
            let mut budget = Budget::new(&app, &headers)?;
            let drive = async {
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
    let mut budget = Budget::new(&app, &headers)?;
    let (file, tx) = body_file(path, mode);
    let drive = async {
        forward(body.into_data_stream(), &tx, &mut budget, broken_body).await?;
        Ok(None)
    };
    append_from(&app, &id, std::iter::once(Ok(file)), drive).await
}

/// Reads a multipart body: each part with a filename is a file (the filename
/// is its archive path); a field `meta` is a fact `path=key=value`, a field
/// `meta-archive` a fact `key=value` about the archive, typed like the CLI's.
async fn drive_multipart(
    mut budget: Budget<'_>,
    body: Body,
    boundary: String,
    files: mpsc::Sender<InputFile>,
) -> Result<Option<MetaTable>, Stop> {
    let broken = |e: multer::Error| match e {
        multer::Error::StreamReadFailed(inner) if inner.is::<FramingTooLong>() => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            inner.to_string(),
        ),
        multer::Error::StreamReadFailed(inner) => crate::error::body_failed(inner.as_ref()),
        e => ApiError::bad_request("bad_body", format!("malformed multipart body: {e}")),
    };
    // multer holds what it has read until it makes progress (a part begins, a
    // part's data comes out): a preamble or part headers that never end would
    // grow its buffer with the body. `held` is what it took in and has not
    // given back as data since the last part began; the body stops once more
    // than MAX_FRAMING bytes are held before the next chunk.
    let held = Arc::new(AtomicUsize::new(0));
    let taken = Arc::clone(&held);
    let guarded = body.into_data_stream().map(move |chunk| {
        type Boxed = Box<dyn std::error::Error + Send + Sync>;
        let chunk = chunk.map_err(|e| Box::new(e) as Boxed)?;
        if taken.fetch_add(chunk.len(), Ordering::Relaxed) > MAX_FRAMING {
            return Err(Box::new(FramingTooLong) as Boxed);
        }
        Ok(chunk)
    });
    let gave = |n: usize| {
        let _ = held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
            Some(h.saturating_sub(n))
        });
    };
    let mut form = multer::Multipart::new(guarded, boundary);
    let mut facts = 0usize;
    let mut meta: Option<MetaTable> = None;
    while let Some(mut field) = form.next_field().await.map_err(broken)? {
        held.store(0, Ordering::Relaxed);
        if let Some(path) = field.file_name() {
            let (file, tx) = body_file(path.to_string(), None);
            if files.send(file).await.is_err() {
                return Err(Stop::Engine);
            }
            let chunks = futures::stream::poll_fn(|cx| field.poll_next_unpin(cx))
                .inspect(|c| gave(c.as_ref().map_or(0, |c| c.len())));
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
        facts += 1;
        if facts > MAX_FACTS {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("more than {MAX_FACTS} metadata fields in one upload"),
            )
            .into());
        }
        let mut text = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(broken)? {
            gave(chunk.len());
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
