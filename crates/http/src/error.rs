//! Every failure as JSON `{"error": {"code", "message"}}` with its status.
//!
//! The code is stable (clients branch on it); the message is for people.

use std::io;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use znippy_seal::SealError;
use znippy_store::StoreError;

/// Declares [`ErrorCode`] from one table (variant, wire string), so that the
/// enum, its strings and its list of every code cannot drift apart.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident => $wire:literal,)*) => {
        /// A stable, machine-readable error code: its wire string is the
        /// `code` of the JSON body, and clients branch on it, so no string
        /// may change.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $name,)*
        }

        impl ErrorCode {
            /// Every code there is.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The wire string, as the JSON body carries it.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $wire,)*
                }
            }
        }
    };
}

error_codes! {
    /// A request hyper cannot parse as HTTP/1.1 (400).
    BadRequest => "bad_request",
    /// A JSON body that does not parse, malformed multipart, or a cut-off upload (400).
    BadBody => "bad_body",
    /// A request body that could not be read to its end (400).
    BrokenBody => "broken_body",
    /// A multipart part with no filename, not `meta` or `meta-archive` (400).
    BadField => "bad_field",
    /// A metadata fact that is malformed, not UTF-8 or wrongly typed (400).
    BadMeta => "bad_meta",
    /// An `X-Znippy-Mode` that is not octal or is above 7777 (400).
    BadMode => "bad_mode",
    /// An invalid archive path, or path parameters that do not parse (400).
    BadPath => "bad_path",
    /// An input that cannot be stored, such as a malformed tar stream (400).
    BadInput => "bad_input",
    /// An archive property out of range (400).
    BadProperty => "bad_property",
    /// An archive id outside the allowed length or characters (400).
    BadId => "bad_id",
    /// A page `limit` out of range (400).
    BadLimit => "bad_limit",
    /// A query string that does not parse, or a meta search asked amiss (400).
    BadQuery => "bad_query",
    /// No bearer token where one is needed (401).
    Unauthorized => "unauthorized",
    /// A bearer token that is not valid (403).
    Forbidden => "forbidden",
    /// No archive with this id (404).
    NoArchive => "no_archive",
    /// No such live file (404).
    NoFile => "no_file",
    /// No route matches the path (404).
    NoRoute => "no_route",
    /// A sealed archive without a signature, asked for its signature (404).
    NotSigned => "not_signed",
    /// The route does not take this method (405).
    BadMethod => "bad_method",
    /// A request body that brought too few bytes within the body timeout (408).
    TooSlow => "too_slow",
    /// Creating an archive that exists (409).
    Exists => "exists",
    /// Changing a sealed archive (409).
    Sealed => "sealed",
    /// Downloading an archive that is still live (409).
    NotSealed => "not_sealed",
    /// A concurrent catalog commit won (409).
    Conflict => "conflict",
    /// An upload whose paths collide with live files or links (409).
    PathConflict => "path_conflict",
    /// A body, form field, count of facts or multipart framing over its limit (413).
    TooLarge => "too_large",
    /// A request target longer than hyper accepts (414).
    UriTooLong => "uri_too_long",
    /// `POST .../files` that is neither multipart nor tar (415).
    BadMediaType => "bad_media_type",
    /// A range that starts past the end (416).
    BadRange => "bad_range",
    /// Request headers larger or more numerous than hyper accepts (431).
    HeadersTooLarge => "headers_too_large",
    /// Stored data that failed its integrity checks (500).
    Corrupt => "corrupt",
    /// Any other server-side failure (500).
    Internal => "internal",
    /// What this deployment cannot do yet, such as sealing on object
    /// storage (501).
    Unsupported => "unsupported",
    /// An archive's blob file changed under the running server (503).
    Unavailable => "unavailable",
    /// Object storage failed or could not be reached (503): nothing was
    /// committed, and the same request may be sent again.
    StorageUnavailable => "storage_unavailable",
    /// An append whose engine bound exceeds the whole engine memory (503).
    OverBudget => "over_budget",
    /// An append queued behind a group commit that failed or that found the
    /// engine memory taken for the body timeout, or a large read that found
    /// no stream free: nothing was done, and the same request may be sent
    /// again (503).
    Retry => "retry",
    /// The disk or quota is full (507).
    NoSpace => "no_space",
}

