//! The two databases behind the store, and the one interface its queries
//! are written against: SQLite (the embedded default, one file in the data
//! directory) and Postgres (a cluster's shared store).
//!
//! Every query is written once, in the SQL both speak, with SQLite's
//! numbered placeholders (`?1`; Postgres gets `$1`). Where the two differ
//! (a JSON field, a substring search, the schema itself), the query asks
//! its [`Dialect`] for the fragment. Values cross as [`Param`]s and come
//! back as [`Row`]s of [`Cell`]s, so a row mapper is the same function for
//! both.

mod params;
mod postgres;
mod row;
mod sqlite;
mod tls;

pub(crate) use self::postgres::PostgresDatabase;
pub use self::postgres::PostgresOptions;
pub(crate) use params::{Param, ToParam};
pub(crate) use row::{corrupt, Row, StoredText};
pub(crate) use sqlite::SqliteDatabase;

use crate::error::{Result, StoreError};

/// Which SQL a database speaks, where the two differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// `haystack` contains `needle` as given (no `%` or `_` patterns), as
    /// a condition.
    pub(crate) fn contains(self, haystack: &str, needle: &str) -> String {
        match self {
            Dialect::Sqlite => format!("instr({haystack}, {needle}) > 0"),
            Dialect::Postgres => format!("strpos({haystack}, {needle}) > 0"),
        }
    }

    /// The text at top-level `key` of the JSON object in `column` (a text
    /// column), or NULL.
    pub(crate) fn json_text(self, column: &str, key: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{key}')"),
            Dialect::Postgres => format!("(CAST({column} AS jsonb) ->> '{key}')"),
        }
    }

    /// The number at `path` (keys, outermost first) of the JSON object in
    /// `column`, or NULL; `integer` picks the number's SQL type.
    pub(crate) fn json_number(self, column: &str, path: &[&str], integer: bool) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{}')", path.join(".")),
            Dialect::Postgres => {
                let sql_type = if integer {
                    "BIGINT"
                } else {
                    "DOUBLE PRECISION"
                };
                format!(
                    "CAST(CAST({column} AS jsonb) #>> '{{{}}}' AS {sql_type})",
                    path.join(",")
                )
            }
        }
    }

    /// Whether the JSON object of strings in `column` maps the key given
    /// by placeholder `key` to the value given by placeholder `value`, as
    /// a condition.
    pub(crate) fn json_has_entry(self, column: &str, key: &str, value: &str) -> String {
        match self {
            Dialect::Sqlite => format!(
                "EXISTS (SELECT 1 FROM json_each({column}) m WHERE m.key = {key} AND m.value = {value})"
            ),
            Dialect::Postgres => {
                format!("(CAST({column} AS jsonb) ->> CAST({key} AS TEXT)) = CAST({value} AS TEXT)")
            }
        }
    }
}

/// One connection (or a transaction on one), whichever database it is.
pub(crate) trait Sql {
    fn dialect(&self) -> Dialect;

    /// Runs one statement; how many rows it changed.
    fn execute(&mut self, sql: &str, params: &[&dyn ToParam]) -> Result<usize>;

    /// Runs a query, handing each row to `each` as it is read.
    fn each_row(
        &mut self,
        sql: &str,
        params: &[&dyn ToParam],
        each: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()>;

    /// Takes a lock on `key` until the transaction ends: the writes of two
    /// API replicas that must not interleave (a session claim, a skill's
    /// next version number, a project's admission) take it first. SQLite
    /// has one writer, so holding its write transaction is the lock.
    fn lock(&mut self, key: &str) -> Result<()>;
}

impl dyn Sql + '_ {
    /// Every row of a query, mapped.
    pub(crate) fn query<T>(
        &mut self,
        sql: &str,
        params: &[&dyn ToParam],
        map: impl Fn(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut rows = Vec::new();
        self.each_row(sql, params, &mut |row| {
            rows.push(map(&row)?);
            Ok(())
        })?;
        Ok(rows)
    }

    /// The first row of a query, mapped, if there is one.
    pub(crate) fn query_opt<T>(
        &mut self,
        sql: &str,
        params: &[&dyn ToParam],
        map: impl Fn(&Row) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut first = None;
        self.each_row(sql, params, &mut |row| {
            if first.is_none() {
                first = Some(map(&row)?);
            }
            Ok(())
        })?;
        Ok(first)
    }

    /// The one row a query always returns (an aggregate), mapped.
    pub(crate) fn query_one<T>(
        &mut self,
        sql: &str,
        params: &[&dyn ToParam],
        map: impl Fn(&Row) -> Result<T>,
    ) -> Result<T> {
        self.query_opt(sql, params, map)?.ok_or_else(|| {
            StoreError::NoRow(sql.split_whitespace().take(6).collect::<Vec<_>>().join(" "))
        })
    }
}

/// Work done with one connection (see [`Database`]).
pub(crate) type Work<'a> = &'a mut dyn FnMut(&mut dyn Sql) -> Result<()>;

/// A database the store runs on.
pub(crate) trait Database: Send + Sync {
    fn dialect(&self) -> Dialect;

    /// Runs `work` with a connection for reading, its statements all
    /// seeing one snapshot of the database (a read-only transaction).
    fn read(&self, work: Work<'_>) -> Result<()>;

    /// Runs `work` with the connection for writing, each statement
    /// committing on its own.
    fn write(&self, work: Work<'_>) -> Result<()>;

    /// Runs `work` in one transaction: committed if it returns `Ok`,
    /// rolled back otherwise. Postgres may run it again when the database
    /// chose it as a deadlock's victim, so `work` must not count on
    /// running once.
    fn transaction(&self, work: Work<'_>) -> Result<()>;

    /// Calls `wake` whenever a row is written to `console_changes` (it must
    /// only signal: SQLite calls it inside the writing transaction).
    fn on_change(&self, wake: Box<dyn Fn() + Send + Sync>);

    /// Closes the connections that have a server to say goodbye to
    /// (Postgres's), waiting for each; work asked of such a database
    /// afterwards fails with `StoreError::Closed`. It blocks: never call
    /// it on a thread that drives an async runtime.
    fn close(&self);
}

/// Rewrites SQLite's placeholders for Postgres: `?N` becomes `$N`, and a
/// bare `?` the next number after the highest so far (SQLite's own rule),
/// outside quoted strings and identifiers.
pub(crate) fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut highest = 0u32;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                let number = match digits.parse::<u32>() {
                    Ok(number) => number,
                    Err(_) => highest + 1,
                };
                highest = highest.max(number);
                out.push('$');
                out.push_str(&number.to_string());
            }
            None => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_like_sqlite_numbers_them() {
        assert_eq!(
            numbered_placeholders("SELECT a FROM t WHERE a = ?1 AND b = ?2 OR ?1 IS NULL"),
            "SELECT a FROM t WHERE a = $1 AND b = $2 OR $1 IS NULL"
        );
        assert_eq!(
            numbered_placeholders("x = ? AND y = ? AND z = ?7 AND w = ?"),
            "x = $1 AND y = $2 AND z = $7 AND w = $8"
        );
        assert_eq!(
            numbered_placeholders("SELECT '?1', \"a?\" FROM t WHERE a = ?1"),
            "SELECT '?1', \"a?\" FROM t WHERE a = $1"
        );
    }
}
