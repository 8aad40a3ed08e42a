//! The neutral shape of one model turn: what the loop sends an upstream
//! ([`Turn`]: messages, tools, the tool choice, what to carry from earlier
//! turns) and what comes back ([`Reply`], streamed as [`Delta`]s). The
//! adapters of [`crate::upstream`] translate it to and from their wire
//! protocols; the loop, the tools and the reasoning items speak it without
//! knowing any adapter.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One message of a conversation, as every protocol can say it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    System(String),
    User(String),
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result, answering the call `call_id`.
    Tool {
        call_id: String,
        output: String,
    },
    /// The model's reasoning in an earlier turn (it belongs with the
    /// assistant message after it: Anthropic's thinking blocks go in it).
    Reasoning(Reasoning),
    /// An item only its own protocol reads (a hosted tool's call and
    /// result, an item reference...): replayed verbatim to an upstream of
    /// that protocol, left out for the others.
    Native(NativeItem),
}

/// A model's reasoning, as an upstream gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasoning {
    /// The upstream's id for it (OpenAI's `rs_...`), kept for replay.
    pub id: Option<String>,
    /// Summary texts (OpenAI's `summary[].text`).
    pub summary: Vec<String>,
    /// The reasoning's own text where the upstream shows it (OpenAI's
    /// `content[].text`, Anthropic's `thinking`).
    pub text: String,
    /// What only the protocol that made it can read back.
    pub sealed: Option<Sealed>,
}

/// The part of a reasoning only its own protocol verifies: replayed to an
/// upstream of that protocol, never shown to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealed {
    /// OpenAI's `encrypted_content`.
    OpenAi(String),
    /// The `signature` of Anthropic's `thinking` block.
    AnthropicSignature(String),
    /// The `data` of Anthropic's `redacted_thinking` block.
    AnthropicRedacted(String),
}

impl Sealed {
    /// The protocol that can read it.
    pub fn protocol(&self) -> Protocol {
        match self {
            Sealed::OpenAi(_) => Protocol::Responses,
            Sealed::AnthropicSignature(_) | Sealed::AnthropicRedacted(_) => Protocol::Anthropic,
        }
    }
}

/// Something of one protocol, kept whole: an item of a conversation, a
/// tool shellgate does not run.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeItem {
    pub protocol: Protocol,
    pub item: Value,
}

impl NativeItem {
    /// Its `type`, for reports (`?` if it has none).
    pub fn kind(&self) -> String {
        /// The one key every item and tool of every protocol has.
        #[derive(Deserialize)]
        struct Typed {
            #[serde(rename = "type")]
            kind: String,
        }
        Typed::deserialize(&self.item).map_or_else(|_| "?".to_owned(), |typed| typed.kind)
    }
}

/// What a client asked beyond the neutral fields of a [`Turn`]: each
/// adapter sends what its protocol can say and names the rest in
/// [`Upstream::uncarried`], so nothing is lost silently.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Carry {
    /// How the model should reason (OpenAI's `reasoning`, Anthropic's
    /// `thinking`, Chat Completions' `reasoning_effort`).
    pub reasoning: Option<ReasoningRequest>,
    /// The shape of the answer's text (OpenAI's `text.format`, Chat
    /// Completions' `response_format`, Anthropic's `output_config`).
    pub output_format: Option<OutputFormat>,
    /// Sequences that end the model's text.
    pub stop: Vec<String>,
    /// Sample from the `top_k` likeliest tokens.
    pub top_k: Option<u64>,
    /// The Responses request's fields shellgate does not act on (its
    /// `CARRIED` keys), as the client sent them: to a Responses upstream.
    pub responses: Map<String, Value>,
    /// The Messages request's fields shellgate does not act on, as the
    /// client sent them: to an Anthropic upstream.
    pub anthropic: Map<String, Value>,
    /// The client's `anthropic-beta` header values: to an Anthropic upstream.
    pub anthropic_beta: Vec<String>,
    /// Tools shellgate does not run (hosted tools of one protocol), as the
    /// client wrote them: to an upstream of that protocol.
    pub native_tools: Vec<NativeItem>,
    /// A Messages client's keys on its own tools beyond name, description
    /// and schema (`strict`, `defer_loading`, `input_examples`...), by tool
    /// name: to an Anthropic upstream, on the same tools.
    pub anthropic_tool_extras: std::collections::BTreeMap<String, Map<String, Value>>,
    /// A Responses client's `strict` on its function tools, by tool name:
    /// to every upstream, on the same tools (Responses' and Chat
    /// Completions' `strict`, Anthropic's `strict` where the Messages
    /// client's own keys do not already say it).
    pub tool_strict: std::collections::BTreeMap<String, bool>,
    /// How the client named each of `native_tools` (same order:
    /// `tools[7] (web_search)`), for [`Upstream::uncarried`].
    pub native_tool_names: Vec<String>,
    /// A `tool_choice` naming a tool of one protocol that the neutral
    /// [`ToolChoice`] cannot say (a hosted tool), as the client wrote it:
    /// an upstream of that protocol sends it instead of the turn's
    /// `tool_choice`; the others keep the turn's (`auto`) and report it.
    pub native_tool_choice: Option<NativeItem>,
}

impl Carry {
    /// What of the native tools and tool choice an upstream speaking
    /// `protocol` cannot send, named as the client wrote them.
    pub fn native_uncarried(&self, protocol: Protocol) -> Vec<String> {
        let mut names: Vec<String> = self
            .native_tools
            .iter()
            .enumerate()
            .filter(|(_, tool)| tool.protocol != protocol)
            .map(|(index, tool)| {
                self.native_tool_names
                    .get(index)
                    .cloned()
                    .unwrap_or_else(|| format!("tools ({})", tool.kind()))
            })
            .collect();
        if let Some(choice) = self
            .native_tool_choice
            .as_ref()
            .filter(|choice| choice.protocol != protocol)
        {
            names.push(format!("tool_choice ({})", choice.kind()));
        }
        names
    }

