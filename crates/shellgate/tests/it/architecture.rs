//! The architecture, checked: no import circle among a crate's
//! files, and no crate depending on one of its own layer or a higher one.
//!
//! It reads the sources, not the compiler's view: every path a file names
//! that starts at `crate::`, `super::`, `self::` or one of its own child
//! modules is an edge from that file to the file of the module it names (the
//! longest prefix that is a module). A circle among those edges means two
//! rooms reach into each other, so neither can be read or changed alone.
//! Circles are looked for in two views of the edges: with a module's uses of
//! the modules above it (a child standing on its parent, `super::X`), and
//! with a module's uses of the modules below it (a parent wiring its
//! children, `child::X`). A parent and its children using each other is the
//! module tree itself, so neither view holds both directions; a circle that
//! leaves the subtree (a child of one folder taking a name from another
//! folder's parent, which reaches back through its own children) shows in
//! one of them. A failure names the files of the circle with the line of
//! each import, or the crate and the dependency that runs upward. Rerun with
//! `cargo test -p shellgate --test it architecture::`.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a crate may depend only on crates of a lower
/// layer (its Cargo.toml's `[dependencies]` are the edges checked).
const LAYERS: &[&[&str]] = &[
    &["wire", "console"],
    &["egress", "store", "objects", "skills"],
    &["sandbox-api"],
    &["sandbox", "model", "interpreter"],
    &["server"],
    &["shellgate"],
];

/// Imports the check lets stand, each with the reason; when the reason goes,
/// so does the entry. (crate, file, file it imports, why.)
const ALLOWED: &[(&str, &str, &str, &str)] = &[];

/// Test and fuzzing harnesses: like `#[cfg(test)]` modules they may reach
/// anything of their crate (the fuzzer drives the whole router). (crate, file.)
const HARNESSES: &[(&str, &str)] = &[("server", "fuzzing.rs")];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn layer_of(krate: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&krate))
}

fn crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(workspace().join("crates"))
        .expect("crates/ is readable")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            entry
                .path()
                .join("Cargo.toml")
                .exists()
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// The workspace crates a crate's Cargo.toml depends on (not dev-dependencies:
/// tests may drive a higher layer).
fn dependencies(krate: &str) -> Vec<String> {
    let manifest =
        std::fs::read_to_string(workspace().join("crates").join(krate).join("Cargo.toml"))
            .expect("Cargo.toml is readable");
    let mut section = String::new();
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section != "[dependencies]" {
            continue;
        }
        if let Some(name) = line
            .split(['=', ' ', '.'])
            .next()
            .and_then(|name| name.strip_prefix("shellgate-"))
        {
            found.push(name.to_owned());
        }
    }
    found
}

