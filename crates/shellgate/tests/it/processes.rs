//! Processes driven through the real engine and helper binary:
//! stdin pipes and terminals, signals, resizes, kills of every descendant,
//! the live limit and the bounded output buffer. (HTTP-level tests, SSE and
//! the WebSocket are in `tests/python/test_processes.py`.)
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::TestEngine;
use shellgate_sandbox::backend::SandboxBackend;
use shellgate_sandbox::SandboxError;
use shellgate_sandbox_api::process::{
    OutputRead, ProcessError, ProcessSpec, ProcessStatus, PtySpec,
};

fn spec(command: &str) -> ProcessSpec {
    ProcessSpec {
        command: command.into(),
        stdin: true,
        pty: None,
        timeout_ms: 60_000,
        keeps_awake: true,
        env: Vec::new(),
        cwd: None,
    }
}

fn pty(command: &str) -> ProcessSpec {
    ProcessSpec {
        pty: Some(PtySpec {
            cols: 100,
            rows: 30,
            term: "xterm-256color".into(),
        }),
        ..spec(command)
    }
}

/// Reads the process's output until `needle` shows (or it ends); returns
/// everything read and the next offset.
async fn read_until(t: &TestEngine, c: &str, p: &str, after: u64, needle: &str) -> (String, u64) {
    read_to(t, c, p, after, needle, |text| text.contains(needle)).await
}

/// The prompt of a Python REPL.
const PROMPT: &str = ">>> ";

/// Reads until `needle` shows and then the REPL's prompt after it: the
/// REPL is back in readline, waiting for a line.
async fn read_to_prompt(
    t: &TestEngine,
    c: &str,
    p: &str,
    after: u64,
    needle: &str,
) -> (String, u64) {
    read_to(t, c, p, after, needle, |text| {
        text.find(needle)
            .is_some_and(|at| text[at + needle.len()..].contains(PROMPT))
    })
    .await
}

