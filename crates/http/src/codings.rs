//! Transfer codings a request may use: `chunked` only.
//!
//! hyper takes a body's `chunked` framing off and passes any other transfer
//! coding's bytes on as they came, so a body sent with `Transfer-Encoding:
//! gzip, chunked` would be stored still compressed, as if it were the file.
//! RFC 9112 (6.1) has a server answer 501 to a transfer coding it does not
//! understand; this does, before a route sees the body.

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};

pub(crate) async fn only_chunked(req: Request, next: Next) -> Response {
    let unknown = req
        .headers()
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| match v.to_str() {
            Ok(v) => v
                .split(',')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>(),
            Err(_) => vec![String::from_utf8_lossy(v.as_bytes()).into_owned()],
        })
        .find(|coding| !coding.eq_ignore_ascii_case("chunked"));
    match unknown {
        None => next.run(req).await,
        Some(coding) => ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            ErrorCode::Unsupported,
            format!(
                "transfer coding {coding:?} is not supported: send the body as it is, or \
                 chunked (a compressed file is uploaded as the file it is)"
            ),
        )
        .into_response(),
    }
}
