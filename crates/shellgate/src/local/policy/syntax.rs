//! A command line as `shellgate local`'s policy sees it: parsed with
//! tree-sitter-bash into the simple commands bash would run (across
//! `;`, `&&`, `||`, `|`, `&`, newlines, subshells, groups, loops,
//! conditionals, substitutions and `bash -c` scripts), each word after
//! quote removal, with every part a rule cannot vouch for (expansions,
//! substitutions, writes to files, function definitions, constructs this
//! module does not handle) noted as a concern, the structurally
//! destructive ones (fork bombs, writes to disks and to the kernel's
//! controls) noted for the deny list, and what a command's standard input
//! is known to carry (a here-string, a literal here-document, an `echo`
//! before it in a pipeline) kept for the deny list to read.
//!
//! Anything tree-sitter cannot read completely, and anything it reads
//! differently from bash as far as this module can tell (text between
//! tokens that bash would not skip, such as `\ ` or a carriage return),
//! is [`Unparsable`]: the policy never vouches for what it did not see.

use tree_sitter::{Node, Parser};

use super::destructive::basename;

/// Deeper than this, a tree is refused rather than walked (a hostile
/// `$($($(...)))` must not exhaust the stack).
const MAX_TREE_DEPTH: usize = 200;

/// More functions defined in one line than the fork-bomb check follows.
const MAX_FUNCTIONS: usize = 256;

/// How many `bash -c` scripts inside one another are read.
const MAX_SCRIPT_NESTING: usize = 4;

/// The shells whose `-c SCRIPT` is read as a script (for the deny list).
const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "mksh", "ash"];

/// Commands that run their arguments as another command: the deny list
/// looks past them (`sudo rm -rf /`, `find . -exec rm -rf / ;`).
pub const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "command", "builtin", "exec", "nice", "nohup", "time", "timeout",
    "setsid", "stdbuf", "ionice", "chrt", "taskset", "xargs", "watch", "strace", "flock",
    "unshare", "nsenter", "chroot", "runuser", "coproc", "busybox", "find",
];

/// Why a command line could not be judged on its syntax tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unparsable {
    #[error("the command does not parse as bash")]
    Syntax,
    #[error("the command parses differently in bash than in the policy's parser ({0})")]
    Ambiguous(String),
    #[error("the command is nested too deeply to judge")]
    TooDeep,
    #[error("the command cannot be parsed")]
    Parser,
}

/// How much of a word bash decides only when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WordKind {
    /// Exactly its text.
    Literal,
    /// A glob, tilde or brace expansion: existing file names or fixed
    /// alternatives, nothing that runs.
    Pattern,
    /// Variables, arithmetic or another command's output.
    Dynamic,
}

/// One word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// After quote removal; expansions kept as written (`"$HOME"/x` is
    /// `$HOME/x`, `mk""fs` is `mkfs`).
    pub text: String,
    /// As a regex rule sees it: literal text quoted where bash would
    /// need it (`'a b'`), glob and expansion characters left bare (`*.rs`),
    /// so a rule can tell a literal `*` from a glob.
    pub canonical: String,
    pub kind: WordKind,
}

/// A simple command: what bash runs with one argv.
#[derive(Debug, Clone)]
pub struct SimpleCommand {
    /// `NAME=VALUE` words before the command name.
    pub assignments: Vec<Word>,
    pub words: Vec<Word>,
    /// The script it runs, when it is a shell's `-c SCRIPT` (or `eval`).
    pub inner: Option<Box<Inner>>,
    /// What its standard input is known to carry, for the deny list (what
    /// `xargs` appends, the code an interpreter reads): a here-string or a
    /// here-document that expands nothing, or the words of an `echo` or
    /// `printf` before it in a pipeline.
    pub input: Option<String>,
}

/// A script a command runs (`bash -c SCRIPT`), read as a script.
#[derive(Debug, Clone)]
pub struct Inner {
    pub script: Script,
    /// Running the command is running this script and nothing else
    /// (`bash -c`, `sh -lc`, with literal words and no assignments), so
    /// allow rules may vouch for the script in its place.
    pub equivalent: bool,
}

impl SimpleCommand {
    /// Assignments then words.
    pub fn all_words(&self) -> impl Iterator<Item = &Word> {
        self.assignments.iter().chain(&self.words)
    }

    /// The normalised command as one line: canonical words joined by
    /// spaces.
    pub fn canonical(&self) -> String {
        join_canonical(self.all_words())
    }
}

