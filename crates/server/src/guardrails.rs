//! Per-project prompt-injection guardrails (see `shellgate_model::guardrail`),
//! built from the configuration: the built-in rules with their configured
//! action, the rules for every project (`project = "*"`), and a project's own;
//! and their input side: every text of a request that a model will read.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use shellgate_model::guardrail::{Action, Guardrail, Rule, REDACTED};

use crate::config::{Config, ConfigError, GuardrailTarget};
use crate::error::{ApiError, ApiResult};

/// What a guardrail reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// User-supplied message content.
    Input,
    /// Shell output, before the model reads it.
    ToolOutput,
}

/// Every guardrail of the server.
#[derive(Default)]
pub struct Guardrails {
    /// Rules of every project, by target.
    everyone: HashMap<Target, Guardrail>,
    /// Rules of one project, by (project, target).
    projects: HashMap<(String, Target), Guardrail>,
}

impl Guardrails {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut guardrails = Guardrails::default();
        for (target, setting) in [
            (Target::Input, config.guardrail_input_default),
            (Target::ToolOutput, config.guardrail_tool_output_default),
        ] {
            if let Some(action) = setting.action() {
                guardrails
                    .everyone
                    .insert(target, Guardrail::defaults(action));
            }
        }
        for rule in &config.guardrails {
            let target = match rule.target {
                GuardrailTarget::Input => Target::Input,
                GuardrailTarget::ToolOutput => Target::ToolOutput,
            };
            let pattern = regex::Regex::new(&rule.pattern)
                .map_err(|e| ConfigError(format!("guardrail pattern {:?}: {e}", rule.pattern)))?;
            let action = rule.action.action();
            let rule_set = Guardrail::new(vec![Rule {
                name: if rule.name.is_empty() {
                    rule.pattern.clone()
                } else {
                    rule.name.clone()
                },
                pattern,
                action,
            }]);
            let slot = if rule.project == "*" {
                guardrails.everyone.entry(target).or_default()
            } else {
                guardrails
                    .projects
                    .entry((rule.project.clone(), target))
                    .or_default()
            };
            *slot = std::mem::take(slot).with(rule_set);
        }
        Ok(guardrails)
    }

    /// The rules that apply to `project`'s `target`, if any.
    pub fn for_project(&self, project: &str, target: Target) -> Option<Arc<Guardrail>> {
        let mut rules = self.everyone.get(&target).cloned().unwrap_or_default();
        if let Some(own) = self.projects.get(&(project.to_owned(), target)) {
            rules = rules.with(own.clone());
        }
        (!rules.is_empty()).then(|| Arc::new(rules))
    }
}

/// Every string inside `value` (itself, or within arrays and objects, in
/// order), for what reaches the model as JSON text whole.
fn string_leaves(value: &mut Value) -> Vec<&mut Value> {
    match value {
        Value::String(_) => vec![value],
        Value::Array(values) => values.iter_mut().flat_map(string_leaves).collect(),
        Value::Object(map) => map.values_mut().flat_map(string_leaves).collect(),
        _ => Vec::new(),
    }
}

