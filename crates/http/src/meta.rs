//! Metadata: search by key, key prefix or file, and set facts.
//!
//! A search answers one of three things, and says which in `result`:
//! `no_metadata` (the archive has no metadata section: nothing was searched),
//! `no_match` (searched, nothing found) or `hits`.

use axum::body::Body;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, OneOfBuilder, Schema};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};
use znippy_format::{MetaCursor, MetaQuery, MetaRow, MetaSearch, MetaTable, MetaValue, PageLimit};

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{ApiPath, ApiQuery};
use crate::openapi::{self, ArchiveId};
use crate::{hex, read_json, AppState};

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SearchQuery {
    /// Exact key. Give exactly one of key, prefix or path.
    key: Option<String>,
    /// Key prefix. Give exactly one of key, prefix or path.
    prefix: Option<String>,
    /// Every fact about this file, in key order. Give exactly one of key, prefix or path.
    path: Option<String>,
    /// The next of the previous page of the same search (an opaque token; anything else is
    /// 400 bad_query).
    after: Option<String>,
    /// Page size, 1 to 10000 (otherwise 400 bad_limit).
    #[param(minimum = 1, maximum = 10000, default = 1000)]
    limit: Option<usize>,
}

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

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect()
}

/// One fact.
#[derive(Serialize, ToSchema)]
#[schema(as = MetaRow)]
pub(crate) struct Row {
    /// The file the fact is about; null for the archive.
    #[schema(required)]
    path: Option<String>,
    key: String,
    #[serde(rename = "type")]
    #[schema(schema_with = type_schema)]
    kind: &'static str,
    #[schema(schema_with = value_schema)]
    value: Value,
}

fn type_schema() -> RefOr<Schema> {
    let types = [
        MetaValue::Str(String::new()),
        MetaValue::I64(0),
        MetaValue::F64(0.0),
        MetaValue::Bool(false),
        MetaValue::Bytes(Vec::new()),
    ];
    openapi::schema(json!({"type": "string", "enum": (types.map(|v| v.type_name()))}))
}

fn value_schema() -> RefOr<Schema> {
    openapi::schema(json!({
        "description": "A string, integer, number or boolean; a bytes value as lowercase hex.",
        "type": ["string", "integer", "number", "boolean"],
    }))
}

impl From<&MetaRow> for Row {
    fn from(r: &MetaRow) -> Self {
        let value = match &r.value {
            MetaValue::Str(s) => json!(s),
            MetaValue::I64(v) => json!(v),
            MetaValue::F64(v) => json!(v),
            MetaValue::Bool(v) => json!(v),
            MetaValue::Bytes(b) => json!(hex(b)),
        };
        Row {
            path: r.path.clone(),
            key: r.key.clone(),
            kind: r.value.type_name(),
            value,
        }
    }
}

/// A page of a search.
#[derive(Serialize, ToSchema)]
#[schema(as = MetaSearch)]
pub(crate) struct Found {
    #[schema(inline)]
    result: Outcome,
    rows: Vec<Row>,
    /// Null on the last page; otherwise pass it as after for the next. A page holds at most
    /// limit rows and ends after the row that takes it past 4 MiB of keys, paths and values.
    #[schema(required)]
    next: Option<String>,
}

/// no_metadata: the archive has no metadata section, nothing was searched (rows empty);
/// no_match: searched, nothing found (rows empty); hits: rows holds the matches.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    NoMetadata,
    NoMatch,
    Hits,
}

