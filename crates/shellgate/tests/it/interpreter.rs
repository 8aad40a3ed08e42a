//! The code interpreter over the real engine: kernels as service
//! processes in a container, contexts, state, interrupts at a timeout and
//! when the caller leaves, restarts, and a kernel that died with its
//! container's suspension. (The kernel's language-level behaviour is
//! tested with the host's python3 in `crates/interpreter`; the HTTP face in
//! `tests/python/test_e2b_interpreter.py`.)
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::TestEngine;
use shellgate_interpreter::{
    Execute, ExecutionEvent, ExecutionSummary, InterpreterError, Interpreters, Interruption,
    Language,
};
use shellgate_sandbox::backend::SandboxBackend;
use tokio::sync::mpsc;

fn code(code: &str) -> Execute {
    Execute {
        code: code.into(),
        context_id: None,
        language: None,
        env_vars: Vec::new(),
        timeout: Duration::from_secs(60),
        tools: Vec::new(),
    }
}

/// Runs code; its summary and every event.
async fn run(
    interpreters: &Interpreters,
    container: &str,
    asked: Execute,
) -> (ExecutionSummary, Vec<ExecutionEvent>) {
    let (sender, mut receiver) = mpsc::channel(64);
    let collect = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            events.push(event);
        }
        events
    });
    let summary = interpreters
        .execute(container, asked, sender)
        .await
        .unwrap();
    (summary, collect.await.unwrap())
}

