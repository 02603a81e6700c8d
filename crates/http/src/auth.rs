//! Bearer-token auth: writes need the token when one is configured; reads need
//! it too when reads are private.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};
use crate::rest_catalog::RestError;
use crate::AppState;

pub(crate) async fn check(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let Some(token) = app.config.token.as_deref() else {
        return next.run(req).await;
    };
    let read = matches!(*req.method(), Method::GET | Method::HEAD);
    if read && !app.config.private_reads {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme is case-insensitive (RFC 9110, 11.1).
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim_start());
    let refuse = |status: StatusCode, code: ErrorCode, message: &str| {
        // Iceberg clients parse the REST spec's error model, not ours.
        if req.uri().path().starts_with("/iceberg/") {
            let kind = if status == StatusCode::UNAUTHORIZED {
                "NotAuthorizedException"
            } else {
                "ForbiddenException"
            };
            RestError(status, kind, message.to_string()).into_response()
        } else {
            ApiError::new(status, code, message).into_response()
        }
    };
    match given {
        None => refuse(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "this request needs 'Authorization: Bearer <token>'",
        ),
        Some(t) if !constant_time_eq(t.as_bytes(), token.as_bytes()) => refuse(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            "the token is not valid",
        ),
        Some(_) => next.run(req).await,
    }
}

/// Compares without an early exit, so response timing does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
