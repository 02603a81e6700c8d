//! Archives: create, list, inspect, drop, seal, and download once sealed.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use znippy_format::{ArchiveProps, ReadAt};
use znippy_store::{CreateOptions, OpenSealed, State as ArchiveState};

use crate::error::{ApiError, ErrorCode};
use crate::extract::{ApiPath, ApiQuery, NoQuery};
use crate::openapi::{self, archive_id, ArchiveId, RangeHeaders};
use crate::ranged::{self, Ranged};
use crate::{hex, read_json, AppState, Memo};

/// Unknown fields are refused (bad_body). Omitted properties take the defaults.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateArchive)]
pub(crate) struct Create {
    #[schema(schema_with = archive_id)]
    id: String,
    /// Size of the pieces large files are cut into, in bytes, 4096 to 67108864 (default
    /// 1572864; null is the default). The service also refuses properties whose appends would
    /// need more than its whole --engine-memory (bad_property).
    #[schema(minimum = 4096, maximum = 67108864)]
    chunk_size: Option<u64>,
    /// Files up to this size are packed together; must be smaller than chunk_size (default
    /// 524288; null is the default).
    pack_threshold: Option<u64>,
    /// The most bytes a pack of small files holds, from pack_threshold to chunk_size: reading
    /// a small file decodes its pack up to it (default 524288 within those bounds; null is
    /// the default).
    pack_size: Option<u64>,
    /// zstd level, -131072 to 22 (default 3; null is the default).
    #[schema(minimum = -131072, maximum = 22)]
    level: Option<i32>,
    /// Start with an (empty) metadata section.
    #[serde(default)]
    #[schema(default = false)]
    metadata: bool,
    /// Let the service's package plugins read the packages appended (jars,
    /// wheels, npm tarballs, crates, .debs): their rows go to a
    /// packages_<plugin> table per plugin, and the sealed archive has
    /// package sections, as `znippy compress` makes them.
    #[serde(default = "yes")]
    #[schema(default = true)]
    plugins: bool,
    /// The repo the package rows are filed under (default "").
    #[serde(default)]
    repo: String,
}

fn yes() -> bool {
    true
}

/// An archive, as the routes that name one answer.
#[derive(Serialize, ToSchema)]
#[schema(as = ArchiveInfo)]
pub(crate) struct Archive {
    id: String,
    #[schema(inline)]
    state: StateName,
    chunk_size: u64,
    pack_threshold: u64,
    pack_size: u64,
    level: i32,
    /// Whether the archive has a metadata section.
    metadata: bool,
    /// Live files.
    files: u64,
    /// Sum of the live files' sizes.
    bytes_in: u64,
    /// Committed bytes of the sidecar (blob region).
    bytes_stored: u64,
    /// Bytes read from the sidecar (or the sealed file) since this server opened it.
    bytes_read: u64,
    /// The current snapshot of the files table; null before the first append.
    #[schema(required)]
    snapshot_id: Option<i64>,
    /// Appends (and deletes) committed.
    appends: u64,
    /// Who signed the sealed archive (its signatures' signers, each checked against its own
    /// certificate; `znippy verify --ca` checks them against a CA), or null when it is sealed
    /// unsigned. Only `GET /archives/{id}` reads it, and only for a sealed archive: absent
    /// elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    signer: Option<Option<String>>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum StateName {
    Live,
    Sealed,
}

