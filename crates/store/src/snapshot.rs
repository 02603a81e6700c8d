//! The snapshots the embedded catalog writes itself: appends and rewrites.
//!
//! A snapshot is one new manifest (the data files it adds, and for a
//! rewrite those it keeps), a manifest list naming that manifest and the
//! manifests it carries over from its parent, and a metadata file; the
//! pointer swap publishes it ([`RedbCatalog::publish`]). iceberg-rust's fast
//! append writes the same files, but reads the parent's manifest list back
//! and parses it, and the rewrite that later reads each new manifest parses
//! that too: apache-avro's schema parsing in those reads was a quarter of a
//! small PUT's CPU (docs/benchmarks.md). The catalog wrote every one of
//! those files, and they never change, so it keeps what it wrote as parsed
//! values by path, as it keeps metadata files: a commit reads no file.
//! After a restart each is read once, from its file. The manifest itself is
//! encoded here too, after the table's first (`manifest.rs`).
//!
//! A shared catalog (REST) is sent its appends through iceberg-rust's
//! transactions: a catalog commit built by hand cannot be sent to it.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    DataFile, FormatVersion, Manifest, ManifestContentType, ManifestEntry, ManifestFile,
    ManifestListWriter, ManifestMetadata, ManifestStatus, ManifestWriterBuilder, Operation,
    Snapshot, SnapshotSummaryCollector, Summary, TableMetadata, MAIN_BRANCH,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, Result};

use crate::catalog::RedbCatalog;
use crate::pinned::is_conflict;

/// How many times an append is built again on a table that a rewrite or an
/// expiry committed to first.
const RACES: usize = 4;

