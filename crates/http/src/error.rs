//! Every failure as JSON `{"error": {"code", "message"}}` with its status.
//!
//! The code is stable (clients branch on it); the message is for people.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use znippy_seal::SealError;
use znippy_store::StoreError;

/// An error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub code: &'static str,
    /// What went wrong, and where it helps, what to do.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn too_large(limit: u64) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the request body exceeds the limit of {limit} bytes"),
        )
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A server-side failure's message names files and internals of the
        // server: it goes to the log, and the client gets what happened.
        let message = if self.status.is_server_error() {
            tracing::error!(code = self.code, status = %self.status, "{}", self.message);
            let what = match self.code {
                "corrupt" => "stored data failed its integrity checks",
                "no_space" => "the server has no disk space left",
                "unavailable" => {
                    "the archive's blob file changed under the server; it needs a restart"
                }
                _ => "the server failed",
            };
            format!("{what}; the server log has the details")
        } else {
            self.message
        };
        let body = serde_json::json!({
            "error": { "code": self.code, "message": message }
        });
        (self.status, axum::Json(body)).into_response()
    }
}

/// Whether `e`'s chain holds an upload that was cut short or malformed: the
/// service's own [`crate::upload::BadUpload`], or the format's tar reader
/// refusing the stream, each carried through the engine's I/O errors.
fn bad_upload(e: &(dyn std::error::Error + 'static)) -> bool {
    let bad = |err: &(dyn std::error::Error + 'static)| {
        err.is::<crate::upload::BadUpload>()
            || matches!(
                err.downcast_ref::<znippy_format::Error>(),
                Some(znippy_format::Error::Input { .. })
            )
    };
    let mut cur = Some(e);
    while let Some(err) = cur {
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
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
        err.downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
}

/// A request body that failed while it was read: too slow (408, see
/// `paced.rs`), else cut off or unreadable (400).
pub(crate) fn body_failed(e: &(dyn std::error::Error + 'static)) -> ApiError {
    match chain(e).find_map(|err| err.downcast_ref::<crate::paced::SlowBody>()) {
        Some(slow) => ApiError::new(StatusCode::REQUEST_TIMEOUT, "too_slow", slow.to_string()),
        None => ApiError::bad_request("broken_body", format!("reading the request body: {e}")),
    }
}

fn format_error(e: &znippy_format::Error) -> ApiError {
    use znippy_format::Error as F;
    let msg = e.to_string();
    match e {
        F::InvalidPath { .. } => ApiError::bad_request("bad_path", msg),
        F::Input { .. } => ApiError::bad_request("bad_input", msg),
        F::Property(_) => ApiError::bad_request("bad_property", msg),
        F::Meta(_) => ApiError::bad_request("bad_meta", msg),
        F::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "no_file", msg),
        F::PathConflict { .. } | F::UnicodeTwin { .. } => {
            ApiError::new(StatusCode::CONFLICT, "path_conflict", msg)
        }
        F::Checksum(_) | F::Corrupt(_) | F::NotAnArchive(_) | F::UnsupportedVersion { .. } => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", msg)
        }
        F::Io { .. } if bad_upload(e) => ApiError::bad_request("bad_body", msg),
        F::Io { .. } if out_of_space(e) => {
            ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "no_space", msg)
        }
        F::Io { .. } => ApiError::internal(msg),
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        match &e {
            StoreError::NoArchive(_) => ApiError::new(StatusCode::NOT_FOUND, "no_archive", msg),
            StoreError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "no_file", msg),
            StoreError::Exists(_) => ApiError::new(StatusCode::CONFLICT, "exists", msg),
            StoreError::Sealed(_) => ApiError::new(StatusCode::CONFLICT, "sealed", msg),
            StoreError::BadId(_) => ApiError::bad_request("bad_id", msg),
            StoreError::SidecarGone(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", msg)
            }
            StoreError::OverBudget { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "over_budget", msg)
            }
            StoreError::Format(f) => format_error(f),
            StoreError::Iceberg(i) if i.kind() == iceberg::ErrorKind::CatalogCommitConflicts => {
                ApiError::new(StatusCode::CONFLICT, "conflict", msg)
            }
            _ if out_of_space(&e) => {
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "no_space", msg)
            }
            _ => ApiError::internal(msg),
        }
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
            e if out_of_space(&e) => {
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "no_space", e.to_string())
            }
            e => ApiError::internal(e.to_string()),
        }
    }
}
