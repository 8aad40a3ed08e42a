//! A Gemini request as the neutral turn (contents and parts → messages,
//! function declarations and `codeExecution` → tools, `toolConfig`,
//! `generationConfig` → sampling and the carry), and what it leaves out,
//! named as the client wrote it.

use base64::Engine as _;
use serde_json::Value;
use shellgate_model::upstream::{
    Message, OutputFormat, ReasoningRequest, ToolCall, ToolChoice, ToolSpec, Turn,
};
use shellgate_wire::gemini::{Content, FunctionDeclaration, GenerateContentRequest, Part};

use crate::error::{ApiError, ApiResult};

/// The name of the code execution tool as the model sees it: a function
/// taking `code`.
pub(super) const CODE_TOOL: &str = "code_execution";

/// What the model is told of the code execution tool.
const CODE_TOOL_DESCRIPTION: &str = "Runs Python code in a sandbox and returns what it printed \
     (stdout, and the traceback when it raises). Variables persist between calls in the same \
     request. Matplotlib figures it shows are returned as images. The code is stopped after 30 \
     seconds. Common scientific libraries (numpy, pandas, matplotlib, sympy...) are available; \
     print the values you need.";

/// The turn of a request and what of it the upstream will not get.
pub(super) struct Translated {
    pub(super) turn: Turn,
    pub(super) uncarried: Vec<String>,
    /// The request offers the code execution tool.
    pub(super) code_execution: bool,
    /// The client asked for the model's thoughts (`includeThoughts`).
    pub(super) include_thoughts: bool,
}

/// The neutral turn of `request` for `model`.
pub(super) fn turn_of(request: &GenerateContentRequest, model: &str) -> ApiResult<Translated> {
    let mut uncarried: Vec<String> = request.extra.keys().cloned().collect();
    let (tools, code_execution) = tools(request, &mut uncarried);
    let mut messages = Vec::new();
    if let Some(system) = &request.system_instruction {
        let text = texts(&system.parts, "systemInstruction", &mut uncarried);
        if !text.is_empty() {
            messages.push(Message::System(text));
        }
    }
    messages.extend(conversation(
        &request.contents,
        code_execution,
        &mut uncarried,
    )?);
    let tool_choice = tool_choice(request, &tools, &mut uncarried)?;
    let mut turn = Turn {
        model: model.to_owned(),
        messages,
        tools,
        tool_choice,
        ..Default::default()
    };
    let mut include_thoughts = false;
    if let Some(config) = &request.generation_config {
        turn.temperature = config.temperature;
        turn.top_p = config.top_p;
        turn.max_output_tokens = config.max_output_tokens;
        turn.carry.stop = config.stop_sequences.clone().unwrap_or_default();
        turn.carry.top_k = config.top_k.filter(|k| *k >= 1.0).map(|k| k.round() as u64);
        let schema = config
            .response_json_schema
            .clone()
            .or_else(|| config.response_schema.clone().map(json_schema));
        turn.carry.output_format = match (schema, config.response_mime_type.as_deref()) {
            (Some(schema), _) => Some(OutputFormat::JsonSchema {
                name: "response".to_owned(),
                description: None,
                schema,
                strict: None,
            }),
            (None, Some("application/json")) => Some(OutputFormat::JsonObject),
            _ => None,
        };
        if config.candidate_count.is_some_and(|n| n > 1) {
            uncarried.push("generationConfig.candidateCount".to_owned());
        }
        if let Some(thinking) = &config.thinking_config {
            include_thoughts = thinking.include_thoughts.unwrap_or(false);
            let effort = thinking
                .thinking_level
                .as_deref()
                .map(str::to_ascii_lowercase)
                .or_else(|| (thinking.thinking_budget == Some(0)).then(|| "minimal".to_owned()));
            let budget_tokens = thinking
                .thinking_budget
                .and_then(|budget| u64::try_from(budget).ok())
                .filter(|budget| *budget > 0);
            if effort.is_some() || budget_tokens.is_some() {
                turn.carry.reasoning = Some(ReasoningRequest {
                    effort,
                    summary: None,
                    budget_tokens,
                });
            }
            uncarried.extend(
                thinking
                    .extra
                    .keys()
                    .map(|key| format!("generationConfig.thinkingConfig.{key}")),
            );
        }
        uncarried.extend(
            config
                .extra
                .keys()
                .map(|key| format!("generationConfig.{key}")),
        );
    }
    Ok(Translated {
        turn,
        uncarried,
        code_execution,
        include_thoughts,
    })
}

