//! Which commands `shellgate local` may run without asking. A command
//! line is parsed into its syntax tree ([`syntax`]) and judged part by
//! part: it is allowed only if every simple command in it, wherever it
//! sits, matches an allow rule (a prefix of its words, or a regular
//! expression over its normalised line), and nothing else in it (a
//! substitution, an expansion, a write to a file, a function definition,
//! a construct the judge does not handle) needs vouching for. It is
//! denied if any simple command in it matches a deny rule or the built-in
//! list of destructive commands ([`destructive`]); deny wins. What does
//! not parse is never allowed.

mod destructive;
mod inline_code;
pub mod syntax;

use std::path::Path;

use anyhow::{Context, Result};
use regex::Regex;
use serde::Deserialize;

use syntax::{Script, SimpleCommand, Word, WordKind};

/// How many scripts inside interpreters' code inside scripts the deny
/// list reads.
const MAX_CODE_NESTING: usize = 4;

/// The words `command` runs from its word `start` on, when the words
/// before it are wrappers: as many lists as the wrappers make of it. After
/// `find`, `{}` is each starting point (`find / -exec rm -rf {} +` runs
/// `rm -rf /`); after `xargs`, the items of its known input are appended
/// (or put for its `-I` string): `echo / | xargs rm -rf` runs `rm -rf /`.
fn run_as(command: &SimpleCommand, start: usize) -> Vec<Vec<Word>> {
    let words = &command.words;
    let mut lists = vec![words[start..].to_vec()];
    let before = &words[..start];
    if let Some(find) = before
        .iter()
        .position(|w| destructive::basename(&w.text) == "find")
    {
        let args: Vec<&str> = words[find + 1..].iter().map(|w| w.text.as_str()).collect();
        let starts = destructive::find_starts(&args);
        lists = lists
            .iter()
            .flat_map(|list| starts.iter().map(move |s| replaced(list, "{}", s)))
            .collect();
    }
    if let (Some(xargs), Some(input)) = (
        before
            .iter()
            .position(|w| destructive::basename(&w.text) == "xargs"),
        command.input.as_deref(),
    ) {
        let mut items: Vec<&str> = input
            .split(|c: char| c.is_whitespace() || c == '\0')
            .map(|item| item.trim_matches(['\'', '"']))
            .filter(|item| !item.is_empty())
            .collect();
        // Each item is judged once (with `-I`, one command per item).
        items.sort_unstable();
        items.dedup();
        let options: Vec<&str> = words[xargs + 1..start]
            .iter()
            .map(|w| w.text.as_str())
            .collect();
        lists = match xargs_replace(&options) {
            Some(pattern) => lists
                .iter()
                .flat_map(|list| items.iter().map(move |item| replaced(list, pattern, item)))
                .collect(),
            None => lists
                .into_iter()
                .map(|mut list| {
                    list.extend(items.iter().map(|item| literal_word(item)));
                    list
                })
                .collect(),
        };
    }
    lists
}

/// `xargs`'s replace string, if its options set one (`-I R`, `-IR`, `-i`,
/// `--replace[=R]`).
fn xargs_replace<'a>(options: &[&'a str]) -> Option<&'a str> {
    let mut options = options.iter();
    while let Some(&option) = options.next() {
        match option {
            "-I" => return options.next().copied(),
            "-i" | "--replace" => return Some("{}"),
            _ => {
                if let Some(pattern) = option
                    .strip_prefix("--replace=")
                    .or_else(|| option.strip_prefix("-I"))
                    .or_else(|| option.strip_prefix("-i"))
                {
                    return Some(pattern);
                }
            }
        }
    }
    None
}

/// `list` with `pattern` in every word's text replaced by `with`.
fn replaced(list: &[Word], pattern: &str, with: &str) -> Vec<Word> {
    list.iter()
        .map(|word| {
            if word.text.contains(pattern) {
                literal_word(&word.text.replace(pattern, with))
            } else {
                word.clone()
            }
        })
        .collect()
}

/// A word whose value is its text (one the deny list made).
fn literal_word(text: &str) -> Word {
    Word {
        text: text.to_owned(),
        canonical: crate::quote::shell_quote(text),
        kind: WordKind::Literal,
    }
}

/// A rule: the command's first words are `prefix`'s, or its normalised
/// line matches `regex`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// How the audit log and the model name it (`prefix:git status`).
    pub name: String,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    Prefix(Vec<String>),
    Regex(Regex),
}

