//! Uploads: a multipart form, a tar stream or one raw body, each one append.
//!
//! The request body is read on the async side by a *driver*, which hands the
//! bytes to the engine's blocking producer through bounded channels: one
//! channel of files, and per file one channel of chunks. The engine reads each
//! file to its end before it asks for the next, so a driver only ever waits
//! for the file being compressed, and memory stays at a few chunks.
//!
//! A file ends only with an explicit end marker. A body that stops early (a
//! client that hangs up, a limit hit, a malformed part) is an error on the
//! engine's side, never a short file, and the batch commits nothing.
//!
//! What every driver shares (the per-file channel, the body limit) is in
//! `body.rs`, the multipart driver in `multipart.rs`; the tar and raw drivers
//! and the append they feed are here.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use utoipa::ToSchema;
use znippy_format::{InputFile, MetaTable, TarEntries};
use znippy_store::Abandoned;

use crate::body::{body_file, body_reader, forward, limited, Stop};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::ApiPath;
use crate::multipart::drive_multipart;
use crate::openapi::{self, ArchiveId, FilePath, ModeHeader};
use crate::AppState;

/// Sent once the batch is durable and committed.
#[derive(Serialize, ToSchema)]
#[schema(as = AppendReceipt)]
pub(crate) struct Receipt {
    /// Files in the batch.
    files: u64,
    /// Input bytes of the batch.
    bytes: u64,
    /// The append's number (1, 2, ...).
    append_seq: u64,
    /// The files-table snapshot that committed it.
    snapshot_id: i64,
    /// The committed end of the sidecar's blob region afterwards.
    blob_end: u64,
}

/// Runs one append fed by `drive`, which sends the batch's files and returns
/// its metadata once the body is read.
async fn append_from<F, D>(
    app: &AppState,
    id: &str,
    files: F,
    drive: D,
) -> Result<Json<Receipt>, ApiError>
where
    F: Iterator<Item = znippy_format::Result<InputFile>> + Send + 'static,
    D: std::future::Future<Output = Result<Option<MetaTable>, Stop>>,
{
    let start = Instant::now();
    let (meta_tx, meta_rx) = oneshot::channel();
    let meta = async move { meta_rx.await.map_err(|_| Abandoned) };
    let driver = async move {
        let meta = drive.await?;
        let _ = meta_tx.send(meta);
        Ok::<_, Stop>(())
    };
    let (driven, appended) = tokio::join!(driver, app.store.append_stream(id, files, meta));
    let receipt = match (driven, appended) {
        (Err(Stop::Api(e)), _) => return Err(e),
        (_, Err(e)) => return Err(e.into()),
        (Err(Stop::Engine), Ok(_)) => {
            return Err(ApiError::internal("the engine stopped reading the upload"))
        }
        (Ok(()), Ok(r)) => r,
    };
    app.metrics.append(start.elapsed(), receipt.commit_time);
    Ok(Json(Receipt {
        files: receipt.files,
        bytes: receipt.bytes,
        append_seq: receipt.append_seq,
        snapshot_id: receipt.snapshot_id,
        blob_end: receipt.blob_end,
    }))
}

/// The engine's side of a channel of files.
fn files_from(
    mut rx: mpsc::Receiver<InputFile>,
) -> impl Iterator<Item = znippy_format::Result<InputFile>> {
    std::iter::from_fn(move || rx.blocking_recv().map(Ok))
}

fn broken_body(e: axum::Error) -> ApiError {
    crate::error::body_failed(&e)
}