/// The text of `parts` (a system instruction's), one a line; a part that
/// is not text is named in `uncarried`.
fn texts(parts: &[Part], at: &str, uncarried: &mut Vec<String>) -> String {
    let mut text = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        match &part.text {
            Some(piece) => text.push(piece.clone()),
            None => uncarried.push(format!("{at}.parts[{index}] ({})", part.kind())),
        }
    }
    text.join("\n")
}

/// The text an inline file becomes when it is text (`text/*`, JSON, CSV):
/// its content, named by its type; `None` for any other (an image...).
fn inline_text(part: &Part) -> Option<String> {
    let blob = part.inline_data.as_ref()?;
    let mime = blob.mime_type.as_str();
    let textual = mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "application/csv" | "application/xml" | "application/x-yaml"
        );
    if !textual {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob.data.as_bytes())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    Some(format!("[attached file, {mime}]\n{text}"))
}

/// The id a call without one gets: its place in the conversation, so the
/// same replayed conversation names it the same.
fn synthesized_id(content: usize, part: usize) -> String {
    format!("call_{content}_{part}")
}

/// The contents as the turn's messages. A model content is one assistant
/// message (its text, its function calls and its code as calls of
/// [`CODE_TOOL`], each code's result the tool message after it); a user
/// content's function responses are tool messages (paired with their call
/// by `id`, else by name with the earliest call unanswered), its text a
/// user message.
fn conversation(
    contents: &[Content],
    code_execution: bool,
    uncarried: &mut Vec<String>,
) -> ApiResult<Vec<Message>> {
    let mut messages = Vec::new();
    // Calls of the last model content not answered yet: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (at, content) in contents.iter().enumerate() {
        let param = format!("contents[{at}]");
        uncarried.extend(content.extra.keys().map(|key| format!("{param}.{key}")));
        match content.role.as_deref() {
            Some("model") => {
                let mut text = Vec::new();
                let mut tool_calls = Vec::new();
                let mut results = Vec::new();
                pending.clear();
                for (index, part) in content.parts.iter().enumerate() {
                    if part.thought == Some(true) {
                        // The model's own reasoning: no protocol but
                        // Google's can take it back.
                        continue;
                    }
                    if let Some(piece) = &part.text {
                        text.push(piece.clone());
                    } else if let Some(call) = &part.function_call {
                        let id = call
                            .id
                            .clone()
                            .filter(|id| !id.is_empty())
                            .unwrap_or_else(|| synthesized_id(at, index));
                        pending.push((id.clone(), call.name.clone()));
                        tool_calls.push(ToolCall {
                            id,
                            name: call.name.clone(),
                            arguments: call
                                .args
                                .as_ref()
                                .map_or_else(|| "{}".to_owned(), Value::to_string),
                        });
                    } else if let Some(code) = &part.executable_code {
                        if code_execution {
                            let id = code
                                .id
                                .clone()
                                .filter(|id| !id.is_empty())
                                .unwrap_or_else(|| synthesized_id(at, index));
                            tool_calls.push(ToolCall {
                                id: id.clone(),
                                name: CODE_TOOL.to_owned(),
                                arguments: serde_json::json!({ "code": code.code }).to_string(),
                            });
                            results.push((id, None));
                        } else {
                            text.push(format!("```python\n{}\n```", code.code));
                        }
                    } else if let Some(result) = &part.code_execution_result {
                        let output = format!(
                            "{}\n{}",
                            outcome_name(result.outcome),
                            result.output.clone().unwrap_or_default()
                        );
                        // The result of the code it follows (by id, else
                        // the last code without one).
                        let slot = results
                            .iter_mut()
                            .rev()
                            .find(|(id, out)| {
                                out.is_none() && result.id.as_ref().is_none_or(|r| r == id)
                            })
                            .filter(|_| code_execution);
                        match slot {
                            Some((_, out)) => *out = Some(output),
                            None => text.push(format!("Output:\n{output}")),
                        }
                    } else if part.inline_data.is_some() {
                        // A figure its code showed: the model was told of
                        // it in the code's result.
                    } else {
                        uncarried.push(format!("{param}.parts[{index}] ({})", part.kind()));
                    }
                }
                messages.push(Message::Assistant {
                    text: text.join("\n"),
                    tool_calls,
                });
                for (call_id, output) in results {
                    messages.push(Message::Tool {
                        call_id,
                        output: output.unwrap_or_default(),
                    });
                }
            }
            Some("user") | Some("function") | None => {
                let mut text = Vec::new();
                for (index, part) in content.parts.iter().enumerate() {
                    if let Some(piece) = &part.text {
                        text.push(piece.clone());
                    } else if let Some(response) = &part.function_response {
                        let by_id = response
                            .id
                            .as_ref()
                            .and_then(|id| pending.iter().position(|(p, _)| p == id));
                        let by_name = || pending.iter().position(|(_, n)| *n == response.name);
                        let call_id = match by_id.or_else(by_name) {
                            Some(position) => pending.remove(position).0,
                            None => response.id.clone().ok_or_else(|| {
                                ApiError::invalid(
                                    format!("{param}.parts[{index}].functionResponse"),
                                    format!(
                                        "the functionResponse '{}' answers no functionCall of \
                                         the model content before it",
                                        response.name
                                    ),
                                )
                            })?,
                        };
                        messages.push(Message::Tool {
                            call_id,
                            output: response
                                .response
                                .as_ref()
                                .map_or_else(|| "{}".to_owned(), Value::to_string),
                        });
                    } else if let Some(attached) = inline_text(part) {
                        text.push(attached);
                    } else {
                        uncarried.push(format!("{param}.parts[{index}] ({})", part.kind()));
                    }
                }
                if !text.is_empty() {
                    messages.push(Message::User(text.join("\n")));
                }
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    format!("{param}.role"),
                    format!("a content's role is 'user' or 'model', not '{other}'"),
                ))
            }
        }
    }
    Ok(messages)
}

