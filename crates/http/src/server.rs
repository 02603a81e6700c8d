//! The accept loop: HTTP/1 connections with the timeouts a public service
//! needs, and a shutdown that waits for requests in flight, but not forever.
//!
//! `axum::serve` sets no header timeout and waits at shutdown for as long as
//! any connection stays open, so a client that sends half a request keeps the
//! process (and the catalog's lock) alive. Here each connection is served by
//! hyper directly:
//!
//! - **Header timeout**: hyper's `header_read_timeout` runs whenever the
//!   connection waits for a request head, from its opening and again after
//!   each response. A client that is slow to send its headers, and an idle
//!   keep-alive connection, are both closed once it passes.
//! - **Write deadline**: a client must take what the service sends, 64 KiB
//!   per body timeout while a write waits, or the connection is closed
//!   (`write_deadline.rs`).
//! - **Parse errors**: what hyper answers a request it cannot parse is
//!   replaced by the service's JSON error (`parse_errors.rs`).
//! - **Shutdown**: the listener closes, every connection finishes the request
//!   it is serving and closes; those still open after the grace period are
//!   dropped. The store's operations run to their end even so (an append cut
//!   off mid-body commits nothing), and the caller then waits for the store.

use std::sync::PoisonError;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::parse_errors;
use crate::write_deadline::WriteDeadline;

/// Serves `app` on `listener` until `shutdown` resolves, then drains the
/// connections for at most `grace`.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    (header_timeout, body_timeout): (Duration, Duration),
    grace: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let (stop, stopping) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let timeouts = (header_timeout, body_timeout);
                    conns.spawn(connection(stream, app.clone(), timeouts, stopping.clone()));
                }
                // Out of descriptors or memory: accepting again at once would
                // spin. Connections already open go on.
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            open = conns.len(),
            "shutdown grace of {grace:?} over: closing the connections still open"
        );
        conns.shutdown().await;
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    (header_timeout, body_timeout): (Duration, Duration),
    mut stopping: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    // A second handle on the socket, for the JSON answer that replaces one of
    // hyper's own (see `parse_errors.rs`).
    let (stream, side) = match second_handle(stream) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!("connection: {e}");
            return;
        }
    };
    let held = parse_errors::Held::default();
    let io = TokioIo::new(WriteDeadline::new(stream, body_timeout));
    let io = parse_errors::HoldOwnAnswers::new(io, held.clone());
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopping.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    let parse_error =
        matches!(&result, Err(e) if e.is_parse() || e.is_parse_too_large() || e.is_parse_status());
    if let Err(e) = &result {
        tracing::debug!("connection: {e}");
    }
    let held = held.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(bytes) = held {
        let answer = match parse_error {
            true => parse_errors::json_answer(&bytes).unwrap_or(bytes),
            false => bytes,
        };
        let mut side = side;
        let sent = tokio::time::timeout(header_timeout, async {
            side.write_all(&answer).await?;
            side.shutdown().await
        });
        if let Ok(Err(e)) = sent.await {
            tracing::debug!("connection: sending the last answer: {e}");
        }
    }
}

/// `stream` and a second handle on the same socket.
fn second_handle(stream: TcpStream) -> std::io::Result<(TcpStream, TcpStream)> {
    let std = stream.into_std()?;
    let other = std.try_clone()?;
    Ok((TcpStream::from_std(std)?, TcpStream::from_std(other)?))
}