/// Canonical words joined by spaces.
pub fn join_canonical<'w>(words: impl Iterator<Item = &'w Word>) -> String {
    words
        .map(|w| w.canonical.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a command line runs, as far as its syntax tells.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Every simple command, wherever it sits (inside substitutions and
    /// function bodies too).
    pub commands: Vec<SimpleCommand>,
    /// Why no rule can vouch for all of it; empty when the line is only
    /// simple commands joined by control operators and compound commands.
    pub concerns: Vec<String>,
    /// Built-in deny rules that the structure itself breaks (a fork
    /// bomb, a write to a disk device).
    pub destructive: Vec<&'static str>,
}

/// Parses a command line.
pub fn parse(source: &str) -> Result<Script, Unparsable> {
    parse_nested(source, 0)
}

fn parse_nested(source: &str, nesting: usize) -> Result<Script, Unparsable> {
    if nesting > MAX_SCRIPT_NESTING {
        return Err(Unparsable::TooDeep);
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .map_err(|_| Unparsable::Parser)?;
    let tree = parser.parse(source, None).ok_or(Unparsable::Parser)?;
    let root = tree.root_node();
    if root.has_error() {
        return Err(Unparsable::Syntax);
    }
    check_gaps(root, source)?;
    let mut walker = Walker {
        source,
        nesting,
        depth: 0,
        script: Script::default(),
        functions: Vec::new(),
        defined: Vec::new(),
        piped: None,
    };
    walker.walk(root)?;
    if forks_without_end(&walker.defined) {
        walker
            .script
            .destructive
            .push(super::destructive::FORK_BOMB);
    }
    Ok(walker.script)
}

/// What may stand between two tokens for bash to skip it as tree-sitter
/// does: blanks, newlines where `newlines` (statement lists), and
/// backslash-newline line continuations beside a blank. Anything else
/// means the two read the line differently: tree-sitter also skips `\ `
/// and carriage returns, which bash keeps in a word, and a continuation
/// alone, which bash removes, gluing its neighbours (`a\⏎#c` is the word
/// `a#c` to bash, a word and a comment to tree-sitter).
fn skippable(gap: &str, newlines: bool) -> bool {
    let mut rest = gap;
    let (mut blank, mut continuation) = (false, false);
    while let Some(c) = rest.chars().next() {
        if c == ' ' || c == '\t' || (newlines && c == '\n') {
            blank = true;
            rest = &rest[1..];
        } else if let Some(after) = rest.strip_prefix("\\\n") {
            continuation = true;
            rest = after;
        } else {
            return false;
        }
    }
    blank || !continuation
}

/// A comment starts where bash starts one: at the start of a word, after
/// a blank, a newline or an operator (not after a line continuation).
fn comment_starts_a_word(source: &str, start: usize) -> bool {
    let before = source.get(..start).unwrap_or("");
    if before.ends_with("\\\n") {
        return false;
    }
    before
        .chars()
        .next_back()
        .is_none_or(|c| matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')'))
}

/// Checks the text between every node's children (and around the root)
/// iteratively, so a deep tree cannot exhaust the stack here.
fn check_gaps(root: Node, source: &str) -> Result<(), Unparsable> {
    let text = |from: usize, to: usize| source.get(from..to).unwrap_or("");
    if !skippable(text(0, root.start_byte()), true)
        || !skippable(text(root.end_byte(), source.len()), true)
    {
        return Err(Unparsable::Ambiguous("text outside the command".into()));
    }
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.kind() == "comment" && !comment_starts_a_word(source, node.start_byte()) {
            return Err(Unparsable::Ambiguous("a comment inside a word".into()));
        }
        // Their text between children is content, judged by the walker;
        // their children are still checked.
        let content = matches!(
            node.kind(),
            "string" | "heredoc_body" | "translated_string" | "expansion"
        );
        let newlines = !matches!(
            node.kind(),
            "command" | "variable_assignment" | "file_redirect" | "herestring_redirect"
        );
        let contiguous = node.kind() == "concatenation";
        let mut at = node.start_byte();
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            let gap = text(at, child.start_byte());
            if !content && ((contiguous && !gap.is_empty()) || !skippable(gap, newlines)) {
                return Err(Unparsable::Ambiguous(format!(
                    "{:?} between tokens",
                    gap.chars().take(20).collect::<String>()
                )));
            }
            at = child.end_byte().max(at);
            stack.push(child);
        }
        if !content && node.child_count() > 0 && !skippable(text(at, node.end_byte()), newlines) {
            return Err(Unparsable::Ambiguous("text after the last token".into()));
        }
    }
    Ok(())
}

/// A function whose body is being walked (or was): which commands it
/// runs, and does it spawn (a pipeline or `&`)?
struct FunctionScan {
    name: String,
    /// The first word of every simple command in its body, once per
    /// call.
    calls: Vec<String>,
    spawns: bool,
}

