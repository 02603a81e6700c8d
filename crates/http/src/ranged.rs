//! Serving bytes of known length: Range, ETag, HEAD, and a body that streams.
//!
//! Files and sealed archives are both "a length, a validator and a way to write
//! any byte range"; this module turns that into a response. Small bodies are
//! read before the status is sent, so a failed checksum is a clean 500; large
//! ones stream from a blocking reader through a bounded channel, so memory
//! stays at a few chunks whatever the size.
//!
//! A streamed body holds a blocking thread while its client takes it. A
//! client that stops taking it loses its connection once a write has waited
//! the body timeout (`write_deadline.rs`), and the thread's next send then
//! fails, which frees it. That bounds what a stalled client holds, not what
//! a slow one does: one that takes just over 64 KiB per body timeout holds
//! its thread to the end, and a few hundred of those would take every thread
//! of the runtime's blocking pool (512 by default), which appends, small
//! reads and the catalog need too. So at most [`MAX_STREAMS`] bodies stream
//! at once; a large read past them waits, holding no thread, up to the body
//! timeout for one to end, then answers 503 `retry`.

use std::io::{self, Write};
use std::ops::Range;
use znippy_format::ReadAt;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::{ApiError, ErrorCode};
use crate::AppState;

/// Bodies up to this size are read whole before the response starts.
const BUFFERED: u64 = 4 << 20;
/// Bytes per chunk of a streamed body.
const CHUNK: usize = 256 << 10;
/// Most bodies streamed at once: far below the blocking pool's 512 threads.
pub(crate) const MAX_STREAMS: usize = 64;

/// Writes the bytes `range` to the writer it is given.
pub(crate) type ReadRange =
    Box<dyn FnOnce(Range<u64>, &mut dyn Write) -> Result<u64, ApiError> + Send>;

/// Something to serve.
pub(crate) struct Ranged {
    /// Its length.
    pub len: u64,
    /// Its validator (unquoted).
    pub etag: String,
    /// Its media type.
    pub content_type: &'static str,
    /// How to write a range of it.
    pub read: ReadRange,
}

enum Wanted {
    Whole,
    Part(Range<u64>),
    Unsatisfiable,
}

/// `Range: bytes=a-b | a- | -n`. Anything else, including several ranges, is
/// served whole, as RFC 9110 allows.
///
/// Written here rather than through the `headers` crate's typed `Range`:
/// its `satisfiable_ranges(len)` yields bounds that still need every rule
/// below (a zero suffix, an empty representation, a start past the end, the
/// clamp to the length), so it would replace only the split on `-`.
fn wanted(headers: &HeaderMap, len: u64, etag: &str) -> Wanted {
    let Some(spec) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return Wanted::Whole;
    };
    if let Some(cond) = headers.get(header::IF_RANGE) {
        if cond.as_bytes() != etag.as_bytes() {
            return Wanted::Whole;
        }
    }
    // The unit is case-insensitive (RFC 9110, 14.1).
    let spec = spec.trim();
    let Some(spec) = spec
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| &spec[6..])
    else {
        return Wanted::Whole;
    };
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return Wanted::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        match position(b) {
            Ok(0) => return Wanted::Unsatisfiable,
            // Satisfiable (RFC 9110, 14.1.1), yet no Content-Range can name
            // zero bytes: the empty representation is sent whole.
            Ok(_) if len == 0 => return Wanted::Whole,
            Ok(n) => len.saturating_sub(n)..len,
            Err(_) => return Wanted::Whole,
        }
    } else {
        let Ok(start) = position(a) else {
            return Wanted::Whole;
        };
        let end = if b.is_empty() {
            len
        } else {
            match position(b) {
                Ok(last) if last >= start => last.saturating_add(1).min(len),
                _ => return Wanted::Whole,
            }
        };
        start..end
    };
    if range.start >= len {
        Wanted::Unsatisfiable
    } else {
        Wanted::Part(range)
    }
}

/// A byte position: digits, and past `u64` the largest, as no file holds
/// that many bytes (so `bytes=99999999999999999999-` is past the end, as
/// `bytes=18446744073709551615-` is, not a header to ignore).
fn position(digits: &str) -> Result<u64, ()> {
    match digits.parse::<u64>() {
        Ok(n) => Ok(n),
        Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(u64::MAX),
        Err(_) => Err(()),
    }
}

