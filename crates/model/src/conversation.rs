//! Responses API items, as the conversation an upstream model reads.
//!
//! Messages become messages; every kind of tool call (`function_call`,
//! `shell_call`, `local_shell_call`) becomes a call of the matching function
//! tool, and every output (`function_call_output`, `shell_call_output`,
//! `local_shell_call_output`) that call's result. What a client replays is
//! read tolerantly: a missing `status`, `exit_code: null`, an `id` instead of
//! a `call_id` (legacy `local_shell_call_output`), extra keys. Reasoning
//! items are passed along in the stored conversation but mean nothing to
//! other models, so they are skipped here.

use serde_json::{json, Value};

use crate::tools::{BASH, LOCAL_SHELL, SHELL};
use crate::upstream::{Message, ToolCall};

/// The text of a message's `content` (a string, or parts).
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| match part.get("type").and_then(Value::as_str) {
                Some("input_text" | "output_text" | "text" | "refusal") => part
                    .get("text")
                    .or_else(|| part.get("refusal"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                Some("input_image") => Some("[an image was attached; it cannot be shown]".into()),
                Some("input_file") => part
                    .get("filename")
                    .and_then(Value::as_str)
                    .map(|name| format!("[file {name}]")),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// What a command's results say, for the model: each command's stdout,
/// stderr and outcome, as JSON.
pub fn shell_output_text(output: Option<&Value>) -> String {
    let entries: Vec<Value> = output
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|entry| {
                    json!({
                        "stdout": entry.get("stdout").cloned().unwrap_or(json!("")),
                        "stderr": entry.get("stderr").cloned().unwrap_or(json!("")),
                        "outcome": entry.get("outcome").cloned().unwrap_or(Value::Null),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Array(entries).to_string()
}

/// The correlation id of a tool call or output item.
fn call_id(item: &Value) -> String {
    item.get("call_id")
        .or_else(|| item.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("call")
        .to_owned()
}

/// Adds a call to the assistant's last message (calls of one turn belong
/// together), or starts one.
fn push_call(messages: &mut Vec<Message>, call: ToolCall) {
    if let Some(Message::Assistant { tool_calls, .. }) = messages.last_mut() {
        tool_calls.push(call);
        return;
    }
    messages.push(Message::Assistant {
        text: String::new(),
        tool_calls: vec![call],
    });
}

/// The conversation for `items`, after the `instructions`.
pub fn messages(instructions: Option<&str>, items: &[Value]) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(instructions) = instructions.filter(|i| !i.trim().is_empty()) {
        messages.push(Message::System(instructions.to_owned()));
    }
    for item in items {
        let kind =
            item.get("type")
                .and_then(Value::as_str)
                .unwrap_or(if item.get("role").is_some() {
                    "message"
                } else {
                    ""
                });
        match kind {
            "message" => {
                let text = content_text(item.get("content"));
                match item.get("role").and_then(Value::as_str) {
                    Some("system" | "developer") => messages.push(Message::System(text)),
                    Some("assistant") => messages.push(Message::Assistant {
                        text,
                        tool_calls: Vec::new(),
                    }),
                    _ => messages.push(Message::User(text)),
                }
            }
            "function_call" => push_call(
                &mut messages,
                ToolCall {
                    id: call_id(item),
                    name: item
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("function")
                        .to_owned(),
                    arguments: item
                        .get("arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}")
                        .to_owned(),
                },
            ),
            "shell_call" => {
                let action = item.get("action").cloned().unwrap_or(json!({}));
                let mut arguments =
                    json!({"commands": action.get("commands").cloned().unwrap_or(json!([]))});
                for key in ["timeout_ms", "max_output_length"] {
                    if let Some(value) = action.get(key).filter(|v| !v.is_null()) {
                        arguments[key] = value.clone();
                    }
                }
                push_call(
                    &mut messages,
                    ToolCall {
                        id: call_id(item),
                        name: SHELL.to_owned(),
                        arguments: arguments.to_string(),
                    },
                )
            }
            "local_shell_call" => {
                let action = item.get("action").cloned().unwrap_or(json!({}));
                let arguments = json!({
                    "command": action.get("command").cloned().unwrap_or(json!([])),
                });
                push_call(
                    &mut messages,
                    ToolCall {
                        id: call_id(item),
                        name: LOCAL_SHELL.to_owned(),
                        arguments: arguments.to_string(),
                    },
                )
            }
            // OpenRouter's items hold the call and its result together.
            "openrouter:shell" => {
                let commands = item
                    .pointer("/action/commands")
                    .cloned()
                    .unwrap_or(json!([]));
                push_call(
                    &mut messages,
                    ToolCall {
                        id: call_id(item),
                        name: SHELL.to_owned(),
                        arguments: json!({ "commands": commands }).to_string(),
                    },
                );
                messages.push(Message::Tool {
                    call_id: call_id(item),
                    output: shell_output_text(item.get("output")),
                });
            }
            "openrouter:bash" => {
                let action = item.get("action").cloned().unwrap_or(json!({}));
                let mut arguments = json!({
                    "command": action.get("command").cloned().unwrap_or(json!("")),
                });
                if action.get("restart") == Some(&json!(true)) {
                    arguments["restart"] = json!(true);
                }
                push_call(
                    &mut messages,
                    ToolCall {
                        id: call_id(item),
                        name: BASH.to_owned(),
                        arguments: arguments.to_string(),
                    },
                );
                let result = item.get("output").cloned().map(|r| json!([r]));
                messages.push(Message::Tool {
                    call_id: call_id(item),
                    output: shell_output_text(result.as_ref()),
                });
            }
            "function_call_output" => messages.push(Message::Tool {
                call_id: call_id(item),
                output: match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    other => content_text(other),
                },
            }),
            "shell_call_output" => messages.push(Message::Tool {
                call_id: call_id(item),
                output: shell_output_text(item.get("output")),
            }),
            "local_shell_call_output" => messages.push(Message::Tool {
                call_id: call_id(item),
                output: match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                },
            }),
            // Reasoning and anything else a model of another family cannot use.
            _ => {}
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_of_every_kind_become_a_conversation() {
        let items = vec![
            json!({"role": "user", "content": "list files"}),
            json!({"type": "reasoning", "summary": []}),
            json!({"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"], "timeout_ms": null}}),
            json!({"type": "shell_call_output", "call_id": "c1", "output": [{"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": null}}]}),
            json!({"type": "local_shell_call", "call_id": "c2", "action": {"type": "exec", "command": ["ls"], "env": {}}}),
            json!({"type": "local_shell_call_output", "id": "c2", "output": "x"}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}),
            json!({"type": "openrouter:shell", "call_id": "c3", "container_id": "cntr_1", "action": {"commands": ["pwd"]}, "output": [{"stdout": "/mnt/data\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}),
            json!({"type": "openrouter:bash", "call_id": "c4", "action": {"command": "id"}, "output": {"stdout": "uid=1000\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}}),
        ];
        let messages = messages(Some("be brief"), &items);
        assert_eq!(messages[0], Message::System("be brief".into()));
        assert_eq!(messages[1], Message::User("list files".into()));
        match &messages[2] {
            Message::Assistant { tool_calls, .. } => {
                assert_eq!(tool_calls[0].name, "shell");
                assert_eq!(tool_calls[0].arguments, r#"{"commands":["ls"]}"#);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(&messages[3], Message::Tool { call_id, output } if call_id == "c1" && output.contains("\"a\\n\""))
        );
        assert!(matches!(&messages[5], Message::Tool { call_id, .. } if call_id == "c2"));
        // The call joins the assistant's message before it, as one turn.
        match (&messages[6], &messages[7]) {
            (Message::Assistant { text, tool_calls }, Message::Tool { call_id, output }) => {
                assert_eq!(text, "done");
                assert_eq!(tool_calls[0].name, "shell");
                assert_eq!(tool_calls[0].arguments, r#"{"commands":["pwd"]}"#);
                assert_eq!(call_id, "c3");
                assert!(output.contains("/mnt/data"));
            }
            other => panic!("{other:?}"),
        }
        match (&messages[8], &messages[9]) {
            (Message::Assistant { tool_calls, .. }, Message::Tool { output, .. }) => {
                assert_eq!(tool_calls[0].name, "bash");
                assert_eq!(tool_calls[0].arguments, r#"{"command":"id"}"#);
                assert!(output.contains("uid=1000"));
            }
            other => panic!("{other:?}"),
        }
    }
}
