//! The web console's terminals.

use serde::{Deserialize, Serialize};

/// The web console's terminals.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Terminals a project may have open in the web console at once (429
    /// beyond), apart from `max_execs_per_project`.
    pub max_console_terminals_per_project: u32,
    /// A console terminal nobody is attached to (its tab closed) ends
    /// after this many seconds; attaching again within them keeps it.
    pub console_terminal_grace_secs: u64,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            max_console_terminals_per_project: 32,
            console_terminal_grace_secs: 60,
        }
    }
}