impl ErrorCode {
    /// What the client is told instead of the message, for the failures
    /// whose message names the server's files and internals.
    fn summary(self) -> Option<&'static str> {
        match self {
            ErrorCode::Corrupt => Some("stored data failed its integrity checks"),
            ErrorCode::NoSpace => Some("the server has no disk space left"),
            ErrorCode::Unavailable => {
                Some("the archive's blob file changed under the server; it needs a restart")
            }
            ErrorCode::StorageUnavailable => {
                Some("object storage failed or could not be reached; try again")
            }
            ErrorCode::Internal => Some("the server failed"),
            _ => None,
        }
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// An error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub code: ErrorCode,
    /// What went wrong, and where it helps, what to do.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::TooLarge, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            message,
        )
    }
}

// The JSON body of an error, shared with the answers that replace hyper's
// own (`parse_errors.rs`) so that both keep one shape. Its doc comment is
// the API description's.
/// Every failure of the service's own routes (everything outside /iceberg/v1), and of requests
/// the HTTP layer cannot parse (bad_request 400, uri_too_long 414, headers_too_large 431, on
/// any route).
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody<'a> {
    #[schema(inline)]
    error: ErrorDetail<'a>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ErrorDetail<'a> {
    #[schema(inline)]
    code: ErrorCode,
    /// For people; may change.
    message: &'a str,
}

impl<'a> ErrorBody<'a> {
    pub(crate) fn new(code: ErrorCode, message: &'a str) -> Self {
        ErrorBody {
            error: ErrorDetail { code, message },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code.as_str(), status = %self.status, "{}", self.message);
        }
        // Such a message goes to the log only, and the client gets what
        // happened; the others (over budget, retry) tell the client what to do.
        let message = match self.code.summary() {
            Some(what) => format!("{what}; the server log has the details"),
            None => self.message,
        };
        let body = ErrorBody::new(self.code, &message);
        (self.status, axum::Json(body)).into_response()
    }
}

/// An upload whose bytes are not what they claim (cut short, malformed),
/// carried through the engine's I/O errors so that it answers 400, not 500.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadUpload(String);

impl BadUpload {
    pub(crate) fn io(message: impl Into<String>) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, BadUpload(message.into()))
    }
}

/// Whether `e`'s chain holds an upload that was cut short or malformed: the
/// service's own [`BadUpload`], or the format's tar reader refusing the
/// stream, each carried through the engine's I/O errors.
fn bad_upload(e: &(dyn std::error::Error + 'static)) -> bool {
    let bad = |err: &(dyn std::error::Error + 'static)| {
        err.is::<BadUpload>()
            || matches!(
                err.downcast_ref::<znippy_format::Error>(),
                Some(znippy_format::Error::Input { .. })
            )
    };
    let mut cur = Some(e);
    while let Some(err) = cur {
        let inner = err.downcast_ref::<io::Error>().and_then(|io| io.get_ref());
        if bad(err) || inner.is_some_and(|i| bad(i)) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// `e` and the errors beneath it.
pub(crate) fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// Whether an I/O error somewhere in `e`'s chain is "no space left".
fn out_of_space(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|err| {
        err.downcast_ref::<io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
}

/// A request body that failed while it was read: too slow (408, see
/// `paced.rs`), past `--max-body` (413, see `body.rs`), else cut off or
/// unreadable (400).
pub(crate) fn body_failed(e: &(dyn std::error::Error + 'static)) -> ApiError {
    if let Some(slow) = chain(e).find_map(|err| err.downcast_ref::<crate::paced::SlowBody>()) {
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            ErrorCode::TooSlow,
            slow.to_string(),
        );
    }
    if let Some(over) = chain(e).find_map(|err| err.downcast_ref::<crate::body::OverLimit>()) {
        return ApiError::too_large(over.to_string());
    }
    ApiError::bad_request(
        ErrorCode::BrokenBody,
        format!("reading the request body: {e}"),
    )
}

fn format_error(e: &znippy_format::Error) -> ApiError {
    use znippy_format::Error as F;
    let msg = e.to_string();
    match e {
        F::InvalidPath { .. } => ApiError::bad_request(ErrorCode::BadPath, msg),
        F::Input { .. } => ApiError::bad_request(ErrorCode::BadInput, msg),
        F::Property(_) => ApiError::bad_request(ErrorCode::BadProperty, msg),
        F::Meta(_) => ApiError::bad_request(ErrorCode::BadMeta, msg),
        F::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NoFile, msg),
        F::PathConflict { .. } | F::UnicodeTwin { .. } => {
            ApiError::new(StatusCode::CONFLICT, ErrorCode::PathConflict, msg)
        }
        F::Checksum(_) | F::Corrupt(_) | F::NotAnArchive(_) | F::UnsupportedVersion { .. } => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Corrupt, msg)
        }
        F::Io { .. } if bad_upload(e) => ApiError::bad_request(ErrorCode::BadBody, msg),
        F::Io { .. } if out_of_space(e) => {
            ApiError::new(StatusCode::INSUFFICIENT_STORAGE, ErrorCode::NoSpace, msg)
        }
        F::Io { .. } | F::Changed(_) | F::Signing(_) => ApiError::internal(msg),
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        store_error(&e, e.to_string())
    }
}

fn store_error(e: &StoreError, msg: String) -> ApiError {
    match e {
        // A group commit's failure answers each of its appends as itself.
        StoreError::Commit(cause) => store_error(cause, msg),
        StoreError::QueueFailed | StoreError::MemoryBusy(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Retry, msg)
        }
        StoreError::NoArchive(_) => ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NoArchive, msg),
        StoreError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NoFile, msg),
        StoreError::Exists(_) => ApiError::new(StatusCode::CONFLICT, ErrorCode::Exists, msg),
        StoreError::Sealed(_) => ApiError::new(StatusCode::CONFLICT, ErrorCode::Sealed, msg),
        StoreError::BadId(_) => ApiError::bad_request(ErrorCode::BadId, msg),
        // Object storage down or unreachable: the client may retry later.
        e if e.is_unavailable() => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::StorageUnavailable,
            msg,
        ),
        StoreError::SidecarGone(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable, msg)
        }
        StoreError::Unsupported(_) => {
            ApiError::new(StatusCode::NOT_IMPLEMENTED, ErrorCode::Unsupported, msg)
        }
        StoreError::OverBudget { .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::OverBudget, msg)
        }
        StoreError::Format(f) => format_error(f),
        StoreError::SidecarShort { .. }
        | StoreError::BadNamespaceProperty { .. }
        | StoreError::BadSummary { .. }
        | StoreError::BadRow { .. }
        | StoreError::SegmentClash { .. }
        | StoreError::SegmentPastEnd { .. }
        | StoreError::BadSegmentKey(_)
        | StoreError::PendingMeta(_) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Corrupt, msg)
        }
        StoreError::Iceberg(i) if i.kind() == iceberg::ErrorKind::CatalogCommitConflicts => {
            ApiError::new(StatusCode::CONFLICT, ErrorCode::Conflict, msg)
        }
        _ if out_of_space(e) => {
            ApiError::new(StatusCode::INSUFFICIENT_STORAGE, ErrorCode::NoSpace, msg)
        }
        _ => ApiError::internal(msg),
    }
}