#[test]
fn no_crate_depends_on_its_own_layer_or_a_higher_one() {
    let mut problems = Vec::new();
    for krate in crates() {
        let Some(own) = layer_of(&krate) else {
            problems.push(format!(
                "crates/{krate} is in no layer: add it to LAYERS in {}",
                file!()
            ));
            continue;
        };
        for dependency in dependencies(&krate) {
            match layer_of(&dependency) {
                Some(theirs) if theirs < own => {}
                Some(_) => problems.push(format!(
                    "crates/{krate}/Cargo.toml: depends on shellgate-{dependency}, \
                     which is not in a lower layer"
                )),
                None => problems.push(format!(
                    "crates/{krate}/Cargo.toml: depends on shellgate-{dependency}, which is in no layer"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_import_circle_among_a_crates_files() {
    let mut problems = Vec::new();
    for krate in crates() {
        let mut graph = Graph::of(&workspace().join("crates").join(&krate).join("src"));
        graph.allow(&krate);
        for circle in graph.circles() {
            problems.push(format!("crates/{krate}: import circle:\n{circle}"));
        }
        let upward = graph.root_imports();
        if !upward.is_empty() {
            problems.push(format!(
                "crates/{krate}: imports back up into the crate root:\n{}",
                upward.join("\n")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_checker_sees_a_circle_through_nested_and_bare_paths() {
    let dir = std::env::temp_dir().join(format!("architecture-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("engine")).expect("temp dir");
    let write = |path: &str, text: &str| std::fs::write(dir.join(path), text).expect("write");
    write(
        "lib.rs",
        "mod engine;\nmod state;\n#[cfg(test)]\nmod checks;\npub struct Thing;\n// crate::state::Nothing in a comment is no edge\n",
    );
    write(
        "state.rs",
        "use crate::{engine::{pools::Pool, Engine}};\nconst S: &str = \"crate::Thing\";\n",
    );
    // A module using its own children closes no circle with their uses of
    // it; a child reaching the root is a root import.
    write(
        "engine/mod.rs",
        "mod pools;\npub struct Engine(pools::Pool, crate::Thing);\n",
    );
    write(
        "engine/pools.rs",
        "pub struct Pool;\n#[cfg(test)]\nmod tests {\n    use crate::Thing;\n}\nfn f() { super::super::state::g() }\n",
    );
    write("checks.rs", "use crate::Thing;\nuse crate::state::S;\n");
    let graph = Graph::of(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(
        circles[0].contains("engine/pools.rs:6 imports state.rs"),
        "{}",
        circles[0]
    );
    assert!(
        circles[0].contains("state.rs:1 imports engine/pools.rs"),
        "{}",
        circles[0]
    );
    assert_eq!(
        graph.root_imports(),
        ["  engine/mod.rs:2 imports lib.rs"],
        "only the root import outside tests, comments and strings"
    );
}

#[test]
fn the_checker_sees_a_circle_through_a_parents_use_of_its_children() {
    // A name the helper takes from the engine's parent module, which reaches
    // the helper back through its child: the circle passes through two
    // parents' uses of their own children.
    let files = |init: &'static str| -> [(&'static str, &'static str); 7] {
        [
            ("lib.rs", "mod engine;\nmod helper;\nmod launcher;\nmod user;\n"),
            ("user.rs", "pub const USER: &str = \"user\";\n"),
            (
                "engine/mod.rs",
                "mod container;\npub use crate::user::USER;\npub struct Engine(container::Running);\n",
            ),
            (
                "engine/container.rs",
                "use super::Engine;\nuse crate::launcher::Helper;\npub struct Running;\n",
            ),
            ("launcher.rs", "use crate::helper::ARG;\npub struct Helper;\n"),
            ("helper/mod.rs", "mod init;\npub const ARG: &str = init::NAME;\n"),
            ("helper/init.rs", init),
        ]
    };
    let tangled = graph_of("through-parent", &files("use crate::engine::USER;\n"));
    let circles = tangled.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(
        circles[0].contains("helper/init.rs:1 imports engine/mod.rs"),
        "{}",
        circles[0]
    );
    assert!(
        circles[0].contains("helper/mod.rs:2 imports helper/init.rs"),
        "{}",
        circles[0]
    );
    // The engine's parent and its child using each other is the module tree.
    let untangled = graph_of("through-parent-fixed", &files("use crate::user::USER;\n"));
    assert_eq!(untangled.circles(), Vec::<String>::new());
}

/// The graph of a crate made of `files` (path under `src/`, text) in a
/// scratch directory.
fn graph_of(name: &str, files: &[(&str, &str)]) -> Graph {
    let dir =
        std::env::temp_dir().join(format!("architecture-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a file has a folder")).expect("temp dir");
        std::fs::write(path, text).expect("write");
    }
    let graph = Graph::of(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    graph
}

/// Which of a module's uses of its own ancestors and descendants a view of
/// the graph holds (uses of every other module are in both).
#[derive(Clone, Copy)]
enum View {
    /// A module's uses of the modules above it: `super::X`, `crate::a::X` in `a/b.rs`.
    UpTheTree,
    /// A module's uses of the modules below it: `child::X` in the parent.
    DownTheTree,
}

/// A crate's files and the imports among them.
struct Graph {
    /// Module path (`["engine", "pools"]`) → the file that holds it, relative to `src/`.
    modules: BTreeMap<Vec<String>, String>,
    /// File → (file it imports → the first line that does), its own
    /// ancestors and descendants included (each view drops one direction).
    edges: BTreeMap<String, BTreeMap<String, usize>>,
}

impl Graph {
    fn of(src: &Path) -> Graph {
        let mut files = Vec::new();
        walk(src, src, &mut files);
        let modules: BTreeMap<Vec<String>, String> = files
            .iter()
            .map(|file| (module_path(file), file.clone()))
            .collect();
        let mut edges: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        // Modules declared `#[cfg(test)] mod name;`: test code in files of
        // their own, which like inline test modules may reach anything.
        let mut tests: Vec<Vec<String>> = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(src.join(file)).expect("source is readable");
            let own = module_path(file);
            tests.extend(test_modules(&text).into_iter().map(|name| {
                let mut path = own.clone();
                path.push(name);
                path
            }));
            for (line, target) in imports(&text, &own, &modules) {
                if let Some(to) = resolve(&target, &modules) {
                    if to != file {
                        edges
                            .entry(file.clone())
                            .or_default()
                            .entry(to.clone())
                            .or_insert(line);
                    }
                }
            }
        }
        edges.retain(|file, _| !tests.iter().any(|test| module_path(file).starts_with(test)));
        Graph { modules, edges }
    }

    /// Drops the edges of [`ALLOWED`] and [`HARNESSES`] for `krate`.
    fn allow(&mut self, krate: &str) {
        for (_, from, to, _) in ALLOWED.iter().filter(|entry| entry.0 == krate) {
            if let Some(edges) = self.edges.get_mut(*from) {
                edges.remove(*to);
            }
        }
        for (_, file) in HARNESSES.iter().filter(|entry| entry.0 == krate) {
            self.edges.remove(*file);
        }
    }

    /// Each strongly connected set of more than one file in either view
    /// (see the crate doc), shown as one circle through it with the line of
    /// each import; a set that shares a file with one already shown is the
    /// same tangle seen from the other view, and is not shown again.
    fn circles(&self) -> Vec<String> {
        let mut shown: Vec<BTreeSet<String>> = Vec::new();
        let mut found = Vec::new();
        for view in [View::UpTheTree, View::DownTheTree] {
            for (component, circle) in self.view(view).circles_among_edges() {
                if shown.iter().all(|other| other.is_disjoint(&component)) {
                    shown.push(component);
                    found.push(circle);
                }
            }
        }
        found
    }

    /// The graph without the edges the other view holds.
    fn view(&self, view: View) -> Graph {
        let mut edges = self.edges.clone();
        for (from, targets) in &mut edges {
            let from = module_path(from);
            targets.retain(|to, _| {
                let to = module_path(to);
                match view {
                    View::UpTheTree => !to.starts_with(&from),
                    View::DownTheTree => !from.starts_with(&to),
                }
            });
        }
        Graph {
            modules: self.modules.clone(),
            edges,
        }
    }

    fn circles_among_edges(&self) -> Vec<(BTreeSet<String>, String)> {
        let nodes: Vec<&String> = self.modules.values().collect();
        let mut seen = BTreeSet::new();
        let mut found = Vec::new();
        for start in &nodes {
            if seen.contains(*start) {
                continue;
            }
            let component: BTreeSet<String> = nodes
                .iter()
                .filter(|other| self.reaches(start, other) && self.reaches(other, start))
                .map(|other| (*other).clone())
                .collect();
            seen.extend(component.iter().cloned());
            if component.len() > 1 {
                let circle = self.describe(start, &component);
                found.push((component, circle));
            }
        }
        found
    }

    /// Imports of the crate root (`lib.rs`, `main.rs`): it is the top of
    /// its crate (it declares the modules and wires them), so a file that
    /// reaches up into it for a type or a helper has it in the wrong room.
    fn root_imports(&self) -> Vec<String> {
        let Some(root) = self.modules.get(&Vec::new()) else {
            return Vec::new();
        };
        self.edges
            .iter()
            .filter_map(|(from, to)| Some((from, to.get(root)?)))
            .map(|(from, line)| format!("  {from}:{line} imports {root}"))
            .collect()
    }

    fn reaches(&self, from: &str, to: &str) -> bool {
        if from == to {
            return true;
        }
        let mut stack = vec![from.to_owned()];
        let mut visited = BTreeSet::new();
        while let Some(node) = stack.pop() {
            if !visited.insert(node.clone()) {
                continue;
            }
            for next in self.edges.get(&node).into_iter().flat_map(|e| e.keys()) {
                if next == to {
                    return true;
                }
                stack.push(next.clone());
            }
        }
        false
    }

    /// The shortest path from `start` back to itself within `component`.
    fn describe(&self, start: &str, component: &BTreeSet<String>) -> String {
        let mut previous: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.to_owned()]);
        let mut end = None;
        'search: while let Some(node) = queue.pop_front() {
            for next in self.edges.get(&node).into_iter().flat_map(|e| e.keys()) {
                if !component.contains(next) {
                    continue;
                }
                if next == start {
                    end = Some(node.clone());
                    break 'search;
                }
                if !previous.contains_key(next) {
                    previous.insert(next.clone(), node.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        let mut path = vec![start.to_owned()];
        let mut node = end.unwrap_or_else(|| start.to_owned());
        let mut back = Vec::new();
        while node != start {
            back.push(node.clone());
            node = previous[&node].clone();
        }
        back.reverse();
        path.extend(back);
        path.push(start.to_owned());
        let mut lines = Vec::new();
        for pair in path.windows(2) {
            let line = self.edges[&pair[0]][&pair[1]];
            lines.push(format!("  {}:{line} imports {}", pair[0], pair[1]));
        }
        let others: Vec<&String> = component.iter().filter(|f| !path.contains(f)).collect();
        if !others.is_empty() {
            lines.push(format!("  (also in the circle: {others:?})"));
        }
        lines.join("\n")
    }
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("source dir is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under root");
            files.push(relative.to_string_lossy().into_owned());
        }
    }
}

/// `lib.rs`, `main.rs` → the root; `a/mod.rs`, `a.rs` → `a`; `a/b.rs` → `a::b`.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file of the longest prefix of `path` that is a module.
fn resolve<'a>(path: &[String], modules: &'a BTreeMap<Vec<String>, String>) -> Option<&'a String> {
    (0..=path.len()).rev().find_map(|n| modules.get(&path[..n]))
}

/// The source with comments, strings and characters blanked out (newlines
/// kept, so lines still count).
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[u8]| {
        for &b in s {
            out.push(if b == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j.min(rest.len())]);
            i += j.min(rest.len());
        } else if let Some(len) = raw_string(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' || rest.starts_with(b"b\"") {
            let mut j = if rest[0] == b'"' { 1 } else { 2 };
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A character literal ('a', '\n', '\u{..}'), not a lifetime.
            let len = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(2).position(|&b| b == b'\'').map(|p| p + 3)
            } else if rest.get(2) == Some(&b'\'') {
                Some(3)
            } else {
                std::str::from_utf8(&rest[1..rest.len().min(6)])
                    .ok()
                    .and_then(|s| s.chars().next())
                    .filter(|c| c.len_utf8() > 1)
                    .and_then(|c| {
                        (rest.get(1 + c.len_utf8()) == Some(&b'\'')).then_some(2 + c.len_utf8())
                    })
            };
            let len = len.unwrap_or(1);
            blank(&mut out, &rest[..len]);
            i += len;
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start.
fn raw_string(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[start..].iter().take_while(|&&b| b == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = rest[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other(char),
}

fn tokens(code: &str) -> Vec<(usize, Token)> {
    let mut found = Vec::new();
    let mut line = 1;
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            // `r#ident` is the identifier itself.
            let word: String = chars[start..i].iter().collect();
            found.push((line, Token::Ident(word)));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            found.push((line, Token::PathSep));
            i += 2;
        } else {
            found.push((
                line,
                match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    ',' => Token::Comma,
                    other => Token::Other(other),
                },
            ));
            i += 1;
        }
    }
    found
}

/// Every module path a file names, with its line: paths from `crate`,
/// `super` and `self`, and paths whose first segment is a child module of
/// the file (`use admission::Admission;` in `lib.rs`, `responses::Running`).
fn imports(
    text: &str,
    own: &[String],
    modules: &BTreeMap<Vec<String>, String>,
) -> Vec<(usize, Vec<String>)> {
    let code = code_only(text);
    let tokens = tokens(&code);
    let children: BTreeSet<&String> = modules
        .keys()
        .filter(|path| path.len() == own.len() + 1 && path.starts_with(own))
        .filter_map(|path| path.last())
        .collect();
    // Inline `mod name { … }` blocks the parser is in: their brace depth,
    // and whether they are `#[cfg(test)]`.
    let mut inline = Vec::new();
    let mut depth = 0usize;
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let previous_is_sep = i > 0 && tokens[i - 1].1 == Token::PathSep;
        match &tokens[i].1 {
            Token::Open => {
                depth += 1;
                i += 1;
                continue;
            }
            Token::Close => {
                if inline.last().map(|(at, _)| *at) == Some(depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some((_, Token::Ident(_))), Some((_, Token::Open))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    let attribute: Vec<&Token> = tokens[i.saturating_sub(7)..i]
                        .iter()
                        .map(|(_, token)| token)
                        .collect();
                    let is_test = attribute
                        == [
                            &Token::Other('#'),
                            &Token::Other('['),
                            &Token::Ident("cfg".into()),
                            &Token::Other('('),
                            &Token::Ident("test".into()),
                            &Token::Other(')'),
                            &Token::Other(']'),
                        ];
                    inline.push((depth + 1, is_test));
                }
            }
            _ => {}
        }
        let Token::Ident(word) = &tokens[i].1 else {
            i += 1;
            continue;
        };
        if previous_is_sep || tokens.get(i + 1).map(|t| &t.1) != Some(&Token::PathSep) {
            i += 1;
            continue;
        }
        let line = tokens[i].0;
        let (base, start) = match word.as_str() {
            "crate" => (Some(Vec::new()), i + 2),
            "self" => (Some(own.to_vec()), i + 2),
            "super" => {
                // Leading `super`s: the first ones leave inline modules
                // (the same file), the rest climb the file's module path.
                let mut climbs = 0usize;
                let mut j = i;
                while matches!(tokens.get(j).map(|t| &t.1), Some(Token::Ident(w)) if w == "super")
                    && tokens.get(j + 1).map(|t| &t.1) == Some(&Token::PathSep)
                {
                    climbs += 1;
                    j += 2;
                }
                let mut base = own.to_vec();
                for _ in 0..climbs.saturating_sub(inline.len()) {
                    base.pop();
                }
                (Some(base), j)
            }
            other if inline.is_empty() && children.contains(&other.to_owned()) => {
                (Some(own.to_vec()), i)
            }
            // A path into another crate: its tree is skipped whole, so a
            // group in it (`other::{config::X}`) is not read as ours.
            _ => (None, i),
        };
        let mut leaves = Vec::new();
        let end = use_tree(&tokens, start, &mut Vec::new(), &mut leaves);
        // Unit tests may reach anything their crate has.
        let in_test = inline.iter().any(|(_, is_test)| *is_test);
        if let (Some(base), false) = (base, in_test) {
            for leaf in leaves {
                let mut full = base.clone();
                full.extend(leaf);
                found.push((line, full));
            }
        }
        i = end.max(i + 1);
    }
    found
}

/// The names of the modules a file declares `#[cfg(test)] mod name;`.
fn test_modules(text: &str) -> Vec<String> {
    let tokens = tokens(&code_only(text));
    let attribute = [
        Token::Other('#'),
        Token::Other('['),
        Token::Ident("cfg".into()),
        Token::Other('('),
        Token::Ident("test".into()),
        Token::Other(')'),
        Token::Other(']'),
    ];
    let kinds: Vec<&Token> = tokens.iter().map(|(_, token)| token).collect();
    let mut names = Vec::new();
    for at in 0..kinds.len() {
        let Some(window) = kinds.get(at..at + attribute.len() + 3) else {
            break;
        };
        let is_attribute = window.iter().zip(&attribute).all(|(a, b)| *a == b);
        if let (true, Token::Ident(word), Token::Ident(name), Token::Other(';')) = (
            is_attribute,
            window[attribute.len()],
            window[attribute.len() + 1],
            window[attribute.len() + 2],
        ) {
            if word == "mod" {
                names.push(name.clone());
            }
        }
    }
    names
}

/// The paths of a use tree (`a::b`, `a::{b, c::{d}}`) starting at `at`.
fn use_tree(
    tokens: &[(usize, Token)],
    at: usize,
    path: &mut Vec<String>,
    leaves: &mut Vec<Vec<String>>,
) -> usize {
    let mut i = at;
    let depth = path.len();
    loop {
        match tokens.get(i).map(|t| &t.1) {
            Some(Token::Ident(word)) => {
                path.push(word.clone());
                i += 1;
                if tokens.get(i).map(|t| &t.1) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                leaves.push(path.clone());
                break;
            }
            Some(Token::Open) => {
                i += 1;
                loop {
                    i = use_tree(tokens, i, path, leaves);
                    match tokens.get(i).map(|t| &t.1) {
                        Some(Token::Comma) => i += 1,
                        Some(Token::Close) => {
                            i += 1;
                            break;
                        }
                        _ => break,
                    }
                    if tokens.get(i).map(|t| &t.1) == Some(&Token::Close) {
                        i += 1;
                        break;
                    }
                }
                break;
            }
            _ => {
                // `*`, `<` (generics) or the end of the path.
                leaves.push(path.clone());
                break;
            }
        }
    }
    path.truncate(depth);
    i
}
