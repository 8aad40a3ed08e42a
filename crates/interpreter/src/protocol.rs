//! The kernel's wire: the bootstrap that starts it, the requests written to
//! its stdin and the events it writes as JSON lines, and the framing that
//! turns the process's output (read by offset from the engine's bounded
//! buffer, which may drop bytes) back into whole lines.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// kernel.py, sent as the first stdin line (a JSON string) to
/// [`BOOTSTRAP`]: nothing is written into the container, so no file there
/// can be swapped under another context, and the command stays short.
pub const KERNEL_SOURCE: &str = include_str!("kernel.py");

/// The command a kernel runs: the image's python3 reading its own source
/// from stdin (`-u`: the protocol lines are never held in a buffer). The
/// source line is read unbuffered (`raw`), so a request written right after
/// it stays in the pipe for the kernel's own reader.
pub const BOOTSTRAP: &str =
    "exec python3 -u -c 'import sys, json; exec(json.loads(sys.stdin.buffer.raw.readline()))'";

/// A line longer than this without a newline is not the kernel's (its
/// events are bounded well below it): dropped, and the stream resyncs.
pub const MAX_LINE: usize = 4 << 20;

/// The first line a kernel reads: its source.
pub fn boot_line() -> Vec<u8> {
    // A string always serialises.
    let mut line = serde_json::to_vec(KERNEL_SOURCE).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A request to the kernel.
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request<'a> {
    /// Runs code; `id` names this execution for an interrupt.
    Execute {
        id: u64,
        code: &'a str,
        env: BTreeMap<&'a str, &'a str>,
        /// The client's tools the code may call (Python only).
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tools: &'a [CodeTool],
    },
    /// Interrupts execution `id` if it is the one running (SIGINT, the
    /// code's `KeyboardInterrupt`); a late one is dropped by the kernel.
    Interrupt { id: u64 },
    /// The client's result for the code's call `id` of one of its tools:
    /// the call's return value, or the error it raises.
    ToolResult {
        id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<ToolFailure>,
    },
}

/// A tool of the client's that an execution's code may call: a function
/// of the cell's namespace named `name` (a Python identifier; another name
/// is not defined), its positional arguments `params` in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CodeTool {
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `Some`: the tool may not be called from code; a call raises
    /// `PermissionError` with this message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// How a call of a client's tool failed, as the code sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFailure {
    /// The client's result was an error: the call raises `ToolError`.
    Tool,
    /// No result came in time: the call raises `TimeoutError`.
    Timeout,
}

/// A call the code made of a client's tool, waiting for its result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CodeToolCall {
    /// The call's id (`toolu_...`), which its result names.
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub input: serde_json::Map<String, serde_json::Value>,
}

impl Request<'_> {
    /// The request as one line.
    pub fn line(&self) -> Vec<u8> {
        // Strings and maps of strings always serialise.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// One event the kernel writes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// It started and reads requests.
    Ready {},
    Stdout {
        text: String,
    },
    Stderr {
        text: String,
    },
    Result(Box<DisplayData>),
    Error {
        name: String,
        value: String,
        traceback: String,
    },
    /// The context's execution count after this execution.
    Count {
        n: u32,
    },
    /// The code called client tools and waits for their results.
    ToolCalls {
        calls: Vec<CodeToolCall>,
    },
    /// The result of call `id` reached the code.
    ToolAnswered {
        id: String,
    },
    /// The execution ended (its events are all written).
    Done {},
}

/// What the framing yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Framed {
    Event(Event),
    /// Bytes of the kernel's output that were lost (dropped by the engine's
    /// buffer, an overlong line, or a line that is not an event).
    Lost(u64),
}

/// Splits the kernel's stdout into lines, across reads, and resyncs after
/// a loss (the rest of a cut line is dropped up to its newline).
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
    /// Inside a line whose start was lost.
    resync: bool,
}

impl Lines {
    /// Bytes the buffer dropped before the next ones.
    pub fn dropped(&mut self, bytes: u64) -> Framed {
        let lost = bytes + self.pending.len() as u64;
        self.pending.clear();
        self.resync = true;
        Framed::Lost(lost)
    }

    /// Adds output; returns what it completes.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Framed> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let (line, tail) = rest.split_at(at);
            rest = &tail[1..];
            if self.resync {
                self.resync = false;
                out.push(Framed::Lost((self.pending.len() + line.len() + 1) as u64));
                self.pending.clear();
                continue;
            }
            self.pending.extend_from_slice(line);
            let whole = std::mem::take(&mut self.pending);
            out.push(match serde_json::from_slice::<Event>(&whole) {
                Ok(event) => Framed::Event(event),
                Err(_) => Framed::Lost(whole.len() as u64 + 1),
            });
        }
        if self.pending.len() + rest.len() > MAX_LINE {
            out.push(self.dropped(rest.len() as u64));
        } else if self.resync {
            // Still inside the cut line: nothing of it is kept.
        } else {
            self.pending.extend_from_slice(rest);
        }
        out
    }
}

/// What a result carries, by format (E2B's `Result`): binary formats are
/// base64.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DisplayData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub png: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jpeg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdf: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub javascript: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    /// A pandas DataFrame's columns as lists (E2B's `data`), passed on as
    /// the kernel wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// A matplotlib figure's data (E2B's `chart`: its type, title, axes and
    /// elements), passed on as the kernel wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<serde_json::Value>,
    #[serde(default)]
    pub is_main_result: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdout(text: &str) -> Framed {
        Framed::Event(Event::Stdout { text: text.into() })
    }

    #[test]
    fn lines_are_whole_across_reads_and_resync_after_a_loss() {
        let mut lines = Lines::default();
        assert!(lines.push(br#"{"ev":"stdout","#).is_empty());
        assert_eq!(
            lines.push(b"\"text\":\"a\"}\n{\"ev\":\"done\"}\n"),
            vec![stdout("a"), Framed::Event(Event::Done {})]
        );
        // The engine dropped bytes: the cut line's rest is not an event.
        assert_eq!(lines.dropped(10), Framed::Lost(10));
        assert_eq!(
            lines.push(b"xt\":\"cut\"}\n{\"ev\":\"stdout\",\"text\":\"b\"}\n"),
            vec![Framed::Lost(11), stdout("b")]
        );
        // Garbage is lost bytes, not an error.
        assert_eq!(lines.push(b"not json\n"), vec![Framed::Lost(9)]);
    }

    #[test]
    fn an_overlong_line_is_dropped_not_kept() {
        let mut lines = Lines::default();
        let big = vec![b'x'; MAX_LINE + 1];
        assert_eq!(lines.push(&big), vec![Framed::Lost(big.len() as u64)]);
        assert_eq!(
            lines.push(b"tail\n{\"ev\":\"done\"}\n"),
            vec![Framed::Lost(5), Framed::Event(Event::Done {})]
        );
    }

    #[test]
    fn results_carry_their_formats() {
        let mut lines = Lines::default();
        let framed = lines.push(
            br#"{"ev":"result","text":"df","html":"<table/>","json":{"a":1},"is_main_result":true}
"#,
        );
        let [Framed::Event(Event::Result(data))] = framed.as_slice() else {
            panic!("{framed:?}")
        };
        assert_eq!(data.text.as_deref(), Some("df"));
        assert_eq!(data.html.as_deref(), Some("<table/>"));
        assert_eq!(data.json, Some(serde_json::json!({"a": 1})));
        assert!(data.is_main_result);
    }
}