/// Whether the functions defined call one another (or themselves) in a
/// cycle that multiplies processes without end: some function on the
/// cycle calls the cycle twice, or once in a pipeline or the background
/// (`f(){ f|f& }`, and as well `a(){ b|b& }; b(){ a|a& }`).
fn forks_without_end(defined: &[FunctionScan]) -> bool {
    if defined.len() > MAX_FUNCTIONS {
        // Too many to follow (the check is cubic): not shown harmless.
        return true;
    }
    let index = |name: &str| defined.iter().position(|f| f.name == name);
    // reaches[i][j]: calling i can lead to calling j.
    let n = defined.len();
    let mut reaches = vec![vec![false; n]; n];
    for (i, function) in defined.iter().enumerate() {
        for callee in function.calls.iter().filter_map(|c| index(c)) {
            reaches[i][callee] = true;
        }
    }
    // Warshall's closure: through k, i reaches all k reaches.
    for k in 0..n {
        let through = reaches[k].clone();
        for row in reaches.iter_mut().filter(|row| row[k]) {
            for (cell, via) in row.iter_mut().zip(&through) {
                *cell |= *via;
            }
        }
    }
    defined.iter().enumerate().any(|(i, function)| {
        // Calls from i back into a cycle through i.
        let recursive = function
            .calls
            .iter()
            .filter_map(|c| index(c))
            .filter(|&callee| reaches[callee][i])
            .count();
        recursive >= 2 || (recursive >= 1 && function.spawns)
    })
}

struct Walker<'s> {
    source: &'s str,
    nesting: usize,
    depth: usize,
    script: Script,
    functions: Vec<FunctionScan>,
    /// Every function defined, once its body is walked.
    defined: Vec<FunctionScan>,
    /// What the command about to be walked reads from the pipe before it
    /// (see [`SimpleCommand::input`]).
    piped: Option<String>,
}

/// The tokens of compound commands and lists that need no judging.
const CONTROL_TOKENS: &[&str] = &[
    ";", "&", "&&", "||", "|", "|&", "\n", "(", ")", "{", "}", "!", "if", "then", "fi", "elif",
    "else", "while", "until", "do", "done", "for", "in", "case", "esac", ";;", ";&", ";;&",
];

