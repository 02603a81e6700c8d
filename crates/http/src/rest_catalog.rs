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
//! Responses are `iceberg-catalog-rest`'s own serde types, the ones its
//! client parses; only the config response is written here, as that crate
//! keeps its type private.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use iceberg::{NamespaceIdent, TableIdent};
use iceberg_catalog_rest::{
    ErrorModel, ListNamespaceResponse, ListTablesResponse, LoadTableResult, NamespaceResponse,
};
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use znippy_store::StoreError;

use crate::openapi::{self, ListParams, NamespacePath, PageParams, TablePath};
use crate::AppState;

/// The catalog's routes, and their operations.
pub(crate) fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, doc) = OpenApiRouter::new()
        .routes(routes!(config))
        .routes(routes!(namespaces))
        .routes(routes!(namespace))
        .routes(routes!(tables))
        .routes(routes!(load_table))
        .split_for_parts();
    let router = router
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
        });
    (router, doc)
}

/// An error in the REST spec's model: status, exception type, message.
pub(crate) struct RestError(pub StatusCode, pub &'static str, pub String);

/// The spec's error body (`iceberg-catalog-rest` keeps its wrapper's field
/// private).
#[derive(serde::Serialize)]
struct ErrorBody {
    error: ErrorModel,
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let RestError(status, kind, message) = self;
        let error = ErrorModel {
            message,
            r#type: kind.to_string(),
            code: status.as_u16(),
            stack: None,
        };
        (status, Json(ErrorBody { error })).into_response()
    }
}

/// A server-side failure: its cause (which names the server's files) goes
/// to the log, the client learns that the server failed.
fn internal(e: impl std::fmt::Display) -> RestError {
    tracing::error!(target: "znippy::http", "iceberg REST catalog: {e}");
    RestError(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        "the server failed; its log has the details".into(),
    )
}

/// A store error as the REST spec names it: an archive that is not there (or
/// could never be: a bad id, a nested name) is a missing namespace.
fn rest_error(ns: &str) -> impl FnOnce(StoreError) -> RestError + '_ {
    move |e| match e {
        StoreError::NoArchive(_) | StoreError::BadId(_) => RestError(
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
            format!("no namespace {ns:?}"),
        ),
        e => internal(e),
    }
}

/// Iceberg REST: catalog configuration
///
/// Query parameters (warehouse) are ignored.
#[utoipa::path(
    get, path = "/config", tag = "iceberg", operation_id = "icebergConfig",
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Empty defaults and overrides.",
            body = openapi::CatalogConfig),
        (status = 401, response = openapi::RestUnauthorized),
        (status = 403, response = openapi::RestForbidden),
    ),
)]
async fn config() -> Json<Value> {
    Json(json!({ "defaults": {}, "overrides": {} }))
}

/// The query parameters of a listing, as text: they are checked here, so a
/// bad one gets the spec's error model rather than the framework's.
/// (`openapi::ListParams` and `openapi::PageParams` document them.)
#[derive(serde::Deserialize)]
struct Params {
    #[serde(rename = "pageToken")]
    page_token: Option<String>,
    #[serde(rename = "pageSize")]
    page_size: Option<String>,
    parent: Option<String>,
}

/// The spec's paging: `pageSize` caps a listing, and `pageToken` (the
/// `next-page-token` of the previous page, opaque to clients: here the last
/// name it listed) resumes it. Without `pageSize` a listing is whole.
struct Paging {
    after: Option<String>,
    size: Option<usize>,
    parent: Option<String>,
}

fn bad_request(message: String) -> RestError {
    RestError(StatusCode::BAD_REQUEST, "BadRequestException", message)
}

/// Path parameters, taken as the query's are: a bad one (not UTF-8 once
/// percent-decoded) gets the spec's error model rather than the framework's.
fn from_path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, RestError> {
    p.map(|Path(v)| v).map_err(|e| bad_request(e.body_text()))
}

impl Paging {
    fn from_query(q: Result<Query<Params>, QueryRejection>) -> Result<Self, RestError> {
        let Query(p) = q.map_err(|e| bad_request(e.body_text()))?;
        let size = match p.page_size.as_deref() {
            None => None,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    return Err(bad_request(format!(
                        "pageSize must be a whole number of at least 1, not {n:?}"
                    )))
                }
            },
        };
        Ok(Paging {
            after: p.page_token.filter(|t| !t.is_empty()),
            size,
            parent: p.parent,
        })
    }

    /// One page of `names` (sorted), and the token of the next page, if any.
    fn page<'a>(&self, names: &'a [String]) -> (&'a [String], Option<String>) {
        let start = match &self.after {
            Some(after) => names.partition_point(|n| n <= after),
            None => 0,
        };
        let rest = &names[start..];
        match self.size {
            Some(n) if n < rest.len() => (&rest[..n], Some(rest[n - 1].clone())),
            _ => (rest, None),
        }
    }
}

