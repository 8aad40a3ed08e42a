//! Exclude patterns of [`super::export`]: globs over member paths relative
//! to the exported directory.
//!
//! `*` matches within one path component, `**` across components (`**/`
//! also matches no directory at all, so `**/node_modules` matches a
//! top-level `node_modules` too), `?` one byte other than `/`, and `\`
//! makes the next byte literal. A trailing `/` restricts a pattern to
//! directories; a leading `./` or `/` is dropped (patterns are relative to
//! the directory anyway), so the Agents SDK's concrete `./path` excludes
//! work unchanged. Matching is an NFA run over the path's bytes: linear in
//! the path for each pattern, never backtracking, whatever the pattern.

/// At most this many patterns per export.
pub const MAX_PATTERNS: usize = 256;
/// At most this many bytes per pattern.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    pub pattern: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Byte(u8),
    /// `?`
    AnyByte,
    /// `*`
    Star,
    /// `**` not followed by `/`
    Globstar,
    /// `**/`: nothing, or anything ending in `/`
    GlobstarSlash,
}

#[derive(Debug, Clone)]
struct Pattern {
    tokens: Vec<Token>,
    directories_only: bool,
}

/// A checked set of exclude patterns.
#[derive(Debug, Clone, Default)]
pub struct ExcludeSet {
    patterns: Vec<Pattern>,
}

