//! A Gemini request as the loop's request (contents and parts → the
//! loop's items, function declarations and `codeExecution` → tools,
//! `toolConfig`, `generationConfig` → sampling and the carry), and what it
//! leaves out, named as the client wrote it.

use base64::Engine as _;
use serde_json::Value;
use shellgate_model::google_outcome;
use shellgate_model::tools::{
    Environment, Function, GoogleCodeExecution, Tools, GOOGLE_CODE_TIMEOUT,
};
use shellgate_model::turn::Carry;
use shellgate_model::upstream::{OutputFormat, ReasoningRequest, ToolChoice, Turn};
use shellgate_wire::gemini::{
    Content, FunctionDeclaration, GenerateContentRequest, GenerationConfig, Part,
};
use shellgate_wire::responses::{
    self as items, CodeInterpreterCall, CodeInterpreterOutput, CodeInterpreterStatus, ContentPart,
    Item, ItemStatus, MessageContent, Role, ToolOutput,
};

use crate::error::{ApiError, ApiResult};

/// A request as the loop takes it, and what of it the upstream will not
/// get.
#[derive(Debug)]
pub(super) struct Translated {
    pub(super) instructions: Option<String>,
    pub(super) items: Vec<Item>,
    /// The function declarations, and Google's code execution (in a new
    /// container, for Google's 30 seconds, until the handler says
    /// otherwise).
    pub(super) tools: Tools,
    pub(super) tool_choice: ToolChoice,
    pub(super) temperature: Option<f64>,
    pub(super) top_p: Option<f64>,
    pub(super) max_output_tokens: Option<u32>,
    pub(super) carry: Carry,
    pub(super) uncarried: Vec<String>,
    /// The client asked for the model's thoughts (`includeThoughts`).
    pub(super) include_thoughts: bool,
}

impl Translated {
    /// The one turn the request is for the upstream (counting its tokens).
    pub(super) fn turn(&self, model: &str) -> Turn {
        let tools = &self.tools;
        Turn {
            model: model.to_owned(),
            messages: shellgate_model::conversation::messages_offering(
                self.instructions.as_deref(),
                &self.items,
                &|name| tools.function(name).is_some() || tools.hosted(name),
            ),
            tools: tools.specs(&|_: &Environment| String::new()),
            tool_choice: self.tool_choice.clone(),
            temperature: self.temperature,
            top_p: self.top_p,
            max_output_tokens: self.max_output_tokens,
            parallel_tool_calls: None,
            carry: tools.carry(self.carry.clone()),
        }
    }
}

/// The loop's request of `request`.
pub(super) fn turn_of(
    request: &GenerateContentRequest,
    attachments: &Attachments,
) -> ApiResult<Translated> {
    let mut uncarried: Vec<String> = request.extra.keys().cloned().collect();
    let tools = tools(request, &mut uncarried)?;
    let instructions = request
        .system_instruction
        .as_ref()
        .map(|system| texts(&system.parts, "systemInstruction", &mut uncarried))
        .filter(|text| !text.is_empty());
    let code_execution = tools.google_code_execution.is_some();
    let items = conversation(
        &request.contents,
        code_execution,
        attachments,
        &mut uncarried,
    )?;
    let tool_choice = tool_choice(request, &tools, &mut uncarried)?;
    let mut translated = Translated {
        instructions,
        items,
        tools,
        tool_choice,
        temperature: None,
        top_p: None,
        max_output_tokens: None,
        carry: Carry::default(),
        uncarried,
        include_thoughts: false,
    };
    if let Some(config) = &request.generation_config {
        generation(config, &mut translated);
    }
    Ok(translated)
}