/// The texts of an item that a model reads, in groups it reads together
/// (a message's parts; one command's stdout and stderr): the string values,
/// to check and perhaps rewrite. What the model itself wrote (assistant
/// messages, tool calls' arguments) is not among them. This follows what
/// `shellgate_model::conversation` renders for the model: a part's `text`,
/// `refusal` and (an attached file's) `filename`; a command's `stdout`,
/// `stderr` and `outcome` whatever their JSON type (what is not a string is
/// shown as JSON, every string in it); a legacy output that is not a
/// string, whole.
///
/// Each group comes with whether it is running text (a match may continue
/// into the next group the model reads); a command's outcome is not.
fn model_groups(item: &mut Value) -> Vec<(Vec<&mut Value>, bool)> {
    fn parts(content: &mut Value) -> Vec<&mut Value> {
        match content {
            Value::String(_) => vec![content],
            Value::Array(parts) => parts
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .flat_map(|part| {
                    part.iter_mut()
                        .filter(|(key, value)| {
                            matches!(key.as_str(), "text" | "refusal" | "filename")
                                && value.is_string()
                        })
                        .map(|(_, value)| value)
                })
                .collect(),
            _ => Vec::new(),
        }
    }
    /// A command's stdout then stderr (as the model reads them; the map's
    /// own order is by name), and apart its outcome's strings.
    fn streams(entry: &mut Value) -> (Vec<&mut Value>, Vec<&mut Value>) {
        let (mut pair, mut outcome) = (Vec::new(), Vec::new());
        if let Some(object) = entry.as_object_mut() {
            for (key, value) in object.iter_mut() {
                match key.as_str() {
                    "stdout" => pair.push((0, value)),
                    "stderr" => pair.push((1, value)),
                    "outcome" => outcome.extend(string_leaves(value)),
                    _ => {}
                }
            }
        }
        pair.sort_by_key(|(rank, _)| *rank);
        let texts = pair
            .into_iter()
            .flat_map(|(_, value)| string_leaves(value))
            .collect();
        (texts, outcome)
    }
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_owned();
    match kind.as_str() {
        "message" => {
            if item.get("role").and_then(Value::as_str) == Some("assistant") {
                return Vec::new();
            }
            item.get_mut("content")
                .map(|c| vec![(parts(c), true)])
                .unwrap_or_default()
        }
        "function_call_output" | "custom_tool_call_output" => item
            .get_mut("output")
            .map(|o| vec![(parts(o), true)])
            .unwrap_or_default(),
        // A string, or anything else shown as its JSON.
        "local_shell_call_output" => item
            .get_mut("output")
            .map(|o| vec![(string_leaves(o), true)])
            .unwrap_or_default(),
        // Every command's streams, read by the model together; outcomes
        // apart (their strings, between two calls' streams, are not what a
        // match across the two would read).
        "shell_call_output" | "openrouter:shell" => match item.get_mut("output") {
            Some(Value::Array(entries)) => {
                let (mut texts, mut outcomes) = (Vec::new(), Vec::new());
                for (text, outcome) in entries.iter_mut().map(streams) {
                    texts.extend(text);
                    outcomes.extend(outcome);
                }
                vec![(texts, true), (outcomes, false)]
            }
            _ => Vec::new(),
        },
        "openrouter:bash" => item
            .get_mut("output")
            .map(|o| {
                let (texts, outcome) = streams(o);
                vec![(texts, true), (outcome, false)]
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The 403 of input the guardrail blocks.
fn blocked(rules: &[String]) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::FORBIDDEN,
        "invalid_request_error",
        format!(
            "The input was blocked by the prompt-injection guardrail (rules: {}).",
            rules.join(", ")
        ),
    )
    .with_code("prompt_injection_detected")
}

/// Checks one group of texts read together (`what` says what, for the
/// log): a block is a 403, a redaction rewrites them, a flag is logged.
fn guard_group(
    guardrail: &Guardrail,
    project: &str,
    what: &str,
    group: Vec<&mut Value>,
) -> ApiResult<()> {
    let texts: Vec<String> = group
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    let views: Vec<&str> = texts.iter().map(String::as_str).collect();
    let verdict = guardrail.check_parts(&views);
    match verdict.action {
        None => {}
        Some(Action::Flag) => {
            tracing::warn!(project, what, rules = ?verdict.rules, "prompt-injection guardrail: input flagged");
        }
        Some(Action::Redact) => {
            tracing::warn!(project, what, rules = ?verdict.rules, "prompt-injection guardrail: input redacted");
            for (slot, text) in group.into_iter().zip(guardrail.redact_parts(&views)) {
                *slot = Value::String(text);
            }
        }
        Some(Action::Block) => {
            tracing::warn!(project, what, rules = ?verdict.rules, "prompt-injection guardrail: input blocked");
            return Err(blocked(&verdict.rules));
        }
    }
    Ok(())
}

/// What a request's guard gives back: its items, instructions and tools as
/// the model may read them.
pub type Guarded = (Vec<Value>, Option<String>, shellgate_model::tools::Tools);

/// [`Guardrails::guard_input`] and [`Guardrails::guard_tools`] of one
/// request, on a blocking thread: folding and matching a request of
/// megabytes is CPU work, kept off the async workers.
pub async fn guard_request(
    state: &Arc<crate::AppState>,
    project: &str,
    mut items: Vec<Value>,
    mut instructions: Option<String>,
    mut tools: shellgate_model::tools::Tools,
) -> ApiResult<Guarded> {
    let (state, project) = (Arc::clone(state), project.to_owned());
    tokio::task::spawn_blocking(move || {
        state
            .guardrails
            .guard_input(&project, &mut items, instructions.as_mut())?;
        state.guardrails.guard_tools(&project, &mut tools)?;
        Ok((items, instructions, tools))
    })
    .await
    .map_err(|e| ApiError::internal(format!("guardrail: {e}")))?
}

/// [`guard_group`], then the group with the end of what the model read
/// before it (`earlier`, which it then joins): a match only the two make
/// together blocks, or redacts this group whole.
fn guard_after(
    guardrail: &Guardrail,
    project: &str,
    what: &str,
    mut group: Vec<&mut Value>,
    earlier: &mut String,
) -> ApiResult<()> {
    let reborrowed: Vec<&mut Value> = group.iter_mut().map(|v| &mut **v).collect();
    guard_group(guardrail, project, what, reborrowed)?;
    let mut texts: Vec<String> = group
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    let views: Vec<&str> = texts.iter().map(String::as_str).collect();
    if let Some(across) = guardrail.check_across(earlier, &views) {
        match across.action {
            Some(Action::Block) => {
                tracing::warn!(project, what, rules = ?across.rules, "prompt-injection guardrail: input blocked (a match across texts)");
                return Err(blocked(&across.rules));
            }
            Some(Action::Redact) => {
                tracing::warn!(project, what, rules = ?across.rules, "prompt-injection guardrail: input redacted (a match across texts)");
                for (slot, text) in group.iter_mut().zip(texts.iter_mut()) {
                    if !text.is_empty() {
                        **slot = Value::String(REDACTED.to_owned());
                        *text = REDACTED.to_owned();
                    }
                }
            }
            _ => {
                tracing::warn!(project, what, rules = ?across.rules, "prompt-injection guardrail: input flagged (a match across texts)");
            }
        }
    }
    let views: Vec<&str> = texts.iter().map(String::as_str).collect();
    shellgate_model::guardrail::remember(earlier, &views);
    Ok(())
}

impl Guardrails {
    /// Checks every text of `items` (and the `instructions`) that a model
    /// will read against `project`'s input rules: messages of every role
    /// but the assistant's, tool outputs (`function_call_output`, replayed
    /// `shell_call_output`, `local_shell_call_output`, OpenRouter's
    /// items). A block is a 403, a redaction rewrites the text, a flag is
    /// logged.
    pub fn guard_input(
        &self,
        project: &str,
        items: &mut [Value],
        instructions: Option<&mut String>,
    ) -> ApiResult<()> {
        let Some(guardrail) = self.for_project(project, Target::Input) else {
            return Ok(());
        };
        // The end of what the model has read so far: a match split between
        // two messages (or the instructions and a message) is found too.
        let mut earlier = String::new();
        if let Some(instructions) = instructions {
            let mut slot = Value::String(std::mem::take(instructions));
            let checked = guard_after(
                &guardrail,
                project,
                "instructions",
                vec![&mut slot],
                &mut earlier,
            );
            *instructions = slot.as_str().unwrap_or_default().to_owned();
            checked?;
        }
        for item in items.iter_mut() {
            for (group, running) in model_groups(item) {
                if running {
                    guard_after(&guardrail, project, "input", group, &mut earlier)?;
                } else {
                    guard_group(&guardrail, project, "input", group)?;
                }
            }
        }
        Ok(())
    }

    /// Checks the descriptions of a request's function tools and every
    /// string of their parameters' schemas (the model reads them as it
    /// reads instructions).
    pub fn guard_tools(
        &self,
        project: &str,
        tools: &mut shellgate_model::tools::Tools,
    ) -> ApiResult<()> {
        let Some(guardrail) = self.for_project(project, Target::Input) else {
            return Ok(());
        };
        // One rule set for every tool (building it per tool was most of
        // the work of a request with thousands of tools).
        for function in &mut tools.functions {
            let mut description = Value::String(std::mem::take(&mut function.description));
            let checked = guard_group(
                &guardrail,
                project,
                "tool description",
                vec![&mut description],
            );
            function.description = description.as_str().unwrap_or_default().to_owned();
            checked?;
            // The schema goes to the model as it is: its descriptions,
            // titles and enum values are read as the description is.
            guard_group(
                &guardrail,
                project,
                "tool parameters",
                string_leaves(&mut function.parameters),
            )?;
        }
        Ok(())
    }

    /// Checks a text of `what` (an attached file, a skill's `SKILL.md`)
    /// against `project`'s input rules; returns it as the model may read
    /// it (redacted if the rules say so).
    pub fn guard_text(&self, project: &str, what: &str, text: &str) -> ApiResult<String> {
        let Some(guardrail) = self.for_project(project, Target::Input) else {
            return Ok(text.to_owned());
        };
        let mut slot = Value::String(text.to_owned());
        guard_group(&guardrail, project, what, vec![&mut slot])?;
        Ok(slot.as_str().unwrap_or_default().to_owned())
    }

    /// Whether a text of `what` passes `project`'s input rules unchanged:
    /// for what cannot be rewritten (a skill bundle), a redaction refuses
    /// it as a block does.
    pub fn refuse_unless_clean(&self, project: &str, what: &str, texts: &[&str]) -> ApiResult<()> {
        let Some(guardrail) = self.for_project(project, Target::Input) else {
            return Ok(());
        };
        let verdict = guardrail.check_parts(texts);
        match verdict.action {
            None => Ok(()),
            Some(Action::Flag) => {
                tracing::warn!(project, what, rules = ?verdict.rules, "prompt-injection guardrail: input flagged");
                Ok(())
            }
            Some(Action::Redact | Action::Block) => {
                tracing::warn!(project, what, rules = ?verdict.rules, "prompt-injection guardrail: input blocked");
                Err(blocked(&verdict.rules))
            }
        }
    }
}