/// Iceberg's summary totals: each total, with the keys that add to and
/// take from it.
const TOTALS: [(&str, &str, &str); 6] = [
    ("total-data-files", "added-data-files", "deleted-data-files"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

/// A snapshot to write on a table's current state.
pub(crate) struct NewSnapshot {
    pub operation: Operation,
    /// Data files the snapshot adds.
    pub added: Vec<DataFile>,
    /// Entries an earlier snapshot added that the new manifest lists again
    /// (a rewrite's), with their inherited fields filled in.
    pub existing: Vec<ManifestEntry>,
    /// Data files no longer in the table after it (a rewrite's merged ones).
    pub removed: Vec<DataFile>,
    /// The parent's manifests the new list names after the new one.
    pub carried: Vec<ManifestFile>,
    /// The summary's own keys; the counts and totals are added here.
    pub props: HashMap<String, String>,
}

impl RedbCatalog {
    /// Appends `files` to `table` (its state under the archive's commit
    /// lock) as one snapshot whose summary holds `props`. A rewrite or an
    /// expiry commits outside that lock only when a delete or a seal is
    /// running: if one got there first, the append is built again on the
    /// table it left.
    pub(crate) async fn append(
        &self,
        table: &Table,
        files: Vec<DataFile>,
        props: HashMap<String, String>,
    ) -> Result<Table> {
        let mut table = table.clone();
        let mut lost = 0;
        loop {
            let carried = match table.metadata().current_snapshot() {
                Some(parent) => self.manifest_list(table.metadata(), parent).await?.to_vec(),
                None => Vec::new(),
            };
            let new = NewSnapshot {
                operation: Operation::Append,
                added: files.clone(),
                existing: Vec::new(),
                removed: Vec::new(),
                carried,
                props: props.clone(),
            };
            match self.commit_snapshot(&table, new).await {
                Err(e) if is_conflict(&e) && lost < RACES => {
                    lost += 1;
                    table = self.load_table(table.identifier()).await?;
                }
                committed => return committed,
            }
        }
    }

    /// Writes `new` as the snapshot after `table`'s current one and
    /// publishes it; returns the table it leaves.
    pub(crate) async fn commit_snapshot(&self, table: &Table, new: NewSnapshot) -> Result<Table> {
        let metadata = table.metadata();
        if metadata.format_version() != FormatVersion::V2 {
            return Err(Error::new(
                ErrorKind::FeatureUnsupported,
                format!(
                    "{}: the store writes snapshots of format version 2 tables only",
                    table.identifier()
                ),
            ));
        }
        let parent = metadata.current_snapshot_id();
        let snapshot_id = new_snapshot_id(metadata);
        let seq = metadata.next_sequence_number();
        let dir = format!("{}/metadata", metadata.location());
        let tag = uuid::Uuid::now_v7();
        let summary = summary(metadata, &new);
        let mut written = Vec::new();
        let mut listed = Vec::with_capacity(new.carried.len() + 1);
        if !new.added.is_empty() || !new.existing.is_empty() {
            let (schema, spec) = (
                metadata.current_schema().clone(),
                metadata.default_partition_spec().as_ref().clone(),
            );
            // The entries as the manifest holds them, and as reading it back
            // gives them, inherited fields included (`load_manifest`): an
            // added entry inherits its file sequence number.
            let mut written_entries = Vec::with_capacity(new.added.len() + new.existing.len());
            let mut entries = Vec::with_capacity(written_entries.capacity());
            for f in new.added {
                let added = ManifestEntry {
                    status: ManifestStatus::Added,
                    snapshot_id: Some(snapshot_id),
                    sequence_number: Some(seq),
                    file_sequence_number: None,
                    data_file: f,
                };
                entries.push(ManifestEntry {
                    file_sequence_number: Some(seq),
                    ..added.clone()
                });
                written_entries.push(added);
            }
            for mut e in new.existing {
                e.snapshot_id.get_or_insert(snapshot_id);
                e.sequence_number.get_or_insert(seq);
                e.status = ManifestStatus::Existing;
                written_entries.push(e.clone());
                entries.push(e);
            }
            let path = format!("{dir}/{tag}-m0.avro");
            let mut manifest = self
                .write_manifest(metadata, &path, snapshot_id, written_entries)
                .await?;
            assign_sequence_number(&mut manifest, seq);
            let parsed = ManifestMetadata {
                schema_id: schema.schema_id(),
                schema,
                partition_spec: spec,
                format_version: FormatVersion::V2,
                content: ManifestContentType::Data,
            };
            self.keep_manifest(&manifest.manifest_path, Manifest::new(parsed, entries));
            written.push(manifest.manifest_path.clone());
            listed.push(manifest);
        }
        listed.extend(new.carried);
        let list_path = format!("{dir}/snap-{snapshot_id}-0-{tag}.avro");
        let mut list = ManifestListWriter::v2(
            self.file_io().new_output(&list_path)?.writer().await?,
            snapshot_id,
            parent,
            seq,
        );
        list.add_manifests(listed.iter().cloned())?;
        list.close().await?;
        self.keep_manifest_list(&list_path, listed);
        written.push(list_path.clone());
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(seq)
            .with_timestamp_ms(now_ms())
            .with_manifest_list(list_path)
            .with_summary(summary)
            .with_schema_id(metadata.current_schema_id())
            .build();
        let built = Arc::new(
            metadata
                .clone()
                .into_builder(Some(
                    crate::catalog::metadata_location_of(table)?.to_string(),
                ))
                .set_branch_snapshot(snapshot, MAIN_BRANCH)?
                .build()?
                .metadata,
        );
        self.publish(table, built, written).await
    }

    /// Writes `entries` (as the manifest holds them) as the manifest at
    /// `path` of snapshot `snapshot_id` on `metadata`'s table, and returns
    /// the list's entry for it, as iceberg-rust's `ManifestWriter` would.
    /// The header comes from the table's first manifest of this process,
    /// which iceberg-rust writes (`manifest.rs`).
    async fn write_manifest(
        &self,
        metadata: &TableMetadata,
        path: &str,
        snapshot_id: i64,
        entries: Vec<ManifestEntry>,
    ) -> Result<ManifestFile> {
        for e in &entries {
            let numbered = e.sequence_number.is_some() && e.file_sequence_number.is_some();
            let refused = match e.status {
                ManifestStatus::Added => continue,
                ManifestStatus::Existing if numbered => continue,
                ManifestStatus::Existing => "an existing entry without its sequence numbers",
                ManifestStatus::Deleted => "a deleted entry",
            };
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "the store writes no {refused} ({})",
                    e.data_file.file_path()
                ),
            ));
        }
        let spec = metadata.default_partition_spec();
        let key = (
            metadata.uuid(),
            metadata.current_schema_id(),
            spec.spec_id(),
        );
        let header = spec
            .is_unpartitioned()
            .then(|| self.manifest_header(&key))
            .flatten();
        let Some(header) = header else {
            let mut writer = ManifestWriterBuilder::new(
                self.file_io().new_output(path)?,
                Some(snapshot_id),
                metadata.current_schema().clone(),
                spec.as_ref().clone(),
            )
            .build_v2_data();
            for e in entries {
                let seq = e.sequence_number.unwrap_or(UNASSIGNED_SEQUENCE_NUMBER);
                match e.status {
                    ManifestStatus::Added => writer.add_file(e.data_file, seq)?,
                    _ => writer.add_existing_file(
                        e.data_file,
                        e.snapshot_id.unwrap_or(snapshot_id),
                        seq,
                        e.file_sequence_number,
                    )?,
                }
            }
            let manifest = writer.write_manifest_file().await?;
            if spec.is_unpartitioned() {
                let file = self.file_io().new_input(path)?.read().await?;
                if let Some(header) = crate::manifest::header_of(&file) {
                    self.keep_manifest_header(key, header);
                }
            }
            return Ok(manifest);
        };
        let sync = *uuid::Uuid::new_v4().as_bytes();
        let file = crate::manifest::encode(&header, sync, &entries)?;
        let manifest_length = file.len() as i64;
        self.file_io().new_output(path)?.write(file.into()).await?;
        let count = |status| entries.iter().filter(move |e| e.status == status);
        let files = |status| Some(count(status).count() as u32);
        // The counts come from manifests on disk: summed without overflow.
        let rows = |status| {
            Some(
                count(status)
                    .map(|e| e.data_file.record_count())
                    .fold(0, u64::saturating_add),
            )
        };
        Ok(ManifestFile {
            manifest_path: path.to_string(),
            manifest_length,
            partition_spec_id: spec.spec_id(),
            content: ManifestContentType::Data,
            sequence_number: UNASSIGNED_SEQUENCE_NUMBER,
            min_sequence_number: entries
                .iter()
                .filter(|e| e.status != ManifestStatus::Deleted)
                .filter_map(|e| e.sequence_number)
                .min()
                .unwrap_or(UNASSIGNED_SEQUENCE_NUMBER),
            added_snapshot_id: snapshot_id,
            added_files_count: files(ManifestStatus::Added),
            existing_files_count: files(ManifestStatus::Existing),
            deleted_files_count: files(ManifestStatus::Deleted),
            added_rows_count: rows(ManifestStatus::Added),
            existing_rows_count: rows(ManifestStatus::Existing),
            deleted_rows_count: rows(ManifestStatus::Deleted),
            partitions: Some(Vec::new()),
            key_metadata: None,
            first_row_id: None,
        })
    }
}