/// `generationConfig`: sampling, stops, the output's format, thinking.
fn generation(config: &GenerationConfig, translated: &mut Translated) {
    let carry = &mut translated.carry;
    translated.temperature = config.temperature;
    translated.top_p = config.top_p;
    translated.max_output_tokens = config.max_output_tokens;
    carry.stop = config.stop_sequences.clone().unwrap_or_default();
    carry.top_k = config.top_k.filter(|k| *k >= 1.0).map(|k| k.round() as u64);
    let schema = config
        .response_json_schema
        .clone()
        .or_else(|| config.response_schema.clone().map(json_schema));
    carry.output_format = match (schema, config.response_mime_type.as_deref()) {
        (Some(schema), _) => Some(OutputFormat::JsonSchema {
            name: "response".to_owned(),
            description: None,
            schema,
            strict: None,
        }),
        (None, Some("application/json")) => Some(OutputFormat::JsonObject),
        _ => None,
    };
    let uncarried = &mut translated.uncarried;
    if config.candidate_count.is_some_and(|n| n > 1) {
        uncarried.push("generationConfig.candidateCount".to_owned());
    }
    if let Some(thinking) = &config.thinking_config {
        translated.include_thoughts = thinking.include_thoughts.unwrap_or(false);
        let budget_tokens = thinking
            .thinking_budget
            .and_then(|budget| u64::try_from(budget).ok())
            .filter(|budget| *budget > 0);
        // A budget is an effort too, for the protocols that take only
        // that (as the Messages API's budget is).
        let effort = thinking
            .thinking_level
            .as_deref()
            .map(str::to_ascii_lowercase)
            .or_else(|| (thinking.thinking_budget == Some(0)).then(|| "minimal".to_owned()))
            .or_else(|| {
                budget_tokens.map(|budget| {
                    shellgate_model::upstream::anthropic::effort_for_budget(budget).to_owned()
                })
            });
        if effort.is_some() || budget_tokens.is_some() {
            carry.reasoning = Some(ReasoningRequest {
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

/// Whether a file of type `mime` is text the model can read as it is.
pub(super) fn textual(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "application/csv" | "application/xml" | "application/x-yaml"
        )
}

/// What a `fileData` part's file is for the model: a file put in the code
/// execution's container (where, and its type), or its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Attached {
    InContainer { path: String, mime: String },
    Text(String),
}

/// The files the request's `fileData` parts name, by `fileUri` (one not
/// here cannot reach the upstream).
pub(super) type Attachments = std::collections::HashMap<String, Attached>;

/// The text an inline file becomes when it is text (`text/*`, JSON, CSV):
/// its content, named by its type; `None` for any other (an image...).
fn inline_text(part: &Part) -> Option<String> {
    let blob = part.inline_data.as_ref()?;
    let mime = blob.mime_type.as_str();
    if !textual(mime) {
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

/// A message item of `role` saying `text`.
fn message(role: Role, text: String) -> Item {
    let part = match role {
        Role::Assistant => ContentPart::OutputText(items::OutputText {
            text,
            annotations: None,
            extra: Default::default(),
        }),
        _ => ContentPart::InputText(items::InputText {
            text,
            extra: Default::default(),
        }),
    };
    Item::Message(items::Message {
        id: None,
        role,
        status: Some(ItemStatus::Completed),
        content: MessageContent::Parts(vec![part]),
        extra: Default::default(),
    })
}

/// The calls of the model content before the one being read that are not
/// answered yet: (id, name).
type Pending = Vec<(String, String)>;

/// The contents as the loop's items. A model content's parts become items
/// in their order: its text an assistant message, its function calls
/// `function_call`s, its code (when the request offers code execution)
/// `code_interpreter_call`s holding the result and the figures after it;
/// a user content's function responses become `function_call_output`s
/// (paired with their call by `id`, else by name with the earliest call
/// unanswered), its text one user message after them.
fn conversation(
    contents: &[Content],
    code_execution: bool,
    attachments: &Attachments,
    uncarried: &mut Vec<String>,
) -> ApiResult<Vec<Item>> {
    let mut items = Vec::new();
    let mut pending = Pending::new();
    for (at, content) in contents.iter().enumerate() {
        let param = format!("contents[{at}]");
        uncarried.extend(content.extra.keys().map(|key| format!("{param}.{key}")));
        match content.role.as_deref() {
            Some("model") => {
                pending.clear();
                let said = ModelContent {
                    at,
                    code_execution,
                    items: &mut items,
                    pending: &mut pending,
                    text: Vec::new(),
                    code: None,
                };
                said.read(&content.parts, uncarried);
            }
            Some("user") | Some("function") | None => user_content(
                at,
                &content.parts,
                attachments,
                &mut pending,
                &mut items,
                uncarried,
            )?,
            Some(other) => {
                return Err(ApiError::invalid(
                    format!("{param}.role"),
                    format!("a content's role is 'user' or 'model', not '{other}'"),
                ))
            }
        }
    }
    Ok(items)
}

/// A model content being read into items.
struct ModelContent<'a> {
    at: usize,
    code_execution: bool,
    items: &'a mut Vec<Item>,
    pending: &'a mut Pending,
    /// Text read since the last item.
    text: Vec<String>,
    /// Where the last code call is in `items`.
    code: Option<usize>,
}

impl ModelContent<'_> {
    fn read(mut self, parts: &[Part], uncarried: &mut Vec<String>) {
        for (index, part) in parts.iter().enumerate() {
            if let Some(signature) = &part.thought_signature {
                // The reasoning that came before the part, given back in
                // its place.
                match super::signature::read(signature) {
                    Some(reasoning) => {
                        for item in reasoning {
                            self.push(Item::Reasoning(item));
                        }
                    }
                    None => uncarried.push(format!(
                        "contents[{}].parts[{index}].thoughtSignature",
                        self.at
                    )),
                }
            }
            if part.thought == Some(true) {
                // The model's own reasoning: no protocol but Google's can
                // take it back.
                continue;
            }
            if let Some(piece) = &part.text {
                self.text.push(piece.clone());
            } else if let Some(call) = &part.function_call {
                let id = call
                    .id
                    .clone()
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| synthesized_id(self.at, index));
                self.pending.push((id.clone(), call.name.clone()));
                let arguments = call
                    .args
                    .as_ref()
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                self.push(Item::FunctionCall(items::FunctionCall {
                    id: None,
                    call_id: Some(id),
                    name: call.name.clone(),
                    namespace: None,
                    arguments,
                    status: Some(ItemStatus::Completed),
                    extra: Default::default(),
                }));
            } else if let Some(code) = &part.executable_code {
                self.code(code, index);
            } else if let Some(result) = &part.code_execution_result {
                self.result(result);
            } else if let Some(blob) = &part.inline_data {
                // A figure its code showed: the call's image.
                if let Some(Item::CodeInterpreterCall(call)) = self.code.map(|i| &mut self.items[i])
                {
                    call.outputs
                        .get_or_insert_with(Vec::new)
                        .push(CodeInterpreterOutput::Image {
                            url: format!("data:{};base64,{}", blob.mime_type, blob.data),
                            extra: Default::default(),
                        });
                }
            } else {
                uncarried.push(format!(
                    "contents[{}].parts[{index}] ({})",
                    self.at,
                    part.kind()
                ));
            }
        }
        self.flush();
    }

    /// The text read so far, as an assistant message before what follows.
    fn flush(&mut self) {
        if !self.text.is_empty() {
            let text = std::mem::take(&mut self.text).join("\n");
            self.items.push(message(Role::Assistant, text));
        }
    }

    fn push(&mut self, item: Item) {
        self.flush();
        self.items.push(item);
    }

    /// `executableCode`: a call of the code tool when it is offered, else
    /// text the model wrote.
    fn code(&mut self, code: &shellgate_wire::gemini::ExecutableCode, index: usize) {
        if !self.code_execution {
            self.text.push(format!("```python\n{}\n```", code.code));
            return;
        }
        let id = code
            .id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| synthesized_id(self.at, index));
        self.push(Item::CodeInterpreterCall(CodeInterpreterCall {
            id: Some(id),
            code: Some(code.code.clone()),
            container_id: None,
            outputs: None,
            status: None,
            extra: Default::default(),
        }));
        self.code = Some(self.items.len() - 1);
    }

    /// `codeExecutionResult`: the result of the code call it follows (by
    /// id, else the last without a result), else text.
    fn result(&mut self, result: &shellgate_wire::gemini::CodeExecutionResult) {
        let output = result.output.clone().unwrap_or_default();
        let call = self.items.iter_mut().rev().find_map(|item| match item {
            Item::CodeInterpreterCall(call)
                if call.status.is_none()
                    && result
                        .id
                        .as_ref()
                        .is_none_or(|id| call.id.as_ref() == Some(id)) =>
            {
                Some(call)
            }
            _ => None,
        });
        match call {
            Some(call) => {
                call.status = Some(status_of(result.outcome));
                call.outputs.get_or_insert_with(Vec::new).insert(
                    0,
                    CodeInterpreterOutput::Logs {
                        logs: output,
                        extra: Default::default(),
                    },
                );
            }
            None => self.text.push(format!(
                "Output:\n{}\n{output}",
                google_outcome::outcome_name(result.outcome)
            )),
        }
    }
}

/// The status of a replayed call whose result had `outcome`.
fn status_of(outcome: shellgate_wire::gemini::Outcome) -> CodeInterpreterStatus {
    use shellgate_wire::gemini::Outcome;
    match outcome {
        Outcome::OutcomeOk => CodeInterpreterStatus::Completed,
        Outcome::OutcomeFailed => CodeInterpreterStatus::Failed,
        Outcome::OutcomeDeadlineExceeded => CodeInterpreterStatus::Incomplete,
        Outcome::OutcomeUnspecified => CodeInterpreterStatus::Completed,
    }
}

/// A user content: its function responses, then its text as one message.
fn user_content(
    at: usize,
    parts: &[Part],
    attachments: &Attachments,
    pending: &mut Pending,
    items: &mut Vec<Item>,
    uncarried: &mut Vec<String>,
) -> ApiResult<()> {
    let param = format!("contents[{at}]");
    let mut text = Vec::new();
    for (index, part) in parts.iter().enumerate() {
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
                            "the functionResponse '{}' answers no functionCall of the model \
                             content before it",
                            response.name
                        ),
                    )
                })?,
            };
            let output = response
                .response
                .as_ref()
                .map_or_else(|| "{}".to_owned(), Value::to_string);
            items.push(Item::FunctionCallOutput(items::FunctionCallOutput {
                id: None,
                call_id: Some(call_id),
                output: ToolOutput::Text(output),
                status: Some(ItemStatus::Completed),
                extra: Default::default(),
            }));
        } else if let Some(attached) = inline_text(part) {
            text.push(attached);
        } else if let Some(attached) = part
            .file_data
            .as_ref()
            .and_then(|file| attachments.get(&file.file_uri))
        {
            text.push(match attached {
                Attached::InContainer { path, mime } => format!(
                    "[attached file {path} ({mime}), in the code execution tool's environment]"
                ),
                Attached::Text(content) => content.clone(),
            });
        } else {
            uncarried.push(format!("{param}.parts[{index}] ({})", part.kind()));
        }
    }
    if !text.is_empty() {
        items.push(message(Role::User, text.join("\n")));
    }
    Ok(())
}

