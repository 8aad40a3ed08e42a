//! The command audit (the `commands` table).

use crate::connection::Store;
use crate::error::{Result, StoreError};
use crate::paging::{page_of, Page};
use crate::sql::Row;
use crate::values::CommandOutcome;

/// One command run in a container (the command audit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub id: String,
    pub project: String,
    pub container_id: String,
    /// The response whose model ran it, if one did.
    pub response_id: Option<String>,
    pub command: String,
    pub outcome: CommandOutcome,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub bytes_out: u64,
    pub created_at: i64,
}

const COMMAND_COLUMNS: &str = "id, project, container_id, response_id, command, outcome, exit_code, duration_ms, bytes_out, created_at";

fn command_row(row: &Row) -> Result<CommandRow> {
    Ok(CommandRow {
        id: row.get(0)?,
        project: row.get(1)?,
        container_id: row.get(2)?,
        response_id: row.get(3)?,
        command: row.get(4)?,
        outcome: row.text(5, "commands", "outcome")?,
        exit_code: row.get(6)?,
        duration_ms: row.number(7, "commands", "duration_ms")?,
        bytes_out: row.number(8, "commands", "bytes_out")?,
        created_at: row.get(9)?,
    })
}

impl Store {
    /// Records commands, in one transaction.
    pub fn record_commands(&self, rows: &[CommandRow]) -> Result<()> {
        let insert = format!(
            "INSERT INTO commands ({COMMAND_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        );
        self.transaction(|sql| {
            for row in rows {
                sql.execute(
                    &insert,
                    &[
                        &row.id,
                        &row.project,
                        &row.container_id,
                        &row.response_id,
                        &row.command,
                        &row.outcome,
                        &row.exit_code,
                        &row.duration_ms,
                        &row.bytes_out,
                        &row.created_at,
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// A page of a container's commands.
    pub fn list_commands(
        &self,
        container_id: &str,
        page: &Page,
    ) -> Result<(Vec<CommandRow>, bool)> {
        self.read(|sql| {
            page_of(
                sql,
                "commands",
                COMMAND_COLUMNS,
                "container_id",
                container_id,
                "project",
                None,
                page,
                command_row,
            )
        })
    }

    /// Every command (of `project`, if given), oldest first, to `each`.
    pub fn each_command(
        &self,
        project: Option<&str>,
        mut each: impl FnMut(CommandRow) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let query = format!(
            "SELECT {COMMAND_COLUMNS} FROM commands
             WHERE (CAST(?1 AS TEXT) IS NULL OR project = ?1) ORDER BY seq"
        );
        self.read(|sql| {
            sql.each_row(&query, &[&project], &mut |row| {
                each(command_row(&row)?).map_err(StoreError::Consumer)
            })
        })
    }
}