impl From<znippy_store::ArchiveInfo> for Archive {
    fn from(i: znippy_store::ArchiveInfo) -> Self {
        Archive {
            id: i.id,
            state: match i.state {
                ArchiveState::Live => StateName::Live,
                ArchiveState::Sealed => StateName::Sealed,
            },
            chunk_size: i.props.chunk_size,
            pack_threshold: i.props.pack_threshold,
            pack_size: i.props.pack_size,
            level: i.props.level,
            metadata: i.with_meta,
            files: i.files,
            bytes_in: i.bytes_in,
            bytes_stored: i.bytes_stored,
            bytes_read: i.bytes_read,
            snapshot_id: i.snapshot_id,
            appends: i.appends,
            signer: None,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ArchiveList {
    archives: Vec<Archive>,
}

/// Create a live archive
#[utoipa::path(
    post, path = "/archives", tag = "archives", operation_id = "createArchive",
    security(("bearer" = [])),
    request_body(
        content = Create,
        description = "JSON of at most 1 MiB. The Content-Type is not checked.",
    ),
    responses(
        (status = 201, description = "Created.", body = Archive),
        (status = 400, description = "bad_body (not JSON, or an unknown field), bad_id, \
            bad_property (chunk_size, pack_threshold, pack_size or level out of range, or an archive whose \
            one append would need more engine memory than the service's whole \
            --engine-memory).", body = crate::error::ErrorBody),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 408, response = openapi::TooSlow),
        (status = 409, description = "exists: an archive with this id exists.",
            body = crate::error::ErrorBody),
        (status = 413, description = "too_large: the JSON body exceeds 1 MiB.",
            body = crate::error::ErrorBody),
        (status = 500, response = openapi::Internal),
        (status = 507, response = openapi::NoSpace),
    ),
)]
pub(crate) async fn create(State(app): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let req: Create = read_json(body).await?;
    let d = ArchiveProps::default();
    let opts = CreateOptions {
        props: ArchiveProps::new(
            req.chunk_size.unwrap_or(d.chunk_size),
            req.pack_threshold.unwrap_or(d.pack_threshold),
            req.pack_size,
            req.level.unwrap_or(d.level),
        ),
        with_meta: req.metadata,
        plugins: req.plugins,
        repo: req.repo,
    };
    let info = app.store.create(&req.id, opts).await?;
    Ok((StatusCode::CREATED, Json(Archive::from(info))).into_response())
}

/// List archives
#[utoipa::path(
    get, path = "/archives", tag = "archives", operation_id = "listArchives",
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Every archive, live and sealed.", body = ArchiveList),
        (status = 400, response = openapi::QueryRejected),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn list(
    State(app): State<AppState>,
    _: ApiQuery<NoQuery>,
) -> Result<Json<ArchiveList>, ApiError> {
    let archives = app.store.infos().await?;
    Ok(Json(ArchiveList {
        archives: archives.into_iter().map(Into::into).collect(),
    }))
}

/// Inspect an archive
#[utoipa::path(
    get, path = "/archives/{id}", tag = "archives", operation_id = "getArchive",
    params(ArchiveId),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The archive.", body = Archive),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn inspect(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Archive>, ApiError> {
    // The signer first, so that the numbers below count its read.
    let signer = match app.store.open_sealed(&id).await? {
        Some(sealed) => Some(
            memo(&app.signers, etag_of(&id, &sealed), move || {
                let archive = znippy_format::Archive::open(&*sealed.source)?;
                Ok(znippy_seal::signer(&archive, &archive.identity()?)?)
            })
            .await?,
        ),
        None => None,
    };
    let mut archive: Archive = app.store.info(&id).await?.into();
    archive.signer = signer;
    Ok(Json(archive))
}

/// One change of an archive: one snapshot of its files table.
#[derive(Serialize, ToSchema)]
pub(crate) struct Change {
    snapshot_id: i64,
    /// When it was committed, in milliseconds since the Unix epoch.
    timestamp_ms: i64,
    /// append (files, facts or both; one group commit), delete, seal, or rewrite (the
    /// table's small data files merged; no row changed).
    #[schema(schema_with = change_kind)]
    kind: &'static str,
    /// The number of the last append it commits.
    #[schema(required)]
    append_seq: Option<u64>,
    /// For an append: the appends its group commit holds (null for other kinds, and for
    /// snapshots older than this field).
    #[schema(required)]
    appends: Option<u64>,
    /// For an append: the files they brought.
    #[schema(required)]
    files: Option<u64>,
    /// For an append: those files' bytes.
    #[schema(required)]
    bytes: Option<u64>,
    /// The end of the committed blob region after it.
    #[schema(required)]
    blob_end: Option<u64>,
}

