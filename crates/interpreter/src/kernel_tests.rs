//! kernel.py at the language level, run by the host's python3 (the
//! container's is the same program; the engine path is tested in
//! `crates/shellgate/tests/it/interpreter.rs`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::protocol::{self, Event, Framed, Lines, Request};

struct HostKernel {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    lines: Lines,
    executions: u64,
}

impl HostKernel {
    fn start() -> Self {
        Self::start_as(crate::Language::Python)
    }

    fn start_as(language: crate::Language) -> Self {
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(protocol::BOOTSTRAP)
            .env(crate::KERNEL_LANGUAGE_ENV, language.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        stdin.write_all(&protocol::boot_line()).unwrap();
        let mut kernel = Self {
            child,
            stdin,
            stdout,
            lines: Lines::default(),
            executions: 0,
        };
        assert_eq!(kernel.next(), Event::Ready {});
        kernel
    }

    fn next(&mut self) -> Event {
        let mut line = Vec::new();
        self.stdout.read_until(b'\n', &mut line).unwrap();
        assert!(!line.is_empty(), "the kernel exited");
        match self.lines.push(&line).pop() {
            Some(Framed::Event(event)) => event,
            other => panic!("{other:?} from {:?}", String::from_utf8_lossy(&line)),
        }
    }

    /// Starts code whose first output is the line `first` and waits for
    /// it (the code is running then); its execution's id.
    fn start_until_stdout(&mut self, code: &str, first: &str) -> u64 {
        let execution = self.start_execution(code, &[]);
        assert_eq!(self.next(), Event::Stdout { text: first.into() });
        execution
    }

    /// Starts code; its execution's id.
    fn start_execution(&mut self, code: &str, env: &[(&str, &str)]) -> u64 {
        self.start_with_tools(code, env, &[])
    }

    /// Starts code that may call `tools`; its execution's id.
    fn start_with_tools(
        &mut self,
        code: &str,
        env: &[(&str, &str)],
        tools: &[protocol::CodeTool],
    ) -> u64 {
        self.executions += 1;
        let request = Request::Execute {
            id: self.executions,
            code,
            env: env.iter().copied().collect(),
            tools,
        };
        self.stdin.write_all(&request.line()).unwrap();
        self.executions
    }

    fn interrupt(&mut self, execution: u64) {
        let request = Request::Interrupt { id: execution };
        self.stdin.write_all(&request.line()).unwrap();
    }

    /// Every event up to `done`.
    fn until_done(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            match self.next() {
                Event::Done {} => return events,
                event => events.push(event),
            }
        }
    }

    /// Runs code; every event up to `done`.
    fn run(&mut self, code: &str, env: &[(&str, &str)]) -> Vec<Event> {
        self.start_execution(code, env);
        self.until_done()
    }
}

impl Drop for HostKernel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main_text(events: &[Event]) -> Option<String> {
    events.iter().find_map(|e| match e {
        Event::Result(data) if data.is_main_result => data.text.clone(),
        _ => None,
    })
}