impl Rule {
    fn prefix(prefix: &str) -> Self {
        Self {
            name: format!("prefix:{prefix}"),
            matcher: Matcher::Prefix(prefix.split_whitespace().map(str::to_owned).collect()),
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

    /// Whether it vouches for one simple command. A prefix matches whole
    /// words (`git` allows `git status`, not `gitk`) and only words whose
    /// value is their text; a regex sees the command's normalised line
    /// (quotes removed, re-quoted where needed, globs bare), never a
    /// whole compound line, and no word whose value bash computes.
    fn allows(&self, command: &SimpleCommand) -> bool {
        match &self.matcher {
            Matcher::Prefix(prefix) => {
                command.all_words().all(|w| w.kind == WordKind::Literal)
                    && starts_with(command.all_words(), prefix)
            }
            Matcher::Regex(regex) => {
                command.all_words().all(|w| w.kind != WordKind::Dynamic)
                    && regex.is_match(&command.canonical())
            }
        }
    }

    /// Whether it denies a command's words, whatever their kind.
    fn denies(&self, words: &[Word]) -> bool {
        match &self.matcher {
            Matcher::Prefix(prefix) => starts_with(words.iter(), prefix),
            Matcher::Regex(regex) => regex.is_match(&syntax::join_canonical(words.iter())),
        }
    }

    /// A deny regex also sees the line as written, as it always has: a
    /// rule against a pipeline (`curl .*\\| *sh`) keeps working.
    fn denies_text(&self, text: &str) -> bool {
        match &self.matcher {
            Matcher::Prefix(_) => false,
            Matcher::Regex(regex) => regex.is_match(text),
        }
    }
}

fn starts_with<'w>(mut words: impl Iterator<Item = &'w Word>, prefix: &[String]) -> bool {
    prefix
        .iter()
        .all(|p| words.next().is_some_and(|w| w.text == *p))
}

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

/// What a policy says of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every part of it is vouched for, by these rules.
    Allowed(String),
    /// By this rule.
    Denied(String),
    /// It parses, and nothing denies it, but no rule vouches for this.
    Unknown(String),
    /// It could not be judged on a syntax tree: why.
    Unparsable(String),
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
            deny: Vec::new(),
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

    /// Deny wins over allow; what does not parse is never allowed.
    pub fn judge(&self, command: &str) -> Verdict {
        if let Some(rule) = self.deny.iter().find(|r| r.denies_text(command)) {
            return Verdict::Denied(rule.name.clone());
        }
        let script = match syntax::parse(command) {
            Ok(script) => script,
            Err(unparsable) => return Verdict::Unparsable(unparsable.to_string()),
        };
        if let Some(rule) = self.denial(&script, 0) {
            return Verdict::Denied(rule);
        }
        match self.vouch(&script) {
            Ok(rules) => Verdict::Allowed(rules.join(", ")),
            Err(why) => Verdict::Unknown(why),
        }
    }

    /// The first deny rule any part of the script breaks: its structure
    /// (a fork bomb), or any simple command, also past wrappers (`sudo`,
    /// `env`, `xargs`, `find -exec`, ...) as the command they run, inside
    /// the scripts it runs (`bash -c`) and the code an interpreter is
    /// given (`python3 -c`), `depth` scripts deep.
    fn denial(&self, script: &Script, depth: usize) -> Option<String> {
        if let Some(rule) = script.destructive.first() {
            return Some((*rule).to_owned());
        }
        script.commands.iter().find_map(|command| {
            let whole = syntax::join_canonical(command.all_words());
            if let Some(rule) = self.deny.iter().find(|r| r.denies_text(&whole)) {
                return Some(rule.name.clone());
            }
            let wrapped = command
                .words
                .first()
                .is_some_and(|w| syntax::WRAPPERS.contains(&destructive::basename(&w.text)));
            let starts = if wrapped { command.words.len() } else { 1 };
            (0..starts.min(command.words.len()))
                .flat_map(|start| run_as(command, start))
                .find_map(|words| self.denial_of(&words, command.input.as_deref(), depth))
                .or_else(|| {
                    command
                        .inner
                        .as_ref()
                        .and_then(|i| self.denial(&i.script, depth))
                })
        })
    }

    fn denial_of(&self, words: &[Word], input: Option<&str>, depth: usize) -> Option<String> {
        // The words bash runs: a pattern's braces expanded (`rm -rf
        // /{usr,etc}`), its globs matched against system paths later.
        let expanded: Vec<String> = words
            .iter()
            .flat_map(|w| match w.kind {
                WordKind::Pattern => destructive::expand_braces(&w.text),
                _ => vec![w.text.clone()],
            })
            .collect();
        let texts: Vec<&str> = expanded.iter().map(String::as_str).collect();
        if let Some(rule) = destructive::check(&texts) {
            return Some(rule.to_owned());
        }
        if let Some(rule) = self.deny.iter().find(|r| r.denies(words)) {
            return Some(rule.name.clone());
        }
        // Code an interpreter runs: its calls, and the command lines it
        // hands to a shell, judged as commands.
        let code = inline_code::code_of(&texts, input)?;
        if let Some(rule) = inline_code::check(&code) {
            return Some(rule.to_owned());
        }
        if depth >= MAX_CODE_NESTING {
            return None;
        }
        inline_code::shell_lines(&code)
            .iter()
            .filter_map(|line| syntax::parse(line).ok())
            .find_map(|script| self.denial(&script, depth + 1))
    }

