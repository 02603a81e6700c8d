//! A read-only Iceberg REST catalog over the live catalog.
//!
//! Each archive is a namespace named by its id, holding the tables `files` and
//! `meta`; a table load returns the current metadata file, so a client sees
//! every committed append on its next query. Writes are not offered: archives
//! change only through znippy's own routes, which keep the sidecar and the
//! tables in step.
//!
//! Errors follow the REST spec's model (`{"error": {"message", "type",
//! "code"}}`), which Iceberg clients parse, rather than the service's own.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use serde_json::{json, Value};
use znippy_store::ROOT_NAMESPACE;

use crate::AppState;

/// The tables every archive namespace holds.
const TABLES: [&str; 2] = ["files", "meta"];

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/config", get(config))
        .route("/namespaces", get(namespaces))
        .route("/namespaces/{ns}", get(namespace))
        .route("/namespaces/{ns}/tables", get(tables))
        .route("/namespaces/{ns}/tables/{table}", get(load_table))
        .fallback(|| async {
            RestError(
                StatusCode::NOT_FOUND,
                "NoSuchEndpointException",
                "this catalog serves config, namespaces, tables and table loads".into(),
            )
        })
        .method_not_allowed_fallback(|| async {
            RestError(
                StatusCode::METHOD_NOT_ALLOWED,
                "BadRequestException",
                "this catalog is read-only: archives change through /archives".into(),
            )
        })
}

/// An error in the REST spec's model: status, exception type, message.
pub(crate) struct RestError(pub StatusCode, pub &'static str, pub String);

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": { "message": self.2, "type": self.1, "code": self.0.as_u16() }
        });
        (self.0, Json(body)).into_response()
    }
}

fn internal(e: impl std::fmt::Display) -> RestError {
    RestError(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        e.to_string(),
    )
}

async fn config() -> Json<Value> {
    Json(json!({ "defaults": {}, "overrides": {} }))
}

/// The catalog namespace of archive `ns`, if it exists.
async fn archive_ns(app: &AppState, ns: &str) -> Result<NamespaceIdent, RestError> {
    let missing = || {
        RestError(
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
            format!("no namespace {ns:?}"),
        )
    };
    // A nested name (levels joined by 0x1F) is never an archive.
    if ns.contains('\u{1f}') {
        return Err(missing());
    }
    let ident = NamespaceIdent::from_strs([ROOT_NAMESPACE, ns]).map_err(internal)?;
    match app.store.catalog().namespace_exists(&ident).await {
        Ok(true) => Ok(ident),
        Ok(false) => Err(missing()),
        Err(e) => Err(internal(e)),
    }
}

#[derive(serde::Deserialize)]
struct NamespacesQuery {
    parent: Option<String>,
}

async fn namespaces(
    State(app): State<AppState>,
    Query(q): Query<NamespacesQuery>,
) -> Result<Json<Value>, RestError> {
    // Archives are one level deep: nothing lives below one.
    if q.parent.is_some_and(|p| !p.is_empty()) {
        return Ok(Json(json!({ "namespaces": [] })));
    }
    let ids = app.store.list().await.map_err(internal)?;
    let list: Vec<Vec<String>> = ids.into_iter().map(|id| vec![id]).collect();
    Ok(Json(json!({ "namespaces": list })))
}

async fn namespace(
    State(app): State<AppState>,
    Path(ns): Path<String>,
) -> Result<Json<Value>, RestError> {
    let ident = archive_ns(&app, &ns).await?;
    let props: HashMap<String, String> = app
        .store
        .catalog()
        .get_namespace(&ident)
        .await
        .map_err(internal)?
        .properties()
        .clone();
    Ok(Json(json!({ "namespace": [ns], "properties": props })))
}

async fn tables(
    State(app): State<AppState>,
    Path(ns): Path<String>,
) -> Result<Json<Value>, RestError> {
    archive_ns(&app, &ns).await?;
    let ids: Vec<Value> = TABLES
        .iter()
        .map(|t| json!({ "namespace": [ns], "name": t }))
        .collect();
    Ok(Json(json!({ "identifiers": ids })))
}

async fn load_table(
    State(app): State<AppState>,
    Path((ns, table)): Path<(String, String)>,
) -> Result<Json<Value>, RestError> {
    let ident = archive_ns(&app, &ns).await?;
    if !TABLES.contains(&table.as_str()) {
        return Err(RestError(
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
            format!("no table {ns}.{table}"),
        ));
    }
    let t = app
        .store
        .catalog()
        .load_table(&TableIdent::new(ident, table))
        .await
        .map_err(internal)?;
    let location = t
        .metadata_location()
        .ok_or_else(|| internal("table without a metadata location"))?;
    Ok(Json(json!({
        "metadata-location": location,
        "metadata": t.metadata(),
        "config": {},
    })))
}