fn stdout(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Stdout { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_last_expression_is_the_main_result_and_state_persists() {
    let mut kernel = HostKernel::start();
    let events = kernel.run("1+1", &[]);
    assert_eq!(main_text(&events).as_deref(), Some("2"));
    assert!(events.contains(&Event::Count { n: 1 }));
    // Variables, imports and the working directory stay.
    kernel.run("import os\nx = 40\nos.chdir('/tmp')", &[]);
    let events = kernel.run("x + 2, os.getcwd()", &[]);
    assert_eq!(main_text(&events).as_deref(), Some("(42, '/tmp')"));
    assert!(events.contains(&Event::Count { n: 3 }));
    // A statement has no main result.
    assert_eq!(main_text(&kernel.run("y = 1", &[])), None);
}

#[test]
fn an_indented_cell_is_dedented_as_ipython_does() {
    let mut kernel = HostKernel::start();
    let events = kernel.run("\n    def f(x):\n        return x * 2\n\n    f(21)\n", &[]);
    assert_eq!(main_text(&events).as_deref(), Some("42"), "{events:?}");
    // A line indented less than the first is left as it is (IPython's
    // rule), so a cell that is not uniformly indented still fails.
    let events = kernel.run("    x = 1\ny = 2", &[]);
    assert_eq!(
        error_of(&events).map(|(name, _)| name).as_deref(),
        None,
        "{events:?}"
    );
    let events = kernel.run("  x = 1\n    y = 2", &[]);
    assert_eq!(
        error_of(&events).map(|(name, _)| name).as_deref(),
        Some("IndentationError"),
        "{events:?}"
    );
}

#[test]
fn jupyter_s_shell_escapes_magics_and_top_level_await_run() {
    let mut kernel = HostKernel::start();
    let events = kernel.run("who = 'cell'\n!echo from {who} $who", &[]);
    assert_eq!(stdout(&events), "from cell cell\n", "{events:?}");
    let events = kernel.run("listed = !printf 'a\\nb\\n'\nlisted", &[]);
    assert_eq!(
        main_text(&events).as_deref(),
        Some("['a', 'b']"),
        "{events:?}"
    );
    let events = kernel.run("%%bash\nx=6\necho $((x * 7))\n", &[]);
    assert_eq!(stdout(&events), "42\n", "{events:?}");
    let events = kernel.run("%cd /tmp\n%pwd", &[]);
    assert_eq!(main_text(&events).as_deref(), Some("'/tmp'"), "{events:?}");
    let events = kernel.run("%nosuchmagic", &[]);
    assert_eq!(
        error_of(&events).map(|(name, _)| name).as_deref(),
        Some("UsageError"),
        "{events:?}"
    );
    // Inside brackets `%` is Python's; a trailing `;` hides the result.
    let events = kernel.run("(7\n %\n 4)", &[]);
    assert_eq!(main_text(&events).as_deref(), Some("3"), "{events:?}");
    assert_eq!(main_text(&kernel.run("1 + 1;", &[])), None);
    let events = kernel.run(
        "import asyncio\nasync def later(v):\n    await asyncio.sleep(0)\n    return v\nawait later(5)",
        &[],
    );
    assert_eq!(main_text(&events).as_deref(), Some("5"), "{events:?}");
}

#[test]
fn capture_keeps_a_cell_s_prints_shell_output_and_displays_until_shown() {
    let mut kernel = HostKernel::start();
    let events = kernel.run(
        "%%capture kept\nimport sys\nprint('printed')\nprint('warned', file=sys.stderr)\n!echo from-shell\nfrom IPython.display import HTML\ndisplay(HTML('<i>shown later</i>'))\n'not the result'",
        &[],
    );
    assert!(
        events.iter().all(|e| !matches!(
            e,
            Event::Stdout { .. } | Event::Stderr { .. } | Event::Result(_) | Event::Error { .. }
        )),
        "{events:?}"
    );
    let events = kernel.run("kept.stdout, kept.stderr, len(kept.outputs)", &[]);
    assert_eq!(
        main_text(&events).as_deref(),
        Some("('printed\\nfrom-shell\\n', 'warned\\n', 1)"),
        "{events:?}"
    );
    let events = kernel.run("kept.show()", &[]);
    assert_eq!(stdout(&events), "printed\nfrom-shell\n", "{events:?}");
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Result(data) if data.html.as_deref() == Some("<i>shown later</i>")
        )),
        "{events:?}"
    );
    // What is not captured is shown as usual; the streams are back after it.
    let events = kernel.run("%%capture --no-stdout\nprint('through')\n", &[]);
    assert_eq!(stdout(&events), "through\n", "{events:?}");
    assert_eq!(stdout(&kernel.run("print('after')", &[])), "after\n");
}

