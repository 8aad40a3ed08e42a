//! Every fixture the `openai` SDK produced (`fixtures/responses/`, see its
//! `generate.py`) is read into its type and written back to equal JSON.
//!
//! "Equal" ignores `null`s: the SDK writes `null` for an optional key it
//! was given as `None` where shellgate may omit the key, and the other way
//! round (shellgate always writes a shell call's `timeout_ms`). Numbers
//! are compared by value (the SDK writes `created_at` as a float; shellgate
//! writes whole seconds). A message written without a `type` (the SDK's
//! `EasyInputMessage`) is read as one and written with `"type": "message"`.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::*;

/// `value` without `null`s (in objects), numbers as `f64`.
fn normal(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut map: serde_json::Map<String, Value> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), normal(v)))
                .collect();
            if map.contains_key("role") && !map.contains_key("type") {
                map.insert("type".into(), Value::String("message".into()));
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.iter().map(normal).collect()),
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        other => other.clone(),
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(name: &str, fixture: &Value) -> T {
    let typed: T = from_value(fixture.clone())
        .unwrap_or_else(|e| panic!("{name}: {}: {}", e.param, e.message));
    let written = serde_json::to_value(&typed).unwrap();
    assert_eq!(normal(&written), normal(fixture), "{name}");
    typed
}

#[test]
fn every_sdk_fixture_round_trips() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/responses");
    let mut seen = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let kind = name.split('.').next().unwrap().to_owned();
        match kind.as_str() {
            "item" => {
                let item: Item = round_trip(&name, &fixture);
                let other = name == "item.item_reference.json";
                assert_eq!(matches!(item, Item::Other(_)), other, "{name}");
            }
            "tool" => {
                let tool: Tool = round_trip(&name, &fixture);
                // Hosted tools shellgate does not run are kept whole.
                let other = [
                    "tool.web_search.json",
                    "tool.file_search.json",
                    "tool.mcp.json",
                    "tool.image_generation.json",
                ]
                .contains(&name.as_str());
                assert_eq!(matches!(tool, Tool::Other(_)), other, "{name}");
            }
            "tool_choice" => {
                round_trip::<ToolChoice>(&name, &fixture);
            }
            "create_response" => {
                let request: CreateResponse = round_trip(&name, &fixture);
                assert_eq!(request.refused(), None, "{name}");
            }
            "response" => {
                round_trip::<Response>(&name, &fixture);
            }
            "event" => {
                let event: StreamEvent = round_trip(&name, &fixture);
                assert_eq!(Some(event.kind()), fixture["type"].as_str(), "{name}");
            }
            other => panic!("{name}: no type for fixtures named {other}.*"),
        }
        kinds.insert(kind);
        seen += 1;
    }
    assert!(seen >= 50, "only {seen} fixtures in {}", dir.display());
    assert_eq!(kinds.len(), 6, "{kinds:?}");
}

#[test]
fn errors_name_the_field_inside_tagged_unions() {
    let bad = serde_json::json!({
        "model": "m",
        "tools": [{"type": "openrouter:shell", "parameters": {"sleep_after_seconds": -1}}],
    });
    let error = from_value::<CreateResponse>(bad).unwrap_err();
    assert_eq!(error.param, "tools[0].parameters.sleep_after_seconds");
    let bad = serde_json::json!({"input": [{"role": "user", "content": "a"},
        {"type": "shell_call", "action": {"commands": "ls"}}]});
    let error = from_value::<CreateResponse>(bad).unwrap_err();
    assert_eq!(error.param, "input[1].action.commands");
    let bad = serde_json::json!({"input": [{"content": "a"}]});
    let error = from_value::<CreateResponse>(bad).unwrap_err();
    assert_eq!(error.param, "input[0].type");
    let bad = serde_json::json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]});
    let error = from_value::<CreateResponse>(bad).unwrap_err();
    assert_eq!(error.param, "input[0].content[0].text");
    assert!(
        error
            .message
            .starts_with("Invalid value for 'input[0].content[0].text': "),
        "{}",
        error.message
    );
    let bad = serde_json::json!({"stream": "yes"});
    let error = from_value::<CreateResponse>(bad).unwrap_err();
    assert_eq!(error.param, "stream");
    let bad = serde_json::json!({"tool_choice": "sometimes"});
    let error = from_value::<CreateResponse>(bad).unwrap_err();
    assert_eq!(
        (error.param.as_str(), error.message.as_str()),
        (
            "tool_choice",
            "tool_choice 'sometimes' is not 'auto', 'required' or 'none'"
        )
    );
}

#[test]
fn unknown_keys_are_kept_and_unknown_parameters_refused() {
    let item: Item = from_value(serde_json::json!({
        "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "caller": {"type": "direct"}
    }))
    .unwrap();
    match &item {
        Item::FunctionCall(call) => assert!(call.extra.contains_key("caller")),
        other => panic!("{other:?}"),
    }
    let request: CreateResponse =
        from_value(serde_json::json!({"model": "m", "reasoning": {}, "bogus": 1})).unwrap();
    assert_eq!(request.refused(), Some("bogus"));
    assert!(request.carried.contains_key("reasoning"));
}

#[test]
fn code_interpreter_shapes_are_typed() {
    let tool: Tool =
        from_value(serde_json::json!({"type": "code_interpreter", "container": "cntr_1"})).unwrap();
    assert!(matches!(
        tool,
        Tool::CodeInterpreter(CodeInterpreterTool { container: Some(CodeInterpreterContainer::Id(ref id)), .. }) if id == "cntr_1"
    ));
    let bad = from_value::<Tool>(serde_json::json!({"type": "code_interpreter",
        "container": {"type": "auto", "memory_limit": "3g"}}))
    .unwrap_err();
    assert_eq!(bad.param, "container.memory_limit");
    let bad = from_value::<Tool>(serde_json::json!({"type": "code_interpreter", "container": 1}))
        .unwrap_err();
    assert_eq!(bad.param, "container");
    let message: Item = from_value(serde_json::json!({"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "see a.csv", "annotations": [
            {"type": "container_file_citation", "container_id": "cntr_1", "file_id": "cfile_1",
             "filename": "a.csv", "start_index": 4, "end_index": 9},
            {"type": "url_citation", "url": "https://example.com"}]}]}))
    .unwrap();
    let Item::Message(Message {
        content: MessageContent::Parts(parts),
        ..
    }) = message
    else {
        panic!("{message:?}")
    };
    let ContentPart::OutputText(OutputText {
        annotations: Some(annotations),
        ..
    }) = &parts[0]
    else {
        panic!("{parts:?}")
    };
    assert!(matches!(&annotations[0], Annotation::ContainerFileCitation(c) if c.end_index == 9));
    assert!(matches!(&annotations[1], Annotation::Other(_)));
    let call: Item = from_value(
        serde_json::json!({"type": "code_interpreter_call", "id": "ci_1",
        "status": "interpreting", "code": "1", "container_id": "cntr_1", "outputs": null}),
    )
    .unwrap();
    assert_eq!(call.container_id(), Some("cntr_1"));
}