    /// The native tools for an upstream speaking `protocol`.
    pub fn native_tools_for(&self, protocol: Protocol) -> impl Iterator<Item = &Value> {
        self.native_tools
            .iter()
            .filter(move |tool| tool.protocol == protocol)
            .map(|tool| &tool.item)
    }
}

/// How a model should reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasoningRequest {
    /// `minimal`, `low`, `medium`, `high`... as the client wrote it.
    pub effort: Option<String>,
    /// OpenAI's `reasoning.summary` (`auto`, `concise`, `detailed`).
    pub summary: Option<String>,
    /// Anthropic's `thinking.budget_tokens`.
    pub budget_tokens: Option<u64>,
}

/// The shape a model's text must have.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    /// JSON matching `schema`.
    JsonSchema {
        name: String,
        description: Option<String>,
        schema: Value,
        strict: Option<bool>,
    },
    /// Any JSON object.
    JsonObject,
}

/// A call of a tool the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments, a JSON object as text (as the model wrote it).
    pub arguments: String,
}

/// A tool the model may call: a function with JSON-schema parameters, or
/// a freeform (`custom`) tool whose call's `arguments` are its raw input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    /// `Some`: a freeform tool (OpenAI's `custom`), with its input's format.
    pub custom: Option<CustomFormat>,
    /// `Some`: the tool belongs to a group (Codex's `namespace` tools);
    /// `name` is then the flattened name every protocol can say, which
    /// calls use (an upstream that has namespaces sends the group).
    pub namespace: Option<ToolNamespace>,
}

/// The group a tool belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolNamespace {
    /// The namespace's name.
    pub namespace: String,
    /// The namespace's description.
    pub description: String,
    /// The tool's own name within it.
    pub name: String,
}

/// The input format of a freeform tool.
#[derive(Debug, Clone, PartialEq)]
pub enum CustomFormat {
    /// Any text.
    Text,
    /// Text in a grammar: `syntax` (`lark`, `regex`) and its `definition`.
    Grammar { syntax: String, definition: String },
}

/// Which tool the model must call, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    #[default]
    Auto,
    Required,
    None,
    Named(String),
}

/// One model turn asked of an upstream.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub parallel_tool_calls: Option<bool>,
    /// What the client asked beyond the fields above.
    pub carry: Carry,
}

impl Turn {
    /// An estimate of the input tokens of this turn, for an upstream that
    /// cannot count them: a token per four bytes of its text (the system
    /// prompt, every message, each tool's name, description and schema),
    /// rounded up — the usual rule of thumb for English text and code with
    /// BPE tokenizers; it is not any model's count.
    pub fn estimated_input_tokens(&self) -> u64 {
        let mut bytes = 0usize;
        for message in &self.messages {
            bytes += match message {
                Message::System(text) | Message::User(text) => text.len(),
                Message::Assistant { text, tool_calls } => {
                    text.len()
                        + tool_calls
                            .iter()
                            .map(|c| c.name.len() + c.arguments.len())
                            .sum::<usize>()
                }
                Message::Tool { output, .. } => output.len(),
                Message::Reasoning(reasoning) => reasoning.text.len(),
                Message::Native(native) => native.item.to_string().len(),
            };
        }
        for tool in &self.tools {
            bytes += tool.name.len() + tool.description.len() + tool.parameters.to_string().len();
        }
        u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX)
    }
}

/// Tokens an upstream counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the input tokens, those read from the upstream's prompt cache
    /// (where it says so).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Of the output tokens, those the model reasoned with (where the
    /// upstream says so).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Finish {
    /// The model finished (an answer, or tool calls).
    #[default]
    Stop,
    /// It ran out of `max_output_tokens`.
    Length,
    /// The upstream refused the content.
    ContentFilter,
}

/// An upstream's answer to one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish: Finish,
    /// The model's reasoning in this turn (before its text and calls).
    pub reasoning: Vec<Reasoning>,
    /// Items of the upstream's own protocol beside text and calls (a
    /// hosted tool's call and result): output as they are, replayed to it.
    pub native: Vec<NativeItem>,
}

/// Pieces of a reply as they arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Text(String),
    /// A tool call begins: its position in the reply, id and name.
    ToolCall {
        index: usize,
        id: String,
        name: String,
    },
    /// More of a tool call's arguments.
    ToolArguments {
        index: usize,
        delta: String,
    },
    /// More of the summary of the reasoning the upstream is telling (its
    /// `id` where the upstream gives one; part `summary_index` of its
    /// summary), before that reasoning's [`Delta::Reasoning`].
    ReasoningSummary {
        id: Option<String>,
        summary_index: usize,
        delta: String,
    },
    /// A reasoning of the reply, whole, as soon as the upstream has told
    /// it (before the text that follows it). An adapter that sends these
    /// sends the reply's [`Reply::reasoning`] in order, each once; the
    /// loop puts any it did not send after them.
    Reasoning(Reasoning),
    /// An item of [`Reply::native`], whole, as soon as it is told (the
    /// same rule).
    Native(NativeItem),
}

/// Where deltas go.
pub type DeltaSink = tokio::sync::mpsc::UnboundedSender<Delta>;

/// The wire protocol of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// OpenAI Chat Completions.
    Chat,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Anthropic,
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "chat" => Ok(Protocol::Chat),
            "responses" => Ok(Protocol::Responses),
            "anthropic" => Ok(Protocol::Anthropic),
            other => Err(format!(
                "unknown upstream protocol {other:?}; use chat, responses or anthropic"
            )),
        }
    }
}
