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
use znippy_format::{MetaRow, MetaSearch, MetaTable, MetaValue};

use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::{read_json, AppState};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchQuery {
    key: Option<String>,
    prefix: Option<String>,
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
    let found = match (q.key, q.prefix) {
        (Some(k), None) => app.store.meta_by_key(&id, &k).await?,
        (None, Some(p)) => app.store.meta_by_prefix(&id, &p).await?,
        _ => {
            return Err(ApiError::bad_request(
                "bad_query",
                "give exactly one of ?key=K or ?prefix=P",
            ))
        }
    };
    let (result, rows) = match &found {
        MetaSearch::NoSection => ("no_metadata", Vec::new()),
        MetaSearch::NoMatch => ("no_match", Vec::new()),
        MetaSearch::Hits(rows) => ("hits", rows.iter().map(row_json).collect()),
    };
    Ok(Json(json!({ "result": result, "rows": rows })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fact {
    /// The file the fact is about; absent for the archive itself.
    path: Option<String>,
    key: String,
    /// A JSON string, integer, number or boolean.
    value: Option<Value>,
    /// A bytes value, in hex.
    bytes_hex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetMeta {
    set: Vec<Fact>,
}

fn typed(f: &Fact) -> Result<MetaValue, ApiError> {
    let bad = |m: &str| ApiError::bad_request("bad_meta", format!("fact {:?}: {m}", f.key));
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
            .map_err(|e| ApiError::bad_request("bad_meta", e.to_string()))?;
    }
    let r = app.store.append(&id, Vec::new(), Some(table)).await?;
    Ok(Json(json!({
        "facts": req.set.len(),
        "append_seq": r.append_seq,
        "snapshot_id": r.snapshot_id,
    })))
}
