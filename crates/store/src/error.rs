//! The store's error type.

/// What can go wrong in the live store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The archive does not exist.
    #[error("no archive {0:?}")]
    NoArchive(String),
    /// An archive with this id already exists.
    #[error("archive {0:?} already exists")]
    Exists(String),
    /// The archive is sealed: it takes no more appends or deletes.
    #[error("archive {0:?} is sealed and cannot change")]
    Sealed(String),
    /// An archive id outside `[A-Za-z0-9_-]{1,64}`.
    #[error("invalid archive id {0:?}: use 1 to 64 of A-Z a-z 0-9 _ -")]
    BadId(String),
    /// The file is not in the archive.
    #[error("no such file in archive: {0}")]
    NotFound(String),
    /// The container layer refused something (a path, a property, a checksum).
    #[error(transparent)]
    Format(#[from] znippy_format::Error),
    /// The Iceberg layer (catalog, table files) failed.
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    /// Local I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Object storage failed or could not be reached.
    #[error("{context}: {source}")]
    ObjectStore {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: object_store::Error,
    },
    /// A scaled-out deployment's configuration does not hold together.
    #[error("{0}")]
    BadRemote(String),
    /// What the store cannot do yet on this backend.
    #[error("{0} is not supported yet")]
    Unsupported(&'static str),
    /// Two blob segments of a live archive start at the same byte.
    #[error("corrupt live archive: blob segments {keys:?} both start at byte {start}")]
    SegmentClash {
        /// Where they start.
        start: u64,
        /// Their keys.
        keys: [String; 2],
    },
    /// A live archive's rows name a blob segment that starts at or past the
    /// committed end of its blob region.
    #[error("corrupt live archive: a blob segment starts at byte {start}, past the end {end}")]
    SegmentPastEnd {
        /// Where it starts.
        start: u64,
        /// The committed end.
        end: u64,
    },
    /// A live archive's rows name a blob segment by a key that is no object key.
    #[error("corrupt live archive: {0:?} is not a blob segment's key")]
    BadSegmentKey(String),
    /// The sidecar file was removed or replaced under the store: nothing can
    /// be made durable in it until the archive is reopened.
    #[error("the blob file {0:?} was removed or replaced while the service ran; restart it")]
    SidecarGone(std::path::PathBuf),
    /// An append to the archive may hold more engine memory than the store's
    /// whole budget, so it could never run.
    #[error(
        "an append to this archive may hold {need} bytes of engine memory, more than the whole \
         budget of {budget}: use a smaller chunk_size or level, or raise the budget \
         (znippy serve --engine-memory)"
    )]
    OverBudget {
        /// The archive's bound, `Engine::memory_bound`.
        need: u64,
        /// The store's budget.
        budget: u64,
    },
    /// The commit of the group of appends this one was queued in failed (the
    /// cause is shared by every append of the group); nothing was committed,
    /// unless the cause is the metadata step, which the archive's next
    /// change (or the next open) completes.
    #[error(transparent)]
    Commit(std::sync::Arc<StoreError>),
    /// The engine memory stayed taken by appends in flight (to any archive)
    /// for as long as an append may wait for its share
    /// ([`StoreOptions::budget_wait`](crate::StoreOptions::budget_wait));
    /// nothing was read or committed. Retry it.
    #[error(
        "the engine memory was taken by other appends in flight for {0:?}; nothing was \
         committed, retry it"
    )]
    MemoryBusy(std::time::Duration),
    /// An append queued after a group whose commit failed: its blobs were
    /// written after theirs, so it is dropped with them. Retry it.
    #[error(
        "the commit of the appends queued before this one failed; nothing was committed, retry it"
    )]
    QueueFailed,
    /// The caller abandoned the batch (its input failed); nothing was committed.
    #[error("append abandoned by its caller; nothing was committed")]
    Aborted,
    /// The task running a change panicked or was cancelled (the runtime is
    /// shutting down); what it committed before stays, the rest is rolled
    /// back on the next open.
    #[error("an archive task failed: {0}")]
    Task(String),
    /// The sidecar is shorter than the blob end its tables committed:
    /// acknowledged bytes are gone (the disk lost them, or something other
    /// than znippy cut the file).
    #[error("{}: sidecar has {len} bytes but {committed} are committed", path.display())]
    SidecarShort {
        /// The sidecar file.
        path: std::path::PathBuf,
        /// Its length.
        len: u64,
        /// The committed blob end.
        committed: u64,
    },
    /// A property the store keeps on an archive's namespace is missing or
    /// does not parse.
    #[error("corrupt live archive: namespace property {key} is {}", shown(value))]
    BadNamespaceProperty {
        /// The property.
        key: String,
        /// What it holds, if anything.
        value: Option<String>,
    },
    /// An entry the store keeps in a snapshot's summary does not parse.
    #[error("corrupt live archive: snapshot summary {key} is {value:?}")]
    BadSummary {
        /// The summary key.
        key: String,
        /// What it holds.
        value: String,
    },
    /// A row of an archive's tables, read or about to be written, breaks the
    /// store's schema.
    #[error("live archive row: column {column} {problem}")]
    BadRow {
        /// The column.
        column: &'static str,
        /// What is wrong with it.
        problem: RowProblem,
    },
    /// A table's schema does not take the rows this version of the store
    /// writes (the table was changed by something other than znippy).
    #[error("table {table} does not take this store's rows: {source}")]
    Schema {
        /// The table.
        table: String,
        /// What Arrow refused.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// The data files a `files` snapshot names for the `meta` table to
    /// commit after it (see "roll forward" in docs/store.md) do not encode.
    #[error("corrupt live archive: the pending meta files of a snapshot: {0}")]
    PendingMeta(#[source] serde_json::Error),
    /// The archive runs a package plugin this build does not have.
    #[error("the archive's packages are read by plugin {0}, which this znippy does not have; run a znippy that has it")]
    MissingPlugin(String),
    /// The data directory holds tables or blobs but no catalog (it is
    /// missing or empty), which a fresh catalog would quietly disown.
    #[error(
        "{}: the catalog is missing or empty, but {} is not: restore the \
         catalog, or move the data directory away to start an empty store",
        catalog.display(),
        holding.display()
    )]
    CatalogMissing {
        /// Where the catalog should be.
        catalog: std::path::PathBuf,
        /// A directory that holds what the catalog would have named.
        holding: std::path::PathBuf,
    },
}