#[test]
fn a_javascript_context_keeps_declarations_and_awaits() {
    let mut kernel = HostKernel::start_as(crate::Language::JavaScript);
    let events = kernel.run("const base = 40\nconsole.log('adding')\nbase + 2", &[]);
    assert_eq!(stdout(&events), "adding\n", "{events:?}");
    assert_eq!(main_text(&events).as_deref(), Some("42"), "{events:?}");
    let events = kernel.run("await Promise.resolve(base + 1)", &[]);
    assert_eq!(main_text(&events).as_deref(), Some("41"), "{events:?}");
    let events = kernel.run("throw new TypeError('no')", &[]);
    assert_eq!(
        error_of(&events),
        Some(("TypeError".to_owned(), "no".to_owned())),
        "{events:?}"
    );
    let events = kernel.run("process.env.SG_JS", &[("SG_JS", "set")]);
    assert_eq!(main_text(&events).as_deref(), Some("'set'"), "{events:?}");
    assert_eq!(main_text(&kernel.run("base", &[])).as_deref(), Some("40"));
}

#[test]
fn prints_shell_children_and_c_level_writes_are_stdout_and_stderr_in_order() {
    let mut kernel = HostKernel::start();
    let events = kernel.run(
        "import os, sys\nprint('from-print')\nos.system('echo from-shell; echo oops >&2')\nos.write(1, b'from-fd\\n')\nsys.stdout.write('no-newline')\n'end'",
        &[],
    );
    assert_eq!(
        stdout(&events),
        "from-print\nfrom-shell\nfrom-fd\nno-newline"
    );
    assert!(
        events.contains(&Event::Stderr {
            text: "oops\n".into()
        }),
        "{events:?}"
    );
    // Everything printed comes before the main result.
    assert!(
        matches!(events.iter().rev().nth(1), Some(Event::Result(_))),
        "{events:?}"
    );
    // The code cannot read the protocol's stdin.
    let events = kernel.run("input()", &[]);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Error { name, .. } if name == "EOFError")));
}

#[test]
fn an_exception_is_an_error_with_the_cell_s_traceback_and_the_context_stays() {
    let mut kernel = HostKernel::start();
    kernel.run("kept = 'yes'", &[]);
    let events = kernel.run("def f():\n    return 1/0\nf()", &[]);
    let error = events
        .iter()
        .find_map(|e| match e {
            Event::Error {
                name,
                value,
                traceback,
            } => Some((name.clone(), value.clone(), traceback.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(error.0, "ZeroDivisionError");
    assert_eq!(error.1, "division by zero");
    assert!(
        error.2.contains("line 2, in f") && error.2.contains("return 1/0"),
        "{}",
        error.2
    );
    assert!(
        !error.2.contains("kernel"),
        "the kernel's own frames are hidden: {}",
        error.2
    );
    assert_eq!(
        main_text(&kernel.run("kept", &[])).as_deref(),
        Some("'yes'")
    );
    // A syntax error too.
    let events = kernel.run("def (", &[]);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Error { name, .. } if name == "SyntaxError")));
}

#[test]
fn rich_reprs_and_display_become_results() {
    let mut kernel = HostKernel::start();
    let events = kernel.run(
        "class T:\n    def _repr_html_(self): return '<b>t</b>'\n    def _repr_json_(self): return {'a': 1}\n    def __repr__(self): return 'T()'\ndisplay(T())\nT()",
        &[],
    );
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Result(data) => Some(data.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(!results[0].is_main_result && results[1].is_main_result);
    assert_eq!(results[1].html.as_deref(), Some("<b>t</b>"));
    assert_eq!(results[1].json, Some(serde_json::json!({"a": 1})));
    assert_eq!(results[1].text.as_deref(), Some("T()"));
}

#[test]
fn env_vars_hold_for_one_execution_and_sigint_interrupts_without_ending_it() {
    let mut kernel = HostKernel::start();
    let events = kernel.run("import os\nos.environ.get('SG_ONE')", &[("SG_ONE", "1")]);
    assert_eq!(main_text(&events).as_deref(), Some("'1'"));
    assert_eq!(
        main_text(&kernel.run("os.environ.get('SG_ONE')", &[])),
        None
    );
    // SIGINT while the code runs: KeyboardInterrupt, the kernel stays.
    kernel.start_until_stdout(
        "import time\nprint('sleeping', flush=True)\ntime.sleep(100)",
        "sleeping\n",
    );
    let pid = kernel.child.id();
    assert!(Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let events = kernel.until_done();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Error { name, .. } if name == "KeyboardInterrupt")),
        "{events:?}"
    );
    assert_eq!(
        main_text(&kernel.run("'alive'", &[])).as_deref(),
        Some("'alive'")
    );
}