/// The outcome's name as the model reads it in a replayed result.
pub(super) fn outcome_name(outcome: shellgate_wire::gemini::Outcome) -> &'static str {
    use shellgate_wire::gemini::Outcome;
    match outcome {
        Outcome::OutcomeOk => "OUTCOME_OK",
        Outcome::OutcomeFailed => "OUTCOME_FAILED",
        Outcome::OutcomeDeadlineExceeded => "OUTCOME_DEADLINE_EXCEEDED",
        Outcome::OutcomeUnspecified => "OUTCOME_UNSPECIFIED",
    }
}

/// The request's tools: its function declarations, and [`CODE_TOOL`] when
/// it asks `codeExecution`; Google's other hosted tools are named in
/// `uncarried`.
fn tools(request: &GenerateContentRequest, uncarried: &mut Vec<String>) -> (Vec<ToolSpec>, bool) {
    let mut specs = Vec::new();
    let mut code_execution = false;
    for (index, tool) in request.tools.iter().flatten().enumerate() {
        for declaration in tool.function_declarations.iter().flatten() {
            specs.push(function(declaration));
        }
        if tool.code_execution.is_some() {
            code_execution = true;
        }
        uncarried.extend(
            tool.extra
                .keys()
                .map(|key| format!("tools[{index}] ({key})")),
        );
    }
    if code_execution && !specs.iter().any(|spec| spec.name == CODE_TOOL) {
        specs.push(ToolSpec {
            name: CODE_TOOL.to_owned(),
            description: CODE_TOOL_DESCRIPTION.to_owned(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The Python code to run"}},
                "required": ["code"],
            }),
            ..Default::default()
        });
    }
    (specs, code_execution)
}

