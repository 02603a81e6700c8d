//! The znippy HTTP service: live archives over HTTP, and their tables over a
//! read-only Iceberg REST catalog.
//!
//! Handlers are thin: each turns a request into one call on the typed core
//! ([`znippy_store::Store`] for live archives, [`znippy_seal::seal`] for
//! publishing) and its result into JSON or bytes. What the service adds is
//! what only an HTTP edge needs:
//!
//! - **Streaming uploads** (`upload.rs`, `multipart.rs`, `body.rs`): multipart, tar and
//!   raw bodies are fed to the compression engine as they arrive, file by
//!   file, through a bounded channel; no upload is ever held in memory whole.
//!   A body that ends early fails the batch, which then commits nothing. A
//!   transfer coding other than `chunked` is refused (`codings.rs`).
//! - **Reads with Range and ETag** (`files.rs`, `ranged.rs`): a file's rows
//!   are taken under the archive's state lock, its bytes read after it, only
//!   the slices a range touches, each verified; large bodies stream, each
//!   from a blocking thread, at most `ranged::MAX_STREAMS` at once. A client
//!   that stops taking an answer loses its connection after the body
//!   timeout (`write_deadline.rs`), and with it what the answer held.
//! - **Errors** (`error.rs`, `extract.rs`): JSON `{"error": {"code",
//!   "message"}}` with one status per kind of failure, for rejections of
//!   paths and queries too.
//! - **Unread bodies** (`unread_body.rs`): a response to a request whose body
//!   was left unread says `Connection: close`, so clients never reuse a
//!   connection the server is about to drop.
//! - **Auth** (`auth.rs`): a bearer token for writes, and for reads too when
//!   they are private.
//! - **Observability** (`observe.rs`): one log line per request, Prometheus
//!   counters and latency histograms at `/metrics`.
//! - **Iceberg REST** (`rest_catalog.rs`): `/iceberg/v1/...` lists each archive
//!   as a namespace holding its `files` and `meta` tables, so DuckDB, pyiceberg,
//!   Spark or Trino query live archives with their own Iceberg readers.
//!
//! - **Web console** (`console.rs`): a page at `/` over the same API,
//!   compiled into the binary.
//! - **API description** (`openapi.rs`): each handler carries its operation,
//!   the router is built from the handlers, and `/openapi.json` serves the
//!   document they make (checked in as `docs/openapi.json`).

mod archives;
mod auth;
mod body;
mod codings;
mod console;
mod error;
mod extract;
mod files;
mod meta;
mod multipart;
mod observe;
mod openapi;
mod paced;
mod packages;
mod parse_errors;
mod ranged;
mod rest_catalog;
mod server;
mod unread_body;
mod upload;
mod write_deadline;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use znippy_store::Store;
pub use znippy_store::{RemoteConfig, StoreOptions};

pub use error::{ApiError, ErrorCode};
pub use observe::Metrics;
pub use paced::MIN_PROGRESS;

/// The default for [`Config::max_body`]: 64 GiB.
pub const DEFAULT_MAX_BODY: u64 = 64 << 30;

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory (catalog, warehouse, sidecars, sealed archives).
    pub data: PathBuf,
    /// A scaled-out deployment to run on instead of the data directory.
    pub remote: Option<RemoteConfig>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The bearer token writes need; `None` means no auth at all.
    pub token: Option<String>,
    /// Whether reads need the token too.
    pub private_reads: bool,
    /// On object storage, answer a download of a sealed archive with a
    /// redirect to a presigned URL (valid [`PRESIGN_EXPIRY`]), so its bytes
    /// bypass the node.
    pub presign: bool,
    /// Allow listening beyond loopback without a token.
    pub insecure_open: bool,
    /// Signs every seal (docs/format.md, 6.6); `None` seals unsigned.
    pub signer: Option<Arc<znippy_sign::Signer>>,
    /// Largest request body accepted, in bytes.
    pub max_body: u64,
    /// Compression workers per append.
    pub threads: usize,
    /// Engine memory all appends in flight share, in bytes (see
    /// [`StoreOptions::engine_memory`]).
    pub engine_memory: u64,
    /// How long a connection may take to send a request's headers, counted
    /// from when it opens and again from each response: slow headers and idle
    /// keep-alive connections are closed after it.
    pub header_timeout: Duration,
    /// Each request body must bring [`MIN_PROGRESS`] bytes, or end, within
    /// this long; otherwise the request fails with 408. Likewise a client must
    /// take [`MIN_PROGRESS`] bytes of what the service sends within it, or
    /// its connection is closed; and a large read waits this long at most
    /// for a stream to be free.
    pub body_timeout: Duration,
    /// How long shutdown waits for requests in flight before it closes their
    /// connections.
    pub shutdown_grace: Duration,
}

