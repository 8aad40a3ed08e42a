//! Python cells paused on the client's tools (Anthropic's programmatic tool
//! calling), owned by the server's state and used by `interpreting`.
//!
//! A cell whose code calls a client's tool runs in a task of its own
//! (`interpreting::interpret_calling`): the request that started it ends
//! with the calls, and the cell waits here, under its name (the id of the
//! `server_tool_use` that runs it), for the client's next request, which
//! gives the results ([`PausedCells::resume`]) and follows the cell until
//! it ends or pauses again. A client that never comes back does not hold
//! the cell for ever: past `code_execution_tool_result_timeout_secs` each
//! call it waits on raises `TimeoutError` in the code, which goes on to
//! its end (the context, and so the container's kernel, stays usable); what
//! it gave is kept for the late request, which answers with it. This file
//! keeps them; `interpreting` follows, resumes and expires them.
//!
//! Kept in memory, on the node that holds the container (a cluster's
//! replica routes the next request there by its `container`): a restarted
//! server has no paused cells, and a late request finds its cell gone.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use shellgate_interpreter::CodeToolCall;
use shellgate_model::run::{Ended, HostError, Interpretation};
use tokio::sync::mpsc;

/// Most ended cells kept for a late request (the oldest forgotten first).
const KEPT_ENDED: usize = 1024;

/// What a cell that calls the client's tools tells whoever follows it.
pub(crate) enum Step {
    /// It waits on the client's results of these calls, made in its
    /// container's context `context`.
    Paused {
        context: String,
        calls: Vec<CodeToolCall>,
    },
    /// It ended.
    Ended(CellResult),
}

/// Where a cell is, for the request following it.
#[derive(Debug)]
pub(crate) enum Progress {
    /// It ended (its `raised` and `timed_out` say how).
    Done(Interpretation),
    Paused(Vec<CodeToolCall>),
    /// No cell of that name waits here.
    Gone,
}

/// Whose cell it is.
#[derive(Debug, Clone)]
pub(crate) struct CellOwner {
    /// The `server_tool_use` id that runs it.
    pub cell: String,
    pub container: String,
    pub project: String,
}

/// A cell's result as its run gave it.
pub(crate) type CellResult = Result<(Interpretation, Ended), HostError>;

/// A cell waiting for the client.
pub(crate) struct Paused {
    pub owner: CellOwner,
    /// The container's context it runs in.
    pub context: String,
    /// The calls it waits on.
    pub calls: Vec<String>,
    pub steps: mpsc::UnboundedReceiver<Step>,
    /// Which pause this is: a deadline set for an earlier one does nothing.
    pub pause: u64,
}

/// What a resuming request finds under a cell's name.
pub(crate) enum Found {
    Paused(Paused),
    /// It ended while its client was away.
    Ended(CellResult),
    Nothing,
}

#[derive(Default)]
struct Cells {
    paused: HashMap<String, Paused>,
    /// Cells that ended while no request followed them (their client did
    /// not answer in time), by name, with their project.
    ended: HashMap<String, (String, CellResult)>,
    ended_order: VecDeque<String>,
    pauses: u64,
}

/// The paused cells of this server.
#[derive(Default)]
pub struct PausedCells(Mutex<Cells>);

impl PausedCells {
    fn lock(&self) -> MutexGuard<'_, Cells> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a paused cell (its `pause` numbered here), returning its
    /// pause's number for its deadline.
    pub(crate) fn keep(&self, mut paused: Paused) -> u64 {
        let mut cells = self.lock();
        cells.pauses += 1;
        paused.pause = cells.pauses;
        let pause = paused.pause;
        cells.paused.insert(paused.owner.cell.clone(), paused);
        pause
    }

    /// Takes what waits under `owner`'s cell name, if it is `owner`'s.
    pub(crate) fn take(&self, owner: &CellOwner) -> Found {
        let mut cells = self.lock();
        let paused = cells.paused.get(&owner.cell).is_some_and(|paused| {
            paused.owner.project == owner.project && paused.owner.container == owner.container
        });
        if paused {
            return cells
                .paused
                .remove(&owner.cell)
                .map_or(Found::Nothing, Found::Paused);
        }
        let ended =
            matches!(cells.ended.get(&owner.cell), Some((project, _)) if *project == owner.project);
        if ended {
            cells.ended_order.retain(|cell| *cell != owner.cell);
            if let Some((_, result)) = cells.ended.remove(&owner.cell) {
                return Found::Ended(result);
            }
        }
        Found::Nothing
    }

    /// Takes cell `cell` if it still waits on pause `pause` (its deadline
    /// passed).
    pub(crate) fn take_pause(&self, cell: &str, pause: u64) -> Option<Paused> {
        let mut cells = self.lock();
        match cells.paused.get(cell) {
            Some(paused) if paused.pause == pause => cells.paused.remove(cell),
            _ => None,
        }
    }

    /// Keeps what a cell gave after its client stopped following it.
    pub(crate) fn keep_ended(&self, cell: String, project: String, ended: CellResult) {
        let mut cells = self.lock();
        cells.ended_order.push_back(cell.clone());
        cells.ended.insert(cell, (project, ended));
        while cells.ended_order.len() > KEPT_ENDED {
            if let Some(oldest) = cells.ended_order.pop_front() {
                cells.ended.remove(&oldest);
            }
        }
    }
}
