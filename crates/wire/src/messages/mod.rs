//! Anthropic's Messages API (`POST /v1/messages`): the request, content
//! blocks, tools, the `Message` response, its stream events and the error
//! body, as the official `anthropic` SDK's models (`anthropic.types`) shape
//! them, with OpenRouter's server tools (`openrouter:shell`,
//! `openrouter:bash`) and their result blocks.
//!
//! The server reads requests and writes answers with these; the upstream
//! adapter for an Anthropic upstream writes requests and reads answers with
//! the same. Fixtures the SDK produced (`fixtures/messages/`, made by its
//! `generate.py`) round-trip through every type (this module's tests).

mod batches;
mod blocks;
mod request;
mod response;
mod stream;

pub use batches::*;
pub use blocks::*;
pub use request::*;
pub use response::*;
pub use stream::*;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::{json, Value};

    use super::*;
    use crate::param::{parse, ParamError};

    /// `value` without its null-valued keys: the SDK writes `null` for an
    /// absent optional field, and reads a missing key and `null` alike.
    fn without_nulls(value: Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k, without_nulls(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
            other => other,
        }
    }

    /// Every fixture of `kind` read as a `T` and written back means the same.
    fn round_trips<T: DeserializeOwned + Serialize>(kind: &str) -> usize {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/messages")
            .join(kind);
        let mut count = 0;
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let fixture: Value = serde_json::from_str(&text).unwrap();
            let typed: T = parse(&fixture).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let written = serde_json::to_value(&typed).unwrap();
            assert_eq!(
                without_nulls(written),
                without_nulls(fixture),
                "{} does not round-trip",
                path.display()
            );
            count += 1;
        }
        count
    }

    #[test]
    fn every_sdk_fixture_round_trips() {
        let counts = [
            round_trips::<CreateMessage>("CreateMessage"),
            round_trips::<MessageParam>("MessageParam"),
            round_trips::<ContentBlock>("ContentBlock"),
            round_trips::<Tool>("Tool"),
            round_trips::<ToolChoice>("ToolChoice"),
            round_trips::<ThinkingConfig>("ThinkingConfig"),
            round_trips::<OutputConfig>("OutputConfig"),
            round_trips::<CountTokens>("CountTokens"),
            round_trips::<TokenCount>("TokenCount"),
            round_trips::<Message>("Message"),
            round_trips::<Usage>("Usage"),
            round_trips::<StreamEvent>("StreamEvent"),
            round_trips::<ErrorResponse>("ErrorResponse"),
        ];
        assert!(
            counts.iter().all(|n| *n > 0),
            "a folder is empty: {counts:?}"
        );
    }

    #[test]
    fn fixtures_read_as_the_variants_they_are() {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/messages");
        let read = |path: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(folder.join(path)).unwrap()).unwrap()
        };
        let block: ContentBlock =
            parse(&read("ContentBlock/openrouter_shell_tool_result.json")).unwrap();
        assert!(
            matches!(block, ContentBlock::OpenrouterShellToolResult(ref r) if r.content.len() == 2)
        );
        // What current clients send is consumed or carried, none refused.
        let current = CreateMessage::read(&read("CreateMessage/current.json")).unwrap();
        assert!(matches!(
            current.thinking,
            Some(ThinkingConfig::Adaptive { .. })
        ));
        assert_eq!(current.top_k, Some(40));
        let carried: Vec<&str> = current.carried.keys().map(String::as_str).collect();
        assert_eq!(
            carried,
            [
                "cache_control",
                "container",
                "context_management",
                "mcp_servers"
            ]
        );
        let structured = CreateMessage::read(&read("CreateMessage/structured.json")).unwrap();
        assert!(matches!(
            structured.output_config.and_then(|c| c.format),
            Some(OutputFormat::JsonSchema { .. })
        ));
        assert!(CountTokens::read(&read("CountTokens/count.json")).is_ok());
        let tool: Tool = parse(&read("Tool/custom.json")).unwrap();
        assert!(matches!(tool, Tool::Custom(_)));
        let tool: Tool = parse(&read("Tool/openrouter_bash.json")).unwrap();
        assert!(matches!(tool, Tool::OpenRouterBash(_)));
        let event: StreamEvent = parse(&read("StreamEvent/message_stop.json")).unwrap();
        assert_eq!(event, StreamEvent::MessageStop);
        let event: StreamEvent = parse(&read("StreamEvent/content_block_delta_json.json")).unwrap();
        assert!(matches!(
            event,
            StreamEvent::ContentBlockDelta {
                delta: Delta::InputJsonDelta { .. },
                ..
            }
        ));
        // What an upstream adds is kept, not an error.
        let event: StreamEvent = parse(&json!({"type": "future_event", "x": 1})).unwrap();
        assert_eq!(event.kind(), "future_event");
        let block: ContentBlock =
            parse(&json!({"type": "web_search_tool_result", "tool_use_id": "x"})).unwrap();
        assert_eq!(block.kind(), "web_search_tool_result");
        // ... and written back whole.
        assert_eq!(
            serde_json::to_value(&block).unwrap(),
            json!({"type": "web_search_tool_result", "tool_use_id": "x"})
        );
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"type": "future_event", "x": 1})
        );
        let tool: Tool = parse(&json!({"type": "web_search_20250305", "name": "w"})).unwrap();
        assert_eq!(tool.kind(), Some("web_search_20250305"));
        assert_eq!(
            serde_json::to_value(&tool).unwrap(),
            json!({"type": "web_search_20250305", "name": "w"})
        );
        let reason: StopReason = serde_json::from_value(json!("some_new_reason")).unwrap();
        assert_eq!(reason, StopReason::Other("some_new_reason".into()));
        assert_eq!(
            serde_json::to_value(StopReason::PauseTurn).unwrap(),
            json!("pause_turn")
        );
    }

    fn error_of<T: DeserializeOwned + std::fmt::Debug>(value: Value) -> ParamError {
        parse::<T>(&value).expect_err("should not parse")
    }

    #[test]
    fn errors_name_the_param_at_fault() {
        let base = || json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
        let with = |key: &str, value: Value| {
            let mut body = base();
            body[key] = value;
            body
        };
        let param = |body: Value| {
            CreateMessage::read(&body)
                .expect_err("should not parse")
                .param
        };
        assert!(CreateMessage::read(&base()).is_ok());
        assert_eq!(param(with("stream", json!("yes"))), "stream");
        assert_eq!(param(with("max_tokens", json!(-1))), "max_tokens");
        assert_eq!(param(with("bogus", json!(1))), "bogus");
        assert_eq!(
            CreateMessage::read(&with("bogus", json!(1)))
                .unwrap_err()
                .message,
            "Extra inputs are not permitted"
        );
        // What current clients send is consumed or carried, not refused.
        let current = json!({"model": "m", "max_tokens": 5, "messages": [],
            "thinking": {"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {}}},
            "container": "cntr_1", "mcp_servers": [], "top_k": 5, "stop_sequences": ["END"]});
        let read = CreateMessage::read(&current).unwrap();
        assert!(read.carried.contains_key("context_management"));
        assert_eq!(serde_json::to_value(&read).unwrap(), current);
        assert_eq!(
            param(with("thinking", json!({"type": "enabled"}))),
            "thinking.budget_tokens"
        );
        assert_eq!(
            param(with("output_config", json!({"format": {"type": "xml"}}))),
            "output_config.format.type"
        );
        let count = |body: Value| CountTokens::read(&body).map_err(|e| e.param);
        assert!(count(json!({"model": "m", "messages": [], "context_management": {}})).is_ok());
        assert_eq!(
            count(json!({"model": "m", "messages": [], "max_tokens": 5})).unwrap_err(),
            "max_tokens"
        );
        let mut missing = base();
        missing.as_object_mut().unwrap().remove("max_tokens");
        assert_eq!(
            error_of::<CreateMessage>(missing).to_string(),
            "max_tokens: Field required"
        );
        assert_eq!(
            param(with(
                "messages",
                json!([{"role": "system", "content": "x"}])
            )),
            "messages[0].role"
        );
        assert_eq!(
            param(with("messages", json!([{"role": "user", "content": 5}]))),
            "messages[0].content"
        );
        let blocks = |block: Value| {
            with(
                "messages",
                json!([{"role": "user", "content": ["x", block]}]),
            )
        };
        // (`"x"` is not a block: the error is at index 0.)
        assert_eq!(
            param(blocks(json!({"type": "text", "text": "a"}))),
            "messages[0].content[0]"
        );
        let block = |block: Value| {
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "text", "text": "a"}, block]}]),
            )
        };
        assert_eq!(
            param(block(json!({"type": "tool_use", "name": "x"}))),
            "messages[0].content[1].id"
        );
        assert_eq!(
            param(block(json!({"type": "tool_use", "id": 5, "name": "x"}))),
            "messages[0].content[1].id"
        );
        assert_eq!(
            param(block(json!({"text": "a"}))),
            "messages[0].content[1].type"
        );
        assert_eq!(
            param(block(json!({"type": 3}))),
            "messages[0].content[1].type"
        );
        assert_eq!(
            param(block(
                json!({"type": "image", "source": {"type": "base64", "data": "x"}})
            )),
            "messages[0].content[1].source.media_type"
        );
        assert_eq!(
            param(block(
                json!({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": 1}]})
            )),
            "messages[0].content[1].content[0].text"
        );
        assert_eq!(
            param(with("tool_choice", json!({"type": "sometimes"}))),
            "tool_choice.type"
        );
        assert_eq!(
            param(with("tool_choice", json!({"type": "tool"}))),
            "tool_choice.name"
        );
        assert_eq!(
            param(with(
                "tool_choice",
                json!({"type": "auto", "disable_parallel_tool_use": "no"})
            )),
            "tool_choice.disable_parallel_tool_use"
        );
        assert_eq!(
            param(with("thinking", json!({"type": "sometimes"}))),
            "thinking.type"
        );
        let tool = |tool: Value| {
            param(with(
                "tools",
                json!([{"name": "a", "input_schema": {}}, tool]),
            ))
        };
        assert_eq!(tool(json!({"name": "b"})), "tools[1].input_schema");
        assert_eq!(
            tool(json!({"name": "b", "input_schema": "x"})),
            "tools[1].input_schema"
        );
        assert_eq!(
            tool(
                json!({"type": "openrouter:shell", "parameters": {"environment": {
                "type": "container_reference", "container_id": 5}}})
            ),
            "tools[1].parameters.environment.container_id"
        );
        assert_eq!(
            tool(json!({"type": "openrouter:bash", "parameters": {"sleep_after_seconds": 1.5}})),
            "tools[1].parameters.sleep_after_seconds"
        );
        assert_eq!(param(json!("text")), "");
    }
}

#[cfg(test)]
mod schema_tests {
    use utoipa::{PartialSchema, ToSchema};

    use super::*;

    /// The OpenAPI document can list these types: their schemas build, and
    /// collecting what they refer to ends (blocks hold blocks: a
    /// `tool_result`'s content, a document's).
    #[test]
    fn the_schemas_build_and_collect() {
        let mut schemas = Vec::new();
        CreateMessage::schemas(&mut schemas);
        Message::schemas(&mut schemas);
        StreamEvent::schemas(&mut schemas);
        ErrorResponse::schemas(&mut schemas);
        let names: Vec<String> = schemas.iter().map(|(name, _)| name.clone()).collect();
        for name in ["ContentBlock", "Tool", "TextOrBlocks", "Usage"] {
            assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
        }
        let create = serde_json::to_value(CreateMessage::schema()).unwrap();
        assert!(create.to_string().contains("max_tokens"));
    }
}
