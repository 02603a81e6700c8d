//! Which tables a clean close left holding only files their snapshots name,
//! so that their next open need not sweep them.
//!
//! A crash can leave files in a table's directory that no snapshot names: a
//! commit whose pointer never moved, a rewrite cut short, what an expiry was
//! keeping for readers. An archive's open sweeps them ([`RedbCatalog::sweep`]),
//! and that reads every manifest of every snapshot the table keeps: after a
//! clean stop as after a crash, more than half of the first listing of a
//! service with many archives (docs/benchmarks.md).
//!
//! So a close that finds a table clean records, in the catalog's `swept`
//! map, a digest of the names of the files below it then. An open whose
//! table has exactly those files skips the sweep. Nothing can make a file
//! an orphan without changing that set: every commit, and so every change
//! of what the snapshots name, writes a new metadata file, and every file a
//! crash leaves is one a change wrote. A crash in a later session, a
//! binary that knows no marks, a file copied in by hand: each changes the
//! names, and the open sweeps.
//!
//! A close finds a table clean this way: it was clean when the process
//! opened it (its mark said so, or the open swept it), so if the names
//! below it are the same, it still is; if they are not (appends, a change
//! that failed, what expiries retired and the close deleted), it is swept
//! again, with the manifests this process read or wrote still cached. A
//! table the process never opened keeps the mark it had.

use std::collections::HashMap;
use std::path::Path;

use iceberg::{Catalog, ErrorKind, Result, TableIdent};
use redb::TableDefinition;

use crate::catalog::{local_path, table_key, RedbCatalog};
use crate::maintenance::files_below;

/// Table keys (as in the catalog's `tables` map) a clean close found clean,
/// each with the digest of the names below the table then.
pub(crate) const SWEPT: TableDefinition<&str, &[u8; 32]> = TableDefinition::new("swept");

/// The tables a process opened, by key, each with the digest of its names
/// once it was clean.
pub(crate) type Opened = HashMap<String, (TableIdent, [u8; 32])>;

/// A digest of the names of the files below `dir`, of any name: a file the
/// sweep would not look at is still a sign that something wrote there.
fn names_below(dir: &Path) -> [u8; 32] {
    let mut names: Vec<Vec<u8>> = files_below(dir)
        .into_iter()
        .map(|p| p.into_os_string().into_encoded_bytes())
        .collect();
    names.sort_unstable();
    let mut digest = blake3::Hasher::new();
    for name in names {
        digest.update(&(name.len() as u64).to_le_bytes());
        digest.update(&name);
    }
    *digest.finalize().as_bytes()
}

impl RedbCatalog {
    /// At an archive's open, before any change to it: sweeps `ident` unless
    /// the last close left it marked with the names it has, and notes the
    /// names for the close. Returns whether it swept.
    pub(crate) async fn sweep_unless_clean(&self, ident: &TableIdent) -> Result<bool> {
        let key = table_key(ident);
        let table = self.load_table(ident).await?;
        let dir = local_path(table.metadata().location());
        let now = names_below(&dir);
        let sweep = self.swept_mark(&key).await? != Some(now);
        let names = match sweep {
            true => {
                self.sweep(&table).await?;
                names_below(&dir)
            }
            false => now,
        };
        self.opened().insert(key, (ident.clone(), names));
        Ok(sweep)
    }

    /// At the store's close, once no change runs: deletes what expiries
    /// retired, sweeps again each table opened in this process whose names
    /// changed, and marks those it opened with their names, in one
    /// transaction.
    pub(crate) async fn close(&self) -> Result<()> {
        self.remove_retired(std::time::Duration::ZERO).await?;
        let opened: Vec<_> = self.opened().drain().collect();
        let (mut marks, mut swept) = (Vec::new(), Vec::new());
        for (key, (ident, at_open)) in opened {
            let clean = async {
                let table = self.load_table(&ident).await?;
                let dir = local_path(table.metadata().location());
                if names_below(&dir) == at_open {
                    marks.push((key, at_open));
                } else {
                    self.sweep(&table).await?;
                    swept.push((key, dir));
                }
                Ok::<_, iceberg::Error>(())
            };
            match clean.await {
                Ok(()) => {}
                // Dropped in this session.
                Err(e) if e.kind() == ErrorKind::TableNotFound => {}
                Err(e) => tracing::warn!("{ident} left to be swept at its next open: {e}"),
            }
        }
        if !swept.is_empty() {
            self.remove_retired(std::time::Duration::ZERO).await?;
            marks.extend(swept.into_iter().map(|(key, dir)| (key, names_below(&dir))));
        }
        self.mark_swept(marks).await
    }
}