/// What is wrong with a column of a row ([`StoreError::BadRow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowProblem {
    /// The column is not in the batch.
    Missing,
    /// The column is not of the type the store writes.
    WrongType,
    /// A count or offset read back negative.
    Negative(i64),
    /// A count or offset past the largest Iceberg `long`.
    TooLarge(u64),
    /// Set in a row whose paired column is null, or null where it is set.
    Unpaired(&'static str),
}

impl std::fmt::Display for RowProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowProblem::Missing => f.write_str("is missing"),
            RowProblem::WrongType => f.write_str("has an unexpected type"),
            RowProblem::Negative(v) => write!(f, "holds a negative value, {v}"),
            RowProblem::TooLarge(v) => write!(f, "cannot hold {v}, past the largest long"),
            RowProblem::Unpaired(other) => write!(f, "is set or null without `{other}`"),
        }
    }
}

fn shown(value: &Option<String>) -> String {
    value
        .as_ref()
        .map_or_else(|| "missing".to_string(), |v| format!("{v:?}"))
}

/// What an append's metadata future yields when the caller gives up on the
/// batch (see [`crate::Store::append_stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned;

impl StoreError {
    /// Whether a commit found that another node committed to the archive
    /// since the change was planned: planning again may succeed.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Iceberg(e) if crate::pinned::is_conflict(e))
    }

    /// Whether object storage or a remote catalog failed or could not be
    /// reached: nothing was committed, and the same request may succeed
    /// once they are back.
    pub fn is_unavailable(&self) -> bool {
        let remote = |e: &(dyn std::error::Error + 'static)| {
            e.is::<object_store::Error>() || e.is::<reqwest::Error>()
        };
        match self {
            StoreError::ObjectStore { .. } => true,
            StoreError::Commit(e) => e.is_unavailable(),
            StoreError::Iceberg(e) => {
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    if remote(c) {
                        return true;
                    }
                    cause = c.source();
                }
                false
            }
            _ => false,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias of the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