impl<'s> Walker<'s> {
    fn text(&self, node: Node) -> &'s str {
        self.source.get(node.byte_range()).unwrap_or("")
    }

    fn concern(&mut self, concern: String) {
        self.script.concerns.push(concern);
    }

    fn walk(&mut self, node: Node) -> Result<(), Unparsable> {
        self.depth += 1;
        if self.depth > MAX_TREE_DEPTH {
            return Err(Unparsable::TooDeep);
        }
        let result = self.walk_node(node);
        self.depth -= 1;
        result
    }

    fn walk_node(&mut self, node: Node) -> Result<(), Unparsable> {
        if !node.is_named() {
            return self.token(node.kind());
        }
        match node.kind() {
            "list" => self.list(node),
            "program"
            | "pipeline"
            | "subshell"
            | "compound_statement"
            | "negated_command"
            | "redirected_statement"
            | "if_statement"
            | "elif_clause"
            | "else_clause"
            | "while_statement"
            | "for_statement"
            | "case_statement"
            | "case_item"
            | "do_group" => self.structure(node),
            "command" => self.command(node),
            "function_definition" => self.function(node),
            "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
                self.redirect(node).map(|_| ())
            }
            "comment" => Ok(()),
            "variable_assignment" | "variable_assignments" => {
                self.concern("it sets a shell variable".into());
                self.children(node)
            }
            "command_substitution" | "process_substitution" => {
                self.concern(format!("it runs a substitution `{}`", self.text(node)));
                self.children(node)
            }
            kind => {
                self.concern(format!("`{kind}` is a construct no rule can vouch for"));
                self.children(node)
            }
        }
    }

    /// Walks every child (for the deny list: commands nested anywhere).
    fn children(&mut self, node: Node) -> Result<(), Unparsable> {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for child in children {
            self.walk(child)?;
        }
        Ok(())
    }

    /// A token of a list or compound command.
    fn token(&mut self, token: &str) -> Result<(), Unparsable> {
        if matches!(token, "|" | "|&" | "&") {
            for function in &mut self.functions {
                function.spawns = true;
            }
        }
        if !CONTROL_TOKENS.contains(&token) {
            self.concern(format!("`{token}` is a construct no rule can vouch for"));
        }
        Ok(())
    }

    /// `a && b || c` nests to the left, one level an operator: walked as
    /// a loop, so a long chain is not mistaken for a deep tree.
    fn list(&mut self, node: Node) -> Result<(), Unparsable> {
        let mut outer = Vec::new();
        let mut innermost = node;
        while let Some(inner) = innermost.child(0).filter(|c| c.kind() == "list") {
            outer.push(innermost);
            innermost = inner;
        }
        self.structure(innermost)?;
        for list in outer.into_iter().rev() {
            let mut cursor = list.walk();
            // Its first child, the inner list, is walked already.
            let rest: Vec<Node> = list.children(&mut cursor).skip(1).collect();
            for child in rest {
                self.walk(child)?;
            }
        }
        Ok(())
    }

    /// Lists, pipelines and compound commands: their statements are
    /// walked; a `for` list or `case` word is a word, judged as one.
    fn structure(&mut self, node: Node) -> Result<(), Unparsable> {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        let pipeline = node.kind() == "pipeline";
        // The simple command a redirected statement's body is (its
        // here-document is that command's input).
        let mut body: Option<usize> = None;
        // What the last stage of a pipeline writes to the next, if known.
        let mut output: Option<String> = None;
        for child in children {
            if pipeline && child.is_named() {
                self.piped = output.take();
            }
            match child.kind() {
                "heredoc_redirect" | "herestring_redirect"
                    if node.kind() == "redirected_statement" =>
                {
                    let input = self.redirect(child)?;
                    if let (Some(input), Some(body)) = (input, body) {
                        if let Some(command) = self.script.commands.get_mut(body) {
                            command.input = Some(input);
                        }
                    }
                }
                "command" => {
                    self.walk(child)?;
                    let last = self.script.commands.len().checked_sub(1);
                    body = last;
                    output = last
                        .and_then(|i| self.script.commands.get(i))
                        .and_then(known_output);
                }
                // The loop variable of `for NAME in ...` is assigned
                // like `NAME=...` (`for HOME in ./x; do git status; done`
                // points git at another config), and its value can only
                // be used through an expansion no rule vouches for.
                "variable_name" if node.kind() == "for_statement" => {
                    self.concern(format!("it sets the shell variable {}", self.text(child)));
                }
                kind if is_word_kind(kind) => {
                    let word = self.word(child)?;
                    if word.kind == WordKind::Dynamic {
                        self.concern(format!("it expands `{}`", self.text(child)));
                    }
                }
                _ => self.walk(child)?,
            }
            self.piped = None;
        }
        Ok(())
    }

    fn command(&mut self, node: Node) -> Result<(), Unparsable> {
        let mut input = self.piped.take();
        let mut assignments = Vec::new();
        let mut words = Vec::new();
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for child in children {
            if !child.is_named() {
                self.concern(format!("`{}` in a command", child.kind()));
                continue;
            }
            match child.kind() {
                "variable_assignment" => assignments.push(self.assignment(child)?),
                "command_name" => {
                    let Some(name) = child.named_child(0) else {
                        return Err(Unparsable::Syntax);
                    };
                    words.push(self.word(name)?);
                }
                "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
                    // A redirection of standard input replaces the pipe.
                    let reads = matches!(child.kind(), "heredoc_redirect" | "herestring_redirect")
                        || self.text(child).starts_with('<');
                    let known = self.redirect(child)?;
                    if reads {
                        input = known;
                    }
                }
                "comment" => {}
                _ => words.push(self.word(child)?),
            }
        }
        if let (Some(first), Some(function)) = (words.first(), self.functions.last_mut()) {
            function.calls.push(first.text.clone());
        }
        let inner = self.inner_script(&assignments, &words)?;
        self.script.commands.push(SimpleCommand {
            assignments,
            words,
            inner,
            input,
        });
        Ok(())
    }

    /// The script a shell's `-c SCRIPT` (or `eval ARGS`) runs, read as
    /// one, when its words are known.
    fn inner_script(
        &self,
        assignments: &[Word],
        words: &[Word],
    ) -> Result<Option<Box<Inner>>, Unparsable> {
        // Past wrappers (`sudo bash -c ...`), for the deny list.
        let mut start = 0;
        while words
            .get(start)
            .is_some_and(|w| WRAPPERS.contains(&basename(&w.text)))
        {
            start += 1;
            // A wrapper's options and operands: the shell is the first
            // word that names one.
            while words
                .get(start)
                .is_some_and(|w| !SHELLS.contains(&basename(&w.text)) && w.text != "eval")
            {
                start += 1;
            }
        }
        let words = &words[start.min(words.len())..];
        let Some(name) = words.first() else {
            return Ok(None);
        };
        let all_literal = words.iter().all(|w| w.kind == WordKind::Literal);
        let name = basename(&name.text);
        if name == "eval" {
            let text: Vec<&str> = words[1..].iter().map(|w| w.text.as_str()).collect();
            return Ok(self.nested(&text.join(" ")).map(|script| {
                Box::new(Inner {
                    script,
                    equivalent: false,
                })
            }));
        }
        if !SHELLS.contains(&name) {
            return Ok(None);
        }
        // `bash -c SCRIPT`, `bash -lc SCRIPT`, `bash -l -c SCRIPT`: the
        // forms a model (and the legacy `local_shell` tool) uses.
        let flags: Vec<&str> = words[1..]
            .iter()
            .map(|w| w.text.as_str())
            .take_while(|w| w.starts_with('-') && *w != "-" && *w != "--")
            .collect();
        if !flags
            .iter()
            .any(|f| !f.starts_with("--") && f.contains('c'))
        {
            return Ok(None);
        }
        let Some(script) = words.get(1 + flags.len()) else {
            return Ok(None);
        };
        let equivalent = start == 0
            && assignments.is_empty()
            && all_literal
            // Not `sh`: dash reads `$'...'` otherwise, and a path other
            // than bash's own could be anything.
            && matches!(words[0].text.as_str(), "bash" | "/bin/bash" | "/usr/bin/bash")
            && matches!(flags.as_slice(), ["-c"] | ["-lc"] | ["-cl"] | ["-l", "-c"]);
        if equivalent {
            // bash runs it: what cannot be read here must not be vouched
            // for, nor slip past the deny list.
            let script = parse_nested(&script.text, self.nesting + 1)?;
            return Ok(Some(Box::new(Inner { script, equivalent })));
        }
        Ok(self.nested(&script.text).map(|script| {
            Box::new(Inner {
                script,
                equivalent: false,
            })
        }))
    }

    /// A script read for the deny list only: one that does not parse (in
    /// another shell's syntax, say) is not read.
    fn nested(&self, text: &str) -> Option<Script> {
        parse_nested(text, self.nesting + 1).ok()
    }

    fn function(&mut self, node: Node) -> Result<(), Unparsable> {
        self.concern("it defines a function".into());
        let Some(name) = node.child_by_field_name("name") else {
            return Err(Unparsable::Syntax);
        };
        let name = self.word(name)?.text;
        self.functions.push(FunctionScan {
            name,
            calls: Vec::new(),
            spawns: false,
        });
        let mut cursor = node.walk();
        let body: Vec<Node> = node
            .children(&mut cursor)
            .filter(|c| c.is_named() && Some(*c) != node.child_by_field_name("name"))
            .collect();
        let walked = body.into_iter().try_for_each(|child| self.walk(child));
        let scan = self.functions.pop();
        walked?;
        self.defined.extend(scan);
        Ok(())
    }

    /// Judges a redirection; returns what it gives the command's standard
    /// input, when that is known (a here-string or here-document that
    /// expands nothing).
    fn redirect(&mut self, node: Node) -> Result<Option<String>, Unparsable> {
        if let Some(name) = named_descriptor(self.source, node.start_byte()) {
            // `{NAME}>FILE` opens a descriptor and stores its number in
            // NAME (for a builtin, in the shell itself): an assignment,
            // whatever tree-sitter makes of the `{NAME}`.
            self.concern(format!("it sets the shell variable {name}"));
        }
        match node.kind() {
            "file_redirect" => self.file_redirect(node).map(|_| None),
            "herestring_redirect" => {
                let mut cursor = node.walk();
                let children: Vec<Node> = node.named_children(&mut cursor).collect();
                let mut input = String::new();
                for child in children {
                    if child.kind() == "file_descriptor" {
                        continue;
                    }
                    let word = self.word(child)?;
                    if word.kind == WordKind::Dynamic {
                        self.concern(format!("it expands `{}`", self.text(child)));
                    }
                    // As written, expansions too: `$HOME` is read as the
                    // home directory it names.
                    input.push_str(&word.text);
                }
                input.push('\n');
                Ok(Some(input))
            }
            _ => self.heredoc(node),
        }
    }

    fn file_redirect(&mut self, node: Node) -> Result<(), Unparsable> {
        let mut operator = None;
        let mut targets = Vec::new();
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for child in children {
            if !child.is_named() {
                operator.get_or_insert(child.kind());
            } else if child.kind() != "file_descriptor" {
                targets.push(child);
            }
        }
        let operator = operator.unwrap_or("");
        for target in targets {
            let word = self.word(target)?;
            let duplicate = word.kind == WordKind::Literal
                && (word.text == "-" || word.text.bytes().all(|b| b.is_ascii_digit()));
            match operator {
                "<" if word.kind != WordKind::Dynamic => {}
                "<&" | ">&" if duplicate => {}
                ">" | ">>" | ">|" | "&>" | "&>>" | ">&" => {
                    if super::destructive::is_disk(&word.text) {
                        self.script.destructive.push(super::destructive::DISK_WRITE);
                    }
                    if super::destructive::is_kernel_control(&word.text) {
                        self.script
                            .destructive
                            .push(super::destructive::KERNEL_CONTROL);
                    }
                    let discarded = word.kind == WordKind::Literal
                        && matches!(
                            word.text.as_str(),
                            "/dev/null" | "/dev/stdout" | "/dev/stderr"
                        );
                    if !discarded {
                        self.concern(format!("it writes to the file {}", word.canonical));
                    }
                }
                _ => self.concern(format!("the redirection `{}`", self.text(node))),
            }
        }
        if !matches!(
            operator,
            ">&-" | "<&-" | "<" | "<&" | ">&" | ">" | ">>" | ">|" | "&>" | "&>>"
        ) {
            self.concern(format!("the redirection `{}`", self.text(node)));
        }
        Ok(())
    }

    /// `<<WORD` / `<<-WORD`: a body with expansions (the delimiter not
    /// quoted) is a concern, and its substitutions are walked. tree-sitter
    /// hangs the rest of the line (`cat <<EOF | wc`) under the redirect.
    fn heredoc(&mut self, node: Node) -> Result<Option<String>, Unparsable> {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        // A quoted delimiter (`<<'EOF'`, `<<"EOF"`, `<<E\OF`) keeps the
        // body as it is.
        let quoted = children
            .iter()
            .find(|c| c.kind() == "heredoc_start")
            .is_some_and(|start| self.text(*start).contains(['\'', '"', '\\']));
        let strip_tabs = children.iter().any(|c| c.kind() == "<<-");
        let delimiter: Option<String> = children
            .iter()
            .find(|c| c.kind() == "heredoc_start")
            .map(|start| self.text(*start).replace(['\'', '"', '\\'], ""));
        let mut input = None;
        for child in children {
            match child.kind() {
                "<<" | "<<-" | "heredoc_start" => {}
                "heredoc_end" => {
                    // bash ends the body only at a line that is the
                    // delimiter alone; tree-sitter also at one that starts
                    // with it (`EOF || cmd`), where bash reads on.
                    let before = self.source.get(..child.start_byte()).unwrap_or("");
                    let before = if strip_tabs {
                        before.trim_end_matches('\t')
                    } else {
                        before
                    };
                    let after = self.source.get(child.end_byte()..).unwrap_or("");
                    if !before.ends_with('\n')
                        || !(after.is_empty() || after.starts_with('\n'))
                        || delimiter.as_deref() != Some(self.text(child))
                    {
                        return Err(Unparsable::Ambiguous("where a here-document ends".into()));
                    }
                }
                "heredoc_body" => {
                    // tree-sitter misses backquotes in a body: the text
                    // itself is checked too.
                    if !quoted && has_expansion(self.text(child)) {
                        self.concern("the here-document expands its text".into());
                    }
                    // As written (expansions and all): what the command
                    // reads, for the deny list.
                    input = Some(self.text(child).to_owned());
                    let mut body_cursor = child.walk();
                    let parts: Vec<Node> = child.named_children(&mut body_cursor).collect();
                    for part in parts {
                        if part.kind() != "heredoc_content" {
                            self.concern(format!(
                                "the here-document expands `{}`",
                                self.text(part)
                            ));
                            self.walk(part)?;
                        }
                    }
                }
                _ => self.walk(child)?,
            }
        }
        Ok(input)
    }

    /// `NAME=VALUE` as one word.
    fn assignment(&mut self, node: Node) -> Result<Word, Unparsable> {
        let mut word = WordBuilder::default();
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "variable_name" => word.literal(self.text(child)),
                "=" | "+=" => word.literal(child.kind()),
                // `a[$(cmd)]=x` evaluates its subscript, `a=(...)` is an
                // array: neither is a plain word.
                "subscript" | "array" => {
                    word.dynamic(self.text(child));
                    self.walk(child)?;
                }
                _ => self.piece(child, &mut word)?,
            }
        }
        Ok(word.finish())
    }

    fn word(&mut self, node: Node) -> Result<Word, Unparsable> {
        let mut word = WordBuilder::default();
        self.piece(node, &mut word)?;
        Ok(word.finish())
    }

    /// Adds one node of a word to it.
    fn piece(&mut self, node: Node, word: &mut WordBuilder) -> Result<(), Unparsable> {
        let text = self.text(node);
        match node.kind() {
            "word" | "number" => unquoted(text, word)?,
            "raw_string" => word.literal(
                text.strip_prefix('\'')
                    .and_then(|t| t.strip_suffix('\''))
                    .ok_or(Unparsable::Syntax)?,
            ),
            "string" => self.double_quoted(node, word)?,
            "ansi_c_string" => match ansi_c(text) {
                Some(decoded) => word.literal(&decoded),
                None => word.dynamic(text),
            },
            "concatenation" => {
                let mut cursor = node.walk();
                let children: Vec<Node> = node.children(&mut cursor).collect();
                for child in children {
                    self.piece(child, word)?;
                }
            }
            "brace_expression" => word.pattern(text),
            // Variables, arithmetic and substitutions: what they hold is
            // known only when they run; their commands still go to the
            // deny list.
            _ => {
                word.dynamic(text);
                self.walk(node)?;
            }
        }
        Ok(())
    }

    /// `"..."`: its content literal but for `\$`, `\``, `\"`, `\\` and
    /// line continuations, and the expansions inside.
    fn double_quoted(&mut self, node: Node, word: &mut WordBuilder) -> Result<(), Unparsable> {
        let end = node.end_byte().saturating_sub(1);
        let mut at = node.start_byte() + 1;
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        let mut content = String::new();
        for child in children {
            if child.start_byte() < at || child.end_byte() > end {
                // The quotes themselves.
                continue;
            }
            content.push_str(self.source.get(at..child.start_byte()).unwrap_or(""));
            at = child.end_byte();
            match child.kind() {
                "string_content" | "$" => content.push_str(self.text(child)),
                _ => {
                    self.quoted_content(&std::mem::take(&mut content), word);
                    word.dynamic(self.text(child));
                    self.walk(child)?;
                }
            }
        }
        content.push_str(self.source.get(at..end).unwrap_or(""));
        self.quoted_content(&content, word);
        Ok(())
    }

    /// Text tree-sitter found no expansion in: literal, unless bash
    /// would still expand something in it (a second guard against a
    /// parser that misses one).
    fn quoted_content(&mut self, content: &str, word: &mut WordBuilder) {
        if has_expansion(content) {
            self.concern(format!("it expands `{content}`"));
            word.dynamic(content);
        } else {
            word.literal(&unescape_double_quoted(content));
        }
    }
}

