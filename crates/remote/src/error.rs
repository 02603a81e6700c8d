//! What can go wrong reading a remote archive.

use std::io;

/// An error reading a remote archive. Reads reach the `format` crate's reader
/// as [`io::Error`]s that carry one of these.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The location is not a URL this crate reads.
    #[error("{0:?} is not a remote archive: give http://HOST/PATH, https://HOST/PATH or s3://BUCKET/KEY")]
    BadLocation(String),
    /// The client could not be configured (credentials, endpoint, URL).
    #[error("configuring the client for {location}: {source}")]
    Config {
        /// The archive's location.
        location: String,
        /// Why.
        source: object_store::Error,
    },
    /// A request failed: refused, timed out, not found, or answered with
    /// something other than the range asked for.
    #[error("reading {what} of {location}: {source}")]
    Request {
        /// The archive's location.
        location: String,
        /// The bytes asked for ("bytes 10..20", "the last 262144 bytes").
        what: String,
        /// What the client said.
        source: object_store::Error,
    },
    /// The server sent fewer or more bytes than the range it acknowledged
    /// (`got` counts up to where the read was cut off).
    #[error("{location} sent {got} bytes for the {want} of bytes {start}.. it was asked for")]
    WrongLength {
        /// The archive's location.
        location: String,
        /// First byte asked for.
        start: u64,
        /// Bytes asked for.
        want: u64,
        /// Bytes received.
        got: u64,
    },
    /// The object is not the one the first request saw: its ETag or its size
    /// changed. Nothing read so far is used; run the command again.
    #[error("{location} changed while it was being read ({what}); run the command again")]
    Changed {
        /// The archive's location.
        location: String,
        /// What differed.
        what: String,
    },
    /// The runtime that drives the requests could not start.
    #[error("starting the I/O runtime: {0}")]
    Runtime(io::Error),
}

impl RemoteError {
    /// Whether `err`, or an error it was caused by, is [`RemoteError::Changed`]:
    /// the archive changed under a read, so an index cached for it is stale.
    pub fn is_changed(err: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(RemoteError::Changed { .. }) = e.downcast_ref::<RemoteError>() {
                return true;
            }
            let inner = e
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|i| i.downcast_ref::<RemoteError>());
            if let Some(RemoteError::Changed { .. }) = inner {
                return true;
            }
            next = e.source();
        }
        false
    }
}

impl From<RemoteError> for io::Error {
    fn from(e: RemoteError) -> io::Error {
        io::Error::other(e)
    }
}
