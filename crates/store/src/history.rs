//! An archive's history: every `files` snapshot says in its summary what it
//! committed, and [`of`] reads that back, newest first.
//!
//! Iceberg's own summary counts rows (slices), not files, and one group
//! commit holds many appends, so each `files` snapshot also carries, beside
//! `znippy.blob-end` and `znippy.append-seq` (the last append it commits):
//!
//! - `znippy.change`: `append`, `delete` or `seal`;
//! - for an `append`: `znippy.appends` (appends in the group commit),
//!   `znippy.files` and `znippy.bytes` (their files and input bytes).
//!
//! A rewrite (`maintenance.rs`) is a `replace` snapshot that copies the
//! summary of the snapshot it rewrites; it is listed as [`ChangeKind::Rewrite`]
//! whatever that says. Snapshots written before these keys existed have no
//! counts. The history is what the table keeps: expiry drops all but the
//! newest snapshots (docs/store.md, "Rewrites and expiry").

use std::collections::HashMap;

use iceberg::spec::{Operation, SnapshotRef, TableMetadata};

use crate::catalog::BLOB_END_KEY;
use crate::sealed::SEALED_KEY;

pub(crate) const APPEND_SEQ_KEY: &str = "znippy.append-seq";
const CHANGE_KEY: &str = "znippy.change";
const APPENDS_KEY: &str = "znippy.appends";
const FILES_KEY: &str = "znippy.files";
const BYTES_KEY: &str = "znippy.bytes";

/// What a `files` snapshot commits, as its summary records it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change {
    /// A group commit of `appends` appends, bringing `files` files of
    /// `bytes` input bytes (a metadata-only append brings none).
    Append {
        appends: u64,
        files: u64,
        bytes: u64,
    },
    /// One file's tombstone.
    Delete,
    /// The seal (`sealed.rs` adds the keys naming the sealed file).
    Seal,
}

/// The summary of a `files` snapshot committing `change`, whose last append
/// is `seq`, with the blob region ending at `blob_end` after it.
pub(crate) fn summary(seq: u64, blob_end: u64, change: Change) -> HashMap<String, String> {
    let mut props = HashMap::from([
        (BLOB_END_KEY.to_string(), blob_end.to_string()),
        (APPEND_SEQ_KEY.to_string(), seq.to_string()),
    ]);
    let name = match change {
        Change::Append {
            appends,
            files,
            bytes,
        } => {
            props.insert(APPENDS_KEY.into(), appends.to_string());
            props.insert(FILES_KEY.into(), files.to_string());
            props.insert(BYTES_KEY.into(), bytes.to_string());
            "append"
        }
        Change::Delete => "delete",
        Change::Seal => "seal",
    };
    props.insert(CHANGE_KEY.into(), name.into());
    props
}

/// What kind of change a snapshot was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Appends (files, facts or both), committed together.
    Append,
    /// A file deleted.
    Delete,
    /// The archive sealed.
    Seal,
    /// The table's small data files rewritten as one; the rows are unchanged.
    Rewrite,
}

impl ChangeKind {
    /// The name the service and the docs use.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Append => "append",
            ChangeKind::Delete => "delete",
            ChangeKind::Seal => "seal",
            ChangeKind::Rewrite => "rewrite",
        }
    }
}

/// One snapshot of an archive's `files` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The snapshot.
    pub snapshot_id: i64,
    /// When it was committed, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// What it committed.
    pub kind: ChangeKind,
    /// The number of the last append it commits.
    pub append_seq: Option<u64>,
    /// For an append: the appends of its group commit.
    pub appends: Option<u64>,
    /// For an append: the files they brought.
    pub files: Option<u64>,
    /// For an append: the input bytes of those files.
    pub bytes: Option<u64>,
    /// The end of the blob region after it.
    pub blob_end: Option<u64>,
}

/// The snapshots of the current snapshot's ancestry that the table keeps,
/// newest first. A summary value that does not parse (another writer's
/// table) is left out, never an error.
pub(crate) fn of(metadata: &TableMetadata) -> Vec<HistoryEntry> {
    let mut out = Vec::new();
    for snapshot in ancestors(metadata) {
        let summary = snapshot.summary();
        let props = &summary.additional_properties;
        let number = |key: &str| props.get(key).and_then(|v| v.parse::<u64>().ok());
        let kind = if summary.operation == Operation::Replace {
            ChangeKind::Rewrite
        } else if props.contains_key(SEALED_KEY) {
            ChangeKind::Seal
        } else if props.get(CHANGE_KEY).map(String::as_str) == Some("delete") {
            ChangeKind::Delete
        } else {
            ChangeKind::Append
        };
        let counted = kind == ChangeKind::Append;
        out.push(HistoryEntry {
            snapshot_id: snapshot.snapshot_id(),
            timestamp_ms: snapshot.timestamp_ms(),
            kind,
            append_seq: number(APPEND_SEQ_KEY),
            appends: number(APPENDS_KEY).filter(|_| counted),
            files: number(FILES_KEY).filter(|_| counted),
            bytes: number(BYTES_KEY).filter(|_| counted),
            blob_end: number(BLOB_END_KEY),
        });
    }
    out
}

/// The current snapshot and its ancestors, newest first. A snapshot's
/// parent is older, so a chain longer than the table's snapshots loops
/// (damaged metadata, or a catalog that does not check parents): it ends
/// there rather than spinning.
pub(crate) fn ancestors(metadata: &TableMetadata) -> impl Iterator<Item = &SnapshotRef> {
    let mut next = metadata.current_snapshot_id();
    std::iter::from_fn(move || {
        let snapshot = metadata.snapshot_by_id(next?)?;
        next = snapshot.parent_snapshot_id();
        Some(snapshot)
    })
    .take(metadata.snapshots().len())
}
