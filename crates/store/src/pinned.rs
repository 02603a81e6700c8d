//! A commit that succeeds only on the snapshot it was built on.
//!
//! iceberg-rust's `Transaction::commit` reloads the table before it commits
//! and, if another writer committed meanwhile, quietly rebuilds the change
//! on the newer table. For a plain append that is what one wants; for a
//! znippy append it is not: its rows' offsets, append number and blob end
//! were computed from the table it saw, and a rebuilt snapshot would put
//! them after someone else's. [`Pinned`] is the catalog a commit goes
//! through so that the reload returns the table the change was built on:
//! the change's requirement then names that snapshot, the catalog refuses
//! the commit if the table moved (a REST catalog answers 409, the embedded
//! one fails its compare-and-swap), and the conflict comes back at once,
//! not retried, for the store to catch up and rebuild the change itself.

use std::collections::HashMap;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};

/// `catalog`, with `table` pinned at the state it was loaded in.
pub(crate) struct Pinned<'a> {
    catalog: &'a dyn Catalog,
    table: &'a Table,
}

impl<'a> Pinned<'a> {
    pub fn new(catalog: &'a dyn Catalog, table: &'a Table) -> Self {
        Pinned { catalog, table }
    }
}

impl std::fmt::Debug for Pinned<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field("table", self.table.identifier())
            .finish_non_exhaustive()
    }
}

/// Whether `e` says the table moved under the commit.
pub(crate) fn is_conflict(e: &Error) -> bool {
    e.kind() == ErrorKind::CatalogCommitConflicts
}

#[async_trait]
impl Catalog for Pinned<'_> {
    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        if ident == self.table.identifier() {
            return Ok(self.table.clone());
        }
        self.catalog.load_table(ident).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.catalog.update_table(commit).await.map_err(|e| {
            if is_conflict(&e) {
                // Not retryable: a retry would reload the same pinned table.
                Error::new(ErrorKind::CatalogCommitConflicts, e.message().to_string())
            } else {
                e
            }
        })
    }

    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.catalog.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.catalog.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.catalog.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.catalog.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.catalog.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.catalog.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.catalog.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.catalog.create_table(namespace, creation).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.catalog.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.catalog.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.catalog.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.catalog.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.catalog.register_table(table, metadata_location).await
    }
}
