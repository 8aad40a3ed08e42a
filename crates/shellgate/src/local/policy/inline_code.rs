//! Code an interpreter is handed on its command line (`python3 -c`,
//! `perl -e`, `ruby -e`, `node -e`, `php -r`, an `awk` program) or on its
//! standard input (a here-document, `echo ... | python3`), read for the
//! deny list: the destructive calls a one-liner makes (a tree removed
//! from a system path, a fork loop, a kill of init or of every process, a
//! write to a kernel control file or a disk), and the command lines it
//! hands to a shell (each string literal, and each list of them, an argv),
//! which the policy judges as the commands they are.
//!
//! Like the rest of the deny list, a guard against accidents: code that
//! builds its paths or calls at run time is not seen.

use std::sync::LazyLock;

use regex::Regex;

use super::destructive::{self, basename};

/// How an interpreter takes code on its command line.
struct Interpreter {
    /// Its names (a version suffix allowed: `python3.12`, `perl5.36`).
    names: &'static [&'static str],
    /// The short options whose argument is code (`-c`, `-e`), also at the
    /// end of a cluster (`-Sc`, `-le`) or with the code attached.
    short: &'static [char],
    /// Long options whose argument is code (`--eval`, `--eval=CODE`).
    long: &'static [&'static str],
    /// Short options that take a value (the rest of their cluster, or the
    /// next word): no code option hides in it (`perl -MFile::Path`).
    valued: &'static [char],
    /// Short options followed by digits only (`perl -l0 -e`, `-le`).
    digits: &'static [char],
    /// Short options whose value names the program to run instead
    /// (`python3 -m module`, `awk -f file`): its code is not here.
    elsewhere: &'static [char],
    /// Several code options add up (`perl -e A -e B`); else the first
    /// one ends the options (`python3 -c CODE ARGS...`).
    repeatable: bool,
    /// The code is the first operand (awk's program).
    operand: bool,
}

const INTERPRETERS: &[Interpreter] = &[
    Interpreter {
        names: &["python", "python2", "python3", "pypy", "pypy3"],
        short: &['c'],
        long: &[],
        valued: &['W', 'X', 'Q'],
        digits: &[],
        elsewhere: &['m'],
        repeatable: false,
        operand: false,
    },
    Interpreter {
        names: &["perl", "perl5"],
        short: &['e', 'E'],
        long: &[],
        valued: &['M', 'm', 'I', 'd', 'D', 'x', 'i'],
        digits: &['l', '0', 'C'],
        elsewhere: &[],
        repeatable: true,
        operand: false,
    },
    Interpreter {
        names: &["ruby"],
        short: &['e'],
        long: &[],
        valued: &['r', 'I', 'C', 'E', 'x', 'K', 'T', '0', 'F'],
        digits: &[],
        elsewhere: &[],
        repeatable: true,
        operand: false,
    },
    Interpreter {
        names: &["node", "nodejs", "bun"],
        short: &['e', 'p'],
        long: &["--eval", "--print"],
        valued: &['r'],
        digits: &[],
        elsewhere: &[],
        repeatable: false,
        operand: false,
    },
    Interpreter {
        names: &["php"],
        short: &['r'],
        long: &[],
        valued: &['d', 'c', 'z'],
        digits: &[],
        elsewhere: &['f'],
        repeatable: false,
        operand: false,
    },
    Interpreter {
        names: &["awk", "gawk", "mawk", "nawk"],
        short: &[],
        long: &[],
        valued: &['F', 'v'],
        digits: &[],
        elsewhere: &['f'],
        repeatable: false,
        operand: true,
    },
];

/// The interpreter `name` is (`python3.12` is `python3`'s).
fn interpreter(name: &str) -> Option<&'static Interpreter> {
    let name = basename(name);
    let unversioned = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .find(|i| i.names.contains(&name) || i.names.contains(&unversioned))
}

