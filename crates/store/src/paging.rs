//! Cursor pagination over any table with a `seq` and an `id` column.

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::{Result, StoreError};

/// Cursor pagination: `limit` rows after the row with id `after`.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub limit: u32,
    pub ascending: bool,
    pub after: Option<String>,
}

/// One page of the rows of `table` whose `scope_column` is `scope` (a
/// project, or a container for its files), only those whose
/// `filter_column` equals `filter` if given, in `seq` order, after the row
/// whose id is `page.after`. Table and column names are this file's
/// constants, never input.
#[allow(clippy::too_many_arguments)]
pub(crate) fn page_of<T>(
    conn: &Connection,
    table: &str,
    columns: &str,
    scope_column: &str,
    scope: &str,
    filter_column: &str,
    filter: Option<&str>,
    page: &Page,
    map: fn(&Row) -> rusqlite::Result<T>,
) -> Result<(Vec<T>, bool)> {
    let cursor = match &page.after {
        Some(after) => Some(
            conn.query_row(
                &format!("SELECT seq FROM {table} WHERE id = ?1 AND {scope_column} = ?2"),
                params![after, scope],
                |row| row.get::<_, i64>(0),
            )
            .optional()?
            // A cursor from another listing, or of a deleted row, cannot
            // say where to go on: silently ending the listing would look
            // like the end of the data.
            .ok_or_else(|| StoreError::UnknownCursor(after.clone()))?,
        ),
        None => None,
    };
    let (comparison, order) = if page.ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    let sql = format!(
        "SELECT {columns} FROM {table} WHERE {scope_column} = ?1 AND (?2 IS NULL OR {filter_column} = ?2)
         AND (?3 IS NULL OR seq {comparison} ?3) ORDER BY seq {order} LIMIT ?4"
    );
    let mut statement = conn.prepare(&sql)?;
    let mut rows = statement
        .query_map(params![scope, filter, cursor, page.limit as i64 + 1], map)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let has_more = rows.len() > page.limit as usize;
    rows.truncate(page.limit as usize);
    Ok((rows, has_more))
}

/// The `seq` of the row `after` names in `table`, within `scope_column` =
/// `scope` when given (`None`: every scope, an admin's listing): where a
/// page after it starts. A cursor of another listing, or of a deleted row,
/// is an error, never a silent end of the data. Table and column names are
/// the callers' constants, never input.
pub(crate) fn cursor_seq(
    conn: &Connection,
    table: &str,
    scope_column: &str,
    scope: Option<&str>,
    after: Option<&str>,
) -> Result<Option<i64>> {
    let Some(after) = after else {
        return Ok(None);
    };
    conn.query_row(
        &format!("SELECT seq FROM {table} WHERE id = ?1 AND (?2 IS NULL OR {scope_column} = ?2)"),
        params![after, scope],
        |row| row.get::<_, i64>(0),
    )
    .optional()?
    .map(Some)
    .ok_or_else(|| StoreError::UnknownCursor(after.to_owned()))
}
