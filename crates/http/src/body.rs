//! The channel from a request body to the engine, which every upload driver
//! uses: one file's bytes go down a bounded channel of pieces and come out as
//! a blocking [`Read`] on the engine's side; a file ends only with an explicit
//! end marker, so a body that stops early is an error there, never a short
//! file. The body limit is counted here too, as the bytes pass.

use std::io::{self, Read};

use axum::http::{header, HeaderMap};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use znippy_format::{InputFile, Source};

use crate::error::{ApiError, BadUpload};
use crate::AppState;

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

/// Counts body bytes against the limit and the metrics.
pub(crate) struct Budget<'a> {
    app: &'a AppState,
    left: u64,
}

impl<'a> Budget<'a> {
    /// The whole limit, or 413 at once when the declared `Content-Length`
    /// is already past it.
    pub(crate) fn new(app: &'a AppState, headers: &HeaderMap) -> Result<Self, ApiError> {
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

    pub(crate) fn take(&mut self, n: usize) -> Result<(), ApiError> {
        self.left = self
            .left
            .checked_sub(n as u64)
            .ok_or_else(|| ApiError::too_large(self.app.config.max_body))?;
        self.app.metrics.bytes_in(n as u64);
        Ok(())
    }
}

/// Sends a byte stream as one file's pieces, then its end marker. On failure
/// the engine is told, so it stops with an error instead of seeing an end.
pub(crate) async fn forward<S, E>(
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

/// A file for the engine whose bytes are sent down the returned channel.
pub(crate) fn body_file(
    path: String,
    mode: Option<u32>,
) -> (InputFile, mpsc::Sender<io::Result<Piece>>) {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let file = InputFile {
        path,
        mode,
        source: Source::Reader(Box::new(BodyReader::new(rx))),
    };
    (file, tx)
}
