//! Files of an archive: list by prefix (paged), read (Range, ETag), delete.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use znippy_format::Kind;

use crate::error::{ApiError, ErrorCode};
use crate::extract::{ApiPath, ApiQuery};
use crate::ranged::{self, Ranged};
use crate::AppState;

/// Page size when the client names none, and the largest it may ask for.
const PAGE: usize = 1000;
const MAX_PAGE: usize = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default)]
    prefix: String,
    /// The `next` of the previous page.
    after: Option<String>,
    limit: Option<usize>,
}

pub(crate) async fn list(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(
            ErrorCode::BadLimit,
            format!("limit must be 1..={MAX_PAGE}"),
        ));
    }
    // One more than asked tells whether there is a next page.
    let mut page = app
        .store
        .list_page(&id, &q.prefix, q.after.as_deref(), limit + 1)
        .await?;
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|e| e.path.clone())
    } else {
        None
    };
    let files: Vec<Value> = page
        .iter()
        .map(|e| {
            Ok(json!({
                "path": e.path,
                "type": e.kind()?.name(),
                "size": e.size,
                "mode": e.mode.map(|m| m & 0o7777),
                "slices": e.slices,
            }))
        })
        .collect::<Result<_, znippy_format::Error>>()?;
    Ok(Json(json!({ "files": files, "next": next })))
}

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
            let len = file.entry().size;
            target = tokio::task::spawn_blocking(move || {
                let mut t = Vec::new();
                file.read_range(0..len, &mut t).map(|_| t)
            })
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

pub(crate) async fn delete_file(
    State(app): State<AppState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    znippy_format::validate_path(&path)?;
    let snapshot = app.store.delete_file(&id, &path).await?;
    Ok(Json(json!({ "deleted": path, "snapshot_id": snapshot })))
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