/// What a simple command writes to its standard output, when its words
/// tell (`echo` and `printf`, their words as written, `printf`'s `\n`
/// made line breaks): what the next command of a pipeline reads.
fn known_output(command: &SimpleCommand) -> Option<String> {
    let (name, args) = command.words.split_first()?;
    let words = || args.iter().map(|w| w.text.as_str());
    match basename(&name.text) {
        "echo" => Some(
            words()
                .skip_while(|w| matches!(*w, "-n" | "-e" | "-E" | "-ne" | "-en"))
                .collect::<Vec<_>>()
                .join(" ")
                + "\n",
        ),
        "printf" => Some(
            words()
                .filter(|w| *w != "--")
                .collect::<Vec<_>>()
                .join(" ")
                .replace("\\n", "\n"),
        ),
        _ => None,
    }
}

/// Whether bash expands something in this double-quoted (or here-document)
/// text: an unescaped backquote, or `$` before a name, a parameter or a
/// bracket.
fn has_expansion(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if matches!(chars.peek(), Some('$' | '`' | '\\' | '"' | '\n')) {
                    chars.next();
                }
            }
            '`' => return true,
            '$' if chars
                .peek()
                .is_some_and(|n| n.is_alphanumeric() || "_({[@*#?!$-'\"".contains(*n)) =>
            {
                return true
            }
            _ => {}
        }
    }
    false
}