#[test]
fn an_interrupt_stops_only_the_execution_it_names() {
    let mut kernel = HostKernel::start();
    kernel.run("kept = 'still here'", &[]);
    let sleeping = kernel.start_until_stdout(
        "import time\nprint('sleeping', flush=True)\ntime.sleep(100)",
        "sleeping\n",
    );
    // Another execution's id (one that ended, or is yet to come) is not it.
    kernel.interrupt(sleeping - 1);
    kernel.interrupt(sleeping + 1);
    kernel.interrupt(sleeping);
    let events = kernel.until_done();
    assert_eq!(
        error_of(&events).map(|(name, _)| name).as_deref(),
        Some("KeyboardInterrupt"),
        "{events:?}"
    );
    // A late interrupt, for the execution that just ended, arriving before
    // the next: dropped, never that next one's KeyboardInterrupt.
    kernel.interrupt(sleeping);
    let events = kernel.run("import time\ntime.sleep(0.5)\nkept", &[]);
    assert_eq!(error_of(&events), None, "{events:?}");
    assert_eq!(main_text(&events).as_deref(), Some("'still here'"));
}

fn error_of(events: &[Event]) -> Option<(String, String)> {
    events.iter().find_map(|e| match e {
        Event::Error { name, value, .. } => Some((name.clone(), value.clone())),
        _ => None,
    })
}

#[test]
fn a_bash_context_keeps_variables_functions_and_cwd_and_survives_an_interrupt() {
    let mut kernel = HostKernel::start_as(crate::Language::Bash);
    let events = kernel.run("x=41; greet() { echo \"hi $1\"; }; cd /tmp", &[]);
    assert_eq!(error_of(&events), None, "{events:?}");
    let events = kernel.run(
        "echo $((x + 1)) \"$SG_ONE\"; greet you; pwd; echo oops >&2",
        &[("SG_ONE", "1")],
    );
    assert_eq!(stdout(&events), "42 1\nhi you\n/tmp\n");
    assert!(
        events.contains(&Event::Stderr {
            text: "oops\n".into()
        }),
        "{events:?}"
    );
    // The cell's variables held for that cell only; the kernel's own is gone.
    let events = kernel.run("echo \"[$SG_ONE][$SHELLGATE_KERNEL_LANGUAGE]\"; cat", &[]);
    assert_eq!(stdout(&events), "[][]\n", "the cell's stdin is /dev/null");
    // A failed cell's error is its exit status, as Jupyter's bash kernel says it.
    assert_eq!(
        error_of(&kernel.run("false", &[])),
        Some((String::new(), "1".into()))
    );
    // Interrupted while a command runs: the cell stops, bash and its state stay.
    let execution =
        kernel.start_until_stdout("echo sleeping; sleep 100; echo not-reached", "sleeping\n");
    kernel.interrupt(execution);
    let events = kernel.until_done();
    assert_eq!(
        error_of(&events).map(|(name, _)| name).as_deref(),
        Some("KeyboardInterrupt"),
        "{events:?}"
    );
    assert_eq!(stdout(&events), "", "{events:?}");
    assert_eq!(stdout(&kernel.run("echo $x; pwd", &[])), "41\n/tmp\n");
    // `exit` ends that bash: said, and the next cell has a new one.
    let events = kernel.run("exit 3", &[]);
    assert!(error_of(&events).is_some_and(|(_, value)| value.contains("bash exited")));
    assert_eq!(stdout(&kernel.run("echo \"[$x]\"", &[])), "[]\n");
}

