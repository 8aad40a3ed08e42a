//! The bounds of an upstream turn, against a hostile model server on a
//! local socket: an answer without end, one trickling a byte at a time, a
//! tool call of 16 MiB, through each adapter the server uses.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use shellgate_model::upstream::{
    connect, Message, Protocol, ToolChoice, Turn, TurnLimits, UpstreamConfig, UpstreamError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the fixture answers each request.
#[derive(Clone)]
enum Answer {
    /// An event stream of text events of `piece` bytes, for ever.
    Endless { piece: usize },
    /// The head of an event stream, then one byte every `every`, for ever.
    Trickle { every: Duration },
    /// These bytes, as an event stream.
    Events(String),
    /// These bytes, as one JSON body.
    Json(String),
    /// HTTP 429 with this `Retry-After`.
    RateLimited(&'static str),
    /// HTTP 500 with a body without end.
    EndlessError,
}

/// Reads one request (its head and its `Content-Length` body).
async fn read_request(socket: &mut TcpStream) -> std::io::Result<()> {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let n = socket.read(&mut buffer).await?;
        if n == 0 {
            return Ok(());
        }
        seen.extend_from_slice(&buffer[..n]);
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while seen.len() < end + 4 + length {
                let n = socket.read(&mut buffer).await?;
                if n == 0 {
                    return Ok(());
                }
                seen.extend_from_slice(&buffer[..n]);
            }
            return Ok(());
        }
    }
}

async fn answer(mut socket: TcpStream, answer: Answer) -> std::io::Result<()> {
    read_request(&mut socket).await?;
    let head = |kind: &str, length: Option<usize>| {
        match length {
        Some(n) => format!("HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {n}\r\nconnection: close\r\n\r\n"),
        None => format!("HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\nconnection: close\r\n\r\n"),
    }
    };
    match answer {
        Answer::Endless { piece } => {
            socket
                .write_all(head("text/event-stream", None).as_bytes())
                .await?;
            let event = format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(piece)}}]})
            );
            // Until the client hangs up: an error ends this.
            loop {
                socket.write_all(event.as_bytes()).await?;
            }
        }
        Answer::Trickle { every } => {
            socket
                .write_all(head("text/event-stream", None).as_bytes())
                .await?;
            loop {
                socket.write_all(b":").await?;
                tokio::time::sleep(every).await;
            }
        }
        Answer::Events(body) => {
            socket
                .write_all(head("text/event-stream", None).as_bytes())
                .await?;
            socket.write_all(body.as_bytes()).await?;
        }
        Answer::RateLimited(retry_after) => {
            let body = "{\"error\": {\"message\": \"slow down\"}}";
            socket
                .write_all(
                    format!(
                        "HTTP/1.1 429 Too Many Requests\r\nretry-after: {retry_after}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await?;
        }
        Answer::EndlessError => {
            socket
                .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n")
                .await?;
            let piece = "e".repeat(64 * 1024);
            loop {
                socket.write_all(piece.as_bytes()).await?;
            }
        }
        Answer::Json(body) => {
            socket
                .write_all(head("application/json", Some(body.len())).as_bytes())
                .await?;
            socket.write_all(body.as_bytes()).await?;
        }
    }
    socket.shutdown().await
}

/// A model server answering every request so; its base URL.
async fn model_server(reply: Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let reply = reply.clone();
            tokio::spawn(async move {
                let _ = answer(socket, reply).await;
            });
        }
    });
    format!("http://{address}/v1")
}

fn turn() -> Turn {
    Turn {
        model: "hostile".into(),
        messages: vec![Message::User("hi".into())],
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
        temperature: None,
        top_p: None,
        max_output_tokens: None,
        parallel_tool_calls: None,
        ..Default::default()
    }
}

async fn ask(url: String, protocol: Protocol, limits: TurnLimits) -> Result<String, UpstreamError> {
    let upstream = connect(UpstreamConfig {
        url,
        api_key: None,
        protocol,
        // Far longer than any piece takes to come: only the turn's
        // deadline can end a trickle.
        timeout: Duration::from_secs(3600),
        attempts: 1,
        limits,
    })?;
    let reply = upstream.complete(&turn(), None).await?;
    Ok(reply
        .tool_calls
        .first()
        .map(|call| call.arguments.clone())
        .unwrap_or(reply.text))
}

