//! The typed values of the store's text columns (statuses, outcomes, memory
//! limits), and how a column is read as one: a row whose column holds a
//! value outside its type is an error naming the table, the column and the
//! value ([`crate::StoreError::Corrupt`]), never a silent default.

use shellgate_wire::MemoryLimit;

use crate::sql::{Param, StoredText, ToParam};

/// Defines a text-stored enum: its variants, their stored text, and the
/// conversions both ways.
macro_rules! stored_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The text stored (and shown on the wire) for this value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value `text` stands for, if any.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl StoredText for $name {
            fn from_text(text: &str) -> Option<Self> {
                Self::parse(text)
            }
        }

        impl ToParam for $name {
            fn to_param(&self) -> Param<'_> {
                Param::Text(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(
                &self,
                serializer: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

stored_enum! {
    /// What a row of `console_changes` says changed (written by triggers).
    ChangeTopic {
        /// A container was made, changed state or was used, or went.
        Container => "container",
        /// A command was written to the audit.
        Command => "command",
        /// A connection was written to the egress log.
        Egress => "egress",
        /// A response was stored or changed status.
        Response => "response",
    }
}

stored_enum! {
    /// Where a container is in its life.
    ContainerStatus {
        /// Its row exists, its sandbox is being made.
        Creating => "creating",
        /// Its processes run.
        Running => "running",
        /// Its processes were stopped (idle); its files are kept.
        Suspended => "suspended",
        /// Being deleted (the status a closing session leaves just before
        /// the row goes).
        Deleted => "deleted",
        /// Its node stopped heart-beating: its files are out of
        /// reach, and it is never made again elsewhere without them; its
        /// node, back with its disk, gives it back.
        Lost => "lost",
    }
}

stored_enum! {
    /// Where a cluster's node is.
    NodeStatus {
        /// Heart-beating and taking new containers.
        Ready => "ready",
        /// Heart-beating, keeping its containers, taking no new ones.
        Draining => "draining",
        /// Stopped heart-beating: its containers are lost.
        Lost => "lost",
    }
}

stored_enum! {
    /// Where a stored response is in its run.
    ResponseStatus {
        Queued => "queued",
        InProgress => "in_progress",
        Completed => "completed",
        Incomplete => "incomplete",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl ResponseStatus {
    /// Whether its run has not finished (queued or in progress).
    pub fn is_running(self) -> bool {
        matches!(self, ResponseStatus::Queued | ResponseStatus::InProgress)
    }
}

stored_enum! {
    /// How an audited command ended.
    CommandOutcome {
        /// It exited (its exit code is beside it).
        Exit => "exit",
        /// It ran out of time and was killed.
        Timeout => "timeout",
    }
}

stored_enum! {
    /// What became of an egress attempt (the egress log's `verdict`).
    EgressVerdict {
        Allowed => "allowed",
        Denied => "denied",
        /// Not an attempt: something the container's user should know.
        Notice => "notice",
        /// Not one attempt: events counted together, which have no row of
        /// their own.
        Aggregated => "aggregated",
    }
}

stored_enum! {
    /// Who put a file into a container.
    FileSource {
        /// Uploaded or attached through the API.
        User => "user",
        /// Found in the container (made by its commands).
        Assistant => "assistant",
    }
}

impl StoredText for MemoryLimit {
    fn from_text(text: &str) -> Option<Self> {
        MemoryLimit::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_round_trips_its_text() {
        for status in [
            ContainerStatus::Creating,
            ContainerStatus::Running,
            ContainerStatus::Suspended,
            ContainerStatus::Deleted,
        ] {
            assert_eq!(ContainerStatus::parse(status.as_str()), Some(status));
        }
        for status in [
            ResponseStatus::Queued,
            ResponseStatus::InProgress,
            ResponseStatus::Completed,
            ResponseStatus::Incomplete,
            ResponseStatus::Failed,
            ResponseStatus::Cancelled,
        ] {
            assert_eq!(ResponseStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(ContainerStatus::parse("Running"), None);
        assert_eq!(CommandOutcome::parse("exit"), Some(CommandOutcome::Exit));
        assert_eq!(FileSource::parse(""), None);
    }
}

stored_enum! {
    /// Where a Message Batch is: running its requests, canceling (its
    /// unstarted requests are canceled, the running ones finish), or ended.
    BatchStatus {
        InProgress => "in_progress",
        Canceling => "canceling",
        Ended => "ended",
    }
}

stored_enum! {
    /// How one request of a Message Batch ended.
    BatchOutcome {
        Succeeded => "succeeded",
        Errored => "errored",
        Canceled => "canceled",
        Expired => "expired",
    }
}