/// The `NAME` of a `{NAME}` that bash reads as a named descriptor of the
/// redirection at `start`: the redirection's own text starts with it, or
/// it stands right before it as a word of its own.
fn named_descriptor(source: &str, start: usize) -> Option<&str> {
    let is_name = |name: &str| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let after = source.get(start..).unwrap_or("");
    if let Some(name) = after
        .strip_prefix('{')
        .and_then(|rest| rest.split_once('}'))
        .map(|(name, _)| name)
        .filter(|name| is_name(name))
    {
        return Some(name);
    }
    let before = source.get(..start)?.strip_suffix('}')?;
    let open = before.rfind('{')?;
    let name = &before[open + 1..];
    let word_start = before[..open]
        .chars()
        .next_back()
        .is_none_or(|c| c.is_whitespace() || ";&|()".contains(c));
    (word_start && is_name(name)).then_some(name)
}

fn is_word_kind(kind: &str) -> bool {
    matches!(
        kind,
        "word"
            | "number"
            | "raw_string"
            | "string"
            | "ansi_c_string"
            | "translated_string"
            | "concatenation"
            | "brace_expression"
            | "simple_expansion"
            | "expansion"
            | "arithmetic_expansion"
            | "command_substitution"
            | "process_substitution"
            | "extglob_pattern"
    )
}

