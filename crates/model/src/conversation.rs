//! Responses API items, as the conversation an upstream model reads.
//!
//! Messages become messages; every kind of tool call (`function_call`,
//! `shell_call`, `local_shell_call`) becomes a call of the matching function
//! tool, and every output (`function_call_output`, `shell_call_output`,
//! `local_shell_call_output`) that call's result; a `code_interpreter_call`
//! is a call of `code_interpreter` (named by its item `id`, as it has no
//! `call_id`) and its result, its logs and a note per image
//! ([`interpreter_output_text`]). What a client replays is
//! read tolerantly: a missing `status`, `exit_code: null`, an `id` instead of
//! a `call_id` (legacy `local_shell_call_output`), extra keys. A
//! `custom_tool_call` is a call whose arguments are its raw input, its
//! output the result; a call of a tool of a `namespace` group is named as
//! the model knows it (`{namespace}__{name}`, [`namespaced_name`]). A
//! `reasoning` item is the model's reasoning ([`crate::reasoning`]; its
//! sealed part read back for the protocol that made it; one with nothing
//! in it is left out), and an item of a type
//! shellgate does not know (`web_search_call`, `item_reference`, another
//! server's `compaction`...) the Responses API's own: each adapter replays
//! what its protocol reads and leaves out the rest. A `compaction`
//! shellgate made (`/v1/responses/compact`) is its summary, a user
//! message after [`COMPACTED_PREFACE`], for any protocol; [`transcript`]
//! is a conversation as the text such a summary is written from.

use shellgate_wire::code_execution::CodeExecutionResult;
use shellgate_wire::responses::{
    CodeInterpreterOutput, Compaction, ContentPart, Item, MessageContent, Role, ShellResult,
    TextOrJson, ToolOutput,
};

use crate::arguments::{BashArguments, InterpreterArguments, LocalShellArguments, ShellArguments};
use crate::tools::{
    namespaced_name, BASH, CODE_INTERPRETER, GOOGLE_CODE_EXECUTION, LOCAL_SHELL, SHELL,
};
use crate::upstream::{Message, NativeItem, Protocol, ToolCall};

/// The text of a message's `content` (a string, or parts).
pub fn content_text(content: &MessageContent) -> String {
    match content {
        MessageContent::Text(text) => text.clone(),
        MessageContent::Parts(parts) => parts_text(parts),
    }
}

