//! Per-project prompt-injection guardrails (see `shellgate_model::guardrail`),
//! built from the configuration: the built-in rules with their configured
//! action, the rules for every project (`project = "*"`), and a project's own.

use std::collections::HashMap;
use std::sync::Arc;

use shellgate_model::guardrail::{Action, Guardrail, Rule};

use crate::config::{Config, ConfigError};

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

fn default_action(setting: &str, name: &str) -> Result<Option<Action>, ConfigError> {
    match setting {
        "off" => Ok(None),
        other => other
            .parse()
            .map(Some)
            .map_err(|e: String| ConfigError(format!("{name}: {e} (or off)"))),
    }
}

impl Guardrails {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut guardrails = Guardrails::default();
        for (target, setting, name) in [
            (
                Target::Input,
                &config.guardrail_input_default,
                "guardrail_input_default",
            ),
            (
                Target::ToolOutput,
                &config.guardrail_tool_output_default,
                "guardrail_tool_output_default",
            ),
        ] {
            if let Some(action) = default_action(setting, name)? {
                guardrails
                    .everyone
                    .insert(target, Guardrail::defaults(action));
            }
        }
        for rule in &config.guardrails {
            let target = match rule.target.as_str() {
                "input" => Target::Input,
                "tool_output" => Target::ToolOutput,
                other => {
                    return Err(ConfigError(format!(
                        "guardrail target {other:?} is not input or tool_output"
                    )))
                }
            };
            let pattern = regex::Regex::new(&rule.pattern)
                .map_err(|e| ConfigError(format!("guardrail pattern {:?}: {e}", rule.pattern)))?;
            let action = rule.action.parse().map_err(ConfigError)?;
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