fn change_kind() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use znippy_store::ChangeKind as K;
    openapi::schema(serde_json::json!({
        "type": "string",
        "enum": ([K::Append, K::Delete, K::Seal, K::Rewrite].map(K::name)),
    }))
}

#[derive(Serialize, ToSchema)]
pub(crate) struct History {
    /// Newest first: the snapshots the files table keeps (expiry drops all but the newest).
    changes: Vec<Change>,
}

/// An archive's changes, from its files table's Iceberg snapshots
#[utoipa::path(
    get, path = "/archives/{id}/history", tag = "archives", operation_id = "archiveHistory",
    params(ArchiveId),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Newest first.", body = History),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn history(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    _: ApiQuery<NoQuery>,
) -> Result<Json<History>, ApiError> {
    let changes = app
        .store
        .history(&id)
        .await?
        .into_iter()
        .map(|h| Change {
            snapshot_id: h.snapshot_id,
            timestamp_ms: h.timestamp_ms,
            kind: h.kind.name(),
            append_seq: h.append_seq,
            appends: h.appends,
            files: h.files,
            bytes: h.bytes,
            blob_end: h.blob_end,
        })
        .collect();
    Ok(Json(History { changes }))
}

/// Drop an archive (its tables, sidecar and sealed file)
#[utoipa::path(
    delete, path = "/archives/{id}", tag = "archives", operation_id = "dropArchive",
    params(ArchiveId),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Dropped."),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn drop_archive(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.store.drop_archive(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
pub(crate) struct SealReceipt {
    id: String,
    /// Length of the sealed .znippy.
    size: u64,
    /// BLAKE3 of the sealed file's tail (bytes from blob_end to the end), hex: names every
    /// file's content, the metadata and the properties; computed from the index alone.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    identity: String,
    /// Whether only the tail was written after the live blobs (nothing was replaced or
    /// deleted).
    in_place: bool,
    /// Blobs copied unchanged by the re-pack (0 in place).
    blobs_copied: u64,
    /// Their bytes.
    bytes_copied: u64,
    /// Blobs rebuilt from their live files, because their members changed (0 in place).
    blobs_rebuilt: u64,
    /// Of those, the ones compressed again.
    codec_runs: u64,
    /// Tail bytes written (the signature's included).
    tail_bytes: u64,
    /// Who signed it (the signing certificate's subject), when the service signs seals
    /// (`--sign-key`); absent when it is not signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    signer: Option<String>,
    /// /archives/{id}/archive.znippy.sig: the signature (DER CMS), when it is signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<String>,
    /// /archives/{id}/archive.znippy
    download: String,
    /// /archives/{id}/archive.znippy.sha256: the whole file's SHA-256, which the seal does
    /// not compute (it reads no payload).
    sha256: String,
}