/// The summary of `new` on `metadata`'s current snapshot: its own keys,
/// iceberg's counts of what it adds and removes, and the totals, as
/// iceberg-rust's snapshot producer computes them.
fn summary(metadata: &TableMetadata, new: &NewSnapshot) -> Summary {
    let (schema, spec) = (metadata.current_schema(), metadata.default_partition_spec());
    let mut counts = SnapshotSummaryCollector::default();
    for f in &new.added {
        counts.add_file(f, schema.clone(), spec.clone());
    }
    for f in &new.removed {
        counts.remove_file(f, schema.clone(), spec.clone());
    }
    let mut props = new.props.clone();
    props.extend(counts.build());
    let previous = metadata
        .current_snapshot()
        .map(|s| &s.summary().additional_properties);
    let number = |props: &HashMap<String, String>, key: &str| -> Option<u64> {
        props.get(key).map_or(Some(0), |v| v.parse().ok())
    };
    for (total, added, removed) in TOTALS {
        // A parent without a total (or with one that is not a number) has
        // none to carry on, as in iceberg.
        let before = match previous {
            None => Some(0),
            Some(p) => p.get(total).and_then(|v| v.parse::<u64>().ok()),
        };
        let after = before
            .zip(number(&props, added))
            .zip(number(&props, removed))
            .map(|((b, a), r)| b.saturating_add(a).saturating_sub(r));
        if let Some(after) = after {
            props.insert(total.to_string(), after.to_string());
        }
    }
    Summary {
        operation: new.operation.clone(),
        additional_properties: props,
    }
}

/// What the manifest list writer assigns to a manifest of its own snapshot.
fn assign_sequence_number(manifest: &mut ManifestFile, seq: i64) {
    if manifest.sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
        manifest.sequence_number = seq;
    }
    if manifest.min_sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
        manifest.min_sequence_number = seq;
    }
}