/// How long a presigned download URL ([`Config::presign`]) stays valid.
pub const PRESIGN_EXPIRY: Duration = Duration::from_secs(15 * 60);

/// The default for [`Config::header_timeout`] and [`Config::body_timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default for [`Config::shutdown_grace`]: below the 30 s a container
/// runtime commonly waits before it kills.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

impl Default for Config {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        Config {
            data: PathBuf::from("znippy-data"),
            remote: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            token: None,
            private_reads: false,
            presign: false,
            insecure_open: false,
            signer: None,
            max_body: DEFAULT_MAX_BODY,
            threads,
            engine_memory: StoreOptions::new(threads).engine_memory,
            header_timeout: DEFAULT_TIMEOUT,
            body_timeout: DEFAULT_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Refused: an open service on a non-loopback address.
    #[error(
        "refusing to listen on {0} without a token: set --token (or ZNIPPY_TOKEN), \
         or pass --insecure-open if this network is trusted"
    )]
    OpenToNetwork(SocketAddr),
    /// The data directory (or the scaled-out deployment) could not be opened.
    #[error("opening the store: {0}")]
    Store(#[from] znippy_store::StoreError),
    /// Binding or serving failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What this node has learnt of sealed files, which never change, by their
/// ETag (`archives::memo`).
pub(crate) type Memo<T> = Arc<std::sync::Mutex<std::collections::HashMap<String, T>>>;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub store: Arc<Store>,
    pub config: Arc<Config>,
    pub metrics: Arc<Metrics>,
    /// The API description, as `/openapi.json` serves it.
    pub openapi: Arc<str>,
    /// The SHA-256 of each sealed file this node has read, by its ETag.
    pub checksums: Memo<[u8; 32]>,
    /// Who signed each sealed file this node has described, by its ETag.
    pub signers: Memo<Option<String>>,
    /// Permits for response bodies that stream, one each (see `ranged.rs`).
    pub streams: Arc<tokio::sync::Semaphore>,
}

/// Every route, from the handlers that document themselves: those that
/// `--token` guards, those it never does, and the document they make (JSON).
fn routes() -> (Router<AppState>, Router<AppState>, String) {
    let (rest, rest_doc) = rest_catalog::routes();
    let (guarded, doc) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(archives::create, archives::list))
        .routes(routes!(archives::inspect, archives::drop_archive))
        .routes(routes!(upload::post_files, files::list))
        .routes(routes!(
            upload::put_file,
            files::get_file,
            files::head_file,
            files::delete_file
        ))
        .routes(routes!(meta::search, meta::set))
        .routes(routes!(packages::list))
        .routes(routes!(archives::history))
        .routes(routes!(archives::seal))
        .routes(routes!(archives::download, archives::head_download))
        .routes(routes!(archives::sha256))
        .routes(routes!(archives::signature))
        .split_for_parts();
    let (open, open_doc) = OpenApiRouter::new()
        .routes(routes!(console::index))
        .routes(routes!(console::asset))
        .routes(routes!(healthz))
        .routes(routes!(observe::render))
        .routes(routes!(serve_openapi))
        .split_for_parts();
    let doc = doc.nest("/iceberg/v1", rest_doc).merge_from(open_doc);
    (
        guarded.nest("/iceberg/v1", rest),
        open,
        openapi::finish(doc),
    )
}

/// The API description `/openapi.json` serves, as JSON.
pub fn openapi_json() -> String {
    routes().2
}

/// The service's routes over `store`.
pub fn router(store: Arc<Store>, config: Config) -> Router {
    let (guarded, open, openapi) = routes();
    let state = AppState {
        store,
        config: Arc::new(config),
        metrics: Arc::new(Metrics::default()),
        openapi: openapi.into(),
        checksums: Arc::default(),
        signers: Arc::default(),
        streams: Arc::new(tokio::sync::Semaphore::new(ranged::MAX_STREAMS)),
    };
    let guarded = guarded.route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::check,
    ));
    Router::new()
        .merge(guarded)
        .merge(open)
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            paced::pace,
        ))
        .layer(axum::middleware::from_fn(codings::only_chunked))
        .layer(axum::middleware::from_fn(unread_body::close_if_unread))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            observe::track,
        ))
        .with_state(state)
}

async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        ErrorCode::NoRoute,
        format!("no route {method} {}: see /openapi.json", uri.path()),
    )
}

async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::BadMethod,
        format!("{} does not take {method}: see /openapi.json", uri.path()),
    )
}