#[tokio::test]
async fn an_answer_without_end_fails_at_the_answer_cap() {
    let url = model_server(Answer::Endless { piece: 4096 }).await;
    let limits = TurnLimits {
        max_answer_bytes: 1024 * 1024,
        ..TurnLimits::default()
    };
    let error = ask(url, Protocol::Chat, limits).await.unwrap_err();
    assert_eq!(error, UpstreamError::AnswerTooLarge { limit: 1024 * 1024 });
    assert!(
        error.to_string().contains("larger than the limit"),
        "{error}"
    );
}

#[tokio::test]
async fn a_whole_json_body_over_the_cap_fails_too() {
    let body = json!({
        "choices": [{"message": {"content": "y".repeat(2 * 1024 * 1024)}, "finish_reason": "stop"}],
    })
    .to_string();
    let url = model_server(Answer::Json(body)).await;
    let limits = TurnLimits {
        max_answer_bytes: 1024 * 1024,
        ..TurnLimits::default()
    };
    let error = ask(url, Protocol::Chat, limits).await.unwrap_err();
    assert!(
        matches!(error, UpstreamError::AnswerTooLarge { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn a_trickling_answer_is_cut_off_at_the_turn_deadline() {
    for protocol in [Protocol::Chat, Protocol::Responses, Protocol::Anthropic] {
        let url = model_server(Answer::Trickle {
            every: Duration::from_millis(20),
        })
        .await;
        let limits = TurnLimits {
            turn_timeout: Duration::from_secs(1),
            ..TurnLimits::default()
        };
        let error = ask(url, protocol, limits).await.unwrap_err();
        assert_eq!(
            error,
            UpstreamError::TurnTimeout { seconds: 1 },
            "{protocol:?}"
        );
    }
}

/// A Chat Completions stream calling `f` with `size` bytes of arguments,
/// in pieces of 100 bytes (as models stream them).
fn chat_tool_call(size: usize) -> String {
    let mut events = String::new();
    let start = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":\""}}
    ]}}]});
    events.push_str(&format!("data: {start}\n\n"));
    let piece = "z".repeat(100);
    for _ in 0..size / 100 {
        let delta = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": piece}}
        ]}}]});
        events.push_str(&format!("data: {delta}\n\n"));
    }
    let end = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "\"}"}}
    ]}, "finish_reason": "tool_calls"}]});
    events.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
    events
}

#[tokio::test]
async fn a_16_mib_tool_call_is_read_whole_under_a_cap_that_allows_it() {
    // Whole pieces of 100 bytes, just over 16 MiB.
    let size = (16 * 1024 * 1024 / 100 + 1) * 100;
    let url = model_server(Answer::Events(chat_tool_call(size))).await;
    let limits = TurnLimits {
        max_answer_bytes: 64 * 1024 * 1024,
        max_tool_call_bytes: 17 * 1024 * 1024,
        ..TurnLimits::default()
    };
    let arguments = ask(url, Protocol::Chat, limits).await.unwrap();
    assert_eq!(arguments.len(), size + "{\"a\":\"\"}".len());
    assert!(arguments.starts_with("{\"a\":\"zzz"));
}

