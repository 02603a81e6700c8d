//! Files of an archive: list by prefix (paged), read (Range, ETag), delete.

use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
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
            "bad_limit",
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
        .map(|e| json!({ "path": e.path, "size": e.size, "mode": e.mode, "slices": e.slices }))
        .collect();
    Ok(Json(json!({ "files": files, "next": next })))
}

pub(crate) async fn get_file(
    State(app): State<AppState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let file = app.store.open_file(&id, &path).await?;
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
    let snapshot = app.store.delete_file(&id, &path).await?;
    Ok(Json(json!({ "deleted": path, "snapshot_id": snapshot })))
}