/// Liveness
///
/// Never needs a token.
#[utoipa::path(
    get, path = "/healthz", tag = "service", operation_id = "healthz",
    security(()),
    responses((status = 200, description = "ok", body = String, content_type = "text/plain")),
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// This document
///
/// Never needs a token.
#[utoipa::path(
    get, path = "/openapi.json", tag = "service", operation_id = "openapi",
    security(()),
    responses((status = 200, description = "OpenAPI 3.1.", body = Object)),
)]
async fn serve_openapi(
    axum::extract::State(app): axum::extract::State<AppState>,
) -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        app.openapi.to_string(),
    )
}

/// Opens the data directory, binds, and serves until `shutdown` resolves;
/// then stops accepting and waits for requests in flight (appends finish and
/// commit), for at most [`Config::shutdown_grace`].
pub async fn serve(
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listener = bind(&config).await?;
    serve_on(listener, config, shutdown).await
}

/// Binds the configured address, refusing an open service beyond loopback.
pub async fn bind(config: &Config) -> Result<tokio::net::TcpListener, ServeError> {
    if config.token.is_none() && !config.insecure_open && !config.listen.ip().is_loopback() {
        return Err(ServeError::OpenToNetwork(config.listen));
    }
    Ok(tokio::net::TcpListener::bind(config.listen).await?)
}

/// [`serve`] on a listener bound already. When it returns, the store is
/// closed and the data directory can be opened again.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let opts = StoreOptions {
        threads: config.threads,
        engine_memory: config.engine_memory,
        plugins: znippy_plugins::builtin(),
        budget_wait: config.body_timeout,
    };
    let store = match &config.remote {
        None => Store::open_with(&config.data, opts).await?,
        Some(remote) => Store::open_remote(remote.connect().await?, opts).await?,
    };
    let store = Arc::new(store);
    let gc = config
        .remote
        .is_some()
        .then(|| tokio::spawn(collect_garbage(Arc::clone(&store))));
    let timeouts = (config.header_timeout, config.body_timeout);
    let grace = config.shutdown_grace;
    let app = router(store.clone(), config);
    tracing::info!(addr = %listener.local_addr()?, "znippy serving");
    server::run(listener, app, timeouts, grace, shutdown).await;
    if let Some(gc) = gc {
        gc.abort();
        let _ = gc.await;
    }
    // Handlers are gone once their connections are, but a spawned seal holds
    // the store a moment longer, and a change whose request was cut off runs
    // to its end on a task of its own. Waiting for both means the data
    // directory (the catalog's lock) is free when this returns.
    let mut store = store;
    let store = loop {
        match Arc::try_unwrap(store) {
            Ok(store) => break store,
            Err(shared) => store = shared,
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    };
    store.close().await;
    Ok(())
}

/// How often a service on object storage removes the segments no row
/// names ([`Store::gc`]).
const GC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs [`Store::gc`] every [`GC_INTERVAL`], until aborted at shutdown.
async fn collect_garbage(store: Arc<Store>) {
    loop {
        tokio::time::sleep(GC_INTERVAL).await;
        match store.gc(znippy_store::GC_MIN_AGE).await {
            Ok(c) if c.objects > 0 => {
                tracing::info!(
                    objects = c.objects,
                    bytes = c.bytes,
                    "removed unnamed segments"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("removing unnamed segments: {e}"),
        }
    }
}

/// Rows in a page when the client names no limit, and the most it may ask
/// for: the listings, metadata searches and package queries share them.
const PAGE: usize = 1000;
const MAX_PAGE: usize = 10_000;

/// The page size a `limit` query parameter asks for, or 400 `bad_limit`.
pub(crate) fn page_size(limit: Option<usize>) -> Result<usize, error::ApiError> {
    match limit.unwrap_or(PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        _ => Err(error::ApiError::bad_request(
            error::ErrorCode::BadLimit,
            format!("limit must be 1..={MAX_PAGE}"),
        )),
    }
}

/// Lowercase hex, as every hash and bytes value the service answers is written.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Largest JSON request body.
pub(crate) const MAX_JSON: usize = 1 << 20;

/// Parses a JSON request body of at most [`MAX_JSON`] bytes.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    body: axum::body::Body,
) -> Result<T, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_JSON).await.map_err(|e| {
        if error::chain(&e).any(|e| e.is::<http_body_util::LengthLimitError>()) {
            ApiError::too_large(format!("a JSON body may have at most {MAX_JSON} bytes"))
        } else {
            error::body_failed(&e)
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(ErrorCode::BadBody, format!("invalid JSON body: {e}")))
}
