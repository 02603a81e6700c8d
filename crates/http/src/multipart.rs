//! The multipart driver: a `multipart/form-data` upload, read part by part
//! as it arrives and fed to one append.
//!
//! Each part with a filename is a file (the filename is its archive path),
//! streamed to the engine like any other upload body (see `upload.rs`); a
//! field `meta` is a fact `path=key=value`, a field `meta-archive` a fact
//! `key=value` about the archive, typed like the CLI's. Facts are held in
//! memory until the body ends, so their bytes together and their number are
//! capped. `--max-body` counts every byte of the body, framing included (see
//! `body.rs`).
//!
//! multer holds what it has read until it makes progress (a part begins, a
//! part's data comes out): a preamble or part headers that never end would
//! grow its buffer with the body. So the bytes multer takes in and has not
//! given back are counted, and the body fails with 413 once more than
//! `MAX_FRAMING` of them are held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use futures::StreamExt;
use tokio::sync::mpsc;
use znippy_format::{InputFile, MetaTable, MetaValue};

use crate::body::{body_file, forward, Stop};
use crate::error::{ApiError, ErrorCode};

/// Most bytes of metadata fields in one multipart upload: as much as
/// `PUT /meta` takes in its whole body, so either route holds the same.
const MAX_META: usize = crate::MAX_JSON;
/// Most metadata fields in one multipart upload: what each costs beyond its
/// bytes is bounded by their number.
const MAX_FACTS: usize = 100_000;
/// Most body bytes the multipart parser may hold without making progress
/// (the preamble, or one part's headers: a 4 KiB path fits many times over),
/// before it is handed one more chunk.
const MAX_FRAMING: usize = 64 << 10;

/// A multipart preamble or part header that does not end.
#[derive(Debug, thiserror::Error)]
#[error("a multipart preamble or part header runs past {MAX_FRAMING} bytes")]
struct FramingTooLong;

/// Reads a multipart body into files sent on `files`, and returns its facts.
pub(crate) async fn drive_multipart(
    body: Body,
    boundary: String,
    files: mpsc::Sender<InputFile>,
) -> Result<Option<MetaTable>, Stop> {
    let broken = |e: multer::Error| match e {
        multer::Error::StreamReadFailed(inner) if inner.is::<FramingTooLong>() => {
            ApiError::too_large(inner.to_string())
        }
        multer::Error::StreamReadFailed(inner) => crate::error::body_failed(inner.as_ref()),
        e => ApiError::bad_request(ErrorCode::BadBody, format!("malformed multipart body: {e}")),
    };
    // `held` is what multer took in and has not given back as data since the
    // last part began; the body stops once more than MAX_FRAMING bytes are
    // held before the next chunk.
    let held = Arc::new(AtomicUsize::new(0));
    let taken = Arc::clone(&held);
    let guarded = body.into_data_stream().map(move |chunk| {
        type Boxed = Box<dyn std::error::Error + Send + Sync>;
        let chunk = chunk.map_err(|e| Box::new(e) as Boxed)?;
        if taken.fetch_add(chunk.len(), Ordering::Relaxed) > MAX_FRAMING {
            return Err(Box::new(FramingTooLong) as Boxed);
        }
        Ok(chunk)
    });
    let gave = |n: usize| {
        let _ = held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
            Some(h.saturating_sub(n))
        });
    };
    let mut form = multer::Multipart::new(guarded, boundary);
    let (mut facts, mut meta_bytes) = (0usize, 0usize);
    let mut meta: Option<MetaTable> = None;
    while let Some(mut field) = form.next_field().await.map_err(broken)? {
        held.store(0, Ordering::Relaxed);
        if let Some(path) = field.file_name() {
            let (file, tx) = body_file(path.to_string(), None);
            if files.send(file).await.is_err() {
                return Err(Stop::Engine);
            }
            let chunks = futures::stream::poll_fn(|cx| field.poll_next_unpin(cx))
                .inspect(|c| gave(c.as_ref().map_or(0, |c| c.len())));
            forward(chunks, &tx, broken).await?;
            continue;
        }
        let name = field.name().unwrap_or_default().to_string();
        let starred = field
            .headers()
            .get(axum::http::header::CONTENT_DISPOSITION)
            .is_some_and(|d| {
                d.as_bytes()
                    .windows(9)
                    .any(|w| w.eq_ignore_ascii_case(b"filename*"))
            });
        let about_file = match name.as_str() {
            "meta" => true,
            "meta-archive" => false,
            _ if starred => {
                let e = format!(
                    "form field {name:?} names its file in filename*, which \
                     multipart/form-data does not use (RFC 7578, 4.2): give the path, in \
                     UTF-8, as filename"
                );
                return Err(ApiError::bad_request(ErrorCode::BadField, e).into());
            }
            _ => {
                return Err(ApiError::bad_request(
                    ErrorCode::BadField,
                    format!(
                        "unknown form field {name:?}: file parts need a filename; \
                         facts go in 'meta' (path=key=value) or 'meta-archive' (key=value)"
                    ),
                )
                .into())
            }
        };
        facts += 1;
        if facts > MAX_FACTS {
            return Err(ApiError::too_large(format!(
                "more than {MAX_FACTS} metadata fields in one upload"
            ))
            .into());
        }
        let mut text = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(broken)? {
            gave(chunk.len());
            meta_bytes += chunk.len();
            if meta_bytes > MAX_META {
                return Err(ApiError::too_large(format!(
                    "the metadata fields of one upload exceed {MAX_META} bytes"
                ))
                .into());
            }
            text.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(text).map_err(|_| {
            ApiError::bad_request(ErrorCode::BadMeta, format!("field {name:?} is not UTF-8"))
        })?;
        meta.get_or_insert_with(MetaTable::new)
            .set_text(&text, about_file, |v| Ok(MetaValue::infer(v)))
            .map_err(|e| ApiError::bad_request(ErrorCode::BadMeta, e.to_string()))?;
    }
    Ok(meta)
}
