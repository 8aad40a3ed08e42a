//! A container's secrets in the engine: a value its commands
//! print is masked however the output is cut (stream deltas, reads), and
//! after the engine restarts without the values the container's network is
//! off and its output is still masked (by the values' verifiers), until the
//! values are supplied again.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{TempDir, TestEngine, BINARY};
use shellgate_egress::secrets::{DomainSecret, SecretValue};
use shellgate_sandbox::backend::{ContainerSpec, NetworkSpec, RunRequest, SandboxBackend};
use shellgate_sandbox::{EngineConfig, LocalEngine};

const VALUE: &str = "sk-live-real-secret-value-4242";

fn config(dir: &TempDir) -> EngineConfig {
    let mut server = shellgate_server::Config::default();
    server.egress.egress = true;
    let (settings, _log) = shellgate_server::egress::settings(&server)
        .expect("egress settings")
        .expect("egress on");
    let mut config = EngineConfig::new(dir.path().join("data"));
    config.helper_binary = BINARY.into();
    config.pool_size = 0;
    config.spare_helpers = 0;
    config.warm_containers = 0;
    config.egress = Some(settings);
    config
}

fn spec() -> ContainerSpec {
    ContainerSpec {
        network: NetworkSpec {
            allowed_domains: vec!["api.secret.test".into()],
            secrets: vec![DomainSecret {
                domain: "api.secret.test".into(),
                name: "API_TOKEN".into(),
                placeholder: shellgate_egress::secrets::placeholder("API_TOKEN"),
                value: Some(SecretValue::new(VALUE)),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Each command prints the value in two writes split at one boundary;
/// returns the streamed stdout of each command and the results' stdout.
async fn split_everywhere(engine: &LocalEngine, id: &str) -> (Vec<String>, Vec<String>) {
    let commands: Vec<String> = (1..VALUE.len())
        .map(|i| {
            format!(
                "printf %s '{}'; sleep 0.02; printf %s '{}'",
                &VALUE[..i],
                &VALUE[i..]
            )
        })
        .collect();
    let count = commands.len();
    let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
    let results = engine
        .run_streaming(id, RunRequest::new(commands), sink)
        .await
        .expect("run");
    let mut streamed = vec![String::new(); count];
    while let Ok(delta) = deltas.try_recv() {
        if delta.stream == shellgate_sandbox::backend::StreamKind::Stdout {
            streamed[delta.command].push_str(&delta.text);
        }
    }
    (streamed, results.into_iter().map(|r| r.stdout).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn values_are_masked_across_deltas_and_after_a_restart_the_network_is_off() {
    let dir = TempDir::new("secrets");
    let (engine, _) = LocalEngine::open(config(&dir)).await.expect("open engine");
    let t = TestEngine { engine, dir };
    t.create_with("s1", spec()).await;
    let placeholder = t.ok("s1", "printf %s \"$API_TOKEN\"").await;
    assert!(placeholder.starts_with("shellgate-secret-api_token-"));
    let (streamed, whole) = split_everywhere(&t.engine, "s1").await;
    assert!(streamed.iter().all(|s| *s == placeholder), "{streamed:?}");
    assert!(whole.iter().all(|s| *s == placeholder), "{whole:?}");
    assert_eq!(
        t.ok("s1", "echo ${HTTPS_PROXY:-none}").await,
        "http://127.0.0.1:80\n"
    );
    // Nothing of the value is on disk, only its verifier.
    let spec = std::fs::read_to_string(t.data_dir().join("containers/s1/spec.json")).unwrap();
    assert!(!spec.contains(VALUE) && spec.contains("sha256"));

    // A restarted engine no longer has the value.
    let TestEngine { engine, dir } = t;
    engine.shutdown().await;
    drop(engine);
    let (engine, _) = LocalEngine::open(config(&dir))
        .await
        .expect("reopen engine");
    let t = TestEngine { engine, dir };
    let status = t.engine.secret_status("s1");
    assert_eq!(status.len(), 1);
    assert!(!status[0].held);
    // Network off: no proxy, no resolver; `$API_TOKEN` keeps its placeholder.
    assert_eq!(t.ok("s1", "echo ${HTTPS_PROXY:-none}").await, "none\n");
    assert_eq!(t.ok("s1", "printf %s \"$API_TOKEN\"").await, placeholder);
    // Still masked, whole and streamed, by the verifier.
    let (streamed, whole) = split_everywhere(&t.engine, "s1").await;
    assert!(streamed.iter().all(|s| *s == placeholder), "{streamed:?}");
    assert!(whole.iter().all(|s| *s == placeholder), "{whole:?}");
    let hex = t
        .ok(
            "s1",
            &format!(
                "printf %s '{}' '{}' | od -An -v -tx1 | tr -d ' \\n'",
                &VALUE[..9],
                &VALUE[9..]
            ),
        )
        .await;
    assert_eq!(hex, placeholder);
    // Another value is refused; the value it was made with brings the
    // network back at the next start.
    let supply = |value: &str| {
        vec![DomainSecret {
            domain: "api.secret.test".into(),
            name: "API_TOKEN".into(),
            placeholder: String::new(),
            value: Some(SecretValue::new(value)),
            ..Default::default()
        }]
    };
    assert!(t
        .engine
        .supply_secrets("s1", supply("sk-live-real-secret-value-0000"))
        .await
        .is_err());
    t.engine
        .supply_secrets("s1", supply(VALUE))
        .await
        .expect("supply");
    assert!(t.engine.secret_status("s1")[0].held);
    assert_eq!(
        t.ok("s1", "echo ${HTTPS_PROXY:-none}").await,
        "http://127.0.0.1:80\n"
    );
    assert_eq!(t.ok("s1", "printf %s \"$API_TOKEN\"").await, placeholder);
    t.finish().await;
}

/// What the container's egress proxy refused while a
/// command ran is told in that command's stderr (host, port, reason),
/// masked like its output, and only in the command it overlapped.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_connection_is_told_in_the_stderr_of_the_command_that_made_it() {
    let dir = TempDir::new("denials");
    let (engine, _) = LocalEngine::open(config(&dir)).await.expect("open engine");
    let t = TestEngine { engine, dir };
    t.create_with("d1", spec()).await;
    // Through HTTPS_PROXY (a CONNECT), and a name that holds the value
    // (which no program holds; a name's text is the program's to choose).
    let result = t
        .run(
            "d1",
            &format!(
                "curl -sS -m 10 https://notlisted.test/ ; \
                 curl -sS -m 10 https://{VALUE}.test/ ; exit 0"
            ),
        )
        .await;
    let lines: Vec<&str> = result
        .stderr
        .lines()
        .filter(|l| l.starts_with("shellgate: egress denied: "))
        .collect();
    assert_eq!(
        lines[0],
        "shellgate: egress denied: CONNECT notlisted.test:443: notlisted.test is not in this \
         container's allowlist",
        "{}",
        result.stderr
    );
    assert_eq!(lines.len(), 2, "{}", result.stderr);
    assert!(!result.stderr.contains(VALUE), "{}", result.stderr);
    assert!(
        lines[1].contains("shellgate-secret-api_token-"),
        "{}",
        result.stderr
    );
    // curl's own line comes first, on its own line.
    assert!(
        result
            .stderr
            .contains("CONNECT tunnel failed, response 403\n"),
        "{}",
        result.stderr
    );
    // The next command made no refused connection: nothing is told.
    let result = t.run("d1", "true").await;
    assert_eq!(result.stderr, "");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_processs_output_is_masked_through_a_pipe_and_a_terminal() {
    use shellgate_sandbox_api::process::{OutputRead, ProcessSpec, PtySpec};
    let dir = TempDir::new("secrets-process");
    let (engine, _) = LocalEngine::open(config(&dir)).await.expect("open engine");
    let t = TestEngine { engine, dir };
    t.create_with("s1", spec()).await;
    let terminal = PtySpec {
        cols: 80,
        rows: 24,
        term: "xterm".into(),
    };
    for (name, pty) in [("p1", None), ("p2", Some(terminal))] {
        // The value in two writes: the buffer's chunks must not split it
        // past the masker either.
        let asked = ProcessSpec {
            command: format!(
                "printf %s '{}'; sleep 0.05; printf %s '{}'",
                &VALUE[..7],
                &VALUE[7..]
            ),
            stdin: false,
            pty,
            timeout_ms: 30_000,
            keeps_awake: true,
            env: Vec::new(),
            cwd: None,
        };
        t.engine.start_process("s1", name, asked).await.unwrap();
        t.engine.wait_process("s1", name).await.unwrap();
        let read = OutputRead {
            after: 0,
            max_bytes: 1 << 20,
            wait: std::time::Duration::ZERO,
        };
        let output = t
            .engine
            .read_process_output("s1", name, read)
            .await
            .unwrap();
        let text: String = output
            .chunks
            .iter()
            .map(|c| String::from_utf8_lossy(&c.data).into_owned())
            .collect();
        assert!(
            !text.contains(VALUE) && text.contains("shellgate-secret-api_token-"),
            "{name}: {text}"
        );
    }
    t.finish().await;
}
