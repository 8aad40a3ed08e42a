//! The Dockerfile subset shellgate builds: `FROM` (one stage), `RUN`,
//! `COPY` (from the build context), `ENV`, `WORKDIR` and `USER`, with `#`
//! comments, line continuations, the `# escape=` directive, and `$NAME` /
//! `${NAME}` / `${NAME:-default}` substitution in the instructions Docker
//! substitutes in (`ENV`, `WORKDIR`, `COPY`, `USER`; `RUN` is the shell's).
//!
//! A Dockerfile is user input: every bound is checked while reading
//! (size, instructions, line length, substitution depth), any other
//! instruction or flag is refused naming its line, and a `COPY` source
//! that would leave the context (`..`) is refused here, before anything
//! runs. The parser never allocates more than a small multiple of its
//! input.

use std::collections::BTreeMap;

/// The largest Dockerfile read.
pub const MAX_DOCKERFILE_BYTES: usize = 256 << 10;
/// The most instructions (after `FROM`) one build runs.
pub const MAX_STEPS: usize = 256;
/// The longest instruction, its continuations joined.
pub const MAX_INSTRUCTION_BYTES: usize = 64 << 10;
/// The most variables `ENV` may set, all steps together.
pub const MAX_ENV: usize = 128;

/// A parsed Dockerfile: its base and the steps run over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// The `FROM` image: a shellgate image, a project's or an imported one.
    pub from: String,
    pub steps: Vec<Step>,
}

/// One instruction after `FROM`, with the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub line: usize,
    pub instruction: Instruction,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// A shell command (`sh -c`); the exec form's words quoted into one.
    Run(String),
    /// Context paths (relative, never leaving it) copied to `dest`.
    Copy {
        sources: Vec<String>,
        dest: String,
        /// `--chown=user[:group]`.
        chown: Option<String>,
    },
    /// Variables set for the later steps and the image's containers.
    Env(Vec<(String, String)>),
    /// The working directory of the later steps and of the image.
    Workdir(String),
    /// The user the later `RUN` steps run as (`root`, `user`, a name of
    /// the image's or `uid[:gid]`).
    User(String),
}

impl Instruction {
    /// The instruction's keyword, as logs print it.
    pub fn keyword(&self) -> &'static str {
        match self {
            Self::Run(_) => "RUN",
            Self::Copy { .. } => "COPY",
            Self::Env(_) => "ENV",
            Self::Workdir(_) => "WORKDIR",
            Self::User(_) => "USER",
        }
    }
}

/// Why a Dockerfile was refused: the line and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Dockerfile line {line}: {message}")]
pub struct DockerfileError {
    pub line: usize,
    pub message: String,
}

fn refuse<T>(line: usize, message: impl Into<String>) -> Result<T, DockerfileError> {
    Err(DockerfileError {
        line,
        message: message.into(),
    })
}

