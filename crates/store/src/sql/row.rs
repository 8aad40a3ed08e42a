//! A row as read from either database, and its cells as Rust values: a
//! column holding a value its type does not have is an error naming it.

use crate::error::{CorruptValue, Result, StoreError};

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
}

impl Cell {
    fn kind(&self) -> &'static str {
        match self {
            Cell::Null => "NULL",
            Cell::Integer(_) => "an integer",
            Cell::Real(_) => "a real",
            Cell::Text(_) => "text",
        }
    }
}

/// A value kept as text in one column (a status, a memory limit, a JSON
/// map): how [`Row::text`] reads it.
pub(crate) trait StoredText: Sized {
    /// The value a stored text stands for, if it stands for one.
    fn from_text(text: &str) -> Option<Self>;
}

/// A row of a query's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    cells: Vec<Cell>,
}

impl Row {
    pub(crate) fn new(cells: Vec<Cell>) -> Self {
        Self { cells }
    }

    fn cell(&self, index: usize) -> Result<&Cell> {
        self.cells.get(index).ok_or(StoreError::Column {
            index,
            problem: "is not in the result",
        })
    }

    /// Column `index` as a `T`.
    pub(crate) fn get<T: FromCell>(&self, index: usize) -> Result<T> {
        let cell = self.cell(index)?;
        T::from_cell(cell).ok_or(StoreError::Column {
            index,
            problem: cell_mismatch(cell, T::EXPECTED),
        })
    }

    /// Column `index` (named `table`.`column` in the error), text standing
    /// for a `T`.
    pub(crate) fn text<T: StoredText>(
        &self,
        index: usize,
        table: &'static str,
        column: &'static str,
    ) -> Result<T> {
        let text: String = self.get(index)?;
        T::from_text(&text).ok_or_else(|| corrupt(table, column, text))
    }

    /// Column `index`, an integer, as a `T` (a count, a size, a port): a
    /// value outside `T` is corrupt, not wrapped around.
    pub(crate) fn number<T: TryFrom<i64>>(
        &self,
        index: usize,
        table: &'static str,
        column: &'static str,
    ) -> Result<T> {
        let value: i64 = self.get(index)?;
        T::try_from(value).map_err(|_| corrupt(table, column, value.to_string()))
    }
}

/// The error for `table`.`column` holding `value`, which its type does not
/// have.
pub(crate) fn corrupt(table: &'static str, column: &'static str, value: String) -> StoreError {
    StoreError::from(CorruptValue {
        table,
        column,
        value,
    })
}

fn cell_mismatch(cell: &Cell, expected: &'static str) -> &'static str {
    // The two names are static: the combinations that can happen are few.
    match (cell.kind(), expected) {
        ("NULL", _) => "is NULL where a value was expected",
        (_, "an integer") => "is not an integer (or is out of range)",
        (_, "a number") => "is not a number",
        (_, "text") => "is not text",
        _ => "has an unexpected type",
    }
}

/// A Rust value a cell can be read as.
pub(crate) trait FromCell: Sized {
    const EXPECTED: &'static str;
    fn from_cell(cell: &Cell) -> Option<Self>;
}

impl FromCell for String {
    const EXPECTED: &'static str = "text";
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Text(text) => Some(text.clone()),
            _ => None,
        }
    }
}

impl FromCell for f64 {
    const EXPECTED: &'static str = "a number";
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Real(value) => Some(*value),
            Cell::Integer(value) => Some(*value as f64),
            _ => None,
        }
    }
}

impl FromCell for bool {
    const EXPECTED: &'static str = "an integer";
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Integer(value) => Some(*value != 0),
            _ => None,
        }
    }
}

macro_rules! integer_cell {
    ($($t:ty),*) => {$(
        impl FromCell for $t {
            const EXPECTED: &'static str = "an integer";
            fn from_cell(cell: &Cell) -> Option<Self> {
                match cell {
                    Cell::Integer(value) => <$t>::try_from(*value).ok(),
                    _ => None,
                }
            }
        }
    )*};
}

integer_cell!(i64, i32, u16, u32, u64, usize);

impl<T: FromCell> FromCell for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Null => Some(None),
            other => T::from_cell(other).map(Some),
        }
    }
}
