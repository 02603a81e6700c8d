//! Connecting to a scaled-out deployment: an Iceberg REST catalog for the
//! tables, S3 (or what speaks its API) for their files and for the blobs.
//!
//! One S3 configuration, read once (the usual `AWS_*` environment variables,
//! and an endpoint for servers other than AWS), makes the client of every
//! bucket involved: the table bucket the catalog writes its files to, and
//! the bucket of the warehouse, where the blob segments go.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::{Catalog, CatalogBuilder};
use iceberg_catalog_rest::RestCatalogBuilder;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::ObjectStore;

use crate::error::{Result, StoreError};
use crate::object_storage::{ObjectStorage, ObjectStorageFactory};

/// How to reach a scaled-out deployment.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    /// The REST catalog's base URL.
    pub catalog_uri: String,
    /// OAuth2 client credentials for the catalog, `ID:SECRET`.
    pub catalog_credential: Option<String>,
    /// The catalog's warehouse: an `s3://bucket/...` location, or the name
    /// of a table bucket (as SeaweedFS and S3 Tables call it). Its bucket
    /// holds the tables' files. Defaults to `warehouse`.
    pub catalog_warehouse: Option<String>,
    /// Where the blobs go: `s3://bucket/prefix`.
    pub warehouse: String,
    /// An S3 endpoint other than AWS's (path-style requests; plain `http://`
    /// allowed).
    pub s3_endpoint: Option<String>,
    /// The S3 access key id and secret, when not from the environment.
    pub s3_credentials: Option<(String, String)>,
}

/// Everything but the secrets.
impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("catalog_uri", &self.catalog_uri)
            .field("catalog_warehouse", &self.catalog_warehouse)
            .field("warehouse", &self.warehouse)
            .field("s3_endpoint", &self.s3_endpoint)
            .finish_non_exhaustive()
    }
}

/// A connected deployment, for [`crate::Store::open_remote`].
#[derive(Clone)]
pub struct Remote {
    /// The tables' catalog.
    pub catalog: Arc<dyn Catalog>,
    /// The bucket the blobs go to.
    pub blobs: Arc<dyn ObjectStore>,
    /// The same bucket, signing URLs that fetch a sealed archive without
    /// credentials.
    pub signer: Arc<dyn Signer>,
    /// The key prefix of the blobs in it.
    pub prefix: Path,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// `s3://bucket/prefix` as its bucket and prefix.
fn parse_s3(url: &str) -> Result<(&str, Path)> {
    let bad = || StoreError::BadRemote(format!("{url:?} is not an s3://BUCKET/PREFIX location"));
    let rest = url.strip_prefix("s3://").ok_or_else(bad)?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad());
    }
    let prefix = Path::parse(prefix.trim_end_matches('/')).map_err(|_| bad())?;
    Ok((bucket, prefix))
}

impl RemoteConfig {
    /// A client of `bucket`, with writes conditional on an object's ETag
    /// (or its absence), which the segments and the catalog's files rely on.
    pub(crate) fn bucket(&self, bucket: &str) -> Result<Arc<AmazonS3>> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch);
        if let Some((id, secret)) = &self.s3_credentials {
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        if let Some(endpoint) = &self.s3_endpoint {
            b = b
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let store = b.build().map_err(|source| StoreError::ObjectStore {
            context: format!("configuring the client of bucket {bucket}"),
            source,
        })?;
        Ok(Arc::new(store))
    }

    /// Connects: loads the catalog's configuration and makes the clients.
    pub async fn connect(&self) -> Result<Remote> {
        let (blob_bucket, prefix) = parse_s3(&self.warehouse)?;
        let catalog_warehouse = self.catalog_warehouse.as_deref().unwrap_or(&self.warehouse);
        let table_bucket = match catalog_warehouse.strip_prefix("s3://") {
            Some(_) => parse_s3(catalog_warehouse)?.0,
            None => catalog_warehouse,
        };
        let storage =
            ObjectStorage::new(&format!("s3://{table_bucket}"), self.bucket(table_bucket)?);
        let mut props = HashMap::from([
            ("uri".to_string(), self.catalog_uri.clone()),
            ("warehouse".to_string(), catalog_warehouse.to_string()),
        ]);
        if let Some(credential) = &self.catalog_credential {
            props.insert("credential".into(), credential.clone());
        }
        let catalog = RestCatalogBuilder::default()
            .with_storage_factory(Arc::new(ObjectStorageFactory::new(storage)))
            .load("znippy", props)
            .await?;
        let blobs = self.bucket(blob_bucket)?;
        Ok(Remote {
            catalog: Arc::new(catalog),
            blobs: blobs.clone(),
            signer: blobs,
            prefix,
        })
    }
}

#[cfg(test)]
impl RemoteConfig {
    /// A test SeaweedFS: the tables in its catalog and table bucket, the
    /// blobs in its plain bucket.
    pub(crate) fn for_seaweed(server: &znippy_testkit::seaweed::Seaweed) -> Self {
        use znippy_testkit::seaweed;
        RemoteConfig {
            catalog_uri: server.catalog.clone(),
            catalog_credential: Some(format!("{}:{}", seaweed::KEY_ID, seaweed::SECRET)),
            catalog_warehouse: Some(seaweed::TABLE_BUCKET.into()),
            warehouse: format!("s3://{}/znippy", seaweed::BUCKET),
            s3_endpoint: Some(server.s3.clone()),
            s3_credentials: Some((seaweed::KEY_ID.into(), seaweed::SECRET.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warehouses_are_s3_locations() {
        let (bucket, prefix) = parse_s3("s3://wh/a/b/").unwrap();
        assert_eq!((bucket, prefix.as_ref()), ("wh", "a/b"));
        assert_eq!(parse_s3("s3://wh").unwrap().1.as_ref(), "");
        for bad in ["wh/a", "s3:///a", "file:///x", "s3://wh/a//b"] {
            assert!(
                matches!(parse_s3(bad), Err(StoreError::BadRemote(_))),
                "{bad}"
            );
        }
    }
}