/// A snapshot id the table does not hold yet.
fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let id = (uuid::Uuid::now_v7().as_u64_pair().1 & i64::MAX as u64) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    use iceberg::{NamespaceIdent, TableIdent};

    use crate::tables;

    async fn create(c: &RedbCatalog, ns: &NamespaceIdent, name: &str) -> TableIdent {
        let creation = tables::one_column(name);
        c.create_table(ns, creation).await.unwrap();
        TableIdent::new(ns.clone(), name.into())
    }

    fn batch(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([("n", Arc::new(Int64Array::from(values.to_vec())) as _)])
            .unwrap()
    }

    /// Every snapshot's list and manifests as the catalog keeps them, next
    /// to what their files say.
    async fn assert_kept_as_written(c: &RedbCatalog, table: &Table) {
        let md = table.metadata();
        for snap in md.snapshots() {
            let kept = c.manifest_list(md, snap).await.unwrap();
            let read = tables::manifest_list(c.file_io(), md, snap).await.unwrap();
            assert_eq!(&*kept, read.entries(), "list of {}", snap.snapshot_id());
            for m in read.entries() {
                let from_file = m.load_manifest(c.file_io()).await.unwrap();
                assert_eq!(
                    *c.manifest(m).await.unwrap(),
                    from_file,
                    "{}",
                    m.manifest_path
                );
            }
        }
    }

    /// The oracle is iceberg-rust itself: a twin table gets the same data
    /// files through its fast append. The summaries must match key for key,
    /// and what the catalog keeps parsed must be what its files say.
    #[tokio::test]
    async fn an_append_is_what_iceberg_would_write_and_reads_back_as_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let (ours, twin) = (create(&c, &ns, "ours").await, create(&c, &ns, "twin").await);
        let appends: [&[i64]; 4] = [&[1], &[2, 3], &[], &[4, 5, 6]];
        for (i, values) in appends.into_iter().enumerate() {
            let table = c.load_table(&ours).await.unwrap();
            let files = match values.is_empty() {
                // A change with no rows: a seal's snapshot.
                true => Vec::new(),
                false => tables::write_data_file(&table, batch(values))
                    .await
                    .unwrap(),
            };
            let props = HashMap::from([("znippy.n".to_string(), i.to_string())]);
            c.append(&table, files.clone(), props.clone())
                .await
                .unwrap();
            let other = c.load_table(&twin).await.unwrap();
            let tx = Transaction::new(&other);
            let action = tx
                .fast_append()
                .add_data_files(files)
                .set_snapshot_properties(props);
            action.apply(tx).unwrap().commit(&c).await.unwrap();
        }
        let summaries = |t: &Table| {
            let mut s: Vec<_> = t
                .metadata()
                .snapshots()
                .map(|s| (s.sequence_number(), s.summary().clone()))
                .collect();
            s.sort_by_key(|(seq, _)| *seq);
            s
        };
        let table = c.load_table(&ours).await.unwrap();
        let other = c.load_table(&twin).await.unwrap();
        assert_eq!(summaries(&table), summaries(&other));
        assert_eq!(table.metadata().snapshots().count(), 4);
        assert_kept_as_written(&c, &table).await;

        // A rewrite, built the same way: its totals count what is left.
        let rewrite = c.plan_rewrite(&table).await.unwrap().unwrap();
        let rows = rewrite.read(&table).await.unwrap();
        let merged = tables::write_batches(&table, rows).await.unwrap();
        c.commit_rewrite(&table, rewrite, merged).await.unwrap();
        let table = c.load_table(&ours).await.unwrap();
        let summary = &table.metadata().current_snapshot().unwrap().summary();
        assert_eq!(summary.operation, Operation::Replace);
        let props = &summary.additional_properties;
        assert_eq!(props["total-data-files"], "1");
        assert_eq!(props["total-records"], "6");
        assert_eq!(props["znippy.n"], "3");
        assert_kept_as_written(&c, &table).await;
        let rows: usize = tables::scan_all(&table)
            .await
            .unwrap()
            .iter()
            .map(RecordBatch::num_rows)
            .sum();
        assert_eq!(rows, 6);
    }

    /// A commit that loses the pointer's compare-and-swap leaves nothing
    /// behind: its manifest, its manifest list and its metadata file are
    /// removed again. (An append then tries again on the winner's snapshot.)
    #[tokio::test]
    async fn a_commit_that_loses_the_swap_leaves_no_files() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let ident = create(&c, &ns, "t").await;
        let stale = c.load_table(&ident).await.unwrap();
        for n in [1, 2] {
            let files = tables::write_data_file(&stale, batch(&[n])).await.unwrap();
            c.append(&stale, files, HashMap::new()).await.unwrap();
        }
        let table = c.load_table(&ident).await.unwrap();
        let md = table.metadata();
        assert_eq!(
            md.snapshots().count(),
            2,
            "the second append went on the first"
        );
        let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
        let mut named: std::collections::HashSet<String> = md
            .metadata_log()
            .iter()
            .map(|m| name(&m.metadata_file))
            .chain(table.metadata_location().map(name))
            .collect();
        for snap in md.snapshots() {
            named.insert(name(snap.manifest_list()));
            for m in c.manifest_list(md, snap).await.unwrap().iter() {
                named.insert(name(&m.manifest_path));
            }
        }
        let dir = crate::catalog::local_path(md.location()).join("metadata");
        for e in std::fs::read_dir(dir).unwrap() {
            let file = e.unwrap().file_name().to_string_lossy().into_owned();
            // The layout for path-based readers: the hint and a link per
            // metadata version (`v1.metadata.json`).
            let layout = file == "version-hint.text" || file.starts_with('v');
            assert!(
                layout || named.contains(&file),
                "{file} is named by nothing"
            );
        }
    }

    /// The manifests the catalog encodes itself against iceberg-rust's own
    /// writer, for the same entries (added and existing, data files with
    /// statistics and bounds): the same header, the same entry in the
    /// list, and the same manifest when each file is read back.
    #[tokio::test]
    async fn an_encoded_manifest_is_what_iceberg_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let (c, ns) = tables::test_catalog(tmp.path()).await;
        let table = c.load_table(&create(&c, &ns, "t").await).await.unwrap();
        let md = table.metadata();
        let mut files = Vec::new();
        for values in [&[1, 2][..], &[-7, 40, 3]] {
            files.extend(
                tables::write_data_file(&table, batch(values))
                    .await
                    .unwrap(),
            );
        }
        let (snapshot_id, seq) = (77, 5);
        let entries: Vec<ManifestEntry> = files
            .iter()
            .map(|f| ManifestEntry {
                status: ManifestStatus::Added,
                snapshot_id: Some(snapshot_id),
                sequence_number: Some(seq),
                file_sequence_number: None,
                data_file: f.clone(),
            })
            .chain([ManifestEntry {
                status: ManifestStatus::Existing,
                snapshot_id: Some(12),
                sequence_number: Some(2),
                file_sequence_number: Some(3),
                data_file: files[0].clone(),
            }])
            .collect();
        let dir = format!("{}/metadata", md.location());
        let path = |name: &str| format!("{dir}/{name}.avro");
        // The table's first manifest in this process: iceberg-rust's.
        let first = c
            .write_manifest(md, &path("first"), snapshot_id, entries.clone())
            .await
            .unwrap();
        let key = (md.uuid(), md.current_schema_id(), 0);
        assert!(c.manifest_header(&key).is_some(), "the header was not kept");
        let ours = c
            .write_manifest(md, &path("ours"), snapshot_id, entries.clone())
            .await
            .unwrap();
        let mut writer = ManifestWriterBuilder::new(
            c.file_io().new_output(path("theirs")).unwrap(),
            Some(snapshot_id),
            md.current_schema().clone(),
            md.default_partition_spec().as_ref().clone(),
        )
        .build_v2_data();
        for e in &entries[..2] {
            writer.add_file(e.data_file.clone(), seq).unwrap();
        }
        writer
            .add_existing_file(files[0].clone(), 12, 2, Some(3))
            .unwrap();
        let theirs = writer.write_manifest_file().await.unwrap();

        let bytes = |name: &str| std::fs::read(crate::catalog::local_path(&path(name))).unwrap();
        let (ours_file, theirs_file) = (bytes("ours"), bytes("theirs"));
        // Encoded, not written by iceberg-rust again: the first file's
        // header byte for byte (apache-avro orders its keys anew per file).
        let header = crate::manifest::header_of;
        assert_eq!(header(&ours_file), header(&bytes("first")), "not encoded");
        let metadata = crate::manifest::metadata_of;
        let (our_header, their_header) = (metadata(&ours_file), metadata(&theirs_file));
        assert!(their_header.as_ref().is_some_and(|h| h.len() >= 7));
        assert!(our_header == their_header, "the headers differ");
        let same_place = |m: &ManifestFile| ManifestFile {
            manifest_path: String::new(),
            manifest_length: 0,
            ..m.clone()
        };
        assert_eq!(same_place(&ours), same_place(&theirs));
        assert_eq!(same_place(&first), same_place(&theirs));
        assert_eq!(ours.manifest_length, ours_file.len() as i64);
        let read = |m: &ManifestFile| {
            let m = m.clone();
            let io = c.file_io().clone();
            async move { m.load_manifest(&io).await.unwrap() }
        };
        let (ours, theirs) = (read(&ours).await, read(&theirs).await);
        assert_eq!(ours.entries().len(), 3);
        assert_eq!(ours, theirs);
    }
}