/// The request's tools: its function declarations, and Google's code
/// execution when it asks `codeExecution`; Google's other hosted tools
/// are named in `uncarried`. A function named like the code tool beside
/// it, or two functions of one name, are a 400.
fn tools(request: &GenerateContentRequest, uncarried: &mut Vec<String>) -> ApiResult<Tools> {
    let mut tools = Tools::default();
    for (index, tool) in request.tools.iter().flatten().enumerate() {
        for declaration in tool.function_declarations.iter().flatten() {
            tools.functions.push(function(declaration));
        }
        if tool.code_execution.is_some() {
            tools.google_code_execution = Some(GoogleCodeExecution {
                environment: Environment::ContainerAuto(Default::default()),
                timeout: GOOGLE_CODE_TIMEOUT,
            });
        }
        uncarried.extend(
            tool.extra
                .keys()
                .map(|key| format!("tools[{index}] ({key})")),
        );
    }
    tools
        .check_names()
        .map_err(|e| ApiError::invalid(e.param, e.message))?;
    Ok(tools)
}

/// A function declaration as a tool: its `parametersJsonSchema`, else its
/// `parameters` (Google's OpenAPI subset) as JSON Schema.
fn function(declaration: &FunctionDeclaration) -> Function {
    let parameters = declaration
        .parameters_json_schema
        .clone()
        .or_else(|| declaration.parameters.clone().map(json_schema))
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    Function {
        name: declaration.name.clone(),
        description: declaration.description.clone().unwrap_or_default(),
        parameters,
        custom: None,
        namespace: None,
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
    tools: &Tools,
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
            [one] if tools.function(one).is_some() || tools.hosted(one) => {
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
    use shellgate_model::tools::GOOGLE_CODE_EXECUTION;
    use shellgate_model::upstream::{Message, ToolCall};

    fn turn_of_plain(request: &GenerateContentRequest) -> ApiResult<Translated> {
        turn_of(request, &Attachments::new())
    }

    fn request(body: Value) -> GenerateContentRequest {
        shellgate_wire::param::parse(&body).expect("a request")
    }

    #[test]
    fn contents_become_messages_with_calls_paired_to_their_answers() {
        let translated = turn_of_plain(&request(json!({
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
        })))
        .expect("translated");
        let turn = translated.turn("m");
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
                "contents[1].parts[0].thoughtSignature",
                "generationConfig.seed"
            ]
        );
        assert!(translated.tools.google_code_execution.is_none());
    }

    #[test]
    fn replayed_code_is_a_call_of_the_code_tool_when_it_is_offered() {
        let body = json!({
            "contents": [
                {"role": "user", "parts": [{"text": "2+2?"}]},
                {"role": "model", "parts": [
                    {"executableCode": {"language": "PYTHON", "code": "print(4)", "id": "e1"}},
                    {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "4\n", "id": "e1"}},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
                    {"text": "4"}]},
                {"role": "user", "parts": [{"text": "and 3+3?"}]}],
            "tools": [{"codeExecution": {}}]
        });
        let translated = turn_of_plain(&request(body)).expect("translated");
        let code = translated
            .tools
            .google_code_execution
            .as_ref()
            .expect("offered");
        assert_eq!(code.timeout, GOOGLE_CODE_TIMEOUT);
        let turn = translated.turn("m");
        assert_eq!(
            turn.tools.last().map(|t| t.name.as_str()),
            Some(GOOGLE_CODE_EXECUTION)
        );
        assert_eq!(
            turn.messages[1..4],
            [
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "e1".into(),
                        name: GOOGLE_CODE_EXECUTION.into(),
                        arguments: r#"{"code":"print(4)"}"#.into()
                    }]
                },
                Message::Tool {
                    call_id: "e1".into(),
                    output: "OUTCOME_OK\n4\n\n[1 figure(s) shown to the user]".into()
                },
                Message::Assistant {
                    text: "4".into(),
                    tool_calls: Vec::new()
                },
            ]
        );
    }

    #[test]
    fn a_signature_shellgate_wrote_gives_the_reasoning_back_before_its_part() {
        let thinking = shellgate_wire::responses::Reasoning {
            content: Some(vec![items::ReasoningText::new(
                items::ReasoningText::CONTENT,
                "look first",
            )]),
            encrypted_content: Some("anthropic-signature:sig-1".into()),
            ..Default::default()
        };
        let signature = super::super::signature::write(&[thinking]);
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [
                {"text": "calling"},
                {"functionCall": {"id": "c1", "name": "f", "args": {}},
                 "thoughtSignature": signature}]}],
            "tools": [{"functionDeclarations": [{"name": "f"}]}]});
        let translated = turn_of_plain(&request(body)).expect("translated");
        assert!(
            translated.uncarried.is_empty(),
            "{:?}",
            translated.uncarried
        );
        let turn = translated.turn("m");
        let reasoning = shellgate_model::turn::Reasoning {
            id: None,
            summary: Vec::new(),
            text: "look first".into(),
            sealed: Some(shellgate_model::turn::Sealed::AnthropicSignature(
                "sig-1".into(),
            )),
        };
        assert_eq!(
            turn.messages[1..],
            [
                Message::Assistant {
                    text: "calling".into(),
                    tool_calls: Vec::new()
                },
                Message::Reasoning(reasoning),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments: "{}".into()
                    }]
                },
            ],
            "{:?}",
            turn.messages
        );
    }

    #[test]
    fn code_without_the_tool_is_text_the_model_wrote() {
        let body = json!({"contents": [
            {"role": "model", "parts": [
                {"executableCode": {"language": "PYTHON", "code": "print(4)"}},
                {"codeExecutionResult": {"outcome": "OUTCOME_FAILED", "output": "boom"}}]}]});
        let turn = turn_of_plain(&request(body)).expect("translated").turn("m");
        assert_eq!(
            turn.messages,
            [Message::Assistant {
                text: "```python\nprint(4)\n```\nOutput:\nOUTCOME_FAILED\nboom".into(),
                tool_calls: Vec::new()
            }]
        );
    }

    #[test]
    fn an_answer_to_no_call_an_unknown_role_and_a_twin_of_the_code_tool_are_400s() {
        let orphan = json!({"contents": [{"role": "user", "parts": [
            {"functionResponse": {"name": "f", "response": {}}}]}]});
        let error = turn_of_plain(&request(orphan)).expect_err("refused");
        assert_eq!(
            error.param.as_deref(),
            Some("contents[0].parts[0].functionResponse")
        );
        let role = json!({"contents": [{"role": "system", "parts": [{"text": "x"}]}]});
        let error = turn_of_plain(&request(role)).expect_err("refused");
        assert_eq!(error.param.as_deref(), Some("contents[0].role"));
        let twin = json!({"contents": [{"parts": [{"text": "x"}]}], "tools": [
            {"codeExecution": {}}, {"functionDeclarations": [{"name": "code_execution"}]}]});
        let error = turn_of_plain(&request(twin)).expect_err("refused");
        assert_eq!(error.param.as_deref(), Some("tools"));
    }
}
