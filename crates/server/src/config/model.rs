//! The model APIs (Responses, Messages, Chat): the upstream model servers
//! they call, the bounds on a run, and the guardrails over its text.

use serde::{Deserialize, Serialize};

use super::{
    default_protocol, GuardrailDefault, GuardrailRule, Protocol, Secret, UnsupportedTools,
    UpstreamRoute,
};

/// The model APIs: upstream model servers, bounds on a run, guardrails.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSettings {
    /// The default upstream model server's base URL (e.g.
    /// `https://api.openai.com/v1`, `http://localhost:11434/v1`); empty: none.
    pub upstream_url: String,
    /// Its API key (sent as a Bearer token; never logged or echoed).
    pub upstream_api_key: Secret,
    /// Its protocol: `chat` (OpenAI Chat Completions), `responses` or
    /// `anthropic`.
    pub upstream_protocol: Protocol,
    /// Longest wait for an upstream's answer to begin, and between its pieces.
    pub upstream_timeout_secs: u64,
    /// Attempts at an upstream request that is rate limited (429) or gets
    /// no answer (a connection refused or dropped before any reply) before
    /// it fails.
    pub upstream_attempts: u32,
    /// Longest time for one whole upstream turn (request, retries and every
    /// piece of the answer): a model trickling its answer is cut off here.
    pub upstream_turn_timeout_secs: u64,
    /// Longest time one response (a Responses or Messages run: every turn
    /// and command) may take: past it the run ends `failed`, its commands
    /// killed.
    pub response_timeout_secs: u64,
    /// Longest time one call of Gemini's code execution (`codeExecution`)
    /// may run its code: past it the code is interrupted and its result is
    /// `OUTCOME_DEADLINE_EXCEEDED` (Google documents 30 seconds).
    pub gemini_code_execution_timeout_secs: u64,
    /// Longest time one Python cell of Anthropic's
    /// `code_execution_20260521` may run: past it the cell is interrupted
    /// and ends as a result with a non-zero `return_code` and a
    /// `detection_timeout` status (Anthropic documents 90 seconds).
    pub code_execution_cell_timeout_secs: u64,
    /// Longest time a Python cell of Anthropic's code execution waits for
    /// the client's result of a call of one of its tools (programmatic
    /// tool calling): past it the call raises `TimeoutError` in the code,
    /// which goes on (Anthropic documents about 4.5 minutes).
    pub code_execution_tool_result_timeout_secs: u64,
    /// Most bytes of one upstream answer, and of the model's answers over
    /// every turn of one response together (over it the response fails).
    pub upstream_max_answer_bytes: u64,
    /// Most bytes of one tool call's arguments in an upstream answer.
    pub upstream_max_tool_call_bytes: u64,
    /// Most `input_file` parts in one Responses API request.
    pub max_input_files: usize,
    /// Most bytes of a request's `input_file` parts together.
    pub max_input_file_bytes: u64,
    /// A request's tools the picked upstream cannot carry (a hosted tool
    /// such as `web_search` before a non-Responses upstream): `drop` (left
    /// out, reported in the `x-shellgate-uncarried` header, the response's
    /// metadata and the log) or `reject` (a 400 naming the tool).
    pub unsupported_tools: UnsupportedTools,
    /// The built-in prompt-injection rules over user input: `off`, `flag`
    /// (logged), `redact` or `block` (403).
    pub guardrail_input_default: GuardrailDefault,
    /// The same rules over shell output before the model reads it: `off`,
    /// `flag`, `redact` or `block` (the output is withheld).
    pub guardrail_tool_output_default: GuardrailDefault,
    /// More rules (config file only): `[[guardrails]] project = "*" or a
    /// project, target = "input" or "tool_output", pattern = "regex",
    /// action = "flag" | "redact" | "block"`.
    pub guardrails: Vec<GuardrailRule>,
    /// Upstreams for models by name prefix (config file only):
    /// `[[upstreams]] prefix = "llama", url = "...", api_key = "...", protocol = "chat"`.
    pub upstreams: Vec<UpstreamRoute>,
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            upstream_url: String::new(),
            upstream_api_key: Secret::default(),
            upstream_protocol: default_protocol(),
            upstream_timeout_secs: 120,
            upstream_attempts: 3,
            upstream_turn_timeout_secs: 600,
            response_timeout_secs: 3600,
            gemini_code_execution_timeout_secs: 30,
            code_execution_cell_timeout_secs: 90,
            code_execution_tool_result_timeout_secs: 270,
            upstream_max_answer_bytes: 32 * 1024 * 1024,
            upstream_max_tool_call_bytes: 4 * 1024 * 1024,
            max_input_files: 50,
            max_input_file_bytes: 64 << 20,
            unsupported_tools: UnsupportedTools::Drop,
            guardrail_input_default: GuardrailDefault::Flag,
            guardrail_tool_output_default: GuardrailDefault::Off,
            guardrails: Vec::new(),
            upstreams: Vec::new(),
        }
    }
}