/// The code a command (its words, `input` what its standard input is known
/// to carry) runs in an interpreter, if it runs one and its code is known:
/// its code options' arguments, or else its input when it names no
/// script (`python3 - <<EOF`).
pub fn code_of(words: &[&str], input: Option<&str>) -> Option<String> {
    let (name, args) = words.split_first()?;
    let interpreter = interpreter(name)?;
    let mut code: Vec<&str> = Vec::new();
    let mut i = 0;
    // What the first operand is: awk's program, else a script (whose code
    // is not here) unless `-` (standard input).
    fn operand<'a>(interpreter: &Interpreter, arg: &'a str, code: &mut Vec<&'a str>) -> bool {
        if interpreter.operand && code.is_empty() {
            code.push(arg);
            false
        } else {
            arg != "-"
        }
    }
    let mut script = false;
    while i < args.len() && (code.is_empty() || interpreter.repeatable) {
        let arg = args[i];
        i += 1;
        if arg == "--" {
            if let Some(next) = args.get(i) {
                script = operand(interpreter, next, &mut code);
            }
            break;
        }
        if interpreter.long.contains(&arg) {
            code.extend(args.get(i));
            i += 1;
            continue;
        }
        if let Some(attached) = interpreter
            .long
            .iter()
            .find_map(|l| arg.strip_prefix(l).and_then(|rest| rest.strip_prefix('=')))
        {
            code.push(attached);
            continue;
        }
        if arg.starts_with("--") {
            continue;
        }
        if arg == "-" || !arg.starts_with('-') {
            script = operand(interpreter, arg, &mut code);
            break;
        }
        let mut skip_to = 0;
        for (at, option) in arg.char_indices().skip(1) {
            if at < skip_to {
                continue;
            }
            let rest = &arg[at + option.len_utf8()..];
            if interpreter.digits.contains(&option) {
                skip_to = at + 1 + rest.bytes().take_while(u8::is_ascii_digit).count();
                continue;
            }
            if interpreter.short.contains(&option) {
                if rest.is_empty() {
                    code.extend(args.get(i));
                    i += 1;
                } else {
                    code.push(rest);
                }
                break;
            }
            if interpreter.elsewhere.contains(&option) {
                return None;
            }
            if interpreter.valued.contains(&option) {
                if rest.is_empty() {
                    i += 1;
                }
                break;
            }
        }
    }
    if !code.is_empty() {
        return Some(code.join("\n"));
    }
    if script {
        return None;
    }
    input.map(str::to_owned)
}

/// The calls of a removal of a whole tree, in the interpreters' standard
/// libraries: their first argument is the tree.
const TREE_REMOVALS: &str = r"(?:\brmtree|\bremove_tree|\brm_rf|\brm_r|\bremove_dir|\bremove_entry(?:_secure)?|\brmSync|\bfs\.rm|\bpromises\.rm|\brimraf(?:\.sync)?|\bremove_dir_all|\bdelete_tree)";

/// A path as code spells it: a string literal, or an expression for `/` or
/// a home directory.
const PATH_ARGUMENT: &str = r#"\s*\(?\s*(?:path\s*=\s*)?(?:(?:pathlib\.)?Path\s*\(\s*|File\.expand_path\s*\(\s*|os\.path\.expanduser\s*\(\s*|os\.path\.abspath\s*\(\s*)?(?:[rbu]?'([^'\\]*)'|[rbu]?"([^"\\]*)"|(os\.sep|(?:pathlib\.)?Path\.home\s*\(\s*\)|os\.environ\s*\[\s*['"]HOME['"]\s*\]|os\.getenv\s*\(\s*['"]HOME['"]\s*\)|\$ENV\s*\{\s*['"]?HOME['"]?\s*\}|ENV\s*\[\s*['"]HOME['"]\s*\]|Dir\.home|os\.homedir\s*\(\s*\)|process\.env\.HOME|\$_SERVER\s*\[\s*['"]HOME['"]\s*\]))"#;

static TREE_REMOVAL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(&format!("{TREE_REMOVALS}{PATH_ARGUMENT}")).ok());

/// A process-creating call, and a loop that does not end: together, a
/// fork bomb (every child runs the same loop).
static FORK_CALL: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\bfork\b").ok());
static ENDLESS_LOOP: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        \bwhile\s*\(?\s*(?:True|true|1|!0|!false)\s*\)?\s*[:{]?   # while True: / while(1){
        | \bwhile\s+fork\b | \bfork\s+while\b | \b1\s+while\b          # perl
        | \bfor\s*\(\s*;\s*;\s*\)                                       # for(;;)
        | \bloop\s*(?:\{|do\b)                                          # ruby
        | \buntil\s*\(?\s*(?:False|false|0)\b                           # until false
        | \bitertools\.count\b | \biter\s*\(\s*int\s*,                   # endless iterators
        | \bwhile\s+\S+\s*=\s*fork",
    )
    .ok()
});

/// A kill call and its arguments (up to its closing parenthesis, the end
/// of its statement or line).
static KILL_CALL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\b(?:kill|killpg)\b\s*\(?([^;)\n]*)").ok());

/// A string literal (single or double quotes, backslash escapes).
static STRING_LITERAL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)""#).ok());