/// A word built piece by piece.
#[derive(Default)]
struct WordBuilder {
    text: String,
    canonical: String,
    /// Literal text not yet quoted into `canonical`.
    run: String,
    kind: Option<WordKind>,
    /// Unquoted `{`, `}`, and `,` or `..`, seen: a brace expansion.
    braces: (bool, bool, bool),
    /// An unquoted `[` seen: a `]` after it makes a glob.
    bracket: bool,
}

impl WordBuilder {
    fn raise(&mut self, kind: WordKind) {
        self.kind = Some(self.kind.map_or(kind, |k| k.max(kind)));
    }

    fn literal(&mut self, text: &str) {
        self.raise(WordKind::Literal);
        self.text.push_str(text);
        self.run.push_str(text);
    }

    fn flush(&mut self) {
        if !self.run.is_empty() {
            self.canonical
                .push_str(&crate::quote::shell_quote(&std::mem::take(&mut self.run)));
        }
    }

    fn bare(&mut self, text: &str, kind: WordKind) {
        self.raise(kind);
        self.flush();
        self.text.push_str(text);
        self.canonical.push_str(text);
    }

    fn pattern(&mut self, text: &str) {
        self.bare(text, WordKind::Pattern);
    }

    fn dynamic(&mut self, text: &str) {
        self.bare(text, WordKind::Dynamic);
    }