/// Seal: publish the archive as an immutable .znippy
///
/// Runs to the end even if the client hangs up. Sealing a sealed archive returns the same
/// file. Afterwards appends and deletes are refused (409 sealed). No request body.
#[utoipa::path(
    post, path = "/archives/{id}/seal", tag = "archives", operation_id = "sealArchive",
    params(ArchiveId),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Sealed.", body = SealReceipt),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
        (status = 507, response = openapi::NoSpace),
    ),
)]
pub(crate) async fn seal(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SealReceipt>, ApiError> {
    // On its own task: a client that hangs up does not cut a seal short.
    let store = app.store.clone();
    let signer = app.config.signer.clone();
    let task = tokio::spawn(async move {
        let r = znippy_seal::seal(&store, &id, signer).await?;
        Ok::<_, ApiError>(SealReceipt {
            signature: r
                .signer
                .is_some()
                .then(|| format!("/archives/{id}/archive.znippy.sig")),
            signer: r.signer,
            size: r.size,
            identity: hex(&r.identity),
            in_place: r.in_place,
            blobs_copied: r.repack.blobs_copied,
            bytes_copied: r.repack.bytes_copied,
            blobs_rebuilt: r.repack.blobs_rebuilt,
            codec_runs: r.repack.codec_runs,
            tail_bytes: r.tail_bytes,
            download: format!("/archives/{id}/archive.znippy"),
            sha256: format!("/archives/{id}/archive.znippy.sha256"),
            id,
        })
    });
    let body = task
        .await
        .map_err(|e| ApiError::internal(format!("seal task: {e}")))??;
    Ok(Json(body))
}

/// Download the sealed archive (Range, ETag)
///
/// The sealed .znippy (409 not_sealed while the archive is live). ETag:
/// "<id>-<snapshot>-<length>". A service started with --presign on object storage
/// answers 307 instead, to a presigned URL of the sealed object (valid 15 minutes).
#[utoipa::path(
    get, path = "/archives/{id}/archive.znippy", tag = "archives",
    operation_id = "downloadArchive",
    params(ArchiveId, RangeHeaders),
    security((), ("bearer" = [])),
    responses(
        (status = 200, response = openapi::WholeBody),
        (status = 206, response = openapi::PartialBody),
        (status = 307, description = "With --presign on object storage: the sealed object's \
            presigned URL, in Location."),
        (status = 304, response = openapi::NotModified),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 409, description = "not_sealed: the archive is live; seal it first.",
            body = crate::error::ErrorBody),
        (status = 416, response = openapi::BadRange),
        (status = 500, response = openapi::Internal),
        (status = 503, response = openapi::Busy),
    ),
)]
pub(crate) async fn download(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if app.config.presign {
        let url = app
            .store
            .presigned_sealed(&id, method.clone(), crate::PRESIGN_EXPIRY)
            .await?;
        if let Some(url) = url {
            return Ok((StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, url)]).into_response());
        }
    }
    let (sealed, etag) = open_sealed(&app, &id).await?;
    let source = sealed.source;
    let src = Ranged {
        len: sealed.len,
        etag,
        content_type: "application/octet-stream",
        read: Box::new(move |range, out| {
            ranged::copy_range(&*source, range, out)
                .map_err(|e| ApiError::internal(format!("reading the sealed archive: {e}")))
        }),
    };
    Ok(ranged::respond(&app, &method, &headers, src).await)
}

/// `id`'s sealed file and its ETag, or 409 not_sealed.
async fn open_sealed(app: &AppState, id: &str) -> Result<(OpenSealed, String), ApiError> {
    let Some(sealed) = app.store.open_sealed(id).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::NotSealed,
            format!("archive {id:?} is live; seal it first (POST /archives/{id}/seal)"),
        ));
    };
    let etag = etag_of(id, &sealed);
    Ok((sealed, etag))
}

/// The ETag of sealed archive `id`. The sealing snapshot is unique to this
/// archive's history, so a dropped and re-created archive sealed to the same
/// length still gets a new tag.
fn etag_of(id: &str, sealed: &OpenSealed) -> String {
    let snapshot = sealed.snapshot_id.unwrap_or_default();
    format!("{id}-{snapshot:x}-{}", sealed.len)
}

/// The sealed archive's SHA-256, as sha256sum prints it
///
/// `<64 hex digits>  <id>.znippy`: with the download saved as <id>.znippy, `sha256sum -c`
/// checks it. The seal reads no payload, so this is computed by reading the sealed file once,
/// the first time it is asked for, and kept by this node from then on.
#[utoipa::path(
    get, path = "/archives/{id}/archive.znippy.sha256", tag = "archives",
    operation_id = "archiveSha256",
    params(ArchiveId),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "One line, as sha256sum prints it.", body = String,
            content_type = "text/plain"),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 409, description = "not_sealed: the archive is live; seal it first.",
            body = crate::error::ErrorBody),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn sha256(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let (sealed, etag) = open_sealed(&app, &id).await?;
    let sum = memo(&app.checksums, etag, move || {
        sha256_of(&*sealed.source, sealed.len)
            .map_err(|e| ApiError::internal(format!("reading the sealed archive: {e}")))
    })
    .await?;
    let line = format!("{}  {id}.znippy\n", hex(&sum));
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], line).into_response())
}