/// Search metadata by key, key prefix or file, a page at a time
#[utoipa::path(
    get, path = "/archives/{id}/meta", tag = "meta", operation_id = "searchMeta",
    params(ArchiveId, SearchQuery),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "result says which of the three answers it is.",
            body = Found),
        (status = 400, response = openapi::QueryRejected),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn search(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<Found>, ApiError> {
    let query = match (q.key, q.prefix, q.path) {
        (Some(k), None, None) => MetaQuery::Key(k),
        (None, Some(p), None) => MetaQuery::Prefix(p),
        (None, None, Some(p)) => MetaQuery::Path(p),
        _ => {
            return Err(ApiError::bad_request(
                ErrorCode::BadQuery,
                "give exactly one of ?key=K, ?prefix=P or ?path=FILE",
            ))
        }
    };
    let rows = crate::page_size(q.limit)?;
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
        MetaSearch::NoSection => (Outcome::NoMetadata, Vec::new(), None),
        MetaSearch::NoMatch => (Outcome::NoMatch, Vec::new(), None),
        MetaSearch::Hits(rows) => (
            Outcome::Hits,
            rows.iter().map(Row::from).collect(),
            rows.last()
                .filter(|_| more)
                .map(|r| cursor_token(&r.cursor())),
        ),
    };
    Ok(Json(Found { result, rows, next }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fact {
    /// The file the fact is about; absent for the archive itself.
    path: Option<String>,
    key: String,
    /// A JSON string, integer, number or boolean, as written: an integer
    /// past i64 is refused, where parsed it would be a float. An explicit
    /// `null` is kept (and refused), not read as an absent value.
    #[serde(default, deserialize_with = "present")]
    value: Option<Box<RawValue>>,
    /// A bytes value, in hex.
    bytes_hex: Option<String>,
}

// Written out, as a derive cannot say "exactly one of value or bytes_hex".
impl PartialSchema for Fact {
    fn schema() -> RefOr<Schema> {
        let exactly_one = OneOfBuilder::new()
            .item(ObjectBuilder::new().required("value"))
            .item(ObjectBuilder::new().required("bytes_hex"));
        let fields = openapi::schema(json!({
            "type": "object",
            "required": ["key"],
            "additionalProperties": false,
            "description": "Exactly one of value or bytes_hex.",
            "properties": {
                "path": {
                    "type": "string",
                    "pattern": openapi::ARCHIVE_PATH,
                    "maxLength": 4096,
                    "description": "The file the fact is about; omit for the archive itself."
                },
                "key": {"type": "string", "minLength": 1},
                "value": {
                    "type": ["string", "integer", "number", "boolean"],
                    "description": "A JSON string (str), integer within i64 (i64), number with a \
                        fraction or exponent (f64) or boolean (bool)."
                },
                "bytes_hex": {
                    "type": "string",
                    "pattern": "^([0-9a-fA-F]{2})*$",
                    "description": "A bytes value, in hex."
                }
            }
        }));
        AllOfBuilder::new().item(fields).item(exactly_one).into()
    }
}

impl ToSchema for Fact {
    fn name() -> std::borrow::Cow<'static, str> {
        "MetaFact".into()
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetMeta {
    set: Vec<Fact>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = SetMetaResult)]
pub(crate) struct FactsSet {
    /// Facts in the request.
    facts: u64,
    append_seq: u64,
    snapshot_id: i64,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

fn typed(f: &Fact) -> Result<MetaValue, ApiError> {
    let bad = |m: &str| ApiError::bad_request(ErrorCode::BadMeta, format!("fact {:?}: {m}", f.key));
    match (&f.value, &f.bytes_hex) {
        (Some(raw), None) => match serde_json::from_str(raw.get()) {
            Ok(Value::String(s)) => Ok(MetaValue::Str(s)),
            Ok(Value::Bool(b)) => Ok(MetaValue::Bool(b)),
            Ok(Value::Number(n)) => {
                let integer = raw.get().bytes().all(|b| b == b'-' || b.is_ascii_digit());
                match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => Ok(MetaValue::I64(i)),
                    (None, Some(x)) if !integer => Ok(MetaValue::F64(x)),
                    _ => Err(bad("integer out of the i64 range")),
                }
            }
            _ => Err(bad("a value is a string, a number or a boolean")),
        },
        (None, Some(h)) => unhex(h)
            .map(MetaValue::Bytes)
            .ok_or_else(|| bad("bytes_hex is not hex")),
        _ => Err(bad("give exactly one of value or bytes_hex")),
    }
}

/// Set metadata facts (one append carrying only facts)
///
/// Creates the metadata section if the archive had none. A fact replaces the one with the same
/// (key, path).
#[utoipa::path(
    put, path = "/archives/{id}/meta", tag = "meta", operation_id = "setMeta",
    params(ArchiveId),
    security(("bearer" = [])),
    request_body(
        content = SetMeta,
        description = "JSON of at most 1 MiB. The Content-Type is not checked.",
    ),
    responses(
        (status = 200, description = "Committed.", body = FactsSet),
        (status = 400, description = "bad_body (not JSON, unknown field), bad_meta (not \
            exactly one of value or bytes_hex, bytes_hex not hex, an integer outside i64, a \
            value that is null/array/object), bad_id.", body = ErrorBody),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 408, response = openapi::TooSlow),
        (status = 409, description = "sealed, or conflict.", body = ErrorBody),
        (status = 413, description = "too_large: the JSON body exceeds 1 MiB.", body = ErrorBody),
        (status = 500, response = openapi::Internal),
        (status = 503, response = openapi::OverBudget),
        (status = 507, response = openapi::NoSpace),
    ),
)]
pub(crate) async fn set(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    body: Body,
) -> Result<Json<FactsSet>, ApiError> {
    let req: SetMeta = read_json(body).await?;
    let mut table = MetaTable::new();
    for f in &req.set {
        table
            .set(f.path.as_deref(), &f.key, typed(f)?)
            .map_err(|e| ApiError::bad_request(ErrorCode::BadMeta, e.to_string()))?;
    }
    let r = app.store.append(&id, Vec::new(), Some(table)).await?;
    Ok(Json(FactsSet {
        facts: req.set.len() as u64,
        append_seq: r.append_seq,
        snapshot_id: r.snapshot_id,
    }))
}