    fn finish(mut self) -> Word {
        // `{a,b}` and `{1..3}` expand; `{}` (find's) does not.
        let (open, close, separator) = self.braces;
        if open && close && separator {
            self.raise(WordKind::Pattern);
        }
        let kind = self.kind.unwrap_or(WordKind::Literal);
        if kind == WordKind::Literal {
            self.canonical = crate::quote::shell_quote(&self.text);
        } else {
            self.flush();
        }
        Word {
            text: self.text,
            canonical: self.canonical,
            kind,
        }
    }
}

/// An unquoted part of a word: backslash escapes removed, glob and tilde
/// characters marking a pattern. A blank or an operator character here
/// would mean tree-sitter split the line where bash does not.
fn unquoted(text: &str, word: &mut WordBuilder) -> Result<(), Unparsable> {
    let mut chars = text.chars().peekable();
    let mut buffer = [0u8; 4];
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(escaped) => word.literal(escaped.encode_utf8(&mut buffer)),
                None => word.literal("\\"),
            },
            '*' | '?' | '~' => word.pattern(c.encode_utf8(&mut buffer)),
            // `[` alone is no glob (`[ -f x ]`); `[...]` is one.
            '[' => {
                word.bracket = true;
                word.literal("[");
            }
            ']' if word.bracket => {
                word.raise(WordKind::Pattern);
                word.literal("]");
            }
            '$' | '`' => word.dynamic(c.encode_utf8(&mut buffer)),
            ' ' | '\t' | '\n' | '\r' | '|' | '&' | ';' | '(' | ')' | '<' | '>' => {
                return Err(Unparsable::Ambiguous(format!("{c:?} inside a word")));
            }
            '{' | '}' | ',' => {
                match c {
                    '{' => word.braces.0 = true,
                    '}' => word.braces.1 = true,
                    _ => word.braces.2 = true,
                }
                word.literal(c.encode_utf8(&mut buffer));
            }
            '.' if chars.peek() == Some(&'.') => {
                word.braces.2 = true;
                word.literal(".");
            }
            _ => word.literal(c.encode_utf8(&mut buffer)),
        }
    }
    Ok(())
}

/// Backslash escapes inside double quotes: only before `$`, `` ` ``, `"`,
/// `\` and a newline does a backslash quote.
fn unescape_double_quoted(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    let mut chars = content.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                    continue;
                }
                Some('\n') => {
                    chars.next();
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// `$'...'` decoded, or `None` for an escape this does not know (the
/// word is then judged as one whose value is not known).
fn ansi_c(text: &str) -> Option<String> {
    let body = text.strip_prefix("$'")?.strip_suffix('\'')?;
    let mut out = Vec::new();
    let mut chars = body.chars().peekable();
    let mut buffer = [0u8; 4];
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        let escaped = chars.next()?;
        let byte = match escaped {
            'a' => 7,
            'b' => 8,
            'e' | 'E' => 27,
            'f' => 12,
            'n' => b'\n',
            'r' => b'\r',
            't' => b'\t',
            'v' => 11,
            '\\' | '\'' | '"' | '?' => escaped as u8,
            'x' => u8::try_from(digits(&mut chars, 16, 0, 2)?).ok()?,
            // One to three octal digits, the first already read.
            '0'..='7' => u8::try_from(digits(&mut chars, 8, escaped.to_digit(8)?, 2)?).ok()?,
            'u' | 'U' => {
                let most = if escaped == 'u' { 4 } else { 8 };
                let decoded = char::from_u32(digits(&mut chars, 16, 0, most)?)?;
                if decoded == '\0' {
                    break;
                }
                out.extend_from_slice(decoded.encode_utf8(&mut buffer).as_bytes());
                continue;
            }
            _ => return None,
        };
        if byte == 0 {
            // bash ends the string at a NUL: `rm$'\0x'` runs `rm`.
            break;
        }
        out.push(byte);
    }
    String::from_utf8(out).ok()
}

/// Up to `most` digits in `radix` after `start`'s; `None` when there is
/// no digit at all and nothing to start from.
fn digits(
    chars: &mut std::iter::Peekable<std::str::Chars>,
    radix: u32,
    start: u32,
    most: usize,
) -> Option<u32> {
    let mut value = start;
    let mut count = 0;
    while count < most {
        let Some(digit) = chars.peek().and_then(|c| c.to_digit(radix)) else {
            break;
        };
        value = value.checked_mul(radix)?.checked_add(digit)?;
        chars.next();
        count += 1;
    }
    (count > 0 || radix == 8).then_some(value)
}
