//! Which commands `shellgate local` may run without asking: allow and deny
//! rules (a command prefix or a regular expression), deny winning, and a
//! built-in deny list of destructive commands that is always on.

use std::path::Path;

use anyhow::{Context, Result};
use regex::Regex;
use serde::Deserialize;

/// A rule: the command starts with `prefix`, or matches `regex`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// How the audit log and the model name it (`prefix:git status`).
    pub name: String,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    Prefix(String),
    Regex(Regex),
}

impl Rule {
    fn prefix(prefix: &str) -> Self {
        Self {
            name: format!("prefix:{prefix}"),
            matcher: Matcher::Prefix(prefix.to_owned()),
        }
    }

    fn regex(pattern: &str) -> Result<Self> {
        Ok(Self {
            name: format!("regex:{pattern}"),
            matcher: Matcher::Regex(
                Regex::new(pattern).with_context(|| format!("bad regex {pattern:?}"))?,
            ),
        })
    }

    pub fn matches(&self, command: &str) -> bool {
        let command = command.trim_start();
        match &self.matcher {
            // A prefix matches whole words: `git` allows `git status`, not
            // `gitk`.
            Matcher::Prefix(prefix) => {
                command == prefix
                    || command
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with(char::is_whitespace))
            }
            Matcher::Regex(regex) => regex.is_match(command),
        }
    }
}

/// Destructive commands denied whatever else is allowed: wiping the root
/// or the home directory, making file systems, writing devices, fork
/// bombs, powering off.
const DEFAULT_DENY: &[&str] = &[
    r"\brm\s+(-[a-zA-Z]*\s+)*(-[a-zA-Z]*[rR][a-zA-Z]*\s+)(-[a-zA-Z]*\s+)*(/|/\*|~|~/|\$HOME|/home|/etc|/usr|/boot|/var)(\s|$)",
    r"\bmkfs(\.\w+)?\b",
    r"\bdd\b.*\bof=/dev/",
    r">\s*/dev/(sd|nvme|vd|hd|xvd|mmcblk)",
    r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
    r"\b(shutdown|reboot|halt|poweroff)\b",
    r"\bchmod\s+(-R\s+)?0?777\s+/(\s|$)",
    r"\bchown\s+-R\b.*\s/(\s|$)",
];

/// The file `--policy` reads (TOML):
///
/// ```toml
/// allow = [{ prefix = "ls" }, { prefix = "git status" }, { regex = "^cat [^;&|]+$" }]
/// deny = [{ prefix = "curl" }]
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    allow: Vec<RuleSpec>,
    #[serde(default)]
    deny: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    prefix: Option<String>,
    regex: Option<String>,
}

impl RuleSpec {
    fn rule(&self) -> Result<Rule> {
        match (&self.prefix, &self.regex) {
            (Some(prefix), None) if !prefix.trim().is_empty() => Ok(Rule::prefix(prefix.trim())),
            (None, Some(regex)) => Rule::regex(regex),
            _ => anyhow::bail!("a rule has exactly one of `prefix` or `regex`"),
        }
    }
}

/// What a policy says of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed(String),
    Denied(String),
    /// No rule speaks of it.
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Policy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

impl Policy {
    /// The built-in deny list and, if given, a policy file's rules.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let mut policy = Self {
            allow: Vec::new(),
            deny: DEFAULT_DENY
                .iter()
                .map(|pattern| Rule::regex(pattern))
                .collect::<Result<_>>()?,
        };
        if let Some(file) = file {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the policy {}", file.display()))?;
            let parsed: PolicyFile = toml::from_str(&text)
                .with_context(|| format!("the policy {} is not valid", file.display()))?;
            for spec in &parsed.allow {
                policy.allow.push(spec.rule()?);
            }
            for spec in &parsed.deny {
                policy.deny.push(spec.rule()?);
            }
        }
        Ok(policy)
    }

    /// Deny wins over allow.
    pub fn judge(&self, command: &str) -> Verdict {
        if let Some(rule) = self.deny.iter().find(|r| r.matches(command)) {
            return Verdict::Denied(rule.name.clone());
        }
        if let Some(rule) = self.allow.iter().find(|r| r.matches(command)) {
            return Verdict::Allowed(rule.name.clone());
        }
        Verdict::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        let path = std::env::temp_dir().join(format!(
            "shellgate-policy-{}-{:?}.toml",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, text).unwrap();
        let policy = Policy::load(Some(&path)).unwrap();
        std::fs::remove_file(path).unwrap();
        policy
    }

    #[test]
    fn destructive_commands_are_denied_by_default() {
        let p = Policy::load(None).unwrap();
        for command in [
            "rm -rf /",
            "rm -rf / --no-preserve-root",
            "sudo rm -fr ~",
            "rm -r -f /*",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            ":(){ :|:& };:",
            "cat x > /dev/nvme0n1",
            "shutdown -h now",
        ] {
            assert!(
                matches!(p.judge(command), Verdict::Denied(_)),
                "{command} was not denied"
            );
        }
        for command in [
            "rm -rf ./build",
            "ls -la",
            "echo rm",
            "git status",
            "rm -rf /tmp/x",
        ] {
            assert_eq!(p.judge(command), Verdict::Unknown, "{command}");
        }
    }

    #[test]
    fn rules_match_prefixes_by_word_and_deny_wins() {
        let p = policy(
            "allow = [{ prefix = \"git\" }, { regex = \"^cat [a-z.]+$\" }, { prefix = \"curl\" }]\n\
             deny = [{ prefix = \"git push\" }, { regex = \"curl .*\\\\|\" }]\n",
        );
        assert_eq!(p.judge("git status"), Verdict::Allowed("prefix:git".into()));
        assert_eq!(p.judge("gitk"), Verdict::Unknown);
        assert_eq!(
            p.judge("git push origin"),
            Verdict::Denied("prefix:git push".into())
        );
        assert!(matches!(p.judge("cat notes.txt"), Verdict::Allowed(_)));
        assert_eq!(p.judge("cat notes.txt; rm x"), Verdict::Unknown);
        assert!(matches!(p.judge("curl -s x | sh"), Verdict::Denied(_)));
        assert!(matches!(p.judge("curl -s x"), Verdict::Allowed(_)));
        // Defaults still apply with a file.
        assert!(matches!(p.judge("rm -rf /"), Verdict::Denied(_)));
    }

    #[test]
    fn bad_policy_files_are_refused() {
        for text in [
            "allow = [{ prefix = \"a\", regex = \"b\" }]",
            "allow = [{ }]",
            "deny = [{ regex = \"(\" }]",
            "allowed = []",
        ] {
            let path =
                std::env::temp_dir().join(format!("shellgate-bad-policy-{}", std::process::id()));
            std::fs::write(&path, text).unwrap();
            assert!(Policy::load(Some(&path)).is_err(), "{text}");
            std::fs::remove_file(path).unwrap();
        }
    }
}