/// Parses `text` (UTF-8, as read from a file or a request).
pub fn parse(text: &str) -> Result<Dockerfile, DockerfileError> {
    if text.len() > MAX_DOCKERFILE_BYTES {
        return refuse(
            0,
            format!(
                "the Dockerfile is {} bytes; at most {MAX_DOCKERFILE_BYTES} are read",
                text.len()
            ),
        );
    }
    if text.contains('\0') {
        return refuse(0, "the Dockerfile holds a NUL byte");
    }
    let escape = escape_directive(text)?;
    let mut from: Option<String> = None;
    let mut steps = Vec::new();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (line, logical) in logical_lines(text, escape)? {
        let (keyword, rest) = match logical.split_once(char::is_whitespace) {
            Some((keyword, rest)) => (keyword, rest.trim()),
            None => (logical.as_str(), ""),
        };
        let keyword = keyword.to_ascii_uppercase();
        if from.is_none() && keyword != "FROM" {
            return refuse(
                line,
                format!("{keyword} before FROM: a build starts FROM an image"),
            );
        }
        let instruction = match keyword.as_str() {
            "FROM" => {
                if from.is_some() {
                    return refuse(line, "a second FROM: multi-stage builds are not supported");
                }
                from = Some(parse_from(line, rest)?);
                continue;
            }
            "RUN" => Instruction::Run(parse_run(line, rest)?),
            "COPY" => parse_copy(line, rest, escape, &env)?,
            "ENV" => {
                let pairs = parse_env(line, rest, escape, &env)?;
                for (name, value) in &pairs {
                    env.insert(name.clone(), value.clone());
                }
                if env.len() > MAX_ENV {
                    return refuse(line, format!("more than {MAX_ENV} variables"));
                }
                Instruction::Env(pairs)
            }
            "WORKDIR" => {
                let dir = substitute(line, rest, escape, &env)?;
                if dir.is_empty() {
                    return refuse(line, "WORKDIR needs a directory");
                }
                Instruction::Workdir(dir)
            }
            "USER" => Instruction::User(parse_user(line, &substitute(line, rest, escape, &env)?)?),
            "ADD" => return refuse(line, "ADD is not supported: use COPY (URLs and archives are not fetched)"),
            "" => continue,
            other => {
                return refuse(
                    line,
                    format!(
                        "{other} is not supported; the instructions are FROM, RUN, COPY, ENV, WORKDIR and USER"
                    ),
                )
            }
        };
        if steps.len() == MAX_STEPS {
            return refuse(line, format!("more than {MAX_STEPS} instructions"));
        }
        steps.push(Step { line, instruction });
    }
    match from {
        Some(from) => Ok(Dockerfile { from, steps }),
        None => refuse(0, "no FROM: a build starts FROM an image"),
    }
}

/// The escape character: `\`, or `` ` `` when the first lines hold the
/// `# escape=`` ` `` directive (directives come before any other line).
fn escape_directive(text: &str) -> Result<char, DockerfileError> {
    for (index, line) in text.lines().enumerate() {
        let Some(comment) = line.trim().strip_prefix('#') else {
            break;
        };
        let Some((name, value)) = comment.split_once('=') else {
            break;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "escape" => {
                return match value.trim() {
                    "\\" => Ok('\\'),
                    "`" => Ok('`'),
                    other => refuse(
                        index + 1,
                        format!("escape={other:?}: the escape character is \\ or `"),
                    ),
                }
            }
            "syntax" | "check" => continue,
            _ => break,
        }
    }
    Ok('\\')
}

/// The instructions' lines: comments and blank lines dropped, a line ending
/// in the escape character joined with the next (a comment line inside
/// one is dropped, as Docker does), each with the number of its first line.
fn logical_lines(text: &str, escape: char) -> Result<Vec<(usize, String)>, DockerfileError> {
    let mut lines = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = raw.trim_start();
        if trimmed.starts_with('#') {
            continue;
        }
        if current.is_none() && trimmed.trim_end().is_empty() {
            continue;
        }
        let body = raw.trim_end();
        let (content, continues) = match body.strip_suffix(escape) {
            // An escaped escape character ends the line as itself.
            Some(before) if !before.ends_with(escape) => (before, true),
            _ => (body, false),
        };
        let (start, mut joined) = current.take().unwrap_or((number, String::new()));
        if joined.len() + content.len() > MAX_INSTRUCTION_BYTES {
            return refuse(
                start,
                format!("an instruction longer than {MAX_INSTRUCTION_BYTES} bytes"),
            );
        }
        joined.push_str(if joined.is_empty() {
            content.trim_start()
        } else {
            content
        });
        if continues {
            current = Some((start, joined));
        } else {
            lines.push((start, joined));
        }
    }
    if let Some((start, joined)) = current {
        // A continuation at the end of the file ends the instruction there.
        lines.push((start, joined));
    }
    Ok(lines)
}

