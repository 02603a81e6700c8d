//! `ObjectStorage`: the tables' files on object storage (S3 and what speaks
//! its API), through the `object_store` crate.
//!
//! iceberg-rust ships storage for local files and memory only; for S3 it
//! points at opendal. znippy talks to object storage through `object_store`
//! instead, the crate arrow, parquet and DataFusion use, so that one client,
//! configured once, carries both the tables' files and the blobs (issue 15's
//! "one object-storage stack"): this module is the iceberg half.
//!
//! A table file is one object. A file written whole is one PUT; one written
//! through a writer is buffered to 8 MiB and then streamed as a multipart
//! upload, so memory stays bounded whatever the file's size. Either way the
//! object appears only when the write completes (S3 commits a PUT, or the
//! upload's completion, atomically), and it is durable once it appears: there
//! is nothing to sync, unlike [`crate::storage::DurableFs`].
//!
//! Locations are URLs (`s3://bucket/key`); the storage serves the one bucket
//! its client was built for and refuses any other, rather than writing a
//! table's files somewhere its catalog does not point.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// Bytes a writer holds before it turns into a multipart upload (S3 parts
/// are at least 5 MiB, but for the last).
const WRITE_BUFFER: usize = 8 << 20;

/// Table files in one bucket of an object store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStorage {
    /// The URL scheme and bucket every location starts with: `s3://bucket/`.
    root: String,
    /// The client; not serialized (it holds credentials and connections), so
    /// a storage rebuilt from its serialized form refuses to work rather
    /// than guess a client.
    #[serde(skip)]
    store: Option<Arc<dyn ObjectStore>>,
}

impl ObjectStorage {
    /// Table files under `root` (`s3://bucket`), through `store`, a client
    /// of that bucket.
    pub fn new(root: &str, store: Arc<dyn ObjectStore>) -> ObjectStorage {
        ObjectStorage {
            root: format!("{}/", root.trim_end_matches('/')),
            store: Some(store),
        }
    }

    fn store(&self) -> Result<&Arc<dyn ObjectStore>> {
        self.store.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "object storage without a client: build it with ObjectStorage::new",
            )
        })
    }

    /// The key of `location` in the bucket.
    fn key(&self, location: &str) -> Result<Path> {
        let key = location.strip_prefix(&self.root).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("{location} is not under {}", self.root),
            )
        })?;
        Path::parse(key).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, format!("object key of {location}")).with_source(e)
        })
    }
}

/// An `object_store` error as iceberg's, the cause kept as its source.
fn store_error(what: &'static str, location: &str) -> impl FnOnce(object_store::Error) -> Error {
    let message = format!("{what} {location}");
    move |e| Error::new(ErrorKind::Unexpected, message).with_source(e)
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store()?.head(&self.key(path)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error("looking for", path)(e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let meta = self
            .store()?
            .head(&self.key(path)?)
            .await
            .map_err(store_error("reading the size of", path))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let got = self
            .store()?
            .get(&self.key(path)?)
            .await
            .map_err(store_error("reading", path))?;
        got.bytes().await.map_err(store_error("reading", path))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(ObjectRead {
            store: self.store()?.clone(),
            key: self.key(path)?,
            location: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        self.store()?
            .put(&self.key(path)?, PutPayload::from_bytes(bs))
            .await
            .map_err(store_error("writing", path))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let writer = BufWriter::with_capacity(self.store()?.clone(), self.key(path)?, WRITE_BUFFER);
        Ok(Box::new(ObjectWrite {
            writer: Some(writer),
            location: path.to_string(),
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.store()?.delete(&self.key(path)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("deleting", path)(e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let store = self.store()?.clone();
        let prefix = self.key(path)?;
        delete_prefix(&store, &prefix)
            .await
            .map_err(store_error("deleting everything under", path))
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        // One bulk request per thousand keys on S3, rather than one each.
        let this = self.clone();
        let keys = paths
            .map(move |path| {
                this.key(&path).map_err(|e| object_store::Error::Generic {
                    store: "ObjectStorage",
                    source: Box::new(e),
                })
            })
            .boxed();
        let deleted = self.store()?.delete_stream(keys);
        drain(deleted)
            .await
            .map_err(store_error("deleting", "table files"))
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Deletes every object under `prefix`, in bulk requests.
async fn delete_prefix(store: &Arc<dyn ObjectStore>, prefix: &Path) -> object_store::Result<()> {
    let keys = store
        .list(Some(prefix))
        .map_ok(|meta| meta.location)
        .boxed();
    drain(store.delete_stream(keys)).await
}

/// Runs a stream of deletes to its end; an object already gone is deleted.
pub(crate) async fn drain(
    deleted: BoxStream<'_, object_store::Result<Path>>,
) -> object_store::Result<()> {
    deleted
        .map(|done| match done {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        })
        .try_collect()
        .await
}

/// Ranged reads of one object.
struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    key: Path,
    location: String,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.key, range)
            .await
            .map_err(store_error("reading", &self.location))
    }
}

/// An object being written; it exists once closed.
struct ObjectWrite {
    /// `None` once closed.
    writer: Option<BufWriter>,
    location: String,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "write to a closed file"))?;
        writer
            .put(bs)
            .await
            .map_err(store_error("writing", &self.location))
    }

    async fn close(&mut self) -> Result<()> {
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "file closed twice"))?;
        writer.shutdown().await.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("finishing {}", self.location),
            )
            .with_source(e)
        })
    }
}

