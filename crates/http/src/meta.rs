//! Metadata: search by key or key prefix, and set facts.
//!
//! A search answers one of three things, and says which in `result`:
//! `no_metadata` (the archive has no metadata section: nothing was searched),
//! `no_match` (searched, nothing found) or `hits`.

use axum::body::Body;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use znippy_format::{MetaCursor, MetaQuery, MetaRow, MetaSearch, MetaTable, MetaValue, PageLimit};

use crate::error::{ApiError, ErrorCode};
use crate::extract::{ApiPath, ApiQuery};
use crate::{read_json, AppState};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchQuery {
    key: Option<String>,
    prefix: Option<String>,
    /// The `next` of the previous page.
    after: Option<String>,
    limit: Option<usize>,
}

/// Rows in a page when the client names no limit, and the most it may ask for.
const PAGE: usize = 1000;
const MAX_PAGE: usize = 10_000;
/// A page ends after the row that brings it past this many bytes of values,
/// paths and keys (a bytes value is twice that in hex): with facts of up to
/// 1 MiB, one page stays a few MiB however many facts match.
const PAGE_BYTES: usize = 4 << 20;

/// `next`: where the page ended, as `hex(key)` for a fact about the archive
/// or `hex(key).hex(path)`. Opaque to clients; any key and path survive it.
fn cursor_token(c: &MetaCursor) -> String {
    match &c.path {
        None => hex(c.key.as_bytes()),
        Some(p) => format!("{}.{}", hex(c.key.as_bytes()), hex(p.as_bytes())),
    }
}

fn parse_cursor(token: &str) -> Result<MetaCursor, ApiError> {
    let text = |h: &str| unhex(h).and_then(|b| String::from_utf8(b).ok());
    let (key, path) = match token.split_once('.') {
        None => (text(token), Some(None)),
        Some((k, p)) => (text(k), text(p).map(Some)),
    };
    match (key, path) {
        (Some(key), Some(path)) => Ok(MetaCursor { key, path }),
        _ => Err(ApiError::bad_request(
            ErrorCode::BadQuery,
            "after is not a next token of this search",
        )),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect()
}

fn row_json(r: &MetaRow) -> Value {
    let value = match &r.value {
        MetaValue::Str(s) => json!(s),
        MetaValue::I64(v) => json!(v),
        MetaValue::F64(v) => json!(v),
        MetaValue::Bool(v) => json!(v),
        MetaValue::Bytes(b) => json!(hex(b)),
    };
    json!({ "path": r.path, "key": r.key, "type": r.value.type_name(), "value": value })
}

pub(crate) async fn search(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<Value>, ApiError> {
    let query = match (q.key, q.prefix) {
        (Some(k), None) => MetaQuery::Key(k),
        (None, Some(p)) => MetaQuery::Prefix(p),
        _ => {
            return Err(ApiError::bad_request(
                ErrorCode::BadQuery,
                "give exactly one of ?key=K or ?prefix=P",
            ))
        }
    };
    let rows = q.limit.unwrap_or(PAGE);
    if rows == 0 || rows > MAX_PAGE {
        return Err(ApiError::bad_request(
            ErrorCode::BadLimit,
            format!("limit must be 1..={MAX_PAGE}"),
        ));
    }
    let after = q.after.as_deref().map(parse_cursor).transpose()?;
    let limit = PageLimit {
        rows,
        bytes: PAGE_BYTES,
    };
    let (found, more) = app
        .store
        .meta_page(&id, &query, after.as_ref(), &limit)
        .await?;
    let (result, rows, next) = match &found {
        MetaSearch::NoSection => ("no_metadata", Vec::new(), None),
        MetaSearch::NoMatch => ("no_match", Vec::new(), None),
        MetaSearch::Hits(rows) => (
            "hits",
            rows.iter().map(row_json).collect(),
            rows.last()
                .filter(|_| more)
                .map(|r| cursor_token(&r.cursor())),
        ),
    };
    Ok(Json(
        json!({ "result": result, "rows": rows, "next": next }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fact {
    /// The file the fact is about; absent for the archive itself.
    path: Option<String>,
    key: String,
    /// A JSON string, integer, number or boolean; an explicit `null` is kept
    /// (and refused), not read as an absent value.
    #[serde(default, deserialize_with = "present")]
    value: Option<Value>,
    /// A bytes value, in hex.
    bytes_hex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetMeta {
    set: Vec<Fact>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn typed(f: &Fact) -> Result<MetaValue, ApiError> {
    let bad = |m: &str| ApiError::bad_request(ErrorCode::BadMeta, format!("fact {:?}: {m}", f.key));
    match (&f.value, &f.bytes_hex) {
        (Some(v), None) => match v {
            Value::String(s) => Ok(MetaValue::Str(s.clone())),
            Value::Bool(b) => Ok(MetaValue::Bool(*b)),
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Ok(MetaValue::I64(i)),
                (None, Some(x)) if n.is_f64() => Ok(MetaValue::F64(x)),
                _ => Err(bad("integer out of the i64 range")),
            },
            _ => Err(bad("a value is a string, a number or a boolean")),
        },
        (None, Some(h)) => unhex(h)
            .map(MetaValue::Bytes)
            .ok_or_else(|| bad("bytes_hex is not hex")),
        _ => Err(bad("give exactly one of value or bytes_hex")),
    }
}

/// `PUT /archives/{id}/meta` `{"set": [{"path", "key", "value" | "bytes_hex"}]}`:
/// one append that carries only facts.
pub(crate) async fn set(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let req: SetMeta = read_json(body).await?;
    let mut table = MetaTable::new();
    for f in &req.set {
        table
            .set(f.path.as_deref(), &f.key, typed(f)?)
            .map_err(|e| ApiError::bad_request(ErrorCode::BadMeta, e.to_string()))?;
    }
    let r = app.store.append(&id, Vec::new(), Some(table)).await?;
    Ok(Json(json!({
        "facts": req.set.len(),
        "append_seq": r.append_seq,
        "snapshot_id": r.snapshot_id,
    })))
}