fn main_text(events: &[ExecutionEvent]) -> Option<String> {
    events.iter().find_map(|e| match e {
        ExecutionEvent::Result(data) if data.is_main_result => data.text.clone(),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn contexts_keep_state_and_a_timeout_or_a_leaving_caller_interrupts_without_losing_it() {
    let t = TestEngine::new("interp-state").await;
    t.create("c1").await;
    let backend: Arc<dyn SandboxBackend> = Arc::new(t.engine.clone());
    let interpreters = Interpreters::new(Arc::clone(&backend));

    let (summary, events) = run(&interpreters, "c1", code("x = 20\nx * 2 + 2")).await;
    assert_eq!(main_text(&events).as_deref(), Some("42"), "{events:?}");
    assert_eq!(summary.execution_count, Some(1));
    assert!(events.contains(&ExecutionEvent::ExecutionCount(1)));
    // The default context: one, made on first use, in E2B's cwd when the
    // image has it (else where commands run).
    let contexts = interpreters.contexts("c1").await;
    assert_eq!(contexts.len(), 1);
    assert_eq!(contexts[0].language, Language::Python);
    let (_, events) = run(&interpreters, "c1", code("import os\nos.getcwd()")).await;
    assert_eq!(
        main_text(&events),
        Some(format!("'{}'", contexts[0].cwd)),
        "{events:?}"
    );

    // A timeout interrupts; the variables stay.
    let mut slow = code("import time\nprint('started', flush=True)\ntime.sleep(100)");
    slow.timeout = Duration::from_secs(2);
    let (summary, events) = run(&interpreters, "c1", slow).await;
    assert_eq!(summary.interrupted, Some(Interruption::TimedOut));
    assert!(!summary.restarted);
    assert!(
        events.iter().any(
            |e| matches!(e, ExecutionEvent::Error { name, .. } if name == "KeyboardInterrupt")
        ),
        "{events:?}"
    );
    assert_eq!(
        main_text(&run(&interpreters, "c1", code("x")).await.1).as_deref(),
        Some("20")
    );

    // The caller leaving interrupts too.
    let (sender, mut receiver) = mpsc::channel(64);
    let running = {
        let interpreters = &interpreters;
        async move {
            interpreters
                .execute(
                    "c1",
                    code("import time\nprint('waiting', flush=True)\ntime.sleep(100)"),
                    sender,
                )
                .await
        }
    };
    let leave = async move {
        while let Some(event) = receiver.recv().await {
            if matches!(event, ExecutionEvent::Stdout { .. }) {
                break;
            }
        }
        drop(receiver);
    };
    let (summary, ()) = tokio::join!(running, leave);
    assert_eq!(summary.unwrap().interrupted, Some(Interruption::CallerLeft));
    assert_eq!(
        main_text(&run(&interpreters, "c1", code("x + 1")).await.1).as_deref(),
        Some("21")
    );

    // Code that ignores the interrupt: the kernel is started again.
    let mut stubborn = code("import time\nwhile True:\n    try:\n        time.sleep(100)\n    except KeyboardInterrupt:\n        pass");
    stubborn.timeout = Duration::from_secs(1);
    let (summary, events) = run(&interpreters, "c1", stubborn).await;
    assert!(summary.restarted, "{events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, ExecutionEvent::Error { name, .. } if name == "KernelRestarted")));
    let (_, events) = run(&interpreters, "c1", code("'x' in globals()")).await;
    assert_eq!(main_text(&events).as_deref(), Some("False"));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn contexts_are_created_listed_restarted_removed_and_bounded() {
    let t = TestEngine::new("interp-contexts").await;
    t.create("c1").await;
    let backend: Arc<dyn SandboxBackend> = Arc::new(t.engine.clone());
    let interpreters = Interpreters::new(Arc::clone(&backend));
    let env = vec![("SG_CONTEXT".to_owned(), "own".to_owned())];
    let context = interpreters
        .create_context("c1", Language::Python, Some("/tmp"), &env)
        .await
        .unwrap();
    assert_eq!(context.cwd, "/tmp");
    let mut asked =
        code("import os\nv = 1\nos.getcwd(), os.environ['SG_CONTEXT'], os.environ.get('SG_CALL')");
    asked.context_id = Some(context.id.clone());
    asked.env_vars = vec![("SG_CALL".into(), "call".into())];
    let (_, events) = run(&interpreters, "c1", asked).await;
    assert_eq!(
        main_text(&events).as_deref(),
        Some("('/tmp', 'own', 'call')"),
        "{events:?}"
    );
    // Another context does not see its variables.
    let (_, events) = run(&interpreters, "c1", code("'v' in globals()")).await;
    assert_eq!(main_text(&events).as_deref(), Some("False"));
    assert_eq!(interpreters.contexts("c1").await.len(), 2);

    // Restart: same id, fresh state.
    interpreters
        .restart_context("c1", &context.id)
        .await
        .unwrap();
    let mut asked = code("'v' in globals()");
    asked.context_id = Some(context.id.clone());
    assert_eq!(
        main_text(&run(&interpreters, "c1", asked).await.1).as_deref(),
        Some("False")
    );

    // Removed: gone, and its kernel with it.
    interpreters
        .remove_context("c1", &context.id)
        .await
        .unwrap();
    assert_eq!(interpreters.contexts("c1").await.len(), 1);
    let mut asked = code("1");
    asked.context_id = Some(context.id.clone());
    let (sender, _receiver) = mpsc::channel(4);
    assert!(matches!(
        interpreters.execute("c1", asked, sender).await,
        Err(InterpreterError::ContextNotFound(_))
    ));
    assert!(matches!(
        interpreters.remove_context("c1", &context.id).await,
        Err(InterpreterError::ContextNotFound(_))
    ));
    // A JavaScript context is made (its runtime starts at its first
    // cell), and contexts are bounded.
    let script = interpreters
        .create_context("c1", Language::JavaScript, None, &[])
        .await
        .unwrap();
    assert_eq!(script.language, Language::JavaScript);
    interpreters.remove_context("c1", &script.id).await.unwrap();
    for _ in 1..shellgate_interpreter::MAX_CONTEXTS {
        interpreters
            .create_context("c1", Language::Python, Some("/tmp"), &[])
            .await
            .unwrap();
    }
    assert!(matches!(
        interpreters
            .create_context("c1", Language::Python, None, &[])
            .await,
        Err(InterpreterError::TooManyContexts { limit: 16 })
    ));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kernels_do_not_keep_a_container_awake_and_come_back_after_a_suspension() {
    let t = TestEngine::new("interp-suspend").await;
    t.create("c1").await;
    let backend: Arc<dyn SandboxBackend> = Arc::new(t.engine.clone());
    let interpreters = Interpreters::new(Arc::clone(&backend));
    run(&interpreters, "c1", code("kept = 1")).await;
    // An idle kernel is a service: the container may be suspended.
    assert!(t.engine.suspend_if_idle("c1").await.unwrap());
    // The next execution wakes the container and says the state is gone.
    let (summary, events) = run(&interpreters, "c1", code("'kept' in globals()")).await;
    assert!(summary.restarted);
    assert_eq!(main_text(&events).as_deref(), Some("False"));
    assert!(events
        .iter()
        .any(|e| matches!(e, ExecutionEvent::Stderr { text, .. } if text.contains("had stopped"))));
    t.finish().await;
}