/// A function declaration as a tool: its `parametersJsonSchema`, else its
/// `parameters` (Google's OpenAPI subset) as JSON Schema.
fn function(declaration: &FunctionDeclaration) -> ToolSpec {
    let parameters = declaration
        .parameters_json_schema
        .clone()
        .or_else(|| declaration.parameters.clone().map(json_schema))
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    ToolSpec {
        name: declaration.name.clone(),
        description: declaration.description.clone().unwrap_or_default(),
        parameters,
        ..Default::default()
    }
}

/// Google's schema (OpenAPI 3.0's subset, types upper case: `OBJECT`,
/// `STRING`; `nullable`) as JSON Schema: the types lower case, a nullable
/// type a pair with `null`.
fn json_schema(schema: Value) -> Value {
    match schema {
        Value::Object(mut map) => {
            let nullable = matches!(map.remove("nullable"), Some(Value::Bool(true)));
            let mut converted: serde_json::Map<String, Value> = map
                .into_iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("type", Value::String(kind)) => (key, Value::String(kind.to_lowercase())),
                    ("properties", Value::Object(properties)) => (
                        key,
                        Value::Object(
                            properties
                                .into_iter()
                                .map(|(name, inner)| (name, json_schema(inner)))
                                .collect(),
                        ),
                    ),
                    // Names and values, not schemas.
                    ("required" | "enum" | "propertyOrdering" | "example" | "default", value) => {
                        (key, value)
                    }
                    (_, value) => (key, json_schema(value)),
                })
                .collect();
            if nullable {
                if let Some(Value::String(kind)) = converted.remove("type") {
                    converted.insert("type".to_owned(), serde_json::json!([kind, "null"]));
                }
            }
            Value::Object(converted)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(json_schema).collect()),
        other => other,
    }
}