fn etag_matches(list: &HeaderValue, etag: &str) -> bool {
    list.to_str().is_ok_and(|l| {
        l.split(',')
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == "*" || t == etag)
    })
}

/// The response to `method` with `headers` for `src`.
pub(crate) async fn respond(
    app: &AppState,
    method: &Method,
    headers: &HeaderMap,
    src: Ranged,
) -> Response {
    let etag = format!("\"{}\"", src.etag);
    let mut builder = Response::builder()
        .header(header::ETAG, &etag)
        .header(header::ACCEPT_RANGES, "bytes");
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| etag_matches(v, &etag))
    {
        return builder
            .status(StatusCode::NOT_MODIFIED)
            .body(Body::empty())
            .unwrap_or_default();
    }
    let range = match wanted(headers, src.len, &etag) {
        Wanted::Whole => {
            builder = builder.status(StatusCode::OK);
            0..src.len
        }
        Wanted::Part(r) => {
            let cr = format!("bytes {}-{}/{}", r.start, r.end - 1, src.len);
            builder = builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, cr);
            r
        }
        Wanted::Unsatisfiable => {
            let mut r = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                ErrorCode::BadRange,
                format!("the range lies past the end ({} bytes)", src.len),
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{}", src.len)) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return r;
        }
    };
    let n = range.end - range.start;
    builder = builder
        .header(header::CONTENT_TYPE, src.content_type)
        .header(header::CONTENT_LENGTH, n);
    if method == Method::HEAD {
        return builder.body(Body::empty()).unwrap_or_default();
    }
    let read = src.read;
    let body = if n <= BUFFERED {
        let task = tokio::task::spawn_blocking(move || {
            let mut buf = Vec::with_capacity(n as usize);
            read(range, &mut buf).map(|_| buf)
        });
        match task.await {
            Ok(Ok(buf)) => Body::from(buf),
            Ok(Err(e)) => return e.into_response(),
            Err(e) => return ApiError::internal(format!("read task: {e}")).into_response(),
        }
    } else {
        match stream(app, range, read).await {
            Ok(body) => body,
            Err(e) => return e.into_response(),
        }
    };
    app.metrics.bytes_out(n);
    builder.body(body).unwrap_or_default()
}

/// A body that `read` writes from a blocking thread of its own, once one of
/// the [`MAX_STREAMS`] is free.
async fn stream(app: &AppState, range: Range<u64>, read: ReadRange) -> Result<Body, ApiError> {
    let window = app.config.body_timeout;
    let permit = tokio::time::timeout(window, app.streams.clone().acquire_owned()).await;
    let Ok(Ok(permit)) = permit else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Retry,
            format!("{MAX_STREAMS} large reads are streaming already; send it again"),
        ));
    };
    let running = app.metrics.stream();
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    let mut w = ChannelWriter {
        tx,
        buf: Vec::with_capacity(CHUNK),
    };
    tokio::task::spawn_blocking(move || {
        // The thread's share of the cap and of the gauge, until it ends.
        let _held = (permit, running);
        let done = read(range, &mut w).and_then(|_| {
            w.send()
                .map_err(|e| ApiError::internal(format!("sending: {e}")))
        });
        if let Err(e) = done {
            // The status is sent already: cutting the body short (its
            // Content-Length unmet) is how the client learns of it. Only if
            // there is room: the client may be the one that stopped taking it.
            tracing::warn!(target: "znippy::http", "streamed read failed: {}", e.message);
            let _ = w.tx.try_send(Err(io::Error::other(e.message)));
        }
    });
    Ok(Body::from_stream(futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|item| (item, rx)) },
    )))
}

/// A blocking writer whose bytes become body chunks.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.buf.len();
        let n = buf.len().min(room);
        self.buf.extend_from_slice(&buf[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Copies bytes `range` of `file` to `out`.
pub(crate) fn copy_range(
    file: &dyn ReadAt,
    range: Range<u64>,
    out: &mut dyn Write,
) -> io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut at = range.start;
    while at < range.end {
        let n = (range.end - at).min(CHUNK as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        out.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(range.end - range.start)
}
