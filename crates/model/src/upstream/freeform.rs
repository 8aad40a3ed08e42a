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
}