/// What code does to a file it opens for writing (a mode, a flag, a
/// redirection, a write call).
static WRITE_MODE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"['"](?:r\+|w|a|wb|ab|w\+|r\+b|wb\+)['"]|O_WRONLY|O_RDWR|\bwrite|['"]\s*>|>\s*['"]?/dev/|\bcreateWriteStream|\bappend"#)
        .ok()
});

/// The built-in rule `code` breaks, if any.
pub fn check(code: &str) -> Option<&'static str> {
    if let Some(removal) = TREE_REMOVAL.as_ref() {
        for found in removal.captures_iter(code) {
            let path = match (found.get(1), found.get(2), found.get(3)) {
                (Some(single), _, _) => single.as_str().to_owned(),
                (_, Some(double), _) => double.as_str().to_owned(),
                (_, _, Some(expression)) if expression.as_str() == "os.sep" => "/".to_owned(),
                (_, _, Some(_)) => "~".to_owned(),
                _ => continue,
            };
            if destructive::is_system_path(&path) {
                return Some(destructive::REMOVE_TREE);
            }
        }
    }
    if FORK_CALL.as_ref().is_some_and(|r| r.is_match(code))
        && ENDLESS_LOOP.as_ref().is_some_and(|r| r.is_match(code))
    {
        return Some(destructive::FORK_BOMB);
    }
    if let Some(kill) = KILL_CALL.as_ref() {
        for found in kill.captures_iter(code) {
            let arguments: Vec<&str> = found
                .get(1)
                .map_or("", |a| a.as_str())
                .split([',', ' '])
                .map(|a| a.trim().trim_matches(['(', ')']))
                .filter(|a| !a.is_empty())
                .collect();
            // Signal 0 only asks whether a process exists.
            if arguments.iter().any(|a| matches!(*a, "1" | "-1")) && !arguments.contains(&"0") {
                return Some(destructive::KILL_ALL);
            }
        }
    }
    let literals = literals(code);
    if literals.iter().any(|l| destructive::is_kernel_control(l)) {
        return Some(destructive::KERNEL_CONTROL);
    }
    if literals.iter().any(|l| destructive::is_disk(l))
        && WRITE_MODE.as_ref().is_some_and(|r| r.is_match(code))
    {
        return Some(destructive::DISK_WRITE);
    }
    None
}

/// The string literals of `code`, escapes undone, with where each is.
fn literals_at(code: &str) -> Vec<(usize, usize, String)> {
    let Some(literal) = STRING_LITERAL.as_ref() else {
        return Vec::new();
    };
    literal
        .captures_iter(code)
        .filter_map(|found| {
            let whole = found.get(0)?;
            let inner = found.get(1).or(found.get(2))?;
            Some((whole.start(), whole.end(), unescape(inner.as_str())))
        })
        .collect()
}

fn literals(code: &str) -> Vec<String> {
    literals_at(code).into_iter().map(|(_, _, l)| l).collect()
}

/// A literal's text: `\\`, `\'`, `\"` and `\n` undone.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// The command lines `code` may hand to a shell or run: each string
/// literal as a line, and each list of two or more literals (`["rm",
/// "-rf", "/"]`, `system("rm", "-rf", "/")`) as an argv, quoted.
pub fn shell_lines(code: &str) -> Vec<String> {
    let found = literals_at(code);
    let mut lines: Vec<String> = found.iter().map(|(_, _, l)| l.clone()).collect();
    let mut argv: Vec<&str> = Vec::new();
    let mut last_end = None;
    for (start, end, literal) in &found {
        let adjacent = last_end
            .is_some_and(|last: usize| code.get(last..*start).is_some_and(|gap| gap.trim() == ","));
        if !adjacent && argv.len() > 1 {
            lines.push(quoted(&argv));
        }
        if !adjacent {
            argv.clear();
        }
        argv.push(literal);
        last_end = Some(*end);
    }
    if argv.len() > 1 {
        lines.push(quoted(&argv));
    }
    lines
}