/// Append one batch of files
///
/// One append, streamed (never held in memory whole). The batch commits as a whole or not at
/// all: a body that ends early or a bad part commits nothing. A path already in the archive is
/// replaced. Appends to one archive serialize.
#[utoipa::path(
    post, path = "/archives/{id}/files", tag = "files", operation_id = "appendFiles",
    params(ArchiveId),
    security(("bearer" = [])),
    request_body(content(
        (inline(openapi::MultipartBatch) = "multipart/form-data"),
        (inline(openapi::TarBatch) = "application/x-tar"),
        (inline(openapi::TarBatch) = "application/tar"),
    )),
    responses(
        (status = 200, description = "Committed and durable.", body = Receipt),
        (status = 400, description = "bad_body (malformed multipart, no boundary), broken_body \
            (the body could not be read), bad_field, bad_meta, bad_path (an invalid archive \
            path), bad_input (an unreadable input, a bad tar stream), bad_id.", body = ErrorBody),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 408, response = openapi::TooSlow),
        (status = 409, description = "sealed: the archive is sealed; conflict: a concurrent \
            commit conflict, path_conflict (x beside x/y).", body = ErrorBody),
        (status = 413, description = "too_large: the upload exceeds --max-body (every byte \
            counts, multipart framing too), its meta fields exceed 1 MiB together or number \
            over 100,000, or a part's headers run past 64 KiB. A Content-Length past \
            --max-body is refused before the body is read.", body = ErrorBody),
        (status = 415, description = "bad_media_type: neither multipart/form-data nor \
            application/x-tar (application/tar).", body = ErrorBody),
        (status = 500, response = openapi::Internal),
        (status = 503, response = openapi::OverBudget),
        (status = 507, response = openapi::NoSpace),
    ),
)]
pub(crate) async fn post_files(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Receipt>, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Media types are case-insensitive (RFC 9110, 8.3.1).
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "multipart/form-data" => {
            let boundary = multer::parse_boundary(ct).map_err(|e| {
                ApiError::bad_request(
                    ErrorCode::BadBody,
                    format!("multipart without a boundary: {e}"),
                )
            })?;
            let (tx, rx) = mpsc::channel(1);
            let drive = drive_multipart(limited(&app, &headers, body)?, boundary, tx);
            append_from(&app, &id, files_from(rx), drive).await
        }
        "application/x-tar" | "application/tar" => {
            let (reader, tx) = body_reader();
            let entries = TarEntries::new(reader);
            let body = limited(&app, &headers, body)?;
            let drive = async {
                forward(body.into_data_stream(), &tx, broken_body).await?;
                Ok(None)
            };
            append_from(&app, &id, entries, drive).await
        }
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::BadMediaType,
            format!(
                "POST a batch as multipart/form-data or application/x-tar (got {ct:?}); \
                 PUT /archives/{id}/files/PATH takes one raw file"
            ),
        )),
    }
}

/// Append one file, the raw body
///
/// One append of one file (replacing the path if present). The Content-Type is not checked.
#[utoipa::path(
    put, path = "/archives/{id}/files/{*path}", tag = "files", operation_id = "putFile",
    params(ArchiveId, FilePath, ModeHeader),
    security(("bearer" = [])),
    request_body(
        content = inline(Option<openapi::Bytes>),
        content_type = "application/octet-stream",
        description = "The file's bytes; an empty body is an empty file.",
    ),
    responses(
        (status = 200, description = "Committed and durable.", body = Receipt),
        (status = 400, description = "bad_mode, bad_path, broken_body, bad_input, bad_id.",
            body = ErrorBody),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 408, response = openapi::TooSlow),
        (status = 409, description = "sealed, or conflict, path_conflict (x beside x/y).",
            body = ErrorBody),
        (status = 413, description = "too_large: the body exceeds --max-body. A \
            Content-Length past --max-body is refused before the body is read.",
            body = ErrorBody),
        (status = 500, response = openapi::Internal),
        (status = 503, response = openapi::OverBudget),
        (status = 507, response = openapi::NoSpace),
    ),
)]
pub(crate) async fn put_file(
    State(app): State<AppState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Receipt>, ApiError> {
    let mode = match headers.get("x-znippy-mode") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                // from_str_radix alone would take a leading sign.
                .filter(|s| s.bytes().all(|b| matches!(b, b'0'..=b'7')))
                .and_then(|s| u32::from_str_radix(s, 8).ok())
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        ErrorCode::BadMode,
                        "X-Znippy-Mode must be octal, at most 7777",
                    )
                })?,
        ),
    };
    let body = limited(&app, &headers, body)?;
    let (file, tx) = body_file(path, mode);
    let drive = async {
        forward(body.into_data_stream(), &tx, broken_body).await?;
        Ok(None)
    };
    append_from(&app, &id, std::iter::once(Ok(file)), drive).await
}
