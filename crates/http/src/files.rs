//! Files of an archive: list by prefix (paged), read (Range, ETag), delete.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use znippy_format::Kind;
use znippy_store::Listed;

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{ApiPath, ApiQuery};
use crate::openapi::{self, ArchiveId, FilePath, RangeHeaders};
use crate::ranged::{self, Ranged};
use crate::AppState;

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only paths starting with this (default: all).
    #[serde(default)]
    #[param(default = "")]
    prefix: String,
    /// The next of the previous page: list paths after this one.
    after: Option<String>,
    /// Page size, 1 to 10000 (otherwise 400 bad_limit).
    #[param(minimum = 1, maximum = 10000, default = 1000)]
    limit: Option<usize>,
    /// `/` folds the listing at the directory `prefix` (which must then be empty or end with
    /// `/`): the files directly in it, and each subdirectory once in `dirs`. Anything else is
    /// 400 bad_query.
    #[param(pattern = "^/$")]
    delimiter: Option<String>,
}

/// One live file.
#[derive(Serialize, ToSchema)]
pub(crate) struct FileEntry {
    path: String,
    #[serde(rename = "type")]
    #[schema(schema_with = kind_schema)]
    kind: &'static str,
    /// Bytes.
    size: u64,
    /// Unix permission bits as a number (420 = 0644); null when none was recorded.
    #[schema(required)]
    mode: Option<u32>,
    /// Number of slices (index rows).
    slices: u64,
}

fn kind_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    openapi::schema(serde_json::json!({
        "type": "string",
        "enum": ([Kind::File, Kind::Symlink, Kind::Dir].map(|k| k.name())),
        "description": "A regular file, a symbolic link (its target is its content) or an \
            empty directory.",
    }))
}

#[derive(Serialize, ToSchema)]
pub(crate) struct FileList {
    files: Vec<FileEntry>,
    /// With delimiter=/: the subdirectories in this page, each `prefix` + name + `/`, in path
    /// order among the files (a page's limit counts both). Absent without a delimiter.
    #[serde(skip_serializing_if = "Option::is_none")]
    dirs: Option<Vec<String>>,
    /// Pass as ?after= for the next page; null on the last page.
    #[schema(required)]
    next: Option<String>,
}

/// List live files by prefix, paged, in path order
#[utoipa::path(
    get, path = "/archives/{id}/files", tag = "files", operation_id = "listFiles",
    params(ArchiveId, ListQuery),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "One page.", body = FileList),
        (status = 400, response = openapi::QueryRejected),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn list(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<FileList>, ApiError> {
    let limit = crate::page_size(q.limit)?;
    let folded = match q.delimiter.as_deref() {
        None => false,
        Some("/") if q.prefix.is_empty() || q.prefix.ends_with('/') => true,
        Some("/") => {
            return Err(ApiError::bad_request(
                ErrorCode::BadQuery,
                "with delimiter=/ the prefix must be a directory: empty or ending with /",
            ))
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                ErrorCode::BadQuery,
                "the only delimiter is /",
            ))
        }
    };
    // One more than asked tells whether there is a next page.
    let after = q.after.as_deref();
    let mut page: Vec<Listed> = if folded {
        app.store
            .list_folded(&id, &q.prefix, after, limit + 1)
            .await?
    } else {
        app.store
            .list_page(&id, &q.prefix, after, limit + 1)
            .await?
            .into_iter()
            .map(Listed::File)
            .collect()
    };
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|e| e.path().to_string())
    } else {
        None
    };
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    for item in page {
        match item {
            Listed::File(e) => files.push(FileEntry {
                kind: e.kind()?.name(),
                size: e.size,
                mode: e.mode.map(|m| m & 0o7777),
                slices: e.slices,
                path: e.path,
            }),
            Listed::Dir(d) => dirs.push(d),
        }
    }
    let dirs = folded.then_some(dirs);
    Ok(Json(FileList { files, dirs, next }))
}

