//! Package rows: what the plugins read from a live archive's packages (a
//! jar's coordinates, a wheel's requirements), answered from its package
//! tables, as DuckDB would answer them through the REST catalog.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json_};
use utoipa::{IntoParams, ToSchema};
use znippy_format::Value;

use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::openapi::{self, ArchiveId};
use crate::AppState;

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PackagesQuery {
    /// Only this plugin's rows: maven, python, npm, crate or deb.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    kind: Option<String>,
    /// Only packages of this name: the `name` column, a jar's `artifact_id`, a
    /// .deb's `package`.
    name: Option<String>,
    /// Only the rows of this file.
    path: Option<String>,
    /// Most rows, 1 to 10000 (otherwise 400 bad_limit).
    #[param(minimum = 1, maximum = 10000, default = 1000)]
    limit: Option<usize>,
}

/// One package of one file.
#[derive(Serialize, ToSchema)]
pub(crate) struct PackageRow {
    path: String,
    /// The plugin that read it.
    #[serde(rename = "type")]
    kind: String,
    pkg_type: i8,
    repo: String,
    /// Why the plugin could not read the package (then `columns` is empty).
    #[schema(required)]
    error: Option<String>,
    /// The plugin's columns that are set: strings, integers, lists of
    /// strings and maps of strings, by column name.
    #[schema(value_type = Object)]
    columns: Map<String, Json_>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct PackageList {
    /// By plugin and repo, then by path (a file's rows in the plugin's order).
    packages: Vec<PackageRow>,
    /// More rows matched than `limit`.
    truncated: bool,
}

fn json(v: &Value) -> Json_ {
    match v {
        Value::Null => Json_::Null,
        Value::Str(s) => Json_::String(s.clone()),
        Value::I64(i) => Json_::from(*i),
        Value::List(l) => Json_::from(l.clone()),
        Value::Map(m) => Json_::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), Json_::String(v.clone())))
                .collect(),
        ),
    }
}

/// The packages of an archive's live files
#[utoipa::path(
    get, path = "/archives/{id}/packages", tag = "archives", operation_id = "listPackages",
    params(ArchiveId, PackagesQuery),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The matching rows.", body = PackageList),
        (status = 400, response = openapi::QueryRejected),
        (status = 401, response = openapi::Unauthorized),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NoArchive),
        (status = 500, response = openapi::Internal),
    ),
)]
pub(crate) async fn list(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PackagesQuery>,
) -> Result<Json<PackageList>, ApiError> {
    let limit = crate::page_size(q.limit)?;
    let packages = app.store.packages(&id).await?;
    let mut rows: Vec<PackageRow> = Vec::new();
    let mut matched = 0usize;
    for ((pkg_type, repo), table, row) in packages.rows() {
        if q.kind.as_ref().is_some_and(|k| *k != table.name)
            || q.path.as_ref().is_some_and(|p| *p != row.path)
        {
            continue;
        }
        let cells = table
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .zip(&row.values);
        let named = |v: &Value| matches!(v, Value::Str(s) if Some(s) == q.name.as_ref());
        if q.name.is_some()
            && !cells
                .clone()
                .any(|(c, v)| ["name", "artifact_id", "package"].contains(&c) && named(v))
        {
            continue;
        }
        matched += 1;
        if rows.len() == limit {
            continue;
        }
        let columns = cells
            .filter(|(_, v)| **v != Value::Null)
            .map(|(c, v)| (c.to_string(), json(v)))
            .collect();
        rows.push(PackageRow {
            path: row.path.clone(),
            kind: table.name.clone(),
            pkg_type: *pkg_type,
            repo: repo.clone(),
            error: row.error.clone(),
            columns,
        });
    }
    Ok(Json(PackageList {
        truncated: matched > rows.len(),
        packages: rows,
    }))
}