/// `toolConfig.functionCallingConfig` as the turn's choice: `AUTO` (and
/// `VALIDATED`), `ANY` (one allowed name: that function), `NONE`.
fn tool_choice(
    request: &GenerateContentRequest,
    tools: &[ToolSpec],
    uncarried: &mut Vec<String>,
) -> ApiResult<ToolChoice> {
    let Some(config) = &request.tool_config else {
        return Ok(ToolChoice::Auto);
    };
    uncarried.extend(config.extra.keys().map(|key| format!("toolConfig.{key}")));
    let Some(calling) = &config.function_calling_config else {
        return Ok(ToolChoice::Auto);
    };
    let allowed = calling
        .allowed_function_names
        .as_deref()
        .unwrap_or_default();
    match calling
        .mode
        .as_deref()
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None | Some("AUTO" | "VALIDATED" | "MODE_UNSPECIFIED") => Ok(ToolChoice::Auto),
        Some("NONE") => Ok(ToolChoice::None),
        Some("ANY") => match allowed {
            [one] if tools.iter().any(|tool| tool.name == *one) => {
                Ok(ToolChoice::Named(one.clone()))
            }
            [] => Ok(ToolChoice::Required),
            _ => {
                uncarried.push("toolConfig.functionCallingConfig.allowedFunctionNames".to_owned());
                Ok(ToolChoice::Required)
            }
        },
        Some(other) => Err(ApiError::invalid(
            "toolConfig.functionCallingConfig.mode",
            format!("mode is AUTO, ANY, NONE or VALIDATED, not '{other}'"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> GenerateContentRequest {
        shellgate_wire::param::parse(&body).expect("a request")
    }

    #[test]
    fn contents_become_messages_with_calls_paired_to_their_answers() {
        let translated = turn_of(
            &request(json!({
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "weather?"},
                        {"inlineData": {"mimeType": "text/csv", "data": "YSxi"}},
                        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
                    {"role": "model", "parts": [{"text": "calling", "thoughtSignature": "c2ln"},
                        {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"name": "weather", "response": {"t": 3}}}]}],
                "tools": [{"functionDeclarations": [{"name": "weather", "description": "w",
                    "parameters": {"type": "OBJECT", "properties": {
                        "city": {"type": "STRING", "nullable": true}}, "required": ["city"]}}]},
                    {"googleSearch": {}}],
                "generationConfig": {"temperature": 0.2, "stopSequences": ["x"], "seed": 1},
                "safetySettings": []
            })),
            "m",
        )
        .expect("translated");
        let turn = translated.turn;
        assert_eq!(
            turn.messages,
            vec![
                Message::System("be brief".into()),
                Message::User("weather?\n[attached file, text/csv]\na,b".into()),
                Message::Assistant {
                    text: "calling".into(),
                    tool_calls: vec![ToolCall {
                        id: "call_1_1".into(),
                        name: "weather".into(),
                        arguments: r#"{"city":"Oslo"}"#.into()
                    }]
                },
                Message::Tool {
                    call_id: "call_1_1".into(),
                    output: r#"{"t":3}"#.into()
                },
            ]
        );
        assert_eq!(
            turn.tools[0].parameters,
            json!({"type": "object", "properties": {"city": {"type": ["string", "null"]}},
                   "required": ["city"]})
        );
        assert_eq!(turn.temperature, Some(0.2));
        assert_eq!(turn.carry.stop, ["x"]);
        assert_eq!(
            translated.uncarried,
            [
                "safetySettings",
                "tools[1] (googleSearch)",
                "contents[0].parts[2] (inlineData)",
                "generationConfig.seed"
            ]
        );
        assert!(!translated.code_execution);
    }

    #[test]
    fn replayed_code_is_a_call_of_the_code_tool_when_it_is_offered() {
        let body = json!({
            "contents": [
                {"role": "user", "parts": [{"text": "2+2?"}]},
                {"role": "model", "parts": [
                    {"executableCode": {"language": "PYTHON", "code": "print(4)", "id": "e1"}},
                    {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "4\n", "id": "e1"}},
                    {"text": "4"}]},
                {"role": "user", "parts": [{"text": "and 3+3?"}]}],
            "tools": [{"codeExecution": {}}]
        });
        let translated = turn_of(&request(body), "m").expect("translated");
        assert!(translated.code_execution);
        assert_eq!(
            translated.turn.tools.last().map(|t| t.name.as_str()),
            Some(CODE_TOOL)
        );
        assert_eq!(
            translated.turn.messages[1..3],
            [
                Message::Assistant {
                    text: "4".into(),
                    tool_calls: vec![ToolCall {
                        id: "e1".into(),
                        name: CODE_TOOL.into(),
                        arguments: r#"{"code":"print(4)"}"#.into()
                    }]
                },
                Message::Tool {
                    call_id: "e1".into(),
                    output: "OUTCOME_OK\n4\n".into()
                },
            ]
        );
    }

    #[test]
    fn an_answer_to_no_call_and_an_unknown_role_are_400s() {
        let orphan = json!({"contents": [{"role": "user", "parts": [
            {"functionResponse": {"name": "f", "response": {}}}]}]});
        let error = turn_of(&request(orphan), "m").err().expect("refused");
        assert_eq!(
            error.param.as_deref(),
            Some("contents[0].parts[0].functionResponse")
        );
        let role = json!({"contents": [{"role": "system", "parts": [{"text": "x"}]}]});
        let error = turn_of(&request(role), "m").err().expect("refused");
        assert_eq!(error.param.as_deref(), Some("contents[0].role"));
    }
}