#[tokio::test]
async fn a_tool_call_over_its_cap_fails_the_turn() {
    let url = model_server(Answer::Events(chat_tool_call(2 * 1024 * 1024))).await;
    let limits = TurnLimits {
        max_tool_call_bytes: 1024 * 1024,
        ..TurnLimits::default()
    };
    let error = ask(url, Protocol::Chat, limits).await.unwrap_err();
    assert_eq!(
        error,
        UpstreamError::ToolCallTooLarge { limit: 1024 * 1024 }
    );
    // Anthropic's pieces of `input` JSON are bounded alike.
    let mut events = String::new();
    events.push_str(&format!(
        "data: {}\n\n",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}})
    ));
    for _ in 0..(2 * 1024 * 1024 / 100) {
        events.push_str(&format!(
            "data: {}\n\n",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "q".repeat(100)}})
        ));
    }
    events.push_str(&format!("data: {}\n\n", json!({"type": "message_stop"})));
    let url = model_server(Answer::Events(events)).await;
    let error = ask(url, Protocol::Anthropic, limits).await.unwrap_err();
    assert!(
        matches!(error, UpstreamError::ToolCallTooLarge { .. }),
        "{error}"
    );
    // And a Responses API answer's function call.
    let response = json!({
        "output": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "w".repeat(2 * 1024 * 1024)}],
    });
    let url = model_server(Answer::Json(response.to_string())).await;
    let error = ask(url, Protocol::Responses, limits).await.unwrap_err();
    assert!(
        matches!(error, UpstreamError::ToolCallTooLarge { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn a_hostile_retry_after_is_no_panic() {
    // `Duration::from_secs_f64` panics on a negative, infinite or NaN
    // number: each once took the server's worker down.
    for retry_after in ["-1", "inf", "NaN", "1e300"] {
        let url = model_server(Answer::RateLimited(retry_after)).await;
        let upstream = connect(UpstreamConfig {
            url,
            api_key: None,
            protocol: Protocol::Chat,
            timeout: Duration::from_secs(3600),
            attempts: 2,
            // Shorter than the longest backoff (10 s): a wait that would
            // pass it ends the turn at once.
            limits: TurnLimits {
                turn_timeout: Duration::from_secs(5),
                ..TurnLimits::default()
            },
        })
        .unwrap();
        let error = upstream.complete(&turn(), None).await.unwrap_err();
        assert!(
            matches!(
                error,
                UpstreamError::RateLimited { attempts: 2 } | UpstreamError::TurnTimeout { .. }
            ),
            "{retry_after}: {error}"
        );
    }
}

#[tokio::test]
async fn an_error_body_without_end_is_read_only_in_part() {
    let url = model_server(Answer::EndlessError).await;
    let error = ask(url, Protocol::Chat, TurnLimits::default())
        .await
        .unwrap_err();
    match error {
        UpstreamError::Status { status, message } => {
            assert_eq!(status, 500);
            assert!(message.starts_with("eee") && message.len() < 2000);
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn an_event_over_several_data_lines_is_read_whole_by_every_adapter() {
    // The EventSource spec joins an event's `data:` lines with `\n`: a
    // server that pretty-prints its JSON over lines is read as one event.
    let spread = |event: serde_json::Value| {
        let pretty = serde_json::to_string_pretty(&event).unwrap();
        let lines: String = pretty.lines().map(|l| format!("data: {l}\r\n")).collect();
        format!(": a comment\r\nevent: x\r\n{lines}\r\n")
    };
    let cases = [
        (
            Protocol::Chat,
            spread(
                json!({"choices": [{"index": 0, "delta": {"content": "joined"}, "finish_reason": "stop"}]}),
            ) + "data: [DONE]\n\n",
        ),
        (
            Protocol::Anthropic,
            spread(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "joined"}}),
            ) + &spread(json!({"type": "message_stop"})),
        ),
        (
            Protocol::Responses,
            spread(json!({"type": "response.completed", "response": {
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "joined"}]}],
            }})),
        ),
    ];
    for (protocol, events) in cases {
        let url = model_server(Answer::Events(events)).await;
        let text = ask(url, protocol, TurnLimits::default()).await.unwrap();
        assert_eq!(text, "joined", "{protocol:?}");
    }
}

/// A model server that closes its first `drops` connections after reading
/// the request, without a byte of answer (a kept-alive connection closed
/// just as a request went out on it), then answers.
async fn dropping_server(drops: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut seen = 0;
        while let Ok((mut socket, _)) = listener.accept().await {
            seen += 1;
            if seen <= drops {
                let _ = read_request(&mut socket).await;
                drop(socket);
                continue;
            }
            let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "answered"}}]});
            tokio::spawn(answer(socket, Answer::Json(body.to_string())));
        }
    });
    format!("http://{address}/v1")
}

#[tokio::test]
async fn a_request_that_got_no_answer_is_sent_again_within_the_attempts() {
    let config = |url: String, attempts: u32| UpstreamConfig {
        url,
        api_key: None,
        protocol: Protocol::Chat,
        timeout: Duration::from_secs(30),
        attempts,
        limits: TurnLimits::default(),
    };
    let upstream = connect(config(dropping_server(2).await, 3)).unwrap();
    let reply = upstream.complete(&turn(), None).await.unwrap();
    assert_eq!(reply.text, "answered");
    // Out of attempts: the error says the upstream could not be reached.
    let upstream = connect(config(dropping_server(1).await, 1)).unwrap();
    let error = upstream.complete(&turn(), None).await.unwrap_err();
    assert!(matches!(error, UpstreamError::Unreachable(_)), "{error}");
}
