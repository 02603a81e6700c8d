//! Where a store keeps its archives: the catalog their tables commit
//! through, and the home of their blobs.
//!
//! The embedded default is a data directory: [`RedbCatalog`] over a local
//! warehouse, and one sidecar file per archive. Scaled out, the tables are
//! in any Iceberg catalog (a REST catalog, whose table files are on object
//! storage) and the blobs are segment objects in a bucket. The append
//! protocol is the same on both; what only the embedded catalog can do
//! (lay the tables out for path-based readers, rewrite and expire them on
//! the store's own schedule) is skipped elsewhere, where the catalog's
//! owner runs its maintenance.

use std::path::PathBuf;
use std::sync::Arc;

use iceberg::Catalog;
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::ObjectStore;
use tokio::runtime::Handle;

use crate::blobs::Blobs;
use crate::catalog::RedbCatalog;
use crate::error::{Result, StoreError};
use crate::sealed::{SealedAt, SealedFile};
use crate::segments::{SegmentRef, Segments};
use crate::sidecar::Sidecar;

/// A store's catalog and blob home.
#[derive(Clone)]
pub(crate) struct Backend {
    catalog: Arc<dyn Catalog>,
    /// The same catalog when it is the embedded one.
    redb: Option<RedbCatalog>,
    home: BlobHome,
}

/// Where the archives' blobs go.
#[derive(Clone)]
enum BlobHome {
    /// `DIR/blobs/<id>.znippy`.
    Local(PathBuf),
    /// `PREFIX/<id>/<uuid>.blobs` in a bucket.
    Objects {
        store: Arc<dyn ObjectStore>,
        signer: Arc<dyn Signer>,
        prefix: ObjectPath,
        runtime: Handle,
    },
}

/// A backend is its catalog, plus a home for blobs.
impl std::ops::Deref for Backend {
    type Target = dyn Catalog;

    fn deref(&self) -> &Self::Target {
        &*self.catalog
    }
}

impl Backend {
    /// The embedded default: `catalog`, and sidecars in `blobs`.
    pub fn local(catalog: RedbCatalog, blobs: PathBuf) -> Self {
        Backend {
            catalog: Arc::new(catalog.clone()),
            redb: Some(catalog),
            home: BlobHome::Local(blobs),
        }
    }

    /// Any catalog, and segments under `prefix` in `store`, whose requests
    /// run on `runtime`.
    pub fn remote(
        catalog: Arc<dyn Catalog>,
        store: Arc<dyn ObjectStore>,
        signer: Arc<dyn Signer>,
        prefix: ObjectPath,
        runtime: Handle,
    ) -> Self {
        Backend {
            catalog,
            redb: None,
            home: BlobHome::Objects {
                store,
                signer,
                prefix,
                runtime,
            },
        }
    }

    /// The catalog, for what every catalog does.
    pub fn catalog(&self) -> &dyn Catalog {
        &*self.catalog
    }

    /// The embedded catalog, for what only it does.
    pub fn redb(&self) -> Option<&RedbCatalog> {
        self.redb.as_ref()
    }

    /// The bucket and prefix the blob segments are under, on object storage.
    pub fn objects(&self) -> Option<(&Arc<dyn ObjectStore>, &ObjectPath)> {
        match &self.home {
            BlobHome::Local(_) => None,
            BlobHome::Objects { store, prefix, .. } => Some((store, prefix)),
        }
    }

    /// Where archive `id`'s sidecar is, in a data directory.
    pub fn sidecar_path(&self, id: &str) -> Option<PathBuf> {
        match &self.home {
            BlobHome::Local(dir) => Some(sidecar_file(dir, id)),
            BlobHome::Objects { .. } => None,
        }
    }

    /// Opens archive `id`'s blob region, cut back to the committed `end`;
    /// `segments` are the segments its rows name (none in a sidecar).
    pub fn open_blobs(
        &self,
        id: &str,
        end: u64,
        segments: impl IntoIterator<Item = SegmentRef>,
    ) -> Result<Blobs> {
        Ok(match &self.home {
            BlobHome::Local(dir) => Blobs::Sidecar(Sidecar::open(&sidecar_file(dir, id), end)?),
            BlobHome::Objects {
                store,
                prefix,
                runtime,
                ..
            } => Blobs::Segments(Segments::new(
                Arc::clone(store),
                runtime.clone(),
                prefix.clone().join(id),
                segments,
                end,
            )?),
        })
    }
}

impl Backend {
    /// Where a seal's summary says the sealed file is: a path in a data
    /// directory, an object key on object storage.
    pub fn sealed_at(&self, location: &str) -> Result<SealedAt> {
        match &self.home {
            BlobHome::Local(_) => Ok(SealedAt::File(PathBuf::from(location))),
            BlobHome::Objects { .. } => ObjectPath::parse(location)
                .map(SealedAt::Object)
                .map_err(|_| StoreError::BadSegmentKey(location.to_string())),
        }
    }

    /// A URL that does `method` on object `key` without credentials for
    /// `expires`.
    pub async fn presign(
        &self,
        method: reqwest::Method,
        key: &ObjectPath,
        expires: std::time::Duration,
    ) -> Result<String> {
        let BlobHome::Objects { signer, .. } = &self.home else {
            return Err(StoreError::Unsupported("presigning outside object storage"));
        };
        let url = signer
            .signed_url(method, key, expires)
            .await
            .map_err(|source| StoreError::ObjectStore {
                context: format!("presigning {key}"),
                source,
            })?;
        Ok(url.to_string())
    }

    /// Opens archive `id`'s sealed file as its blob region: the whole file
    /// (or object) reads as one region, tail included, and is never cut.
    pub fn open_sealed(&self, id: &str, sealed: &SealedFile) -> Result<Blobs> {
        match (&self.home, &sealed.at) {
            (_, SealedAt::File(path)) => Ok(Blobs::Sidecar(Sidecar::open_existing(path)?)),
            (
                BlobHome::Objects {
                    store,
                    prefix,
                    runtime,
                    ..
                },
                SealedAt::Object(key),
            ) => Ok(Blobs::Segments(Segments::new(
                Arc::clone(store),
                runtime.clone(),
                prefix.clone().join(id),
                [SegmentRef {
                    start: 0,
                    key: key.to_string(),
                }],
                sealed.len,
            )?)),
            (BlobHome::Local(_), SealedAt::Object(key)) => {
                Err(StoreError::BadSegmentKey(key.to_string()))
            }
        }
    }
}

/// Archive `id`'s sidecar in the blob directory `dir`.
fn sidecar_file(dir: &std::path::Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.znippy"))
}