fn parse_from(line: usize, rest: &str) -> Result<String, DockerfileError> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    match words.as_slice() {
        [flag, ..] if flag.starts_with("--") => {
            refuse(line, format!("FROM {flag}: flags are not supported"))
        }
        [image] => Ok((*image).to_owned()),
        [] => refuse(line, "FROM needs an image"),
        [_, as_word, ..] if as_word.eq_ignore_ascii_case("as") => {
            refuse(line, "FROM … AS: multi-stage builds are not supported")
        }
        _ => refuse(line, "FROM takes one image"),
    }
}

fn parse_run(line: usize, rest: &str) -> Result<String, DockerfileError> {
    if rest.starts_with("--") {
        return refuse(line, "RUN flags (--mount, --network) are not supported");
    }
    let command = match exec_form(line, rest)? {
        Some(words) => words
            .iter()
            .map(|word| shell_quote(word))
            .collect::<Vec<_>>()
            .join(" "),
        None => rest.to_owned(),
    };
    if command.trim().is_empty() {
        return refuse(line, "RUN needs a command");
    }
    Ok(command)
}

/// The exec (JSON array) form's words, if `rest` is one.
fn exec_form(line: usize, rest: &str) -> Result<Option<Vec<String>>, DockerfileError> {
    if !rest.starts_with('[') {
        return Ok(None);
    }
    match serde_json::from_str::<Vec<String>>(rest) {
        Ok(words) if words.is_empty() => refuse(line, "an empty JSON array"),
        Ok(words) => Ok(Some(words)),
        // Docker reads a line that is not a JSON array of strings as the
        // shell form.
        Err(_) => Ok(None),
    }
}

/// `word` quoted for `sh` (single quotes, each `'` closed and escaped).
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn parse_copy(
    line: usize,
    rest: &str,
    escape: char,
    env: &BTreeMap<String, String>,
) -> Result<Instruction, DockerfileError> {
    let mut chown = None;
    let mut rest = rest;
    while let Some(flag_and_more) = rest.strip_prefix("--") {
        let (flag, more) = flag_and_more
            .split_once(char::is_whitespace)
            .unwrap_or((flag_and_more, ""));
        match flag.split_once('=') {
            Some(("chown", owner)) if !owner.is_empty() => {
                chown = Some(parse_user(line, &substitute(line, owner, escape, env)?)?);
            }
            _ => {
                return refuse(
                    line,
                    format!("COPY --{flag}: only --chown=USER[:GROUP] is supported"),
                )
            }
        }
        rest = more.trim_start();
    }
    let words = match exec_form(line, rest)? {
        Some(words) => words,
        None => split_words(line, rest, escape)?,
    };
    let words = words
        .iter()
        .map(|word| substitute(line, word, escape, env))
        .collect::<Result<Vec<_>, _>>()?;
    let Some((dest, sources)) = words.split_last() else {
        return refuse(line, "COPY needs a source and a destination");
    };
    if sources.is_empty() {
        return refuse(line, "COPY needs a source and a destination");
    }
    let sources = sources
        .iter()
        .map(|source| context_path(line, source))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Instruction::Copy {
        sources,
        dest: dest.clone(),
        chown,
    })
}

/// A `COPY` source as a path inside the context: relative, normalised,
/// never leaving it, no wildcards.
fn context_path(line: usize, source: &str) -> Result<String, DockerfileError> {
    if source.contains(['*', '?', '[']) {
        return refuse(line, format!("COPY {source}: wildcards are not supported"));
    }
    let mut parts = Vec::new();
    for part in source.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return refuse(
                    line,
                    format!("COPY {source}: a source may not leave the context"),
                )
            }
            part => parts.push(part),
        }
    }
    Ok(if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    })
}

/// Whitespace-separated words, the escape character keeping the next
/// character as it is (a space in a path).
fn split_words(line: usize, text: &str, escape: char) -> Result<Vec<String>, DockerfileError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == escape {
            match chars.next() {
                // `$` stays escaped for the substitution that follows.
                Some('$') => {
                    word.push(escape);
                    word.push('$');
                }
                Some(next) => word.push(next),
                None => return refuse(line, "the line ends in an escape character"),
            }
        } else if c.is_whitespace() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    Ok(words)
}

