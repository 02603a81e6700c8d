//! Reading sealed `.znippy` archives where they are published: over HTTP(S)
//! from any server that honours `Range` (the service's
//! `GET /archives/{id}/archive.znippy`, a static file server, a CDN) and from
//! S3 (`s3://bucket/key`), without downloading them.
//!
//! The container was laid out for this: a footer at the end, a manifest before
//! it, then the trie, the data index, and each file's own blobs. A
//! [`RemoteSource`] is a [`znippy_format::ReadAt`] over one object, so the
//! reader of the `format` crate runs on it unchanged:
//!
//! 1. **Open** fetches the last [`WINDOW`] bytes in one request. That holds the
//!    footer, the manifest, the meta section and, for archives up to some
//!    25,000 files, the trie and the data index's Arrow footer too (an
//!    archive compressed from a directory has a batch trie instead, a key
//!    per 256 files, which the window holds up to a million files or so).
//! 2. **A miss in the index** (past the blob region) fetches the bytes asked
//!    for plus up to [`BACK`] bytes before them, so that an Arrow footer's
//!    length and the footer itself come in one request.
//! 3. **A blob** is fetched exactly, and not kept.
//!
//! A one-file `get` of an archive of up to about 25,000 files therefore costs
//! three requests: the window, one batch of the data index, the file's blob (a file of
//! several pieces: one per piece). Every request after the first carries
//! `If-Match` with the first response's ETag, and checks the object's size and
//! the length of what came back, so an object replaced between two requests
//! is an error ([`RemoteError::Changed`]), never a mix of two archives; every
//! slice is still checked against its BLAKE3 by the reader.
//!
//! [`IndexCache`] keeps the index bytes an operation read (never blobs), keyed
//! by location and tagged with the ETag, in the user's cache directory and
//! bounded in size. A second `get` from the same archive then costs one
//! request: the blob, whose `If-Match` also tells whether the cached index is
//! still the archive's. [`RemoteError::is_changed`] says when to forget the
//! entry and read again from scratch.

mod cache;
mod error;
mod location;
mod source;

pub use cache::IndexCache;
pub use error::RemoteError;
pub use location::Location;
pub use source::{RemoteSource, BACK, WINDOW};