    /// The rules that vouch for every part of the script, or why none
    /// does for one.
    fn vouch(&self, script: &Script) -> Result<Vec<String>, String> {
        if let Some(concern) = script.concerns.first() {
            return Err(concern.clone());
        }
        if script.commands.is_empty() {
            return Err("there is no command in it".to_owned());
        }
        let mut rules: Vec<String> = Vec::new();
        for command in &script.commands {
            let vouched = match self.allow.iter().find(|r| r.allows(command)) {
                Some(rule) => vec![rule.name.clone()],
                // `bash -c SCRIPT` is its script.
                None => match command.inner.as_ref().filter(|i| i.equivalent) {
                    Some(inner) => self.vouch(&inner.script)?,
                    None => return Err(format!("no rule allows `{}`", command.canonical())),
                },
            };
            for rule in vouched {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        Ok(rules)
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

    /// The example policy of docs/guide/local.md.
    fn readme() -> Policy {
        policy(
            "allow = [{ prefix = \"ls\" }, { prefix = \"git status\" }, { regex = \"^cat [^;&|]+$\" }]\n\
             deny = [{ prefix = \"git push\" }]\n",
        )
    }

    fn allowed(p: &Policy, command: &str) -> bool {
        matches!(p.judge(command), Verdict::Allowed(_))
    }

    fn denied(p: &Policy, command: &str) -> bool {
        matches!(p.judge(command), Verdict::Denied(_))
    }

    #[test]
    fn every_simple_command_must_match_a_rule() {
        // Each would pass the example policy (docs/guide/local.md) if the
        // line were matched as a whole string rather than command by command.
        let p = readme();
        for command in [
            "git status >/dev/null || touch X",
            "git status; touch X",
            "git status && touch X",
            "git status & touch X",
            "git status | touch X",
            "cat $(touch X)",
            "cat `touch X`",
            "cat a\ntouch X",
            "cat <(touch X)",
            "ls \"$(touch X)\"",
            "(git status; touch X)",
            "{ ls; touch X; }",
            "if ls; then touch X; fi",
            "while ls; do touch X; done",
            "for f in a b; do touch X; done",
            "case a in a) touch X;; esac",
            "! touch X",
            "ls\n\ntouch X",
            "cat x <<EOF && touch X\nbody\nEOF",
            "cat x <<EOF\nbody\nEOF\ntouch X",
        ] {
            assert!(!allowed(&p, command), "{command:?} was allowed");
        }
        for command in [
            "git status",
            "git status >/dev/null 2>&1 && ls -la",
            "ls; cat notes.txt",
            "cat a\ncat b",
            "(ls) | cat x",
            "if git status; then ls; else cat x; fi",
            "ls & git status",
            "case a in a) ls;; esac",
            "! ls # a comment",
            "bash -lc 'ls && git status'",
        ] {
            assert!(allowed(&p, command), "{command:?}: {:?}", p.judge(command));
        }
        // A long chain is judged whole, not refused as too deep.
        let chain = vec!["ls"; 2000].join(" && ");
        assert!(allowed(&p, &chain));
        assert!(!allowed(&p, &format!("{chain} || touch X")));
    }

    #[test]
    fn variables_set_without_an_assignment_word_are_never_vouched_for() {
        // Found by the red team: a loop variable and a named descriptor
        // are assignments too. `for HOME in ./x; do git status; done`
        // made git read ./x/.gitconfig (whose core.fsmonitor it runs);
        // `for PATH in ...` chooses what `ls` is.
        let p = policy(
            "allow = [{ prefix = \"ls\" }, { prefix = \"git status\" }, { prefix = \"echo\" }]",
        );
        for command in [
            "for HOME in ./evil; do git status; done",
            "for PATH in /tmp; do ls; done",
            "for f in a *.rs; do ls; done",
            "for f; do ls; done",
            "echo {HOME}>/dev/null; git status",
            "echo x {HOME}>/dev/null",
            "ls {fd}>/dev/null",
            "echo {PATH}</dev/null; ls",
        ] {
            assert!(
                matches!(p.judge(command), Verdict::Unknown(_)),
                "{command:?}: {:?}",
                p.judge(command)
            );
        }
        // Braces that are no descriptor name stay words.
        assert!(allowed(&p, "echo a{b}>/dev/null"));
        assert!(allowed(&p, "echo {} >/dev/null"));
    }

    #[test]
    fn words_are_judged_after_quote_removal_and_expansions_are_not_literal() {
        let p = policy("allow = [{ prefix = \"echo hi\" }, { prefix = \"ls\" }, { regex = \"^cat [a-z.*]+$\" }]");
        assert!(allowed(&p, "echo 'hi' there"));
        assert!(allowed(&p, "e\"ch\"o h\\i"));
        assert!(allowed(&p, "echo $'h\\x69'"));
        assert!(!allowed(&p, "echo \"$HOME\""));
        assert!(!allowed(&p, "echo hi $x"));
        assert!(!allowed(&p, "echo hi ${x:=y}"));
        assert!(!allowed(&p, "echo hi $((x))"));
        // A glob needs a rule that admits it: the regex does, the prefix not.
        assert!(!allowed(&p, "ls *.rs"));
        assert!(!allowed(&p, "ls ~"));
        assert!(!allowed(&p, "ls {a,b}"));
        assert!(allowed(&p, "ls a{}b"));
        assert!(!allowed(&p, "ls [ab]"));
        assert!(!allowed(&p, "ls [a'b']"));
        assert!(allowed(&p, "ls [ -f x"));
        assert!(allowed(&p, "cat *.txt"));
        // A quoted `*` is literal: shown quoted to the regex.
        assert!(!allowed(&p, "cat '*'"));
        // Assignments are words of the command: `ls` does not allow them.
        assert!(!allowed(&p, "LD_PRELOAD=x.so ls"));
        assert!(!allowed(&p, "X=1"));
        assert!(!allowed(&p, "a[$(touch X)]=1 ls"));
    }

    #[test]
    fn writes_substitutions_and_functions_are_never_vouched_for() {
        let p = readme();
        for command in [
            "cat a > b",
            "cat a >> b",
            "cat a &> b",
            "cat a >| b",
            "cat a >& b",
            "ls 2> err",
            "ls > /dev/null.x",
            "cat <<EOF\n$(touch X)\nEOF",
            "cat <<EOF\n$HOME\nEOF",
            // tree-sitter-bash sees no substitution in this body; bash runs it.
            "cat x <<EOF\n`touch X`\nEOF",
            "cat x <<EOF\na\\\\$(touch X)\nEOF",
            "cat \"a\\\\$(touch X)\"",
            "cat <<< \"$(touch X)\"",
            "ls(){ touch X; }; ls",
            "function ls { touch X; }",
            "export PATH=.",
            "[[ -f x ]]",
            "(( x ))",
            "coproc ls",
        ] {
            assert!(
                matches!(p.judge(command), Verdict::Unknown(_)),
                "{command:?}: {:?}",
                p.judge(command)
            );
        }
        for command in [
            "cat a > /dev/null",
            "ls 2>&1",
            "ls >&2 2>&-",
            "cat - < notes.txt",
            "cat x <<'EOF'\n$(touch X)\nEOF",
            "cat x <<EOF | cat y\nplain\nEOF",
            "cat - <<< hello",
        ] {
            assert!(allowed(&p, command), "{command:?}: {:?}", p.judge(command));
        }
    }

    #[test]
    fn what_does_not_parse_is_never_allowed() {
        let p = readme();
        for command in [
            "ls (",
            "cat 'a",
            "ls \\ -la",
            "ls\r",
            "cat a\r\ntouch X",
            "ls 3<>f",
            // tree-sitter-bash drops the `-` here: the text between its
            // tokens gives it away.
            "cat - <<'EOF'\nx\nEOF",
            // Found by running generated lines through bash: tree-sitter
            // ends a here-document at `E || ...`, bash reads on (and runs
            // the backquotes); it takes `\⏎#` for a comment, bash for
            // part of a word (and runs what follows `&`).
            "cat x <<E\nx\nE || ls\n`touch X`\nE",
            "cat x\\\n#y & touch X",
            "ls a\\\nb",
            &"$(".repeat(300),
            // Balanced but deeper than the walker goes.
            &format!("{}ls{}", "$(".repeat(5000), ")".repeat(5000)),
            &format!("{}ls{}", "(".repeat(5000), ")".repeat(5000)),
        ] {
            assert!(
                matches!(p.judge(command), Verdict::Unparsable(_)),
                "{command:?}: {:?}",
                p.judge(command)
            );
        }
    }

    #[test]
    fn destructive_commands_are_denied_in_any_spelling_and_anywhere() {
        let p = Policy::load(None).unwrap();
        for command in [
            "rm -rf /",
            "rm -rf \"/\"",
            "rm -rf '/'",
            "rm -rf /\"\"",
            "rm --recursive --force /",
            "rm -r -f /",
            "rm -fr -- /",
            "rm -rf /*",
            "rm -rf / --no-preserve-root",
            "rm -rf \"$HOME\"",
            "sudo rm -fr ~",
            "find . -exec rm -rf / \\;",
            "find . -exec bash -c 'mkfs /dev/sda' \\;",
            "sudo -u root env X=1 rm -r -f /*",
            "rm -r -f /*",
            "f(){ f|f& };f",
            ":(){ :|:& };:",
            "bomb() { bomb | bomb & }; bomb",
            "f() ( f & f )",
            "mk\"\"fs /dev/sda",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            "cat x > /dev/nvme0n1",
            "shutdown -h now",
            // Nested anywhere.
            "ls; (cd / && rm -rf *) ; echo $(rm -rf /)",
            "echo \"$(rm -rf ~)\"",
            "bash -c 'rm -rf /'",
            "sh -lc \"echo; rm -rf /\"",
            "sudo bash -c 'mkfs /dev/sda'",
            "eval 'rm -rf /'",
            "cat <<EOF\n$(mkfs /dev/sda)\nEOF",
            "if true; then rm -rf /etc; fi",
            "x=$(rm -rf /)",
            "export X=$(rm -rf /)",
            "rm$'\\0garbage' -rf /",
            "cat \"$(ls; rm -rf /)\"",
            // Found by the red team: bash expands braces and globs
            // before rm sees them; so does the deny list (and in
            // `never-ask` these ran).
            "rm -rf /{usr,etc}",
            "rm -rf {/tmp/x,/}",
            "rm -rf /u*",
            "rm -rf /[e]tc",
            "rm -r{,} -f{,} /",
            "a(){ b|b& }; b(){ a|a& }; a",
            "a() { b & b; }; b() { a; }; a",
        ] {
            assert!(denied(&p, command), "{command:?}: {:?}", p.judge(command));
        }
        for command in [
            "rm -rf ./build",
            "ls -la",
            "echo rm -rf /",
            "echo 'rm -rf /'",
            "git commit -m 'rm -rf /'",
            "rm -rf /tmp/x",
            "find / -name core",
            "fact() { fact; }",
            "f() { g | g & }",
            "rm -rf /tmp/{a,b}",
            "rm -rf ./u*",
            "a() { b; }; b() { a; }",
            "a() { b | b & }; b() { ls; }",
        ] {
            assert!(!denied(&p, command), "{command:?}: {:?}", p.judge(command));
        }
    }

    #[test]
    fn commands_run_through_pipes_wrappers_and_interpreters_are_judged_as_what_they_run() {
        let p = Policy::load(None).unwrap();
        let rule = |command: &str| match p.judge(command) {
            Verdict::Denied(rule) => rule,
            other => panic!("{command:?} was not denied: {other:?}"),
        };
        for (command, expected) in [
            // xargs runs its command with the items it reads.
            ("xargs rm -rf <<< /", destructive::REMOVE_TREE),
            ("echo / | xargs rm -rf", destructive::REMOVE_TREE),
            (
                "echo /usr /tmp | xargs -n1 rm -rf",
                destructive::REMOVE_TREE,
            ),
            ("printf '/\n' | xargs rm -r", destructive::REMOVE_TREE),
            ("echo / | sudo xargs rm -rf", destructive::REMOVE_TREE),
            ("echo /etc | xargs -I{} rm -rf {}", destructive::REMOVE_TREE),
            ("echo /etc | xargs -I % rm -rf %", destructive::REMOVE_TREE),
            (
                "xargs rm -rf <<EOF
/
EOF",
                destructive::REMOVE_TREE,
            ),
            ("xargs -0 rm -rf <<< \"$HOME\"", destructive::REMOVE_TREE),
            ("echo ~root | xargs rm -rf", destructive::REMOVE_TREE),
            // find runs `-exec`'s command with `{}` as what it found, and
            // `-delete` removes the tree.
            ("find / -delete", destructive::REMOVE_TREE),
            ("find /usr -name '*' -delete", destructive::REMOVE_TREE),
            ("find -L ~ -delete", destructive::REMOVE_TREE),
            ("find / -exec rm -rf {} +", destructive::REMOVE_TREE),
            (
                "find / -mindepth 1 -execdir rm -rf {} \\;",
                destructive::REMOVE_TREE,
            ),
            ("sudo find /etc -exec rm -r {} +", destructive::REMOVE_TREE),
            ("find /dev/sda -exec shred {} +", destructive::DISK_WRITE),
            // Another user's home is a home.
            ("rm -rf ~root", destructive::REMOVE_TREE),
            ("rm -rf ~alice/", destructive::REMOVE_TREE),
            // Interpreters' inline code.
            (
                "perl -MFile::Path -e 'rmtree(\"/\")'",
                destructive::REMOVE_TREE,
            ),
            (
                "perl -e 'use File::Path; rmtree \"/\"'",
                destructive::REMOVE_TREE,
            ),
            (
                "python3 -c 'import shutil; shutil.rmtree(\"/\")'",
                destructive::REMOVE_TREE,
            ),
            (
                "python3 -c \"import shutil,os; shutil.rmtree(os.path.expanduser('~'))\"",
                destructive::REMOVE_TREE,
            ),
            (
                "ruby -rfileutils -e 'FileUtils.rm_rf(\"/\")'",
                destructive::REMOVE_TREE,
            ),
            (
                "node -e 'require(\"fs\").rmSync(\"/\", {recursive: true})'",
                destructive::REMOVE_TREE,
            ),
            (
                "python3 <<'EOF'\nimport shutil\nshutil.rmtree('/etc')\nEOF",
                destructive::REMOVE_TREE,
            ),
            (
                "echo 'import shutil; shutil.rmtree(\"/\")' | python3",
                destructive::REMOVE_TREE,
            ),
            (
                "python3 -c 'import os; os.system(\"rm -rf /\")'",
                destructive::REMOVE_TREE,
            ),
            (
                "python3 -c 'import subprocess; subprocess.run([\"rm\", \"-rf\", \"/\"])'",
                destructive::REMOVE_TREE,
            ),
            (
                "perl -e 'system(\"mkfs.ext4 /dev/sda1\")'",
                destructive::MAKE_FS,
            ),
            (
                "awk 'BEGIN { system(\"rm -rf /\") }'",
                destructive::REMOVE_TREE,
            ),
            (
                "bash -c \"python3 -c 'import shutil; shutil.rmtree(\\\"/\\\")'\"",
                destructive::REMOVE_TREE,
            ),
            (
                "python3 -c 'import os\nwhile True:\n    os.fork()'",
                destructive::FORK_BOMB,
            ),
            (
                "python3 -c 'import os\nwhile 1: os.fork()'",
                destructive::FORK_BOMB,
            ),
            ("perl -e 'fork while fork'", destructive::FORK_BOMB),
            ("ruby -e 'loop { fork }'", destructive::FORK_BOMB),
            (
                "python3 -c 'import os; os.kill(-1, 9)'",
                destructive::KILL_ALL,
            ),
            // Disks and the kernel's controls.
            ("shred /dev/sda", destructive::DISK_WRITE),
            ("shred -n 1 -z /dev/nvme0n1", destructive::DISK_WRITE),
            ("blkdiscard /dev/sdb", destructive::DISK_WRITE),
            ("echo c > /proc/sysrq-trigger", destructive::KERNEL_CONTROL),
            ("echo b >/proc//sysrq-trigger", destructive::KERNEL_CONTROL),
            (
                "echo o | sudo tee /proc/sysrq-trigger",
                destructive::KERNEL_CONTROL,
            ),
            ("dd if=/dev/zero of=/dev/mem", destructive::KERNEL_CONTROL),
            (
                "python3 -c 'open(\"/proc/sysrq-trigger\", \"w\").write(\"c\")'",
                destructive::KERNEL_CONTROL,
            ),
            // init, and every process.
            ("kill -9 1", destructive::KILL_ALL),
            ("kill -9 -1", destructive::KILL_ALL),
            ("kill -KILL -1", destructive::KILL_ALL),
            ("kill -s KILL 1", destructive::KILL_ALL),
            ("kill -- -1", destructive::KILL_ALL),
            ("kill 1", destructive::KILL_ALL),
            ("sudo kill -9 1", destructive::KILL_ALL),
            ("killall5 -9", destructive::KILL_ALL),
            ("pkill -9 systemd", destructive::KILL_ALL),
        ] {
            assert_eq!(rule(command), expected, "{command:?}");
        }
        // Near misses: ordinary commands that look alike stay allowed.
        for command in [
            "rm -rf ./build",
            "rm -rf ~/project/target",
            "rm -rf ~root/.cache/pip",
            "find . -name '*.pyc' -delete",
            "find . -name node_modules -type d -prune -exec rm -rf {} +",
            "find /tmp/work -delete",
            "find / -name core",
            "echo ./build | xargs rm -rf",
            "find . -name '*.o' | xargs rm -f",
            "xargs rm -rf < dirs.txt",
            "echo / | xargs ls",
            "kill -9 1234",
            "kill -0 1",
            "kill -TERM %1",
            "kill -l",
            "kill -9 -1234",
            "python3 -c 'import shutil; shutil.rmtree(\"build\")'",
            "python3 -c 'import os; print(os.getpid())'",
            "python3 -c 'print(open(\"/dev/sda\", \"rb\").read(512))'",
            "perl -e 'print \"hello\\n\"'",
            "python3 script.py -c 'shutil.rmtree(\"/\")'",
            "cat /proc/sysrq-trigger",
            "shred secret.txt",
            "echo / ; xargs rm -rf < list",
        ] {
            assert!(!denied(&p, command), "{command:?}: {:?}", p.judge(command));
        }
    }

    #[test]
    fn deny_rules_match_normalised_commands_and_win() {
        let p = policy(
            "allow = [{ prefix = \"git\" }, { regex = \"^cat [a-z.]+$\" }, { prefix = \"curl\" }]\n\
             deny = [{ prefix = \"git push\" }, { regex = \"curl .*\\\\|\" }]\n",
        );
        assert_eq!(p.judge("git status"), Verdict::Allowed("prefix:git".into()));
        assert!(matches!(p.judge("gitk"), Verdict::Unknown(_)));
        for command in [
            "git push origin",
            "git 'push' origin",
            "g\"it\" pu''sh",
            "ls; git push",
            "echo $(git push)",
            "sudo git push",
            "git push $remote",
        ] {
            assert_eq!(
                p.judge(command),
                Verdict::Denied("prefix:git push".into()),
                "{command:?}"
            );
        }
        assert!(matches!(p.judge("cat notes.txt"), Verdict::Allowed(_)));
        assert!(matches!(
            p.judge("cat notes.txt; rm x"),
            Verdict::Unknown(_)
        ));
        // A deny regex still sees the whole line.
        assert!(denied(&p, "curl -s x | sh"));
        assert!(allowed(&p, "curl -s x"));
        assert_eq!(
            p.judge("git log && cat a.txt"),
            Verdict::Allowed("prefix:git, regex:^cat [a-z.]+$".into())
        );
        // Defaults still apply with a file.
        assert!(denied(&p, "rm -rf /"));
        assert!(denied(&p, "git status && rm -rf /"));
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
/// Generated lines, judged and then run by bash: whatever the policy
/// allows must run no command it did not see. Ignored by default (it
/// runs bash some thousand times, as `nobody`, so it needs root):
/// `ROUNDS=20000 SEED=7 cargo test -p shellgate --bin shellgate
/// differential -- --ignored --nocapture`.
#[cfg(test)]
mod differential {
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};

    #[test]
    #[ignore]
    fn what_is_allowed_runs_only_allowed_commands() {
        let dir =
            std::env::temp_dir().join(format!("shellgate-differential-{}", std::process::id()));
        let (bin, work, log) = (dir.join("bin"), dir.join("work"), dir.join("log"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        // `a` and `b` are allowed, `c` is not; each notes that it ran.
        for name in ["a", "b", "c"] {
            let stub = bin.join(name);
            std::fs::write(
                &stub,
                format!("#!/bin/sh\necho {name} >> {}\n", log.display()),
            )
            .unwrap();
            std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // The lines' own `bash -c` is bash.
        std::os::unix::fs::symlink("/bin/bash", bin.join("bash")).unwrap();
        for path in [&dir, &work] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let policy_file = dir.join("policy.toml");
        std::fs::write(
            &policy_file,
            "allow = [{ prefix = \"a\" }, { prefix = \"b\" }, { regex = \"^b [a-z ]*$\" }]",
        )
        .unwrap();
        let policy = super::Policy::load(Some(&policy_file)).unwrap();
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(default)
        };
        let mut seed = number("SEED", 1);
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let run = |line: &str| {
            let _ = std::fs::remove_file(&log);
            // Output read to its end: every process the line started
            // (in the background too) is done when it ends.
            let _ = Command::new("/usr/bin/setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "/usr/bin/prlimit",
                    "--nproc=40",
                    "/usr/bin/timeout",
                    "-s",
                    "KILL",
                    "3",
                    "/bin/bash",
                    "-c",
                    line,
                ])
                .env_clear()
                .env("PATH", &bin)
                .current_dir(&work)
                .stdin(Stdio::null())
                .output();
            std::fs::read_to_string(&log).unwrap_or_default()
        };
        assert!(run("a; c").contains('c'), "the harness sees nothing run");
        let (mut allowed, mut bypasses) = (0, Vec::new());
        for _ in 0..number("ROUNDS", 2000) {
            let line = gen_line(&mut next, 0);
            let line = mutate(&mut next, line);
            if !matches!(policy.judge(&line), super::Verdict::Allowed(_)) {
                continue;
            }
            allowed += 1;
            let ran = run(&line);
            // Nor write a file (the stubs write outside `work`).
            let wrote = std::fs::read_dir(&work).map_or(0, |d| d.count());
            if ran.lines().any(|l| l == "c") || wrote > 0 {
                bypasses.push(line);
                let _ = std::fs::remove_dir_all(&work);
                std::fs::create_dir_all(&work).unwrap();
                std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        println!("{allowed} lines allowed and run");
        assert!(
            bypasses.is_empty(),
            "ran a command the policy did not allow: {bypasses:#?}"
        );
    }

    /// One of `xs`.
    fn pick<'a>(next: &mut impl FnMut() -> usize, xs: &[&'a str]) -> &'a str {
        xs[next() % xs.len()]
    }

    /// A word: mostly plain, sometimes one of the spellings that hide a
    /// command or are read differently by a parser that is not bash.
    fn gen_word(next: &mut impl FnMut() -> usize, head: bool) -> String {
        let names = [
            "a",
            "b",
            "c",
            "'a'",
            "\"b\"",
            "\\c",
            "$'\\x63'",
            "a\\\nb",
            "c\\\n",
            "'c'",
            "\"c\"",
            "b''",
            "a\"\"",
            "${x}c",
            "$x",
            "`c`",
            "$(c)",
            "<(c)",
            "~",
            "*",
            "{a,c}",
            "c#",
            "#c",
            "a#c",
            "x=c",
            "\\#c",
            "$'c'",
            "$\"c\"",
            "-c",
            "--",
            "\\ ",
            "a\\ c",
            "\r",
            "!",
            "{",
            "}",
            "[[",
            "((",
            "c)",
            "(c",
            "\\'",
            "'\\''",
            "\"\\\"\"",
            "\"$\"",
            "\"`c`\"",
            "\"\\`c\\`\"",
            "$((1))",
            "1",
            "2>&1",
            ">/dev/null",
            ">&2",
            "<<<c",
            "<<<$(c)",
            "=",
            "a=b",
            ">x",
            ">>x",
            "&>x",
            "2>x",
            ">|x",
            "> /dev/null",
            ">/dev/nul*",
            ">&x",
            "<x",
            "<>x",
            "$'\\''",
            "$'\\'c'",
            "\"'\"",
            "\"a'b\"'c'",
            "\\\"",
            "\"\\\\\"",
            "\"$(\"",
            "$'\\0'c",
            ";;",
            "esac",
            "time",
            "!",
            "then",
            "do",
        ];
        let plain: &[&str] = if head {
            &["a", "b", "a", "'b'", "a\\\n"]
        } else {
            &["x", "y", "'x y'", "\"x\"", "-x", "/dev/null"]
        };
        let n = if head { 1 } else { 1 + next() % 2 };
        (0..n)
            .map(|_| {
                if !next().is_multiple_of(4) {
                    pick(next, plain).to_string()
                } else {
                    pick(next, &names).to_string()
                }
            })
            .collect()
    }

    /// A simple or compound command.
    fn gen_command(next: &mut impl FnMut() -> usize, depth: usize) -> String {
        match next() % 14 {
            0 if depth < 2 => format!("( {} )", gen_line(next, depth + 1)),
            1 if depth < 2 => format!("{{ {}; }}", gen_line(next, depth + 1)),
            2 if depth < 2 => format!(
                "if {}; then {}; fi",
                gen_line(next, depth + 1),
                gen_line(next, depth + 1)
            ),
            3 if depth < 2 => format!("bash -c '{}'", gen_line(next, depth + 1).replace('\'', "")),
            4 => format!(
                "{} <<E\n{}\nE",
                gen_simple(next),
                pick(
                    next,
                    &["c", "$(c)", "`c`", "\\`c\\`", "E", "x", "\\$(c)", "$x"]
                )
            ),
            5 => format!(
                "{} <<'E'\n{}\nE\n{}",
                gen_simple(next),
                pick(next, &["c", "$(c)", "`c`"]),
                pick(next, &["c", "a", ""])
            ),
            8 => format!(
                "{} <<-E\n\t{}\n\tE\n{}",
                gen_simple(next),
                pick(next, &["c", "$(c)", "x"]),
                pick(next, &["c", "a", ""])
            ),
            9 => format!(
                "{} <<A <<'B'\n{}\nA\n{}\nB",
                gen_simple(next),
                pick(next, &["x", "$(c)", "B"]),
                pick(next, &["x", "$(c)", "A"])
            ),
            10 if depth < 2 => format!(
                "case {} in {}) {};;& *) {};; esac",
                gen_word(next, false),
                gen_word(next, false),
                gen_line(next, depth + 1),
                gen_line(next, depth + 1)
            ),
            6 if depth < 2 => format!(
                "for i in {}; do {}; done",
                gen_word(next, false),
                gen_line(next, depth + 1)
            ),
            7 if depth < 2 => format!(
                "case {} in {}) {};; esac",
                gen_word(next, false),
                gen_word(next, false),
                gen_line(next, depth + 1)
            ),
            _ => gen_simple(next),
        }
    }

    /// Words joined by blanks or line continuations.
    fn gen_simple(next: &mut impl FnMut() -> usize) -> String {
        let mut words = vec![gen_word(next, true)];
        for _ in 0..next() % 4 {
            words.push(gen_word(next, false));
        }
        let seps = [" ", " ", "\t", "\\\n", " \\\n "];
        let mut out = String::new();
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                out.push_str(pick(next, &seps));
            }
            out.push_str(w);
        }
        out
    }

    /// Commands joined by control operators.
    fn gen_line(next: &mut impl FnMut() -> usize, depth: usize) -> String {
        let ops = [";", " && ", " || ", " | ", " & ", "\n", ";\n", " |& ", "&"];
        let mut out = gen_command(next, depth);
        for _ in 0..next() % 3 {
            out.push_str(pick(next, &ops));
            out.push_str(&gen_command(next, depth));
        }
        if next().is_multiple_of(5) {
            out.push_str(pick(next, &[" #c", " # x \\\nc", "&", ";"]));
        }
        out
    }

    /// The line with one character inserted, removed or replaced.
    fn mutate(next: &mut impl FnMut() -> usize, line: String) -> String {
        if !next().is_multiple_of(3) || line.is_empty() {
            return line;
        }
        let mut chars: Vec<char> = line.chars().collect();
        let at = next() % chars.len();
        let noise = [
            '\\', '\'', '"', '#', '\n', ';', '`', '$', ' ', '\r', '&', '(', ')', '{', '}', '<', '>',
        ];
        match next() % 3 {
            0 => {
                chars.insert(at, noise[next() % noise.len()]);
            }
            1 => {
                chars.remove(at);
            }
            _ => {
                chars[at] = noise[next() % noise.len()];
            }
        }
        chars.into_iter().collect()
    }
}