impl From<znippy_format::Error> for ApiError {
    fn from(e: znippy_format::Error) -> Self {
        format_error(&e)
    }
}

impl From<SealError> for ApiError {
    fn from(e: SealError) -> Self {
        match e {
            SealError::Store(s) => s.into(),
            SealError::Format(f) => format_error(&f),
            e if out_of_space(&e) => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                ErrorCode::NoSpace,
                e.to_string(),
            ),
            e => ApiError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(e: ApiError) -> (StatusCode, serde_json::Value) {
        let r = e.into_response();
        let status = r.status();
        let body = futures::executor::block_on(axum::body::to_bytes(r.into_body(), 1 << 20));
        (status, serde_json::from_slice(&body.unwrap()).unwrap())
    }

    /// A failure whose message names the server's internals reaches the
    /// client as what happened; one that tells the client what to do
    /// reaches it whole.
    #[test]
    fn server_errors_show_the_client_what_it_can_use() {
        let internal = ApiError::internal("reading /srv/data/blobs/a.blobs: EIO");
        let (status, body) = response(internal);
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "internal");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(!message.contains("/srv"), "{message}");

        let (status, body) = response(ApiError::from(StoreError::QueueFailed));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "retry");
        assert_eq!(
            body["error"]["message"],
            StoreError::QueueFailed.to_string()
        );

        let corrupt = StoreError::BadSummary {
            key: "znippy.blob-end".into(),
            value: "x".into(),
        };
        let (status, body) = response(ApiError::from(corrupt));
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "corrupt");

        let down = StoreError::ObjectStore {
            context: "writing segment znippy/a/blobs/x.blobs".into(),
            source: object_store::Error::NotImplemented {
                operation: "put".into(),
                implementer: "test".into(),
            },
        };
        let (status, body) = response(ApiError::from(down));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "storage_unavailable");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(!message.contains("znippy/a"), "{message}");

        let seal = StoreError::Unsupported("sealing an archive on object storage");
        let (status, body) = response(ApiError::from(seal));
        assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
        assert_eq!(body["error"]["code"], "unsupported");
    }
}
