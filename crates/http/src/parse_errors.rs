//! JSON bodies on the answers hyper gives by itself.
//!
//! A request hyper cannot parse never reaches the router: hyper answers it
//! itself (400 for a malformed head, 414 for a request target over 65,534
//! bytes, 431 for headers over its buffer or over 100 fields), with an empty
//! body, and ends the connection with a parse error. hyper has no hook for
//! that answer, so the connection's socket is wrapped:
//!
//! 1. A write that is exactly such an answer, byte for byte, is held back
//!    (and reported written to hyper).
//! 2. If hyper then reads or writes again, the held bytes were not its own
//!    answer after all (a response body can hold any bytes): they go out as
//!    they were, before anything else.
//! 3. If instead the connection ends (hyper shuts it down, which the wrapper
//!    leaves to the accept loop while it holds bytes), the loop sends them
//!    through a second handle on the socket: as they were, or, when the
//!    connection ended with a parse error, the same status with the
//!    service's JSON error in their place.
//!
//! So a response is never altered: only bytes that hyper wrote as its last
//! act before a parse error are replaced.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};

use crate::error::{ErrorBody, ErrorCode};

/// The status lines hyper answers unparsable requests with, and the error
/// each stands for.
const ANSWERS: [(&str, ErrorCode, &str); 3] = [
    (
        "400 Bad Request",
        ErrorCode::BadRequest,
        "the request is not valid HTTP/1.1",
    ),
    (
        "414 URI Too Long",
        ErrorCode::UriTooLong,
        "the request target is over 65534 bytes",
    ),
    (
        "431 Request Header Fields Too Large",
        ErrorCode::HeadersTooLarge,
        "the request headers are over about 400 KiB or 100 fields",
    ),
];

/// Bytes held back from the socket, shared by the wrapper and the loop.
pub(crate) type Held = Arc<Mutex<Option<Vec<u8>>>>;

/// Which of hyper's own answers `bytes` is exactly, if any: the status line,
/// `connection: close`, `content-length: 0`, a `date` and the blank line.
fn own_answer(bytes: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?;
    let which = ANSWERS
        .iter()
        .position(|(status, ..)| rest.starts_with(status))?;
    let rest = rest[ANSWERS[which].0.len()..]
        .strip_prefix("\r\nconnection: close\r\ncontent-length: 0\r\ndate: ")?;
    // An IMF-fixdate is 29 characters: "Tue, 01 Dec 2026 21:15:31 GMT".
    let (date, end) = rest.split_at_checked(29)?;
    (date.ends_with(" GMT") && end == "\r\n\r\n").then_some(which)
}

/// The service's answer in place of the held `bytes`, if they are one of
/// hyper's own.
pub(crate) fn json_answer(bytes: &[u8]) -> Option<Vec<u8>> {
    let (status, code, message) = ANSWERS[own_answer(bytes)?];
    let body = serde_json::to_string(&ErrorBody::new(code, message)).ok()?;
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// A connection's socket, holding back what may be hyper's own error answer.
pub(crate) struct HoldOwnAnswers<T> {
    inner: T,
    held: Held,
    /// How much of the held bytes went out, once they are released.
    sent: usize,
}

impl<T> HoldOwnAnswers<T> {
    pub(crate) fn new(inner: T, held: Held) -> Self {
        HoldOwnAnswers {
            inner,
            held,
            sent: 0,
        }
    }
}

impl<T: Write + Unpin> HoldOwnAnswers<T> {
    /// Sends held bytes as they were: hyper went on, so they were not its
    /// last answer.
    fn release(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(bytes) = held.as_ref() {
            if self.sent == bytes.len() {
                *held = None;
                self.sent = 0;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Holds `bytes` if they are one of hyper's own answers.
    fn hold(&mut self, bytes: &[u8]) -> bool {
        if own_answer(bytes).is_none() {
            return false;
        }
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = Some(bytes.to_vec());
        true
    }
}

impl<T: Read + Write + Unpin> Read for HoldOwnAnswers<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.release(cx))?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for HoldOwnAnswers<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.release(cx))?;
        if self.hold(buf) {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.release(cx))?;
        let mut parts = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (parts.next(), parts.next()) {
            if self.hold(only) {
                return Poll::Ready(Ok(only.len()));
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Held bytes stay held: hyper flushes right after its own answer.
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper shuts down before it returns its parse error: held bytes,
        // and the shutdown, are left to the accept loop, which knows then
        // what they were.
        if self.sent == 0
            && self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
        {
            return Poll::Ready(Ok(()));
        }
        ready!(self.release(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\
                         content-length: 0\r\ndate: Tue, 01 Dec 2026 21:15:31 GMT\r\n\r\n";

    /// Held bytes go out as they were, and first, once hyper goes on to
    /// read or write: they were a body's, not hyper's last answer.
    #[tokio::test]
    async fn held_bytes_are_released_when_hyper_goes_on() {
        use std::future::poll_fn;
        use tokio::io::AsyncReadExt;

        let (ours, mut peer) = tokio::io::duplex(1 << 16);
        let held = Held::default();
        let mut io = HoldOwnAnswers::new(hyper_util::rt::TokioIo::new(ours), held.clone());
        let n = poll_fn(|cx| Pin::new(&mut io).poll_write(cx, OWN))
            .await
            .unwrap();
        assert_eq!(n, OWN.len());
        poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
            .await
            .unwrap();
        assert!(held.lock().unwrap().is_some(), "held past a flush");
        poll_fn(|cx| Pin::new(&mut io).poll_write(cx, b"next"))
            .await
            .unwrap();
        assert!(held.lock().unwrap().is_none());
        let mut got = vec![0u8; OWN.len() + 4];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..OWN.len()], OWN);
        assert_eq!(&got[OWN.len()..], b"next");
    }

    #[test]
    fn only_hyper_own_answers_match() {
        let own = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                    content-length: 0\r\ndate: Tue, 01 Dec 2026 21:15:31 GMT\r\n\r\n";
        assert_eq!(own_answer(own), Some(2));
        assert_eq!(own_answer(OWN), Some(0));
        let json = String::from_utf8(json_answer(own).unwrap()).unwrap();
        assert!(json.starts_with("HTTP/1.1 431 "), "{json}");
        assert!(json.ends_with("\"headers_too_large\",\"message\":\"the request headers are over about 400 KiB or 100 fields\"}}"), "{json}");
        let mut longer = own.to_vec();
        longer.extend_from_slice(b"x");
        assert_eq!(own_answer(&longer), None);
        assert_eq!(own_answer(&own[..own.len() - 1]), None);
        let other = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\r\n";
        assert_eq!(own_answer(other), None);
    }
}
