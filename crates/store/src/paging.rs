//! Cursor pagination over any table with a `seq` and an `id` column.

use crate::error::{Result, StoreError};
use crate::sql::{Row, Sql};

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
    sql: &mut dyn Sql,
    table: &str,
    columns: &str,
    scope_column: &str,
    scope: &str,
    filter_column: &str,
    filter: Option<&str>,
    page: &Page,
    map: fn(&Row) -> Result<T>,
) -> Result<(Vec<T>, bool)> {
    let cursor = cursor_seq(sql, table, scope_column, Some(scope), page.after.as_deref())?;
    let query = page_query(
        table,
        columns,
        scope_column,
        filter.map(|_| filter_column),
        cursor.is_some(),
        page.ascending,
    );
    let mut rows = sql.query(
        &query,
        &[&scope, &filter, &cursor, &(i64::from(page.limit) + 1)],
        map,
    )?;
    let has_more = rows.len() > page.limit as usize;
    rows.truncate(page.limit as usize);
    Ok((rows, has_more))
}

/// [`page_of`]'s query. A filter and a cursor are each a clause of their
/// own (`column = ?2`, `seq < ?3`), never `(?2 IS NULL OR column = ?2)`:
/// that form keeps the index from being used, and a filtered listing read
/// every row of the scope, a page deep in the listing every row before it.
pub(crate) fn page_query(
    table: &str,
    columns: &str,
    scope_column: &str,
    filter_column: Option<&str>,
    after_cursor: bool,
    ascending: bool,
) -> String {
    let (comparison, order) = if ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    let filter = match filter_column {
        Some(column) => format!("{column} = ?2"),
        None => "CAST(?2 AS TEXT) IS NULL".to_owned(),
    };
    let after = match after_cursor {
        true => format!("seq {comparison} ?3"),
        false => "CAST(?3 AS BIGINT) IS NULL".to_owned(),
    };
    format!(
        "SELECT {columns} FROM {table} WHERE {scope_column} = ?1 AND {filter}
         AND {after} ORDER BY seq {order} LIMIT ?4"
    )
}

/// The `seq` of the row `after` names in `table`, within `scope_column` =
/// `scope` when given (`None`: every scope, an admin's listing): where a
/// page after it starts. A cursor of another listing, or of a deleted row,
/// is an error, never a silent end of the data (silently ending the
/// listing would look like the end of the data). Table and column names
/// are the callers' constants, never input.
pub(crate) fn cursor_seq(
    sql: &mut dyn Sql,
    table: &str,
    scope_column: &str,
    scope: Option<&str>,
    after: Option<&str>,
) -> Result<Option<i64>> {
    let Some(after) = after else {
        return Ok(None);
    };
    sql.query_opt(
        &format!(
            "SELECT seq FROM {table} WHERE id = ?1
             AND (CAST(?2 AS TEXT) IS NULL OR {scope_column} = ?2)"
        ),
        &[&after, &scope],
        |row| row.get::<i64>(0),
    )?
    .map(Some)
    .ok_or_else(|| StoreError::UnknownCursor(after.to_owned()))
}
