//! A connection's writes must keep moving, as a request body must keep
//! coming (`paced.rs`): whenever the service has bytes to send, the client
//! must take [`MIN_PROGRESS`] of them within the body timeout, counting only
//! the time a write waits for it, or the write fails and hyper closes the
//! connection.
//!
//! Without it a client that asks for a file and never reads the answer keeps
//! what the answer holds for as long as it keeps the connection open: up to
//! 4 MiB of a body read whole before it is sent, hyper's buffers, and for a
//! streamed body the blocking thread that reads it (`ranged.rs`), which the
//! closed connection frees, as its channel's receiver goes with it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::MIN_PROGRESS;

/// `inner`, whose writes fail once they have taken less than
/// [`MIN_PROGRESS`] bytes in `window` of waiting.
pub(crate) struct WriteDeadline<T> {
    inner: T,
    window: Duration,
    /// Set when a write first waits, cleared once [`MIN_PROGRESS`] bytes
    /// have gone since, or everything was flushed.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Bytes written since the deadline was set.
    taken: u64,
}

impl<T> WriteDeadline<T> {
    pub(crate) fn new(inner: T, window: Duration) -> Self {
        WriteDeadline {
            inner,
            window,
            deadline: None,
            taken: 0,
        }
    }

    /// What a write polled: the bytes it took are progress, and one that
    /// waits runs the deadline.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                self.taken += n as u64;
                if self.taken >= MIN_PROGRESS {
                    self.deadline = None;
                    self.taken = 0;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => self.waits(cx),
            failed => failed,
        }
    }

    /// A write that waits: pending until the deadline, then an error.
    fn waits<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let window = self.window;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(window)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took less than {MIN_PROGRESS} bytes in {window:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(Ok(())) => {
                // Nothing left to send: nothing to wait for.
                this.deadline = None;
                this.taken = 0;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.waits(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const WINDOW: Duration = Duration::from_secs(30);

    /// Writes 1 MiB through a 1 KiB pipe to a client that reads `piece`
    /// bytes, then pauses `pause`, until the end; returns how it ended.
    async fn send_to(piece: usize, pause: Duration) -> io::Result<()> {
        let (server, mut client) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            if piece > 0 {
                let mut buf = vec![0; piece];
                while client.read(&mut buf).await.is_ok_and(|n| n > 0) {
                    tokio::time::sleep(pause).await;
                }
            }
            // A client that stops reading keeps the connection open.
            std::future::pending::<()>().await
        });
        let mut w = WriteDeadline::new(server, WINDOW);
        let sent = async {
            w.write_all(&vec![7; 1 << 20]).await?;
            w.flush().await
        }
        .await;
        reader.abort();
        sent
    }

    /// On tokio's paused clock: the deadline counts only the time a write
    /// waits, so what decides is how fast the client takes the bytes.
    #[tokio::test(start_paused = true)]
    async fn a_client_must_take_64_kib_per_window() {
        let stalled = send_to(0, Duration::ZERO).await.unwrap_err();
        assert_eq!(stalled.kind(), io::ErrorKind::TimedOut, "{stalled}");
        // 1 KiB every 10 s: 3 KiB per window.
        let slow = send_to(1024, Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(slow.kind(), io::ErrorKind::TimedOut, "{slow}");
        // 1 KiB every 100 ms: 300 KiB per window.
        send_to(1024, Duration::from_millis(100)).await.unwrap();
    }
}