/// The text of content parts, one line each: text as it is, an image or a
/// file as a note that it was attached.
pub fn parts_text(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter_map(|part| match part {
            ContentPart::InputText(part) => Some(part.text.clone()),
            ContentPart::OutputText(part) => Some(part.text.clone()),
            ContentPart::Refusal(part) => Some(part.refusal.clone()),
            ContentPart::InputImage(_) => {
                Some("[an image was attached; it cannot be shown]".into())
            }
            ContentPart::InputFile(file) => {
                file.filename.as_ref().map(|name| format!("[file {name}]"))
            }
            // Chat Completions' `text` part, which clients replay too.
            ContentPart::Other(part)
                if part.get("type").and_then(|t| t.as_str()) == Some("text") =>
            {
                part.get("text").and_then(|t| t.as_str()).map(str::to_owned)
            }
            ContentPart::Other(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One command's result as the model reads it: its three keys always
/// written, in name order, and what a client put in them kept (a replayed
/// outcome with keys of its own, a stdout that is not a string), as the
/// upstream has always read them.
#[derive(serde::Serialize)]
struct ResultForModel<'a> {
    /// As JSON, whose objects keep their keys in name order.
    outcome: Option<serde_json::Value>,
    stderr: &'a TextOrJson,
    stdout: &'a TextOrJson,
}

/// What a command's results say, for the model: each command's stdout,
/// stderr and outcome, as JSON.
pub fn shell_output_text(output: &[ShellResult]) -> String {
    let entries: Vec<ResultForModel<'_>> = output
        .iter()
        .map(|entry| ResultForModel {
            outcome: entry
                .outcome
                .as_ref()
                .and_then(|outcome| serde_json::to_value(outcome).ok()),
            stderr: &entry.stderr,
            stdout: &entry.stdout,
        })
        .collect();
    serde_json::to_string(&entries).unwrap_or_else(|_| "[]".to_owned())
}

/// What a code interpreter call's outputs say, for the model: its logs as
/// they are, and a note for each image (the model cannot see it; the user
/// does).
pub fn interpreter_output_text(outputs: Option<&[CodeInterpreterOutput]>) -> String {
    let parts: Vec<&str> = outputs
        .unwrap_or_default()
        .iter()
        .map(|output| match output {
            CodeInterpreterOutput::Logs { logs, .. } => logs.as_str(),
            CodeInterpreterOutput::Image { .. } => "[an image was shown to the user]",
        })
        .collect();
    if parts.is_empty() {
        return "[no output]".to_owned();
    }
    parts.join("\n")
}

/// The correlation id of a tool call or output item: its `call_id`, or
/// its `id` (a legacy `local_shell_call_output`).
fn call_id(call_id: &Option<String>, id: &Option<String>) -> String {
    call_id
        .as_deref()
        .or(id.as_deref())
        .unwrap_or("call")
        .to_owned()
}

/// Arguments as JSON text.
fn arguments(arguments: &impl serde::Serialize) -> String {
    serde_json::to_string(arguments).unwrap_or_else(|_| "{}".to_owned())
}

/// The name the model knows a user's tool by: a tool of a namespace is
/// flattened, as the request's tools were.
fn model_name(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(namespace) => namespaced_name(namespace, name),
        None => name.to_owned(),
    }
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

/// A code execution sub-tool's result as the model reads it: a command's
/// output and exit code, a file's text, what an edit did, or the error.
pub fn code_execution_output_text(result: Option<&CodeExecutionResult>) -> String {
    use shellgate_wire::code_execution::{
        BashToolResultContent as B, PythonToolResultContent as P, TextEditorToolResultContent as T,
    };
    match result {
        None => String::new(),
        Some(CodeExecutionResult::Bash(B::BashCodeExecutionResult(done))) => {
            let mut text = done.stdout.clone();
            if !done.stderr.is_empty() {
                text.push_str(&format!("\nstderr:\n{}", done.stderr));
            }
            if let Some(code) = done.return_code.filter(|code| *code != 0) {
                text.push_str(&format!("\nexit code: {code}"));
            }
            text
        }
        Some(CodeExecutionResult::Bash(B::BashCodeExecutionToolResultError(error))) => {
            format!("Error: {}", error.error_code)
        }
        Some(CodeExecutionResult::TextEditor(T::TextEditorCodeExecutionViewResult(view))) => {
            view.content.clone()
        }
        Some(CodeExecutionResult::TextEditor(T::TextEditorCodeExecutionCreateResult(made))) => {
            if made.is_file_update {
                "The file was overwritten.".to_owned()
            } else {
                "The file was created.".to_owned()
            }
        }
        Some(CodeExecutionResult::TextEditor(T::TextEditorCodeExecutionStrReplaceResult(diff))) => {
            let mut text = "The text was replaced.".to_owned();
            for line in diff.lines.iter().flatten() {
                text.push('\n');
                text.push_str(line);
            }
            text
        }
        Some(CodeExecutionResult::Python(P::CodeExecutionResult(done))) => {
            let mut text = done.stdout.clone();
            if !done.stderr.is_empty() {
                text.push_str(&format!("\nstderr:\n{}", done.stderr));
            }
            if done.return_code != 0 {
                text.push_str(&format!("\nreturn code: {}", done.return_code));
            }
            text
        }
        Some(CodeExecutionResult::Python(P::CodeExecutionToolResultError(error))) => {
            format!("Error: {}", error.error_code)
        }
        Some(CodeExecutionResult::TextEditor(T::TextEditorCodeExecutionToolResultError(error))) => {
            match &error.error_message {
                Some(message) => format!("Error: {}: {message}", error.error_code),
                None => format!("Error: {}", error.error_code),
            }
        }
    }
}

/// The conversation for `items`, after the `instructions`.
pub fn messages<'a>(
    instructions: Option<&str>,
    items: impl IntoIterator<Item = &'a Item>,
) -> Vec<Message> {
    messages_offering(instructions, items, &|_| true)
}

/// The conversation for `items`, after the `instructions`, when the turn
/// offers the tools `offered` names (by the names the model knows them
/// by). A call the neutral turn cannot say of a tool it does not offer —
/// a freeform (`custom_tool_call`) or namespaced call of a tool the client
/// declared where shellgate does not read it, such as Codex's
/// `additional_tools` item — is the Responses API's own, and so is its
/// output: replayed verbatim to a Responses upstream (which knows the
/// tool), left out for others.
pub fn messages_offering<'a>(
    instructions: Option<&str>,
    items: impl IntoIterator<Item = &'a Item>,
    offered: &dyn Fn(&str) -> bool,
) -> Vec<Message> {
    let mut messages = Vec::new();
    // The calls kept whole, whose outputs are kept whole too.
    let mut foreign: Vec<String> = Vec::new();
    let native = |item: &Item| {
        Message::Native(NativeItem {
            protocol: Protocol::Responses,
            item: serde_json::to_value(item).unwrap_or_default(),
        })
    };
    if let Some(instructions) = instructions.filter(|i| !i.trim().is_empty()) {
        messages.push(Message::System(instructions.to_owned()));
    }
    for item in items {
        match item {
            Item::Message(message) => {
                let text = content_text(&message.content);
                messages.push(match message.role {
                    Role::System | Role::Developer => Message::System(text),
                    Role::Assistant => Message::Assistant {
                        text,
                        tool_calls: Vec::new(),
                    },
                    Role::User => Message::User(text),
                });
            }
            Item::FunctionCall(call)
                if call.namespace.is_some()
                    && !offered(&model_name(&call.name, call.namespace.as_deref())) =>
            {
                foreign.push(call_id(&call.call_id, &call.id));
                messages.push(native(item));
            }
            Item::CustomToolCall(call)
                if !offered(&model_name(&call.name, call.namespace.as_deref())) =>
            {
                foreign.push(call_id(&call.call_id, &call.id));
                messages.push(native(item));
            }
            Item::FunctionCallOutput(answer)
                if foreign.contains(&call_id(&answer.call_id, &answer.id)) =>
            {
                messages.push(native(item))
            }
            Item::CustomToolCallOutput(answer)
                if foreign.contains(&call_id(&answer.call_id, &answer.id)) =>
            {
                messages.push(native(item))
            }
            Item::FunctionCall(call) => push_call(
                &mut messages,
                ToolCall {
                    id: call_id(&call.call_id, &call.id),
                    name: model_name(&call.name, call.namespace.as_deref()),
                    arguments: call.arguments.clone(),
                },
            ),
            Item::CustomToolCall(call) => push_call(
                &mut messages,
                ToolCall {
                    id: call_id(&call.call_id, &call.id),
                    name: model_name(&call.name, call.namespace.as_deref()),
                    arguments: call.input.clone(),
                },
            ),
            Item::CustomToolCallOutput(answer) => messages.push(Message::Tool {
                call_id: call_id(&answer.call_id, &answer.id),
                output: match &answer.output {
                    ToolOutput::Text(text) => text.clone(),
                    ToolOutput::Parts(parts) => parts_text(parts),
                },
            }),
            Item::ShellCall(call) => push_call(
                &mut messages,
                ToolCall {
                    id: call_id(&call.call_id, &call.id),
                    name: SHELL.to_owned(),
                    arguments: arguments(&ShellArguments {
                        commands: call.action.commands.clone(),
                        max_output_length: call.action.max_output_length.into(),
                        timeout_ms: call.action.timeout_ms.into(),
                    }),
                },
            ),
            Item::LocalShellCall(call) => push_call(
                &mut messages,
                ToolCall {
                    id: call_id(&call.call_id, &call.id),
                    name: LOCAL_SHELL.to_owned(),
                    arguments: arguments(&LocalShellArguments {
                        command: call.action.command.clone(),
                        ..LocalShellArguments::default()
                    }),
                },
            ),
            // OpenRouter's items hold the call and its result together.
            Item::OpenRouterShell(call) => {
                let id = call_id(&call.call_id, &call.id);
                push_call(
                    &mut messages,
                    ToolCall {
                        id: id.clone(),
                        name: SHELL.to_owned(),
                        arguments: arguments(&ShellArguments {
                            commands: call.action.commands.clone(),
                            ..ShellArguments::default()
                        }),
                    },
                );
                messages.push(Message::Tool {
                    call_id: id,
                    output: shell_output_text(&call.output),
                });
            }
            Item::OpenRouterBash(call) => {
                let id = call_id(&call.call_id, &call.id);
                push_call(
                    &mut messages,
                    ToolCall {
                        id: id.clone(),
                        name: BASH.to_owned(),
                        arguments: arguments(&BashArguments {
                            command: call.action.command.clone(),
                            restart: call.action.restart,
                        }),
                    },
                );
                messages.push(Message::Tool {
                    call_id: id,
                    output: shell_output_text(call.output.as_slice()),
                });
            }
            // A turn that offers Google's code execution and not OpenAI's
            // code interpreter ran its calls' code on the same kernel: the
            // model knows the tool by Google's name and reads the outcome.
            Item::CodeInterpreterCall(call)
                if offered(GOOGLE_CODE_EXECUTION) && !offered(CODE_INTERPRETER) =>
            {
                let id = call_id(&None, &call.id);
                push_call(
                    &mut messages,
                    ToolCall {
                        id: id.clone(),
                        name: GOOGLE_CODE_EXECUTION.to_owned(),
                        arguments: arguments(&InterpreterArguments {
                            code: call.code.clone().unwrap_or_default(),
                        }),
                    },
                );
                messages.push(Message::Tool {
                    call_id: id,
                    output: crate::google_outcome::told(call),
                });
            }
            Item::CodeInterpreterCall(call) => {
                let id = call_id(&None, &call.id);
                push_call(
                    &mut messages,
                    ToolCall {
                        id: id.clone(),
                        name: CODE_INTERPRETER.to_owned(),
                        arguments: arguments(&InterpreterArguments {
                            code: call.code.clone().unwrap_or_default(),
                        }),
                    },
                );
                messages.push(Message::Tool {
                    call_id: id,
                    output: interpreter_output_text(call.outputs.as_deref()),
                });
            }
            // A code execution sub-tool's call and its result, together.
            Item::CodeExecutionCall(call) => {
                let id = call_id(&call.call_id, &call.id);
                push_call(
                    &mut messages,
                    ToolCall {
                        id: id.clone(),
                        name: call.name.clone(),
                        arguments: serde_json::Value::Object(call.input.clone()).to_string(),
                    },
                );
                messages.push(Message::Tool {
                    call_id: id,
                    output: code_execution_output_text(call.result.as_ref()),
                });
            }
            Item::FunctionCallOutput(answer) => messages.push(Message::Tool {
                call_id: call_id(&answer.call_id, &answer.id),
                output: match &answer.output {
                    ToolOutput::Text(text) => text.clone(),
                    ToolOutput::Parts(parts) => parts_text(parts),
                },
            }),
            Item::ShellCallOutput(answer) => messages.push(Message::Tool {
                call_id: call_id(&answer.call_id, &answer.id),
                output: shell_output_text(&answer.output),
            }),
            Item::LocalShellCallOutput(answer) => messages.push(Message::Tool {
                call_id: call_id(&answer.call_id, &answer.id),
                output: match &answer.output {
                    Some(TextOrJson::Text(text)) => text.clone(),
                    Some(TextOrJson::Json(other)) => other.to_string(),
                    None => String::new(),
                },
            }),
            Item::Reasoning(reasoning) => {
                let reasoning = crate::reasoning::from_item(reasoning);
                if !crate::reasoning::is_empty(&reasoning) {
                    messages.push(Message::Reasoning(reasoning));
                }
            }
            // A compaction shellgate made: its summary stands for the turns
            // it replaced, for a model of any protocol.
            Item::Other(item) if compaction_summary(item).is_some() => {
                let summary = compaction_summary(item).unwrap_or_default();
                messages.push(Message::User(format!("{COMPACTED_PREFACE}\n\n{summary}")));
            }
            // An Anthropic server tool's block a Messages client replayed
            // (`web_search_tool_result`...): for an Anthropic upstream.
            Item::Other(block) if shellgate_wire::messages::holds_server_tool_block(block) => {
                messages.push(Message::Native(NativeItem {
                    protocol: Protocol::Anthropic,
                    item: serde_json::Value::Object(block.clone()),
                }))
            }
            // The Responses API's own items, for an upstream that reads them.
            Item::Other(item) => messages.push(Message::Native(NativeItem {
                protocol: Protocol::Responses,
                item: serde_json::Value::Object(item.clone()),
            })),
        }
    }
    messages
}

/// What introduces a compaction's summary to the model.
pub const COMPACTED_PREFACE: &str =
    "[The earlier conversation was compacted. Its summary, written for you to continue from:]";

/// The summary a compaction item (`item`, of a `type` [`Item`] does not
/// name) holds, if shellgate made it.
fn compaction_summary(item: &shellgate_wire::responses::Extra) -> Option<String> {
    Compaction::read(item)?.summary()
}

/// `messages` as one text, a paragraph each, saying who spoke: what a
/// model reads to summarize a conversation (`/v1/responses/compact`) in
/// one turn of any protocol, with no tool declared (Anthropic's API
/// refuses a conversation that calls tools it does not declare). Items
/// only their own protocol reads are left out.
pub fn transcript(messages: &[Message]) -> String {
    let mut paragraphs = Vec::new();
    for message in messages {
        match message {
            Message::System(text) => paragraphs.push(format!("[instructions]\n{text}")),
            Message::User(text) => paragraphs.push(format!("[user]\n{text}")),
            Message::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    paragraphs.push(format!("[assistant]\n{text}"));
                }
                for call in tool_calls {
                    paragraphs.push(format!(
                        "[assistant calls {} ({})]\n{}",
                        call.name, call.id, call.arguments
                    ));
                }
            }
            Message::Tool { call_id, output } => {
                paragraphs.push(format!("[result of {call_id}]\n{output}"))
            }
            Message::Reasoning(_) | Message::Native(_) => {}
        }
    }
    paragraphs.join("\n\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_replayed_code_interpreter_call_is_a_call_and_its_result() {
        let items: Vec<Item> = serde_json::from_value(json!([
            {"role": "user", "content": "plot it"},
            {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
             "code": "plot()", "container_id": "cntr_1", "outputs": [
                {"type": "logs", "logs": "drawn\n"},
                {"type": "image", "url": "data:image/png;base64,AAAA"}]},
            {"type": "code_interpreter_call", "id": "ci_2", "status": "in_progress",
             "code": null, "container_id": "cntr_1", "outputs": null},
        ]))
        .unwrap();
        let messages = messages(None, &items);
        let Message::Assistant { tool_calls, .. } = &messages[1] else {
            panic!("{messages:?}")
        };
        assert_eq!(tool_calls[0].id, "ci_1");
        assert_eq!(tool_calls[0].name, CODE_INTERPRETER);
        assert_eq!(tool_calls[0].arguments, r#"{"code":"plot()"}"#);
        assert_eq!(
            messages[2],
            Message::Tool {
                call_id: "ci_1".into(),
                output: "drawn\n\n[an image was shown to the user]".into()
            }
        );
        // The image's bytes never reach the model; an item without outputs
        // says it has none.
        assert!(!format!("{messages:?}").contains("AAAA"));
        assert!(matches!(&messages[4], Message::Tool { output, .. } if output == "[no output]"));
    }

    #[test]
    fn items_of_every_kind_become_a_conversation() {
        let items: Vec<Item> = serde_json::from_value(json!([
            json!({"role": "user", "content": "list files"}),
            json!({"type": "reasoning", "summary": []}),
            json!({"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"], "timeout_ms": null}}),
            json!({"type": "shell_call_output", "call_id": "c1", "output": [{"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": null}}]}),
            json!({"type": "local_shell_call", "call_id": "c2", "action": {"type": "exec", "command": ["ls"], "env": {}}}),
            json!({"type": "local_shell_call_output", "id": "c2", "output": "x"}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}),
            json!({"type": "openrouter:shell", "call_id": "c3", "container_id": "cntr_1", "action": {"commands": ["pwd"]}, "output": [{"stdout": "/mnt/data\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}),
            json!({"type": "openrouter:bash", "call_id": "c4", "action": {"command": "id"}, "output": {"stdout": "uid=1000\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}}),
        ]))
        .unwrap();
        let messages = messages(Some("be brief"), &items);
        assert_eq!(messages[0], Message::System("be brief".into()));
        assert_eq!(messages[1], Message::User("list files".into()));
        // A reasoning with nothing in it is left out.
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

    #[test]
    fn custom_and_namespaced_calls_are_calls_and_their_outputs_results() {
        let items: Vec<Item> = serde_json::from_value(json!([
            {"type": "custom_tool_call", "call_id": "c0", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c0", "output": "Done"},
            {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]))
        .unwrap();
        let messages = messages(None, &items);
        match &messages[..] {
            [Message::Assistant {
                tool_calls: first, ..
            }, Message::Tool { call_id, output }, Message::Assistant {
                tool_calls: second, ..
            }, Message::Tool { .. }] => {
                // A freeform call's arguments are its raw input.
                assert_eq!(first[0].name, "apply_patch");
                assert_eq!(first[0].arguments, "*** Begin Patch");
                assert_eq!((call_id.as_str(), output.as_str()), ("c0", "Done"));
                // A namespaced call is named as the model knows the tool.
                assert_eq!(second[0].name, "multi_agent_v1__spawn_agent");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_compaction_of_shellgates_is_its_summary_and_anothers_is_kept_whole() {
        let ours = Compaction::seal("cmp_1".into(), "The user asked for primes.").into_item();
        let theirs: Item = serde_json::from_value(
            json!({"type": "compaction", "id": "cmp_2", "encrypted_content": "gAAAAB"}),
        )
        .unwrap();
        let messages = messages(None, [&ours, &theirs]);
        assert_eq!(
            messages,
            vec![
                Message::User(format!("{COMPACTED_PREFACE}\n\nThe user asked for primes.")),
                Message::Native(NativeItem {
                    protocol: Protocol::Responses,
                    item: json!({"type": "compaction", "id": "cmp_2", "encrypted_content": "gAAAAB"}),
                }),
            ],
            "{messages:?}"
        );
    }

    #[test]
    fn a_transcript_says_who_spoke_and_leaves_out_what_only_a_protocol_reads() {
        let items: Vec<Item> = serde_json::from_value(json!([
            {"type": "message", "role": "user", "content": "list /tmp"},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "item_reference", "id": "msg_1"},
            {"type": "message", "role": "assistant", "content": "There is a.txt."},
        ]))
        .unwrap();
        let text = transcript(&messages(Some("Be brief."), &items));
        assert_eq!(
            text,
            "[instructions]\nBe brief.\n\n[user]\nlist /tmp\n\n[assistant calls ls (c1)]\n{}\n\n\
             [result of c1]\na.txt\n\n[assistant]\nThere is a.txt.",
            "{text}"
        );
    }

    #[test]
    fn unknown_items_are_kept_whole_and_the_rest_read_as_before() {
        let items: Vec<Item> = serde_json::from_value(json!([
            {"type": "item_reference", "id": "msg_1"},
            {"type": "message", "role": "user", "content": [
                {"type": "text", "text": "chat part"},
                {"type": "input_image", "image_url": "data:,"},
                {"type": "input_file", "file_id": "file_1"},
                {"type": "refusal", "refusal": "no"},
                {"type": "input_audio", "input_audio": {}},
            ]},
            {"type": "function_call", "id": "fc_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "id": "fco_1", "output": [{"type": "input_text", "text": "found"}]},
            {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"], "timeout_ms": 5, "max_output_length": 9}},
            {"type": "shell_call_output", "call_id": "c1", "output": [{"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]},
            {"type": "openrouter:bash", "call_id": "c2", "action": {"command": "", "restart": true}, "output": null},
            {"type": "local_shell_call_output", "call_id": "c3", "output": {"exit": 0}},
        ]))
        .unwrap();
        let messages = messages(Some("  "), &items);
        // An item of a type shellgate does not know is the Responses API's own.
        assert_eq!(
            messages[0],
            Message::Native(NativeItem {
                protocol: Protocol::Responses,
                item: json!({"type": "item_reference", "id": "msg_1"}),
            })
        );
        let messages = &messages[1..];
        assert_eq!(
            messages[0],
            Message::User("chat part\n[an image was attached; it cannot be shown]\nno".into())
        );
        match &messages[1] {
            Message::Assistant { tool_calls, .. } => {
                // A call without a call_id is named by its id.
                assert_eq!(tool_calls[0].id, "fc_1");
                assert_eq!(tool_calls[0].arguments, "{}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            messages[2],
            Message::Tool {
                call_id: "fco_1".into(),
                output: "found".into()
            }
        );
        match &messages[3] {
            Message::Assistant { tool_calls, .. } => assert_eq!(
                tool_calls[0].arguments,
                r#"{"commands":["ls"],"max_output_length":9,"timeout_ms":5}"#
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            messages[4],
            Message::Tool {
                call_id: "c1".into(),
                output: r#"[{"outcome":{"type":"timeout"},"stderr":"","stdout":""}]"#.into()
            }
        );
        match &messages[5..] {
            [Message::Assistant { tool_calls, .. }, Message::Tool { output, .. }, Message::Tool {
                call_id,
                output: local,
            }] => {
                assert_eq!(tool_calls[0].arguments, r#"{"command":"","restart":true}"#);
                assert_eq!(output, "[]");
                assert_eq!(call_id, "c3");
                assert_eq!(local, r#"{"exit":0}"#);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_freeform_or_namespaced_call_of_a_tool_not_offered_is_kept_whole_with_its_output() {
        let items: Vec<Item> = serde_json::from_value(json!([
            {"type": "custom_tool_call", "call_id": "c1", "namespace": "functions", "name": "exec", "input": "text(1)"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "1"},
            {"type": "function_call", "call_id": "c2", "namespace": "clock", "name": "sleep", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "slept"},
            // Offered, or said whole by the neutral turn: calls as before.
            {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "x"},
            {"type": "function_call", "call_id": "c4", "name": "not_offered", "arguments": "{}"},
        ]))
        .unwrap();
        let offered = |name: &str| name == "apply_patch";
        let read = messages_offering(None, &items, &offered);
        for (index, message) in read[..4].iter().enumerate() {
            assert_eq!(
                message,
                &Message::Native(NativeItem {
                    protocol: Protocol::Responses,
                    item: serde_json::to_value(&items[index]).unwrap(),
                })
            );
        }
        match &read[4..] {
            [Message::Assistant { tool_calls, .. }] => {
                let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                assert_eq!(names, ["apply_patch", "not_offered"]);
            }
            other => panic!("{other:?}"),
        }
        // Every tool offered: all are calls.
        assert!(!messages(None, &items)
            .iter()
            .any(|message| matches!(message, Message::Native(_))));
    }
}
