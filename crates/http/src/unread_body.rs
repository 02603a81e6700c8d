//! A request whose body was not read to its end closes its connection.
//!
//! When the service refuses a request before reading its body (too large, a
//! bad token, a method the route does not take), the unread bytes are still
//! on the wire. hyper then either drains them or drops the connection, and
//! decides which only after the response head may have gone out saying
//! "keep-alive". A pooling client that sends its next request on that
//! connection sees it closed under it. Saying `Connection: close` on every
//! such response makes the outcome one thing: the client opens a fresh
//! connection, and hyper closes this one after the response (it honours the
//! header).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// Adds `Connection: close` to the response when the request had a body the
/// handler left unread.
pub(crate) async fn close_if_unread(req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let ended = Arc::new(AtomicBool::new(false));
    let req = req.map(|body| {
        Body::new(Watched {
            inner: body,
            ended: ended.clone(),
        })
    });
    let mut response = next.run(req).await;
    if !ended.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A body that records when it has been read to its end.
struct Watched {
    inner: Body,
    ended: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