#[test]
fn output_past_the_bound_is_dropped_and_said() {
    let mut kernel = HostKernel::start();
    let events = kernel.run("print('x' * 3_000_000)", &[]);
    assert_eq!(stdout(&events).len(), 1 << 20);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Stderr { text } if text.contains("were dropped"))));
}

/// The next event that is not output, and the output before it.
fn next_call(kernel: &mut HostKernel) -> Vec<protocol::CodeToolCall> {
    loop {
        match kernel.next() {
            Event::ToolCalls { calls } => return calls,
            Event::Stdout { .. } | Event::Stderr { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    }
}

fn tool_result(
    kernel: &mut HostKernel,
    id: &str,
    content: &str,
    error: Option<protocol::ToolFailure>,
) {
    let request = Request::ToolResult { id, content, error };
    kernel.stdin.write_all(&request.line()).unwrap();
}

#[test]
fn client_tools_are_functions_waiting_for_their_results() {
    let mut kernel = HostKernel::start();
    let tools = [
        protocol::CodeTool {
            name: "weather".into(),
            params: vec!["city".into(), "unit".into()],
            description: Some("The weather.".into()),
            refused: None,
        },
        protocol::CodeTool {
            name: "secret".into(),
            params: Vec::new(),
            description: None,
            refused: Some("not from code".into()),
        },
    ];
    // Called plainly, a call blocks until its result, which it returns.
    let code = "print(weather('Paris', unit='C'))\ntry:\n    secret()\nexcept PermissionError as e:\n    print('refused:', e)";
    kernel.start_with_tools(code, &[], &tools);
    let [call] = next_call(&mut kernel).try_into().unwrap();
    assert_eq!(call.name, "weather");
    assert_eq!(
        serde_json::Value::Object(call.input),
        serde_json::json!({"city": "Paris", "unit": "C"})
    );
    tool_result(&mut kernel, &call.id, "sunny", None);
    assert_eq!(kernel.next(), Event::ToolAnswered { id: call.id });
    let events = kernel.until_done();
    assert_eq!(
        stdout(&events),
        "sunny\nrefused: not from code\n",
        "{events:?}"
    );
    // Awaited, the calls made together come together; an error result
    // raises ToolError, a timeout TimeoutError.
    let code = "import asyncio\nr = await asyncio.gather(weather('A'), weather('B'))\nprint(r)\ntry:\n    await weather('C')\nexcept TimeoutError as e:\n    print('late:', e)\ntry:\n    await weather('D')\nexcept ToolError as e:\n    print('failed:', e)";
    kernel.start_with_tools(code, &[], &tools);
    let calls = next_call(&mut kernel);
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        let city = call.input["city"].as_str().unwrap().to_owned();
        tool_result(&mut kernel, &call.id, &city.to_lowercase(), None);
    }
    let mut printed = String::new();
    let [late] = next_call_after_answers(&mut kernel, &mut printed)
        .try_into()
        .unwrap();
    tool_result(
        &mut kernel,
        &late.id,
        "too slow",
        Some(protocol::ToolFailure::Timeout),
    );
    let [failing] = next_call_after_answers(&mut kernel, &mut printed)
        .try_into()
        .unwrap();
    tool_result(
        &mut kernel,
        &failing.id,
        "no such city",
        Some(protocol::ToolFailure::Tool),
    );
    let events = kernel.until_done();
    printed.push_str(&stdout(&events));
    assert_eq!(
        printed, "['a', 'b']\nlate: too slow\nfailed: no such city\n",
        "{events:?}"
    );
    // The tools are the execution's only: gone after it.
    let events = kernel.run("print('weather' in globals())", &[]);
    assert_eq!(stdout(&events), "False\n", "{events:?}");
}

/// The next calls, past the answers' acknowledgements; what the code
/// printed meanwhile goes to `printed`.
fn next_call_after_answers(
    kernel: &mut HostKernel,
    printed: &mut String,
) -> Vec<protocol::CodeToolCall> {
    loop {
        match kernel.next() {
            Event::ToolCalls { calls } => return calls,
            Event::Stdout { text } => printed.push_str(&text),
            Event::ToolAnswered { .. } | Event::Stderr { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    }
}
