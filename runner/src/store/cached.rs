//! Statements through the connection's statement cache: the runner runs the
//! same few dozen statements for every write and every task view, and
//! parsing them again each time was a twentieth of runnerd's time in a wave.
//! [`Cached`] is `execute` and `query_row` with the statement kept.

use rusqlite::{Connection, Params, Row};

/// How many statements the cache keeps (the store has about sixty).
pub(super) const CAPACITY: usize = 96;

/// `execute` and `query_row` of a connection (or a transaction, through
/// its `Deref`), each statement prepared once and kept.
pub(super) trait Cached {
    /// [`Connection::execute`], with the statement kept.
    fn exec_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;

    /// [`Connection::query_row`], with the statement kept.
    fn row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn exec_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}