/// Iceberg REST: list namespaces (one per archive)
///
/// Paged as the REST spec says when pageSize is given; an archive as the parent lists nothing
/// (archives are one level deep), and a parent that is no archive is 404.
#[utoipa::path(
    get, path = "/namespaces", tag = "iceberg", operation_id = "icebergListNamespaces",
    params(ListParams),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The archives.", body = openapi::NamespaceList),
        (status = 400, response = openapi::RestBadRequest),
        (status = 401, response = openapi::RestUnauthorized),
        (status = 403, response = openapi::RestForbidden),
        (status = 404, response = openapi::RestNotFound),
        (status = 500, response = openapi::RestInternal),
    ),
)]
async fn namespaces(
    State(app): State<AppState>,
    q: Result<Query<Params>, QueryRejection>,
) -> Result<Json<ListNamespaceResponse>, RestError> {
    let paging = Paging::from_query(q)?;
    // Archives are one level deep: nothing lives below one.
    let ids = match paging.parent.as_deref().filter(|p| !p.is_empty()) {
        Some(parent) => {
            app.store
                .namespace_properties(parent)
                .await
                .map_err(rest_error(parent))?;
            Vec::new()
        }
        None => app.store.list().await.map_err(internal)?,
    };
    let (page, next) = paging.page(&ids);
    Ok(Json(ListNamespaceResponse {
        namespaces: page.iter().cloned().map(NamespaceIdent::new).collect(),
        next_page_token: next,
    }))
}

/// Iceberg REST: load a namespace
#[utoipa::path(
    get, path = "/namespaces/{ns}", tag = "iceberg", operation_id = "icebergGetNamespace",
    params(NamespacePath),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The archive's namespace and properties.",
            body = openapi::Namespace),
        (status = 400, response = openapi::RestBadRequest),
        (status = 401, response = openapi::RestUnauthorized),
        (status = 403, response = openapi::RestForbidden),
        (status = 404, response = openapi::RestNotFound),
        (status = 500, response = openapi::RestInternal),
    ),
)]
async fn namespace(
    State(app): State<AppState>,
    ns: Result<Path<String>, PathRejection>,
) -> Result<Json<NamespaceResponse>, RestError> {
    let ns = from_path(ns)?;
    let properties = app
        .store
        .namespace_properties(&ns)
        .await
        .map_err(rest_error(&ns))?;
    Ok(Json(NamespaceResponse {
        namespace: NamespaceIdent::new(ns),
        properties,
    }))
}

/// Iceberg REST: list tables (files and meta)
#[utoipa::path(
    get, path = "/namespaces/{ns}/tables", tag = "iceberg", operation_id = "icebergListTables",
    params(NamespacePath, PageParams),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The two tables.", body = openapi::TableIdentifierList),
        (status = 400, response = openapi::RestBadRequest),
        (status = 401, response = openapi::RestUnauthorized),
        (status = 403, response = openapi::RestForbidden),
        (status = 404, response = openapi::RestNotFound),
        (status = 500, response = openapi::RestInternal),
    ),
)]
async fn tables(
    State(app): State<AppState>,
    ns: Result<Path<String>, PathRejection>,
    q: Result<Query<Params>, QueryRejection>,
) -> Result<Json<ListTablesResponse>, RestError> {
    let ns = from_path(ns)?;
    let paging = Paging::from_query(q)?;
    let names = app.store.table_names(&ns).await.map_err(rest_error(&ns))?;
    let (page, next) = paging.page(&names);
    let namespace = NamespaceIdent::new(ns);
    Ok(Json(ListTablesResponse {
        identifiers: page
            .iter()
            .map(|t| TableIdent::new(namespace.clone(), t.clone()))
            .collect(),
        next_page_token: next,
    }))
}

/// Iceberg REST: load a table
///
/// The current metadata, so a client sees every committed append on its next load. Query
/// parameters (snapshots) are ignored.
#[utoipa::path(
    get, path = "/namespaces/{ns}/tables/{table}", tag = "iceberg",
    operation_id = "icebergLoadTable",
    params(NamespacePath, TablePath),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The table.", body = openapi::LoadTableResult),
        (status = 400, response = openapi::RestBadRequest),
        (status = 401, response = openapi::RestUnauthorized),
        (status = 403, response = openapi::RestForbidden),
        (status = 404, response = openapi::RestNotFound),
        (status = 500, response = openapi::RestInternal),
    ),
)]
async fn load_table(
    State(app): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<LoadTableResult>, RestError> {
    let (ns, table) = from_path(path)?;
    let missing_table = || {
        RestError(
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
            format!("no table {ns}.{table}"),
        )
    };
    let t = match app.store.table_named(&ns, &table).await {
        Err(StoreError::NotFound(_)) => return Err(missing_table()),
        r => r.map_err(rest_error(&ns))?,
    };
    let location = t
        .metadata_location()
        .ok_or_else(|| internal("table without a metadata location"))?;
    Ok(Json(LoadTableResult {
        metadata_location: Some(location.to_string()),
        metadata: t.metadata().clone(),
        config: Default::default(),
        storage_credentials: None,
    }))
}