fn quoted(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| crate::quote::shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        for regex in [
            &TREE_REMOVAL,
            &FORK_CALL,
            &ENDLESS_LOOP,
            &KILL_CALL,
            &STRING_LITERAL,
            &WRITE_MODE,
        ] {
            assert!(regex.is_some());
        }
    }

    fn words(line: &[&str]) -> Vec<String> {
        line.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn the_code_is_found_where_each_interpreter_takes_it() {
        for (line, code) in [
            (&["python3", "-c", "X"][..], Some("X")),
            (&["python3.12", "-Sc", "X"], Some("X")),
            (&["python", "-W", "ignore", "-cX"], Some("X")),
            (&["/usr/bin/python3", "script.py", "-c", "X"], None),
            (&["perl", "-MFile::Path", "-e", "X"], Some("X")),
            (&["perl", "-le", "X", "-e", "Y"], Some("X\nY")),
            (&["perl", "-e", "X", "-e", "Y"], Some("X\nY")),
            (&["ruby", "-rfileutils", "-e", "X"], Some("X")),
            (&["node", "--eval=X"], Some("X")),
            (&["node", "-e", "X"], Some("X")),
            (&["php", "-r", "X"], Some("X")),
            (&["awk", "-F:", "X", "file"], Some("X")),
            (&["awk", "-v", "a=1", "X"], Some("X")),
            (&["awk", "-f", "prog.awk"], None),
            (&["ls", "-c", "X"], None),
        ] {
            let owned = words(line);
            let texts: Vec<&str> = owned.iter().map(String::as_str).collect();
            assert_eq!(code_of(&texts, None).as_deref(), code, "{line:?}");
        }
        // Standard input, when no script is named.
        assert_eq!(code_of(&["python3"], Some("X")).as_deref(), Some("X"));
        assert_eq!(code_of(&["python3", "-"], Some("X")).as_deref(), Some("X"));
        assert_eq!(code_of(&["python3", "s.py"], Some("X")), None);
        assert_eq!(code_of(&["cat"], Some("X")), None);
    }

    #[test]
    fn destructive_calls_are_found_in_code() {
        for code in [
            "import shutil; shutil.rmtree('/')",
            "import shutil; shutil.rmtree(\"/etc\", ignore_errors=True)",
            "shutil.rmtree(path='/usr')",
            "import shutil, pathlib; shutil.rmtree(pathlib.Path('/'))",
            "import shutil, os; shutil.rmtree(os.path.expanduser('~'))",
            "import shutil, os; shutil.rmtree(os.sep)",
            "shutil.rmtree(Path.home())",
            "shutil.rmtree(os.environ['HOME'])",
            "rmtree(\"/\")",
            "use File::Path; rmtree '/'",
            "File::Path::remove_tree('/home')",
            "require 'fileutils'; FileUtils.rm_rf('/')",
            "FileUtils.rm_r '/var'",
            "require('fs').rmSync('/', {recursive: true})",
            "fs.rmSync(process.env.HOME, {recursive: true})",
            "import os\nwhile True:\n    os.fork()",
            "import os\nwhile 1: os.fork()",
            "fork while fork",
            "1 while fork",
            "loop { fork }",
            "while(true){require('child_process').fork()}",
            "import os; [os.fork() for _ in iter(int, 1)]",
            "import os; os.kill(-1, 9)",
            "import os, signal; os.kill(1, signal.SIGKILL)",
            "kill 9, -1",
            "kill 'KILL', 1",
            "Process.kill(:KILL, -1)",
            "process.kill(-1)",
            "open('/proc/sysrq-trigger', 'w').write('c')",
            "open('/dev/sda', 'wb').write(b'0' * 512)",
            "open(my $d, '>', '/dev/nvme0n1')",
        ] {
            assert!(check(code).is_some(), "{code:?}");
        }
        for code in [
            "import shutil; shutil.rmtree('./build')",
            "shutil.rmtree('/tmp/x')",
            "shutil.rmtree(tmp)",
            "import os\nfor _ in range(3): os.fork()",
            "import os; pid = os.fork()",
            "while True: print(1)",
            "import os; os.kill(1234, 9)",
            "import os; os.kill(1, 0)",
            "print(open('/dev/sda', 'rb').read(512))",
            "print('/proc/sys/kernel/random')",
        ] {
            assert_eq!(check(code), None, "{code:?}");
        }
    }

    #[test]
    fn literals_and_argv_lists_are_command_lines() {
        let lines = shell_lines("import os, subprocess; os.system('rm -rf /'); subprocess.run([\"rm\", \"-rf\", \"/\"]); print(\"a\\\"b\")");
        assert!(lines.contains(&"rm -rf /".to_owned()), "{lines:?}");
        assert!(lines.contains(&"rm -rf /".to_owned()));
        assert!(
            lines.iter().any(|l| l == "rm -rf /" || l == "rm '-rf' /"),
            "{lines:?}"
        );
        assert!(lines.contains(&"a\"b".to_owned()), "{lines:?}");
        let argv = shell_lines("system('rm', '-rf', '/etc')");
        assert!(
            argv.iter()
                .any(|l| l.contains("rm") && l.contains("/etc") && l.contains("-rf")),
            "{argv:?}"
        );
    }
}