fn parse_env(
    line: usize,
    rest: &str,
    escape: char,
    env: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, DockerfileError> {
    let check_name = |name: &str| {
        let mut chars = name.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if valid {
            Ok(())
        } else {
            refuse(line, format!("ENV {name:?}: not a variable name"))
        }
    };
    let first = rest.split_whitespace().next().unwrap_or_default();
    if !first.contains('=') {
        // The old form: `ENV NAME the rest of the line`.
        let Some((name, value)) = rest.split_once(char::is_whitespace) else {
            return refuse(line, "ENV needs NAME=value");
        };
        check_name(name)?;
        return Ok(vec![(
            name.to_owned(),
            substitute(line, value.trim(), escape, env)?,
        )]);
    }
    let mut pairs = Vec::new();
    // Substitution sees the values set earlier on the same line as the
    // line started: Docker's rule.
    for word in quoted_words(line, rest, escape)? {
        let Some((name, value)) = word.split_once('=') else {
            return refuse(line, format!("ENV {word:?}: expected NAME=value"));
        };
        check_name(name)?;
        pairs.push((name.to_owned(), substitute(line, value, escape, env)?));
    }
    Ok(pairs)
}

/// Words as a shell splits them: single quotes keep everything, double
/// quotes keep all but the escape character's effect, the escape character
/// outside quotes keeps the next one. A `$` that was escaped or inside
/// single quotes is marked (`escape` before it) so substitution leaves it.
fn quoted_words(line: usize, text: &str, escape: char) -> Result<Vec<String>, DockerfileError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c == escape => match chars.next() {
                Some('$') => word.extend([escape, '$']),
                Some(next) => word.push(next),
                None => return refuse(line, "the line ends in an escape character"),
            },
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('$') => word.extend([escape, '$']),
                    Some(next) => word.push(next),
                    None => return refuse(line, "a single quote is not closed"),
                }
            },
            '"' => loop {
                match chars.next() {
                    Some('"') => break,
                    Some(e) if e == escape => match chars.next() {
                        Some('$') => word.extend([escape, '$']),
                        Some(next) => word.push(next),
                        None => return refuse(line, "a double quote is not closed"),
                    },
                    Some(next) => word.push(next),
                    None => return refuse(line, "a double quote is not closed"),
                }
            },
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                in_word = false;
                continue;
            }
            c => word.push(c),
        }
        in_word = true;
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `text` with `$NAME`, `${NAME}` and `${NAME:-default}` replaced from
/// `env` (unset: empty, or the default); `escape` before `$` keeps a
/// literal `$`. Defaults are not substituted again: no recursion, so no
/// input can make it deep.
fn substitute(
    line: usize,
    text: &str,
    escape: char,
    env: &BTreeMap<String, String>,
) -> Result<String, DockerfileError> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == escape && chars.peek() == Some(&'$') {
            out.push('$');
            chars.next();
            continue;
        }
        if c != '$' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            let mut inside = String::new();
            loop {
                match chars.next() {
                    Some('}') => break,
                    Some(c) => inside.push(c),
                    None => return refuse(line, "a ${ is not closed"),
                }
            }
            let (name, default) = match inside.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inside.as_str(), None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return refuse(line, format!("${{{inside}}}: not a variable"));
            }
            // `:-` takes the default for an unset or empty variable.
            let value = env
                .get(name)
                .filter(|value| !value.is_empty() || default.is_none());
            match (value, default) {
                (Some(value), _) => out.push_str(value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {}
            }
        } else {
            let mut name = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            if name.is_empty() {
                out.push('$');
            } else if let Some(value) = env.get(&name) {
                out.push_str(value);
            }
        }
        if out.len() > MAX_INSTRUCTION_BYTES {
            return refuse(
                line,
                format!("the instruction grows past {MAX_INSTRUCTION_BYTES} bytes substituted"),
            );
        }
    }
    Ok(out)
}

