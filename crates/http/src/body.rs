//! The channel from a request body to the engine, which every upload driver
//! uses: one file's bytes go down a bounded channel of pieces and come out as
//! a blocking [`Read`] on the engine's side; a file ends only with an explicit
//! end marker, so a body that stops early is an error there, never a short
//! file. The body limit is counted here too, on the request body itself, as
//! its bytes pass.

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::mpsc;
use znippy_format::{InputFile, Source};

use crate::error::{ApiError, BadUpload};
use crate::{AppState, Metrics};

/// Chunks buffered per file between the driver and the engine.
const CHUNKS_IN_FLIGHT: usize = 8;

/// One file's bytes as a driver sends them: data, then the end marker.
pub(crate) enum Piece {
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
pub(crate) enum Stop {
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

/// A request body past `--max-body`: the error its bytes fail with once the
/// limit is passed, which `error::body_failed` answers with 413.
#[derive(Debug, thiserror::Error)]
#[error("the request body exceeds the limit of {0} bytes")]
pub(crate) struct OverLimit(u64);

/// `body` under `--max-body`, or 413 at once when its declared
/// `Content-Length` is past it. Every byte read from it counts, whatever a
/// driver makes of it (multipart framing and facts as much as file data),
/// and goes to the metrics.
pub(crate) fn limited(app: &AppState, headers: &HeaderMap, body: Body) -> Result<Body, ApiError> {
    let limit = app.config.max_body;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(OverLimit(limit).to_string()));
    }
    Ok(Body::new(Limited {
        inner: body,
        limit,
        left: limit,
        metrics: Arc::clone(&app.metrics),
    }))
}

struct Limited {
    inner: Body,
    limit: u64,
    left: u64,
    metrics: Arc<Metrics>,
}

impl HttpBody for Limited {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                let Some(left) = this.left.checked_sub(n) else {
                    return Poll::Ready(Some(Err(axum::Error::new(OverLimit(this.limit)))));
                };
                this.left = left;
                this.metrics.bytes_in(n);
                Poll::Ready(Some(Ok(frame)))
            }
            other => Poll::Ready(other),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Sends a byte stream as one file's pieces, then its end marker. On failure
/// the engine is told, so it stops with an error instead of seeing an end.
pub(crate) async fn forward<S, E>(
    mut stream: S,
    tx: &mpsc::Sender<io::Result<Piece>>,
    broken: impl Fn(E) -> ApiError,
) -> Result<(), Stop>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let result = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(&broken)?;
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

/// A blocking reader of the bytes sent down the returned channel.
pub(crate) fn body_reader() -> (Box<dyn Read + Send>, mpsc::Sender<io::Result<Piece>>) {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    (Box::new(BodyReader::new(rx)), tx)
}

/// A file for the engine whose bytes are sent down the returned channel.
pub(crate) fn body_file(
    path: String,
    mode: Option<u32>,
) -> (InputFile, mpsc::Sender<io::Result<Piece>>) {
    let (reader, tx) = body_reader();
    let file = InputFile {
        path,
        mode,
        source: Source::Reader(reader),
    };
    (file, tx)
}