impl ExcludeSet {
    /// Checks and compiles `patterns`.
    pub fn parse(patterns: &[String]) -> Result<Self, PatternError> {
        if patterns.len() > MAX_PATTERNS {
            return Err(PatternError {
                pattern: format!("({} patterns)", patterns.len()),
                reason: "too many exclude patterns (at most 256)",
            });
        }
        let patterns = patterns
            .iter()
            .map(|p| {
                Pattern::parse(p).map_err(|reason| PatternError {
                    pattern: p.clone(),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// Whether a member (its path relative to the exported directory, no
    /// trailing slash) is excluded.
    pub fn matches(&self, path: &[u8], is_directory: bool) -> bool {
        self.patterns
            .iter()
            .any(|p| (is_directory || !p.directories_only) && p.matches(path))
    }
}

impl Pattern {
    fn parse(pattern: &str) -> Result<Self, &'static str> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err("the pattern is longer than 1024 bytes");
        }
        if pattern.contains('\0') {
            return Err("a NUL byte in the pattern");
        }
        let mut rest = pattern;
        loop {
            if let Some(r) = rest.strip_prefix("./") {
                rest = r;
            } else if let Some(r) = rest.strip_prefix('/') {
                rest = r;
            } else {
                break;
            }
        }
        let directories_only = rest.ends_with('/');
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() || rest == "." {
            return Err("the pattern names no member");
        }
        if rest.split('/').any(|c| c == "..") {
            return Err("'..' never matches a member (paths are relative to the directory)");
        }
        let bytes = rest.as_bytes();
        let mut tokens = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if i + 1 < bytes.len() => {
                    tokens.push(Token::Byte(bytes[i + 1]));
                    i += 2;
                }
                b'*' if bytes.get(i + 1) == Some(&b'*') => {
                    if bytes.get(i + 2) == Some(&b'/') {
                        tokens.push(Token::GlobstarSlash);
                        i += 3;
                    } else {
                        tokens.push(Token::Globstar);
                        i += 2;
                    }
                    // `***` is `**`: further stars add nothing.
                    while bytes.get(i) == Some(&b'*') {
                        i += 1;
                    }
                }
                b'*' => {
                    tokens.push(Token::Star);
                    i += 1;
                }
                b'?' => {
                    tokens.push(Token::AnyByte);
                    i += 1;
                }
                b => {
                    tokens.push(Token::Byte(b));
                    i += 1;
                }
            }
        }
        Ok(Self {
            tokens,
            directories_only,
        })
    }

    /// Runs the pattern's NFA over `path`: `states[i]` is "the first `i`
    /// tokens have matched the bytes so far".
    fn matches(&self, path: &[u8]) -> bool {
        let n = self.tokens.len();
        let mut states = vec![false; n + 1];
        let mut next = vec![false; n + 1];
        states[0] = true;
        self.close(&mut states);
        for &c in path {
            next.iter_mut().for_each(|s| *s = false);
            for (i, token) in self.tokens.iter().enumerate() {
                if !states[i] {
                    continue;
                }
                match *token {
                    Token::Byte(b) if b == c => next[i + 1] = true,
                    Token::Byte(_) => {}
                    Token::AnyByte if c != b'/' => next[i + 1] = true,
                    Token::AnyByte => {}
                    Token::Star if c != b'/' => next[i] = true,
                    Token::Star => {}
                    Token::Globstar => next[i] = true,
                    Token::GlobstarSlash => {
                        next[i] = true;
                        if c == b'/' {
                            next[i + 1] = true;
                        }
                    }
                }
            }
            self.close(&mut next);
            std::mem::swap(&mut states, &mut next);
            if !states.iter().any(|s| *s) {
                return false;
            }
        }
        states[n]
    }

    /// Adds the states reachable without consuming a byte: every star
    /// kind may match nothing.
    fn close(&self, states: &mut [bool]) {
        for (i, token) in self.tokens.iter().enumerate() {
            if states[i] && matches!(token, Token::Star | Token::Globstar | Token::GlobstarSlash) {
                states[i + 1] = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> ExcludeSet {
        ExcludeSet::parse(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn star_stays_within_a_component() {
        let s = set(&["*.log"]);
        assert!(s.matches(b"a.log", false));
        assert!(s.matches(b".log", false));
        assert!(!s.matches(b"dir/a.log", false));
        assert!(!s.matches(b"a.log.txt", false));
        let s = set(&["src/*/target"]);
        assert!(s.matches(b"src/x/target", true));
        assert!(!s.matches(b"src/x/y/target", true));
    }

    #[test]
    fn globstar_crosses_components_and_matches_none() {
        let s = set(&["**/node_modules"]);
        assert!(s.matches(b"node_modules", true));
        assert!(s.matches(b"a/b/node_modules", true));
        assert!(!s.matches(b"a/node_modules_x", true));
        let s = set(&["a/**"]);
        assert!(s.matches(b"a/b", false));
        assert!(s.matches(b"a/b/c", false));
        assert!(!s.matches(b"ab", false));
        let s = set(&["a**z"]);
        assert!(s.matches(b"a/b/z", false));
        assert!(s.matches(b"az", false));
        let s = set(&["**/*.pyc"]);
        assert!(s.matches(b"x.pyc", false));
        assert!(s.matches(b"p/q/x.pyc", false));
    }

    #[test]
    fn question_mark_escape_and_literals() {
        let s = set(&["a/?.txt", "lit\\*"]);
        assert!(s.matches(b"a/b.txt", false));
        assert!(!s.matches(b"a/bc.txt", false));
        assert!(!s.matches(b"a//.txt", false));
        assert!(s.matches(b"lit*", false));
        assert!(!s.matches(b"literal", false));
    }

    #[test]
    fn prefixes_and_directory_only_patterns() {
        let s = set(&["./cache/", "/build"]);
        assert!(s.matches(b"cache", true));
        assert!(!s.matches(b"cache", false));
        assert!(s.matches(b"build", false));
        assert!(!s.matches(b"x/build", false));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in ["", "/", "./", "../x", "a/../b", "a\0b"] {
            assert!(
                ExcludeSet::parse(&[bad.to_string()]).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(ExcludeSet::parse(&vec!["x".to_string(); MAX_PATTERNS + 1]).is_err());
        assert!(ExcludeSet::parse(&["x".repeat(MAX_PATTERN_BYTES + 1)]).is_err());
    }

    #[test]
    fn many_stars_stay_linear() {
        // A backtracking matcher takes exponential time on this; the NFA
        // answers at once.
        let s = set(&[&"*a".repeat(40)]);
        assert!(s.matches(&[b'a'; 4000], false));
        let s = set(&[&"**a".repeat(40)]);
        assert!(!s.matches(&[b'a'; 30], false));
    }
}
