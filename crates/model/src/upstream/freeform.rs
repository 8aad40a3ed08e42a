//! Freeform (`custom`) tools before an upstream whose protocol has only
//! function tools (Chat Completions, Anthropic Messages): each is a
//! function taking one string `input` (its grammar, if any, in that
//! parameter's description: [`crate::tools::freeform_parameters`]). The
//! conversation's calls of one are sent as `{"input": ...}`, and the
//! model's `{"input": ...}` is unwrapped into the call's raw input, the
//! neutral shape of a freeform call.
//!
//! Chat Completions has a `custom` tool type of its own at OpenAI, but the
//! model servers this adapter is for (vLLM, Ollama, llama.cpp, LiteLLM)
//! refuse it; a function is understood by all.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{Message, Reply, ToolSpec, Turn};

/// A freeform call's arguments as a function's.
#[derive(Serialize, Deserialize)]
struct Input<'a> {
    input: Cow<'a, str>,
}

/// Whether `name` is a freeform tool of `tools`.
fn freeform(tools: &[ToolSpec], name: &str) -> bool {
    tools
        .iter()
        .any(|tool| tool.name == name && tool.custom.is_some())
}

/// `turn` with its freeform calls' raw input wrapped as `{"input": ...}`
/// (borrowed as it is when it has no freeform tools).
pub fn as_functions(turn: &Turn) -> Cow<'_, Turn> {
    if !turn.tools.iter().any(|tool| tool.custom.is_some()) {
        return Cow::Borrowed(turn);
    }
    let mut turn = turn.clone();
    for message in &mut turn.messages {
        if let Message::Assistant { tool_calls, .. } = message {
            for call in tool_calls
                .iter_mut()
                .filter(|call| freeform(&turn.tools, &call.name))
            {
                let wrapped = Input {
                    input: Cow::Borrowed(&call.arguments),
                };
                if let Ok(text) = serde_json::to_string(&wrapped) {
                    call.arguments = text;
                }
            }
        }
    }
    Cow::Owned(turn)
}

/// The model's calls of freeform tools with their raw input: the `input`
/// string of its arguments (arguments of another shape are kept as the
/// model wrote them: the client sees what it sent).
pub fn unwrap_calls(reply: &mut Reply, tools: &[ToolSpec]) {
    for call in reply
        .tool_calls
        .iter_mut()
        .filter(|call| freeform(tools, &call.name))
    {
        if let Ok(Input { input }) = serde_json::from_str::<Input<'_>>(&call.arguments) {
            call.arguments = input.into_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{CustomFormat, ToolCall};

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "apply_patch".into(),
                custom: Some(CustomFormat::Text),
                ..Default::default()
            },
            ToolSpec {
                name: "lookup".into(),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn freeform_calls_are_wrapped_for_the_upstream_and_unwrapped_from_it() {
        let call = |name: &str, arguments: &str| ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        let turn = Turn {
            tools: tools(),
            messages: vec![Message::Assistant {
                text: String::new(),
                tool_calls: vec![
                    call("apply_patch", "*** Begin Patch\n\"x\"\n"),
                    call("lookup", "{\"q\":1}"),
                ],
            }],
            ..Default::default()
        };
        let sent = as_functions(&turn);
        match &sent.messages[0] {
            Message::Assistant { tool_calls, .. } => {
                assert_eq!(
                    tool_calls[0].arguments,
                    r#"{"input":"*** Begin Patch\n\"x\"\n"}"#
                );
                assert_eq!(tool_calls[1].arguments, "{\"q\":1}");
            }
            other => panic!("{other:?}"),
        }
        let mut reply = Reply {
            tool_calls: vec![
                call("apply_patch", r#"{"input":"raw text"}"#),
                call("apply_patch", "not json"),
                call("lookup", r#"{"input":"kept"}"#),
            ],
            ..Default::default()
        };
        unwrap_calls(&mut reply, &turn.tools);
        assert_eq!(reply.tool_calls[0].arguments, "raw text");
        assert_eq!(reply.tool_calls[1].arguments, "not json");
        assert_eq!(reply.tool_calls[2].arguments, r#"{"input":"kept"}"#);
        // A turn without freeform tools is sent as it is.
        let plain = Turn::default();
        assert!(matches!(as_functions(&plain), Cow::Borrowed(_)));
    }

    #[test]
    fn before_anthropic_a_freeform_tool_is_a_tool_of_one_string() {
        use serde_json::json;
        let spec = ToolSpec {
            name: "apply_patch".into(),
            description: "Edit files.".into(),
            parameters: crate::tools::freeform_parameters(&CustomFormat::Grammar {
                syntax: "lark".into(),
                definition: "start: /.+/".into(),
            }),
            custom: Some(CustomFormat::Grammar {
                syntax: "lark".into(),
                definition: "start: /.+/".into(),
            }),
            ..Default::default()
        };
        let turn = Turn {
            model: "claude".into(),
            tools: vec![spec],
            messages: vec![
                Message::User("patch it".into()),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "t1".into(),
                        name: "apply_patch".into(),
                        arguments: "*** Begin Patch".into(),
                    }],
                },
            ],
            ..Default::default()
        };
        let body = serde_json::to_value(
            super::super::anthropic::request_body(&as_functions(&turn), false).unwrap(),
        )
        .unwrap();
        let schema = &body["tools"][0]["input_schema"];
        assert_eq!(schema["required"], json!(["input"]));
        assert!(schema["properties"]["input"]["description"]
            .as_str()
            .unwrap()
            .contains("start: /.+/"));
        assert_eq!(
            body["messages"][1]["content"][0]["input"],
            json!({"input": "*** Begin Patch"})
        );
        // The model's tool_use input is unwrapped into the raw input.
        let mut reply = super::super::anthropic::parse_message(
            serde_json::from_value(json!({
                "content": [{"type": "tool_use", "id": "t2", "name": "apply_patch",
                             "input": {"input": "*** End Patch"}}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }))
            .unwrap(),
        )
        .unwrap();
        unwrap_calls(&mut reply, &turn.tools);
        assert_eq!(reply.tool_calls[0].arguments, "*** End Patch");
    }
}