/// A `USER` (or `--chown`) value: `name` or `uid`, optionally `:group`.
fn parse_user(line: usize, value: &str) -> Result<String, DockerfileError> {
    let valid_part = |part: &str| {
        !part.is_empty()
            && part.len() <= 32
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            && !part.starts_with('-')
    };
    let value = value.trim();
    let valid = match value.split_once(':') {
        Some((user, group)) => valid_part(user) && valid_part(group),
        None => valid_part(value),
    };
    if valid {
        Ok(value.to_owned())
    } else {
        refuse(
            line,
            format!("USER {value:?}: expected NAME or UID, optionally :GROUP"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(text: &str) -> Vec<Instruction> {
        parse(text)
            .expect("parses")
            .steps
            .into_iter()
            .map(|s| s.instruction)
            .collect()
    }

    fn refused(text: &str) -> DockerfileError {
        parse(text).expect_err("refused")
    }

    #[test]
    fn the_subset_parses_with_comments_continuations_and_lines() {
        let file = parse(
            "# a comment\n\nfrom debian-12\nENV A=1 B=\"two words\" C='$A'\n\
             RUN apt-get update && \\\n    # dropped comment\n    apt-get install -y jq\n\
             WORKDIR /opt/$A\ncopy --chown=user:user src/app.py ./app.py\nUSER user\n\
             RUN [\"echo\", \"it's\"]\n",
        )
        .expect("parses");
        assert_eq!(file.from, "debian-12");
        let lines: Vec<usize> = file.steps.iter().map(|s| s.line).collect();
        assert_eq!(lines, vec![4, 5, 8, 9, 10, 11]);
        let instructions: Vec<Instruction> =
            file.steps.into_iter().map(|s| s.instruction).collect();
        assert_eq!(
            instructions,
            vec![
                Instruction::Env(vec![
                    ("A".into(), "1".into()),
                    ("B".into(), "two words".into()),
                    ("C".into(), "$A".into()),
                ]),
                Instruction::Run("apt-get update &&     apt-get install -y jq".into()),
                Instruction::Workdir("/opt/1".into()),
                Instruction::Copy {
                    sources: vec!["src/app.py".into()],
                    dest: "./app.py".into(),
                    chown: Some("user:user".into()),
                },
                Instruction::User("user".into()),
                Instruction::Run(r"'echo' 'it'\''s'".into()),
            ]
        );
    }

    #[test]
    fn substitution_defaults_escapes_and_the_old_env_form() {
        assert_eq!(
            steps("FROM x\nENV HOME_DIR /srv/app home\nWORKDIR ${HOME_DIR}/${MISSING:-d}/\\$x\n"),
            vec![
                Instruction::Env(vec![("HOME_DIR".into(), "/srv/app home".into())]),
                Instruction::Workdir("/srv/app home/d/$x".into()),
            ]
        );
        // The backtick escape: Windows-style paths keep their backslashes.
        assert_eq!(
            steps("# escape=`\nFROM x\nRUN echo a `\n  b\\c\n"),
            vec![Instruction::Run("echo a   b\\c".into())]
        );
    }

    #[test]
    fn crlf_and_an_escape_at_the_end_of_the_file_end_the_instruction() {
        assert_eq!(
            steps("FROM x\r\nRUN echo hi \\\r\n"),
            vec![Instruction::Run("echo hi".into())]
        );
        assert_eq!(
            steps("FROM x\nRUN echo \\\\\n"),
            vec![Instruction::Run("echo \\\\".into())]
        );
    }

    #[test]
    fn what_is_outside_the_subset_is_refused_naming_the_line() {
        for (text, line, words) in [
            ("RUN x\n", 1, "before FROM"),
            ("FROM a\nFROM b\n", 2, "second FROM"),
            ("FROM a AS build\n", 1, "multi-stage"),
            ("FROM --platform=arm64 a\n", 1, "flags"),
            ("FROM a\n\nADD http://x/y /y\n", 3, "ADD"),
            ("FROM a\nCMD [\"x\"]\n", 2, "CMD is not supported"),
            ("FROM a\nCOPY ../secret /s\n", 2, "leave the context"),
            ("FROM a\nCOPY a/../../b /s\n", 2, "leave the context"),
            ("FROM a\nCOPY *.py /s\n", 2, "wildcards"),
            ("FROM a\nCOPY --from=build /a /b\n", 2, "--chown"),
            ("FROM a\nCOPY onlyone\n", 2, "source and a destination"),
            ("FROM a\nRUN --mount=type=cache x\n", 2, "flags"),
            ("FROM a\nRUN\n", 2, "needs a command"),
            ("FROM a\nENV 1A=x\n", 2, "not a variable name"),
            ("FROM a\nENV A=\"open\n", 2, "not closed"),
            ("FROM a\nENV A='open\n", 2, "not closed"),
            ("FROM a\nWORKDIR ${A\n", 2, "not closed"),
            ("FROM a\nWORKDIR ${A B}\n", 2, "not a variable"),
            ("FROM a\nUSER root;rm\n", 2, "expected NAME"),
            ("FROM a\nUSER -r\n", 2, "expected NAME"),
            ("# escape=x\nFROM a\n", 1, "escape character"),
            ("", 0, "no FROM"),
            ("# only a comment\n", 0, "no FROM"),
        ] {
            let error = refused(text);
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.to_string().contains(words), "{text:?}: {error}");
        }
    }

    #[test]
    fn hostile_sizes_are_refused_before_they_cost_anything() {
        let huge = format!("FROM a\nRUN {}\n", "x".repeat(MAX_DOCKERFILE_BYTES));
        assert!(refused(&huge).message.contains("at most"));
        // An instruction of a thousand continuations, past the line limit.
        let long = format!(
            "FROM a\nRUN {}x\n",
            "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy \\\n"
                .repeat(1000)
        );
        let error = refused(&long);
        assert_eq!(error.line, 2, "{error}");
        assert!(error.message.contains("longer than"), "{error}");
        let many = format!("FROM a\n{}", "RUN true\n".repeat(MAX_STEPS + 1));
        assert!(refused(&many).message.contains("instructions"));
        let vars = format!(
            "FROM a\n{}",
            (0..=MAX_ENV)
                .map(|i| format!("ENV V{i}=x\n"))
                .collect::<String>()
        );
        assert!(refused(&vars).message.contains("variables"));
        // Each ENV doubles the value: substitution stops at the bound
        // rather than growing without one.
        let doubling = format!(
            "FROM a\nENV A=xxxxxxxxxxxxxxxx\n{}",
            "ENV A=$A$A\n".repeat(40)
        );
        assert!(refused(&doubling).message.contains("grows past"));
        assert!(refused("FROM a\nRUN \0\n").message.contains("NUL"));
    }

    #[test]
    fn odd_escapes_and_unicode_never_panic() {
        for text in [
            "FROM a\nENV A=\\\n",
            "FROM a\nENV A=\"\\\n",
            "FROM a\nCOPY a\\\n",
            "FROM a\nCOPY a \\ b\n",
            "FROM a\nWORKDIR $\n",
            "FROM a\nWORKDIR ${}\n",
            "FROM a\nWORKDIR ${:-}\n",
            "FROM a\nENV é=1\n",
            "FROM a\nRUN [\"\\u0000\"]\n",
            "FROM a\nRUN [1, 2]\n",
            "FROM a\nRUN []\n",
            "FROM a\nUSER 🦀\n",
            "\u{feff}FROM a\n",
            "FROM a\n\\\n\\\n\\",
            "# escape=`\nFROM a\nENV A=`\n",
        ] {
            let _ = parse(text);
        }
        // A JSON array that is not all strings is the shell form.
        assert_eq!(
            steps("FROM a\nRUN [1, 2]\n"),
            vec![Instruction::Run("[1, 2]".into())]
        );
        assert_eq!(
            steps("FROM a\nCOPY my\\ file /dst\n"),
            vec![Instruction::Copy {
                sources: vec!["my file".into()],
                dest: "/dst".into(),
                chown: None
            }]
        );
    }
}
