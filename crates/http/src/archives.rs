//! Archives: create, list, inspect, drop, seal, and download once sealed.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use znippy_format::ArchiveProps;
use znippy_store::{ArchiveInfo, CreateOptions, State as ArchiveState};

use crate::error::{ApiError, ErrorCode};
use crate::extract::ApiPath;
use crate::ranged::{self, Ranged};
use crate::{read_json, AppState};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    id: String,
    chunk_size: Option<u64>,
    pack_threshold: Option<u64>,
    level: Option<i32>,
    /// Start with an (empty) metadata section.
    #[serde(default)]
    metadata: bool,
}

pub(crate) fn info_json(i: &ArchiveInfo) -> Value {
    json!({
        "id": i.id,
        "state": match i.state { ArchiveState::Live => "live", ArchiveState::Sealed => "sealed" },
        "chunk_size": i.props.chunk_size,
        "pack_threshold": i.props.pack_threshold,
        "level": i.props.level,
        "metadata": i.with_meta,
        "files": i.files,
        "bytes_in": i.bytes_in,
        "bytes_stored": i.bytes_stored,
        "bytes_read": i.bytes_read,
        "snapshot_id": i.snapshot_id,
        "appends": i.appends,
    })
}

pub(crate) async fn create(State(app): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let req: Create = read_json(body).await?;
    let d = ArchiveProps::default();
    let opts = CreateOptions {
        props: ArchiveProps {
            chunk_size: req.chunk_size.unwrap_or(d.chunk_size),
            pack_threshold: req.pack_threshold.unwrap_or(d.pack_threshold),
            level: req.level.unwrap_or(d.level),
        },
        with_meta: req.metadata,
    };
    let info = app.store.create(&req.id, opts).await?;
    Ok((StatusCode::CREATED, Json(info_json(&info))).into_response())
}

pub(crate) async fn list(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut out = Vec::new();
    for id in app.store.list().await? {
        out.push(info_json(&app.store.info(&id).await?));
    }
    Ok(Json(json!({ "archives": out })))
}

pub(crate) async fn inspect(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(info_json(&app.store.info(&id).await?)))
}

pub(crate) async fn drop_archive(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.store.drop_archive(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn seal(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    // On its own task: a client that hangs up does not cut a seal short.
    let store = app.store.clone();
    let task = tokio::spawn(async move {
        let r = znippy_seal::seal(&store, &id).await?;
        Ok::<_, ApiError>(json!({
            "id": id,
            "size": r.size,
            "identity": blake3_hex(&r.identity),
            "in_place": r.in_place,
            "blobs_copied": r.repack.blobs_copied,
            "bytes_copied": r.repack.bytes_copied,
            "blobs_rebuilt": r.repack.blobs_rebuilt,
            "codec_runs": r.repack.codec_runs,
            "tail_bytes": r.tail_bytes,
            "download": format!("/archives/{id}/archive.znippy"),
        }))
    });
    let body = task
        .await
        .map_err(|e| ApiError::internal(format!("seal task: {e}")))??;
    Ok(Json(body))
}

fn blake3_hex(h: &[u8; 32]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) async fn download(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(sealed) = app.store.open_sealed(&id).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::NotSealed,
            format!("archive {id:?} is live; seal it first (POST /archives/{id}/seal)"),
        ));
    };
    // The sealing snapshot is unique to this archive's history, so a dropped
    // and re-created archive sealed to the same length still gets a new tag.
    let snapshot = sealed.snapshot_id.unwrap_or_default();
    let etag = format!("{id}-{snapshot:x}-{}", sealed.len);
    let file = sealed.file;
    let src = Ranged {
        len: sealed.len,
        etag,
        content_type: "application/octet-stream",
        read: Box::new(move |range, out| {
            ranged::copy_range(&file, range, out)
                .map_err(|e| ApiError::internal(format!("reading the sealed archive: {e}")))
        }),
    };
    Ok(ranged::respond(&app, &method, &headers, src).await)
}
