//! The read commands on a remote archive: `znippy list|get|verify|info|meta URL`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use znippy_cli::read::ReadCmd;
use znippy_format::Archive;
use znippy_remote::{IndexCache, Location, RemoteError, RemoteSource};

/// Runs `cmd` on the archive its URL names, through the index cache. With
/// `ZNIPPY_REMOTE_STATS` set, says on stderr how many requests it made and
/// how many bytes came back.
///
/// A cached index is checked against the object before anything it says is
/// trusted: by a `get`'s blob request (with `If-Match`), or, for a command
/// that may make no request at all, by a `HEAD` first. When the archive
/// turns out changed, nothing was written from the stale index: the entry
/// is dropped and the command runs again from scratch, once: the second run
/// does not read the cache, so an entry that cannot be dropped (a read-only
/// cache) does not send it round again. (A `get` of an empty
/// file or a directory, which needs no blob, is checked after it ran: what
/// it wrote, nothing, is right either way.)
pub fn run(cmd: &ReadCmd) -> Result<ExitCode> {
    let name = cmd.archive().to_string_lossy();
    let location =
        Location::parse(&name).ok_or_else(|| RemoteError::BadLocation(name.to_string()))??;
    let cache = IndexCache::from_env();
    // The cache the next run reads, if any; `None` once an entry of it
    // was found stale.
    let mut trusted = cache.as_ref();
    let forget = |trusted: &mut Option<&IndexCache>| {
        if let Some(c) = trusted.take() {
            c.forget(&location.to_string());
        }
    };
    let stale = |r: Result<(), RemoteError>| matches!(r, Err(RemoteError::Changed { .. }));
    let is_get = matches!(cmd, ReadCmd::Get(_));
    loop {
        let source = RemoteSource::open(&location, trusted)?;
        let archive = Archive::open(source).with_context(|| format!("reading {location}"))?;
        let source = archive.source();
        source.set_blob_end(archive.blob_end());
        if source.from_cache() && !is_get && stale(source.validate()) {
            forget(&mut trusted);
            continue;
        }
        let result = cmd.run(&archive);
        if std::env::var_os("ZNIPPY_REMOTE_STATS").is_some() {
            eprintln!(
                "znippy: {location}: {} requests, {} bytes received{}",
                source.requests(),
                source.bytes_received(),
                if source.from_cache() {
                    ", index from the cache"
                } else {
                    ""
                }
            );
        }
        let cached = source.from_cache();
        match result {
            Err(e) if cached && source.requests() == 1 && RemoteError::is_changed(e.as_ref()) => {
                forget(&mut trusted)
            }
            Err(e) => return Err(e),
            Ok(_) if cached && source.requests() == 0 && stale(source.validate()) => {
                forget(&mut trusted)
            }
            Ok(code) => {
                if let Some(c) = &cache {
                    // A cache that cannot be written costs the next command
                    // its requests, not this one its result.
                    let _ = source.save_index(c);
                }
                return Ok(code);
            }
        }
    }
}
