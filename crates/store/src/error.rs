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
    /// unless the cause is the metadata step, which the next open completes.
    #[error(transparent)]
    Commit(std::sync::Arc<StoreError>),
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
    /// Stored rows that break the store's own rules.
    #[error("corrupt live archive {0}")]
    Corrupt(String),
}

/// What an append's metadata future yields when the caller gives up on the
/// batch (see [`crate::Store::append_stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned;

impl StoreError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias of the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
