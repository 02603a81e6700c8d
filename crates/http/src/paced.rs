//! Request bodies must keep moving.
//!
//! An upload holds its archive's append lock until its body ends, so a client
//! that sends one byte a second would hold every other append to that archive
//! (and its DELETE) for as long as it likes. Each request body must therefore
//! bring at least [`MIN_PROGRESS`] bytes, or end, within every
//! `Config::body_timeout`; otherwise reading it fails with [`SlowBody`], which
//! handlers answer with 408 and which leaves the append with nothing
//! committed. Only the time the service spends waiting for bytes counts:
//! time it spends not reading (the engine busy, the channel to it full) is
//! not held against the client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::AppState;

/// Bytes a body must bring within each `body_timeout`.
pub const MIN_PROGRESS: u64 = 64 << 10;

/// A request body that brought less than [`MIN_PROGRESS`] bytes within the
/// body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body brought less than {MIN_PROGRESS} bytes in {0:?}")]
pub(crate) struct SlowBody(pub Duration);

/// Puts every request body under the body timeout.
pub(crate) async fn pace(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let window = app.config.body_timeout;
    let req = req.map(|inner| {
        Body::new(Paced {
            inner,
            window,
            got: 0,
            owed: Duration::ZERO,
            waiting_since: None,
            deadline: Box::pin(tokio::time::sleep(window)),
        })
    });
    next.run(req).await
}

struct Paced {
    inner: Body,
    window: Duration,
    /// Bytes since the window began.
    got: u64,
    /// Time the service has spent waiting for the client since then.
    owed: Duration,
    /// When the last poll found nothing to read, if it did.
    waiting_since: Option<Instant>,
    deadline: Pin<Box<Sleep>>,
}

impl Paced {
    fn slow(&self) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Poll::Ready(Some(Err(axum::Error::new(SlowBody(self.window)))))
    }
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let now = Instant::now();
        if let Some(since) = this.waiting_since.take() {
            this.owed += now - since;
        }
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.got += frame.data_ref().map_or(0, |d| d.len() as u64);
                if this.got >= MIN_PROGRESS {
                    this.got = 0;
                    this.owed = Duration::ZERO;
                } else if this.owed >= this.window {
                    return this.slow();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                let Some(left) = this.window.checked_sub(this.owed).filter(|l| !l.is_zero()) else {
                    return this.slow();
                };
                this.waiting_since = Some(now);
                this.deadline.as_mut().reset(now + left);
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => this.slow(),
                    Poll::Pending => Poll::Pending,
                }
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