/// Builds [`ObjectStorage`] for a `FileIO`: the same client whatever the
/// catalog's storage properties say, so that one configuration holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStorageFactory(ObjectStorage);

impl ObjectStorageFactory {
    /// A factory of `storage`.
    pub fn new(storage: ObjectStorage) -> ObjectStorageFactory {
        ObjectStorageFactory(storage)
    }
}

#[typetag::serde]
impl StorageFactory for ObjectStorageFactory {
    fn build(&self, _: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn storage() -> (ObjectStorage, Arc<InMemory>) {
        let mem = Arc::new(InMemory::new());
        (ObjectStorage::new("s3://wh", mem.clone()), mem)
    }

    #[tokio::test]
    async fn a_file_written_whole_reads_back_whole_and_by_range() {
        let (s, _) = storage();
        let at = "s3://wh/t/metadata/v1.metadata.json";
        assert!(!s.exists(at).await.unwrap());
        s.write(at, Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
        assert!(s.exists(at).await.unwrap());
        assert_eq!(s.metadata(at).await.unwrap().size, 10);
        assert_eq!(&s.read(at).await.unwrap()[..], b"0123456789");
        let r = s.reader(at).await.unwrap();
        assert_eq!(&r.read(3..7).await.unwrap()[..], b"3456");
    }

    /// A writer past its buffer streams a multipart upload, and the object
    /// exists only once the writer is closed.
    #[tokio::test]
    async fn a_large_file_appears_only_when_its_writer_closes() {
        let (s, mem) = storage();
        let at = "s3://wh/t/data/big.parquet";
        let mut w = s.writer(at).await.unwrap();
        let chunk = Bytes::from(vec![7u8; 3 << 20]);
        for _ in 0..4 {
            w.write(chunk.clone()).await.unwrap();
        }
        assert!(!s.exists(at).await.unwrap(), "visible before close");
        w.close().await.unwrap();
        assert_eq!(s.metadata(at).await.unwrap().size, 12 << 20);
        let key = Path::from("t/data/big.parquet");
        assert_eq!(mem.head(&key).await.unwrap().size, 12 << 20);
        assert!(w.close().await.is_err(), "closing twice is an error");
        assert!(
            w.write(chunk).await.is_err(),
            "writing after close is an error"
        );
    }

    #[tokio::test]
    async fn deletes_remove_one_file_or_everything_under_a_prefix() {
        let (s, _) = storage();
        for name in ["a/1", "a/2", "a/b/3", "c/4"] {
            s.write(&format!("s3://wh/{name}"), Bytes::from_static(b"x"))
                .await
                .unwrap();
        }
        s.delete("s3://wh/c/4").await.unwrap();
        s.delete("s3://wh/c/4").await.unwrap();
        s.delete_prefix("s3://wh/a").await.unwrap();
        for name in ["a/1", "a/2", "a/b/3", "c/4"] {
            assert!(
                !s.exists(&format!("s3://wh/{name}")).await.unwrap(),
                "{name}"
            );
        }
        for name in ["d/5", "d/6"] {
            s.write(&format!("s3://wh/{name}"), Bytes::from_static(b"x"))
                .await
                .unwrap();
        }
        let names = ["s3://wh/d/5", "s3://wh/gone", "s3://wh/d/6"];
        let paths = futures::stream::iter(names.map(String::from)).boxed();
        s.delete_stream(paths).await.unwrap();
        assert!(!s.exists("s3://wh/d/5").await.unwrap());
        assert!(!s.exists("s3://wh/d/6").await.unwrap());
        let outside = futures::stream::iter(["s3://other/x".to_string()]).boxed();
        assert!(s.delete_stream(outside).await.is_err());
    }

    #[tokio::test]
    async fn a_location_outside_the_bucket_is_refused() {
        let (s, mem) = storage();
        for at in [
            "s3://other/x",
            "file:///tmp/x",
            "s3://wh-2/x",
            "s3://wh/a//b",
        ] {
            let e = s.write(at, Bytes::from_static(b"x")).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::DataInvalid, "{at}: {e}");
        }
        assert!(mem.list(None).next().await.is_none(), "nothing was written");
    }

    /// On a real S3 server and a real REST catalog (SeaweedFS): the store's
    /// own table writer puts parquet and metadata in the bucket, a commit
    /// from a handle that another commit made stale is retried on the new
    /// snapshot (both appends kept, one after the other), and a file larger
    /// than the write buffer goes up as a multipart upload.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tables_on_seaweedfs_commit_through_its_rest_catalog() {
        use iceberg::transaction::{ApplyTransactionAction, Transaction};
        use iceberg::NamespaceIdent;
        use znippy_testkit::seaweed::{self, Seaweed};

        use crate::remote::RemoteConfig;

        let Some(server) = Seaweed::start() else {
            return;
        };
        // The catalog as `znippy serve --catalog rest` connects to it, and a
        // client of its table bucket configured the same way.
        let config = RemoteConfig::for_seaweed(&server);
        let s3 = config.bucket(seaweed::TABLE_BUCKET).unwrap();
        let root = format!("s3://{}", seaweed::TABLE_BUCKET);
        let storage = ObjectStorage::new(&root, s3.clone());
        let catalog = config.connect().await.unwrap().catalog;

        let ns = NamespaceIdent::new("z".into());
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .unwrap();
        let creation = crate::tables::one_column("t");
        let table = catalog.create_table(&ns, creation).await.unwrap();
        let location = table.metadata().location().to_string();
        assert!(location.starts_with(&format!("{root}/")), "{location}");

        let stale = catalog.load_table(table.identifier()).await.unwrap();
        for (handle, values) in [(&table, vec![1i64, 2]), (&stale, vec![3])] {
            let batch = arrow_array::RecordBatch::try_from_iter([(
                "n",
                Arc::new(arrow_array::Int64Array::from(values)) as _,
            )])
            .unwrap();
            let files = crate::tables::write_data_file(handle, batch).await.unwrap();
            let tx = Transaction::new(handle);
            let action = tx.fast_append().add_data_files(files);
            action.apply(tx).unwrap().commit(&*catalog).await.unwrap();
        }

        let table = catalog.load_table(table.identifier()).await.unwrap();
        let snapshots: Vec<_> = table.metadata().snapshots().collect();
        assert_eq!(snapshots.len(), 2, "one snapshot per append");
        let mut values: Vec<i64> = crate::tables::scan_all(&table)
            .await
            .unwrap()
            .iter()
            .flat_map(|b| {
                let col = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>();
                col.unwrap().values().to_vec()
            })
            .collect();
        values.sort();
        assert_eq!(values, [1, 2, 3], "the stale commit was retried, not lost");

        let prefix = Path::parse(location.strip_prefix(&format!("{root}/")).unwrap()).unwrap();
        let keys: Vec<String> = s3
            .list(Some(&prefix))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        let count = |end: &str| keys.iter().filter(|k| k.ends_with(end)).count();
        assert_eq!(count(".parquet"), 2, "{keys:?}");
        assert!(count(".metadata.json") >= 3, "{keys:?}");

        // A table bucket takes table files only (a `.bin` is refused with a
        // 403), so the large file is named as the data file it stands for.
        let big = format!("{location}/data/big.parquet");
        let mut w = storage.writer(&big).await.unwrap();
        let chunk = Bytes::from(znippy_testkit::data::noise(1, 3 << 20));
        for _ in 0..4 {
            w.write(chunk.clone()).await.unwrap();
        }
        w.close().await.unwrap();
        assert_eq!(storage.metadata(&big).await.unwrap().size, 12 << 20);
        let r = storage.reader(&big).await.unwrap();
        let at = (9 << 20) + 5;
        assert_eq!(r.read(at..at + 100).await.unwrap(), chunk.slice(5..105));
    }

    #[tokio::test]
    async fn a_deserialized_storage_refuses_to_work() {
        let (s, _) = storage();
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("InMemory"), "{json}");
        let back: ObjectStorage = serde_json::from_str(&json).unwrap();
        let e = back.read("s3://wh/x").await.unwrap_err();
        assert!(e.to_string().contains("without a client"), "{e}");
    }
}
