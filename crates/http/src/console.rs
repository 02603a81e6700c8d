//! The web console: a page at `/` and its script and style under
//! `/console/`, compiled into the binary (`crates/http/console/`), so the
//! service has no build step, no files to install and loads nothing from
//! anywhere else.
//!
//! The console is a client of the public API and nothing more: it holds no
//! data, so its files never need the token, and every archive byte it shows
//! comes through the routes `--token` and `--private-reads` guard. Its
//! answers carry a Content-Security-Policy that lets the page run only its
//! own script and talk only to this origin.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};
use crate::extract::ApiPath;

/// Each file of the console: its name under `/console/`, type and bytes.
const ASSETS: [(&str, &str, &str); 3] = [
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("../console/console.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../console/favicon.svg"),
    ),
];

const INDEX: &str = include_str!("../console/index.html");

/// Only this origin, only the console's own script and style; previews are
/// `blob:` URLs the script makes from what it fetched.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'none'";

fn answer(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The files change with the binary: ask again, cheaply, every time.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The web console
///
/// A page for browsing, uploading, searching, sealing and downloading archives, served by the
/// binary itself. Never needs a token (the data it shows comes through the API, which may).
#[utoipa::path(
    get, path = "/", tag = "console", operation_id = "console",
    security(()),
    responses((status = 200, description = "The console's page.", body = String,
        content_type = "text/html")),
)]
pub(crate) async fn index() -> Response {
    answer("text/html; charset=utf-8", INDEX)
}

/// A file of the web console
///
/// Its script and style. Never needs a token.
#[utoipa::path(
    get, path = "/console/{asset}", tag = "console", operation_id = "consoleAsset",
    params(("asset" = String, Path, description = "console.js, console.css or favicon.svg")),
    security(()),
    responses(
        (status = 200, description = "The file.", body = String, content_type = "text/plain"),
        (status = 404, description = "no_file: the console has no such file.",
            body = crate::error::ErrorBody),
    ),
)]
pub(crate) async fn asset(ApiPath(name): ApiPath<String>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, content_type, body)| answer(content_type, body))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NoFile,
                format!("the console has no file {name:?}"),
            )
        })
}