/// The sealed archive's signature (DER CMS)
///
/// A detached CMS SignedData over the line naming the archive's identity (docs/format.md,
/// 6.6), read from the archive's signature section: with that line (`znippy identity`),
/// `openssl cms -verify -binary -inform DER -in archive.znippy.sig -content content.bin
/// -CAfile ca.pem -purpose any` checks it. A service started with `--sign-key` signs every
/// seal; an archive signed several times answers its first signature.
#[utoipa::path(
    get, path = "/archives/{id}/archive.znippy.sig", tag = "archives",
    operation_id = "archiveSignature",
    params(ArchiveId),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The signature, DER.", body = Vec<u8>,
            content_type = "application/pkcs7-signature"),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, description = "no_archive, or not_signed: the sealed archive has no \
            signature.", body = crate::error::ErrorBody),
        (status = 409, description = "not_sealed: the archive is live; seal it first.",
            body = crate::error::ErrorBody),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn signature(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let (sealed, _) = open_sealed(&app, &id).await?;
    let signatures = tokio::task::spawn_blocking(move || {
        znippy_format::Archive::open(&*sealed.source)?.signatures()
    })
    .await
    .map_err(|e| ApiError::internal(format!("signature task: {e}")))??;
    let Some(first) = signatures.into_iter().next() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotSigned,
            format!("archive {id:?} is sealed without a signature"),
        ));
    };
    Ok((
        [(header::CONTENT_TYPE, "application/pkcs7-signature")],
        first,
    )
        .into_response())
}

/// What `read` learns of the sealed file tagged `etag`, read once on a
/// blocking thread and then kept in `memo`: a sealed file never changes.
async fn memo<T: Clone + Send + 'static>(
    memo: &Memo<T>,
    etag: String,
    read: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    if let Some(known) = memo.lock().ok().and_then(|m| m.get(&etag).cloned()) {
        return Ok(known);
    }
    let learnt = tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| ApiError::internal(format!("reading the sealed archive: {e}")))??;
    if let Ok(mut m) = memo.lock() {
        m.insert(etag, learnt.clone());
    }
    Ok(learnt)
}

/// SHA-256 of the first `len` bytes of `source`, read in pieces of at most
/// 8 MiB (on object storage each piece is one ranged GET).
fn sha256_of(source: &dyn ReadAt, len: u64) -> std::io::Result<[u8; 32]> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; len.min(8 << 20) as usize];
    let mut at = 0;
    while at < len {
        let n = buf.len().min((len - at) as usize);
        source.read_exact_at(&mut buf[..n], at)?;
        hash.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hash.finalize().into())
}

/// The sealed archive's headers
///
/// As GET, without the body.
#[utoipa::path(
    head, path = "/archives/{id}/archive.znippy", tag = "archives",
    operation_id = "headArchive",
    params(ArchiveId, RangeHeaders),
    security((), ("bearer" = [])),
    responses(
        (status = 200, response = openapi::WholeHeaders),
        (status = 206, response = openapi::PartialHeaders),
        (status = 307, description = "With --presign on object storage: the sealed object's \
            presigned URL, in Location."),
        (status = 304, response = openapi::NotModified),
        (status = 400, response = openapi::BadId),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 409, description = "not_sealed: the archive is live; seal it first.",
            body = crate::error::ErrorBody),
        (status = 416, response = openapi::BadRange),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn head_download(
    state: State<AppState>,
    id: ApiPath<String>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    download(state, id, method, headers).await
}
