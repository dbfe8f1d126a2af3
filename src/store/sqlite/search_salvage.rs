//! The search index removed the hard way, when its own pages are damaged
//! (SQLite only).
//!
//! The ordinary reset ([`super::search_table::reset`]) drops the FTS5 table, and
//! FTS5 drops its shadow tables. Both need the damaged pages: a `DROP TABLE`
//! of the virtual table first connects to it (reading its configuration and
//! structure record: "vtable constructor failed"), and dropping a b-tree
//! walks every page of it ("database disk image is malformed"). So a damaged
//! page in `search_text_data` or `search_text_content` made the index
//! impossible to rebuild.
//!
//! The way out is SQLite's documented one for a schema object that cannot be
//! dropped ("PRAGMA writable_schema": the schema table may then be changed
//! with ordinary DELETE statements; "PRAGMA writable_schema = RESET" reloads
//! the schema; `VACUUM` rebuilds the file from the tables the schema names,
//! leaving the pages of the forgotten ones behind): in one transaction, the
//! schema rows of the index (the FTS5 table, its shadow tables and their
//! indexes, and `search_parts`, which only says where the index's further
//! parts are) are deleted and the tables made anew, empty; then `VACUUM`
//! takes the orphaned pages out. Every other table keeps its rows: `VACUUM`
//! copies them. What the index held is the mirror's accepted texts, which
//! the reindex puts back.
//!
//! A crash between the commit and the `VACUUM` leaves a working store whose
//! orphaned pages `integrity_check` reports ("never used"); the next reindex
//! of a damaged index, or a `VACUUM`, takes them out.

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::store::search::Tokenizer;
use crate::store::sqlite::search_table::remake;
use crate::store::sqlite::Sqlite;

impl Sqlite {
    /// Remove the search index without reading its pages and make it again,
    /// empty, with `tokenizer` (recorded in meta); then `VACUUM`.
    pub(crate) fn search_reset_hard(&self, tokenizer: Tokenizer) -> Result<()> {
        self.outside_tx(|c| remake(c, tokenizer))?;
        self.outside_tx(|c| c.execute_batch("VACUUM"))
    }

    /// Run `f` on a connection of the pool, outside any transaction (what
    /// cannot run in one, as `VACUUM`), in this handle's turn of writing.
    fn outside_tx<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        if self.access != crate::store::sqlite::open::Access::ReadWrite {
            return Err(Error::ReadOnly {
                path: self.path.clone(),
                detail: "opened for reading only; nothing was written".into(),
            });
        }
        let _turn = self.turnstile.enter();
        let conn = self.conn()?;
        f(&conn).map_err(|e| Error::from_sqlite(&self.path, e))
    }
}