/// Reads the process's output until `done` holds of all read (or it ends,
/// a failure naming `what`); returns everything read and the next offset.
async fn read_to(
    t: &TestEngine,
    c: &str,
    p: &str,
    after: u64,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> (String, u64) {
    let mut text = String::new();
    let mut offset = after;
    loop {
        let read = OutputRead {
            after: offset,
            max_bytes: 1 << 20,
            wait: Duration::from_secs(20),
        };
        let output = t.engine.read_process_output(c, p, read).await.unwrap();
        for chunk in &output.chunks {
            text.push_str(&String::from_utf8_lossy(&chunk.data));
        }
        offset = output.next_offset;
        if done(&text) {
            return (text, offset);
        }
        assert!(
            output.process.status == ProcessStatus::Running,
            "ended before {what:?}: {text:?} {:?}",
            output.process
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repl_takes_stdin_through_a_pipe_and_a_terminal() {
    let t = TestEngine::new("proc-repl").await;
    t.create("c1").await;
    let e = &t.engine;
    // A pipe: python reads its stdin, not a terminal.
    e.start_process("c1", "p1", spec("python3 -iqu"))
        .await
        .unwrap();
    e.write_process_stdin(
        "c1",
        "p1",
        // One write for the line: stdout and the prompts (stderr) are two
        // pipes, read in no fixed order between them.
        b"import sys; print(f'{6*7} {sys.stdin.isatty()}')\n".to_vec(),
        false,
    )
    .await
    .unwrap();
    let (text, _) = read_until(&t, "c1", "p1", 0, "42 False").await;
    assert!(text.contains("42 False"), "{text}");
    e.write_process_stdin("c1", "p1", Vec::new(), true)
        .await
        .unwrap();
    let ended = e.wait_process("c1", "p1").await.unwrap();
    assert_eq!(ended.status, ProcessStatus::Exited);
    assert_eq!(ended.exit_code(), Some(0));
    // Stdin to a process that ended.
    assert!(matches!(
        e.write_process_stdin("c1", "p1", b"x".to_vec(), false)
            .await,
        Err(SandboxError::Process(ProcessError::Exited(_)))
    ));

    // A terminal: isatty, TERM, its size, a resize seen by stty.
    let mut asked = pty("python3 -iq");
    asked.env = vec![("GREETING".into(), "hello".into())];
    e.start_process("c1", "p2", asked).await.unwrap();
    e.write_process_stdin(
        "c1",
        "p2",
        b"import os, sys; print('tty', sys.stdin.isatty(), os.environ['TERM'], os.environ['GREETING'], os.get_terminal_size())\n".to_vec(),
        false,
    )
    .await
    .unwrap();
    // Resized once the REPL is back at its prompt, as a user resizes: as
    // readline prepares the terminal for each prompt it reads the window
    // size and writes it back (TIOCGWINSZ, then TIOCSWINSZ), so a resize
    // that lands between the two is undone by the REPL itself, in any
    // terminal. The engine's resize is in effect when it returns.
    let (text, offset) = read_to_prompt(&t, "c1", "p2", 0, "columns=100, lines=30").await;
    assert!(text.contains("tty True xterm-256color hello"), "{text}");
    e.resize_process("c1", "p2", 132, 43).await.unwrap();
    e.write_process_stdin(
        "c1",
        "p2",
        b"import subprocess; subprocess.run(['stty', 'size'])\n".to_vec(),
        false,
    )
    .await
    .unwrap();
    let (text, offset) = read_until(&t, "c1", "p2", offset, "43 132").await;
    assert!(text.contains("43 132"), "{text}");
    // SIGINT interrupts the REPL's statement, and the REPL goes on.
    e.write_process_stdin(
        "c1",
        "p2",
        b"import time; print('sleep' + 'ing'); time.sleep(600)\n".to_vec(),
        false,
    )
    .await
    .unwrap();
    let (_, offset) = read_until(&t, "c1", "p2", offset, "sleeping").await;
    e.signal_process("c1", "p2", libc::SIGINT).await.unwrap();
    let (text, offset) = read_until(&t, "c1", "p2", offset, "KeyboardInterrupt").await;
    assert!(text.contains("KeyboardInterrupt"), "{text}");
    e.write_process_stdin("c1", "p2", b"print('still', 1+1)\n".to_vec(), false)
        .await
        .unwrap();
    read_until(&t, "c1", "p2", offset, "still 2").await;
    // Terminal injection stays refused inside the container's terminal.
    e.write_process_stdin(
        "c1",
        "p2",
        b"import fcntl, termios; print('sti', end=' ');\ntry:\n  fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('allo' + 'wed')\nexcept OSError as e: print('refused', e.errno)\n\n".to_vec(),
        false,
    )
    .await
    .unwrap();
    let (text, _) = read_until(&t, "c1", "p2", offset, "refused 1").await;
    assert!(!text.contains("allowed"), "{text}");
    let killed = e.kill_process("c1", "p2").await.unwrap();
    assert_eq!(killed.status, ProcessStatus::Killed);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_ends_every_descendant_and_a_timeout_kills() {
    let t = TestEngine::new("proc-kill").await;
    t.create("c1").await;
    let e = &t.engine;
    e.start_process(
        "c1",
        "p1",
        spec("setsid sleep 1001 & sleep 1002 & echo started; wait"),
    )
    .await
    .unwrap();
    read_until(&t, "c1", "p1", 0, "started").await;
    assert!(
        common::eventually(Duration::from_secs(10), || common::processes_matching(
            "sleep 1001"
        ) >= 1)
        .await
    );
    let killed = e.kill_process("c1", "p1").await.unwrap();
    assert_eq!(killed.status, ProcessStatus::Killed);
    assert!(
        common::eventually(Duration::from_secs(10), || common::processes_matching(
            "sleep 1001"
        ) == 0
            && common::processes_matching("sleep 1002") == 0)
        .await
    );

    let mut short = pty("yes");
    short.timeout_ms = 1500;
    e.start_process("c1", "p2", short).await.unwrap();
    // Nobody reads: the buffer stays bounded, the timeout kills.
    let ended = e.wait_process("c1", "p2").await.unwrap();
    assert_eq!(ended.status, ProcessStatus::Timeout);
    let output = e
        .read_process_output(
            "c1",
            "p2",
            OutputRead {
                after: 0,
                max_bytes: 16,
                wait: Duration::ZERO,
            },
        )
        .await
        .unwrap();
    assert!(output.process.output_bytes > 0);
    assert_eq!(output.dropped_bytes, output.next_offset - 16);

    // Without stdin, a write is refused; without a terminal, a resize.
    let mut quiet = spec("sleep 1003");
    quiet.stdin = false;
    e.start_process("c1", "p3", quiet).await.unwrap();
    assert!(matches!(
        e.write_process_stdin("c1", "p3", b"x".to_vec(), false)
            .await,
        Err(SandboxError::InvalidRequest { param: "stdin", .. })
    ));
    assert!(matches!(
        e.resize_process("c1", "p3", 10, 10).await,
        Err(SandboxError::InvalidRequest { param: "pty", .. })
    ));
    // A missing working directory is the caller's error.
    let mut lost = spec("true");
    lost.cwd = Some("/no/such/dir".into());
    assert!(matches!(
        e.start_process("c1", "p4", lost).await,
        Err(SandboxError::InvalidRequest { param: "cwd", .. })
    ));
    // Stopping the container ends its processes; readers see the end.
    e.stop("c1").await.unwrap();
    let ended = e.wait_process("c1", "p3").await.unwrap();
    assert_ne!(ended.status, ProcessStatus::Running);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn at_most_64_processes_live_in_a_container() {
    let t = TestEngine::new("proc-limit").await;
    t.create("c1").await;
    let e = &t.engine;
    for n in 0..64 {
        e.start_process("c1", &format!("p{n}"), spec("exec sleep 1000"))
            .await
            .unwrap();
    }
    assert!(matches!(
        e.start_process("c1", "p64", spec("sleep 1000")).await,
        Err(SandboxError::Process(ProcessError::TooMany { limit: 64 }))
    ));
    // A busy container is not suspended.
    assert!(!e.suspend_if_idle("c1").await.unwrap());
    e.kill_process("c1", "p0").await.unwrap();
    e.start_process("c1", "p64", spec("true")).await.unwrap();
    assert_eq!(e.list_processes("c1").await.unwrap().len(), 65);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_process_has_no_timeout_keeps_nothing_awake_and_dies_with_suspension() {
    let t = TestEngine::new("proc-service").await;
    t.create("c1").await;
    let e = &t.engine;
    // No timeout armed (0 would be refused by /v1's rule, not the engine's),
    // not counted in flight.
    let service = ProcessSpec {
        timeout_ms: 0,
        keeps_awake: false,
        ..spec("echo up; exec sleep 1004")
    };
    e.start_process("c1", "svc", service).await.unwrap();
    read_until(&t, "c1", "svc", 0, "up").await;
    assert_eq!(
        e.process("c1", "svc").await.unwrap().status,
        ProcessStatus::Running
    );
    // A client's process keeps the container awake; once it ends, the
    // service alone does not.
    e.start_process("c1", "cmd", spec("exec sleep 1005"))
        .await
        .unwrap();
    assert!(!e.suspend_if_idle("c1").await.unwrap());
    e.kill_process("c1", "cmd").await.unwrap();
    e.wait_process("c1", "cmd").await.unwrap();
    // The ended process's pump lets go of the container just after its end
    // is seen: await that, then the service alone keeps nothing awake.
    assert!(
        common::eventually_async(Duration::from_secs(10), || async {
            e.suspend_if_idle("c1").await.unwrap()
        })
        .await
    );
    // Suspension stopped the container, and the service with it.
    let ended = e.wait_process("c1", "svc").await.unwrap();
    assert_ne!(ended.status, ProcessStatus::Running);
    assert_ne!(ended.status, ProcessStatus::Timeout);
    assert!(
        common::eventually(Duration::from_secs(10), || common::processes_matching(
            "sleep 1004"
        ) == 0)
        .await
    );
    t.finish().await;
}