/// Read one file (Range, ETag)
///
/// The file's bytes, verified slice by slice; only the slices a range touches are read. The
/// ETag is derived from the file's slice checksums. Bodies over 4 MiB stream: a failure after
/// the status was sent, or a client that takes less than 64 KiB within --body-timeout, cuts the
/// body short of its Content-Length. A sealed archive's files are read from the sealed .znippy.
#[utoipa::path(
    get, path = "/archives/{id}/files/{*path}", tag = "files", operation_id = "getFile",
    params(ArchiveId, FilePath, RangeHeaders),
    security((), ("bearer" = [])),
    responses(
        (status = 200, response = openapi::FileBody),
        (status = 206, response = openapi::PartialBody),
        (status = 304, response = openapi::NotModified),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, description = "no_archive or no_file.", body = ErrorBody),
        (status = 416, response = openapi::BadRange),
        (status = 500, response = openapi::Internal),
        (status = 503, response = openapi::Busy),
    ),
)]
pub(crate) async fn get_file(
    State(app): State<AppState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A path no upload could have stored is a bad request, not a missing file.
    znippy_format::validate_path(&path)?;
    let file = app.store.open_file(&id, &path).await?;
    let kind = file.entry().kind()?;
    if kind != Kind::File {
        // A link answers with its target in a header, a directory with its
        // type: neither has a body, and no link is followed.
        let mut target = Vec::new();
        if kind == Kind::Symlink {
            target = tokio::task::spawn_blocking(move || file.read_link())
                .await
                .map_err(|e| ApiError::internal(format!("read task: {e}")))??;
        }
        let mut resp = Response::new(axum::body::Body::empty());
        let h = resp.headers_mut();
        h.insert("x-znippy-type", HeaderValue::from_static(kind.name()));
        // The type every GET of a file answers with, here with no bytes.
        h.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        if kind == Kind::Symlink {
            let encoded = percent_encode(&target);
            let value = HeaderValue::from_str(&encoded)
                .map_err(|e| ApiError::internal(format!("link target header: {e}")))?;
            h.insert("x-znippy-link-target", value);
        }
        return Ok(resp);
    }
    let src = Ranged {
        len: file.entry().size,
        etag: file.etag(),
        content_type: "application/octet-stream",
        read: Box::new(move |range, out| Ok(file.read_range(range, out)?)),
    };
    Ok(ranged::respond(&app, &method, &headers, src).await)
}

/// One file's headers
///
/// As GET, without the body.
#[utoipa::path(
    head, path = "/archives/{id}/files/{*path}", tag = "files", operation_id = "headFile",
    params(ArchiveId, FilePath, RangeHeaders),
    security((), ("bearer" = [])),
    responses(
        (status = 200, response = openapi::WholeHeaders),
        (status = 206, response = openapi::PartialHeaders),
        (status = 304, response = openapi::NotModified),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, description = "no_archive or no_file.", body = ErrorBody),
        (status = 416, response = openapi::BadRange),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn head_file(
    state: State<AppState>,
    path: ApiPath<(String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    get_file(state, path, method, headers).await
}

#[derive(Serialize, ToSchema)]
pub(crate) struct DeletedFile {
    /// The path.
    deleted: String,
    /// The files-table snapshot of the tombstone.
    snapshot_id: i64,
}

/// Delete one file (a tombstone append)
///
/// Metadata about the path stays.
#[utoipa::path(
    delete, path = "/archives/{id}/files/{*path}", tag = "files", operation_id = "deleteFile",
    params(ArchiveId, FilePath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Deleted.", body = DeletedFile),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, description = "no_archive or no_file.", body = ErrorBody),
        (status = 409, description = "sealed, or conflict.", body = ErrorBody),
        (status = 500, response = openapi::Internal),
        (status = 507, response = openapi::NoSpace),
    ),
)]
pub(crate) async fn delete_file(
    State(app): State<AppState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
) -> Result<Json<DeletedFile>, ApiError> {
    znippy_format::validate_path(&path)?;
    let snapshot_id = app.store.delete_file(&id, &path).await?;
    Ok(Json(DeletedFile {
        deleted: path,
        snapshot_id,
    }))
}

/// A link target as a header value: bytes outside printable ASCII, and `%`,
/// percent-encoded (RFC 3986), so any target survives the trip.
fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
