//! The built-in deny list: destructive commands denied whatever else is
//! allowed, in every approval mode, matched on a simple command's words
//! after quote removal (`rm -rf "/"` is `rm -rf /`, `mk""fs` is `mkfs`),
//! with long and short options alike (`rm --recursive --force /` is
//! `rm -rf /`). A guard against accidents, not a boundary: a command that
//! builds its words at run time (`$(echo rm) ...`) is not seen here, and
//! `--approve auto` never runs such a command unasked anyway.

pub const REMOVE_TREE: &str = "builtin:rm-recursive-system-path";
pub const MAKE_FS: &str = "builtin:mkfs";
pub const DD_DEVICE: &str = "builtin:dd-to-device";
pub const DISK_WRITE: &str = "builtin:write-to-disk";
pub const FORK_BOMB: &str = "builtin:fork-bomb";
pub const POWER: &str = "builtin:shutdown";
pub const PERMISSIONS: &str = "builtin:chmod-chown-system-path";

/// Top-level directories whose removal (or recursive re-permissioning)
/// wrecks the machine.
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
    "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// The built-in rule a command's words (assignments left out) break.
pub fn check(words: &[&str]) -> Option<&'static str> {
    let (name, args) = words.split_first()?;
    let name = basename(name);
    match name {
        "rm" if has_option(args, 'r', "recursive") || has_option(args, 'R', "recursive") => {
            operands(args).any(is_system_path).then_some(REMOVE_TREE)
        }
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(POWER),
        "systemctl" | "init" | "telinit"
            if args
                .iter()
                .any(|a| matches!(*a, "poweroff" | "reboot" | "halt" | "kexec" | "0" | "6")) =>
        {
            Some(POWER)
        }
        "dd" => args
            .iter()
            .any(|a| {
                a.strip_prefix("of=")
                    .is_some_and(|t| t.starts_with("/dev/"))
            })
            .then_some(DD_DEVICE),
        "tee" | "cp" => args.iter().any(|a| is_disk(a)).then_some(DISK_WRITE),
        "chmod" | "chown" | "chgrp" => {
            let recursive = has_option(args, 'R', "recursive");
            operands(args)
                .any(|a| normalise(a) == "/" || (recursive && is_system_path(a)))
                .then_some(PERMISSIONS)
        }
        _ if name.starts_with("mkfs") || matches!(name, "mke2fs" | "mkswap" | "wipefs") => {
            Some(MAKE_FS)
        }
        _ => None,
    }
}

/// Whether `short` is among the short-option clusters (`-rf`, `-r -f`)
/// or `long` is given, in full or abbreviated as getopt accepts it
/// (`--recursive`, `--rec`), before a `--`.
fn has_option(args: &[&str], short: char, long: &str) -> bool {
    args.iter()
        .take_while(|a| **a != "--")
        .any(|a| match a.strip_prefix("--") {
            Some(name) => {
                let name = name.split('=').next().unwrap_or(name);
                !name.is_empty() && long.starts_with(name)
            }
            None => a.len() > 1 && a.starts_with('-') && a[1..].contains(short),
        })
}

/// The operands: the words that are not options (all of them after `--`).
fn operands<'a>(args: &'a [&'a str]) -> impl Iterator<Item = &'a str> + 'a {
    let mut after_dashes = false;
    args.iter().copied().filter(move |a| {
        if after_dashes {
            return true;
        }
        if *a == "--" {
            after_dashes = true;
            return false;
        }
        !(a.len() > 1 && a.starts_with('-'))
    })
}

/// A path with `//`, `/./`, `/..` and a trailing `/` folded, and `$HOME`
/// written as `~`.
fn normalise(path: &str) -> String {
    let (root, rest) = if let Some(rest) = path.strip_prefix('/') {
        ("/", rest)
    } else if let Some(rest) = ["~", "$HOME", "${HOME}"]
        .iter()
        .find_map(|home| path.strip_prefix(home))
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    {
        ("~", rest)
    } else {
        return path.to_owned();
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    match (root, parts.is_empty()) {
        ("/", true) => "/".to_owned(),
        ("/", false) => format!("/{}", parts.join("/")),
        (_, true) => "~".to_owned(),
        (_, false) => format!("~/{}", parts.join("/")),
    }
}

/// `/`, `~`, a top-level system directory, or everything in one (`/*`);
/// a glob is one if it can match one (`/u*`, `/[e]tc`, `/??r`).
fn is_system_path(path: &str) -> bool {
    let path = normalise(path);
    let dir = match path.strip_suffix("/*") {
        Some("") => "/",
        Some(dir) => dir,
        None => &path,
    };
    if dir == "/" || dir == "~" || SYSTEM_DIRS.contains(&dir) {
        return true;
    }
    dir.contains(['*', '?', '['])
        && SYSTEM_DIRS
            .iter()
            .any(|system| glob_matches(dir.as_bytes(), system.as_bytes()))
}

/// Whether a shell glob (`*`, `?`, `[...]`) matches `name` whole. An
/// unclosed `[` is literal, as in bash.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        // `/` is matched only literally, as in a path.
        Some((b'*', rest)) => (0..=name.len())
            .take_while(|&skip| skip == 0 || name[skip - 1] != b'/')
            .any(|skip| glob_matches(rest, &name[skip..])),
        Some((b'?', rest)) => name
            .split_first()
            .is_some_and(|(c, tail)| *c != b'/' && glob_matches(rest, tail)),
        Some((b'[', rest)) => {
            let negated = matches!(rest.first(), Some(b'!' | b'^'));
            let set = if negated { &rest[1..] } else { rest };
            // A `]` first in the set is one of its members.
            let Some(close) = set.iter().skip(1).position(|c| *c == b']').map(|i| i + 1) else {
                return name.first() == Some(&b'[') && glob_matches(rest, &name[1..]);
            };
            let (members, after) = (&set[..close], &set[close + 1..]);
            name.split_first().is_some_and(|(c, tail)| {
                let mut hit = false;
                let mut i = 0;
                while i < members.len() {
                    if i + 2 < members.len() && members[i + 1] == b'-' {
                        hit |= (members[i]..=members[i + 2]).contains(c);
                        i += 3;
                    } else {
                        hit |= members[i] == *c;
                        i += 1;
                    }
                }
                hit != negated && *c != b'/' && glob_matches(after, tail)
            })
        }
        Some((c, rest)) => name
            .split_first()
            .is_some_and(|(n, tail)| n == c && glob_matches(rest, tail)),
    }
}

/// At most this many words come out of one word's brace expansion; a
/// word that would make more is left as it is.
const MAX_BRACE_WORDS: usize = 1024;

/// The words bash makes of one by brace expansion (`/{usr,etc}` is
/// `/usr /etc`, `{rm,-rf}` is `rm -rf`): comma alternatives, nested,
/// however many in a word. Sequences (`{1..3}`) are left as written.
pub fn expand_braces(original: &str) -> Vec<String> {
    let mut done = Vec::new();
    let mut pending = vec![original.to_owned()];
    while let Some(word) = pending.pop() {
        match split_first_brace(&word) {
            Some((head, alternatives, tail)) => {
                if done.len() + pending.len() + alternatives.len() > MAX_BRACE_WORDS {
                    return vec![original.to_owned()];
                }
                // Reversed onto the stack, so they come out in order.
                for alternative in alternatives.iter().rev() {
                    pending.push(format!("{head}{alternative}{tail}"));
                }
            }
            None => done.push(word),
        }
    }
    done
}

/// The first `{a,b,...}` of a word with a comma at its own level: what
/// comes before it, its alternatives, what comes after it.
fn split_first_brace(word: &str) -> Option<(&str, Vec<&str>, &str)> {
    let bytes = word.as_bytes();
    for open in (0..bytes.len()).filter(|&i| bytes[i] == b'{') {
        let mut depth = 0;
        let mut commas = Vec::new();
        for (i, byte) in bytes.iter().enumerate().skip(open) {
            match byte {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        if commas.is_empty() {
                            break;
                        }
                        let mut alternatives = Vec::new();
                        let mut from = open + 1;
                        for comma in commas {
                            alternatives.push(&word[from..comma]);
                            from = comma + 1;
                        }
                        alternatives.push(&word[from..i]);
                        return Some((&word[..open], alternatives, &word[i + 1..]));
                    }
                }
                b',' if depth == 1 => commas.push(i),
                _ => {}
            }
        }
    }
    None
}

/// A disk device (`/dev/sda`, `/dev/nvme0n1p1`, ...).
pub fn is_disk(path: &str) -> bool {
    normalise(path).strip_prefix("/dev/").is_some_and(|device| {
        [
            "sd", "nvme", "vd", "hd", "xvd", "mmcblk", "md", "dm-", "loop",
        ]
        .iter()
        .any(|prefix| device.starts_with(prefix))
    })
}

/// The last path component (`/sbin/mkfs.ext4` is `mkfs.ext4`).
pub fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(command: &str) -> Vec<&str> {
        command.split_whitespace().collect()
    }

    #[test]
    fn options_long_or_short_and_paths_in_any_spelling() {
        for command in [
            "rm -rf /",
            "rm -r -f /",
            "rm --recursive --force /",
            "rm --rec /",
            "rm -fr -- /",
            "rm -R /*",
            "rm / -rf",
            "rm -rf //",
            "rm -rf /usr/..",
            "rm -rf ~",
            "rm -rf ~/",
            "rm -rf $HOME",
            "rm -rf /etc/",
            "/bin/rm -rf /home",
        ] {
            assert_eq!(check(&words(command)), Some(REMOVE_TREE), "{command}");
        }
        for command in [
            "rm -rf ./build",
            "rm -rf /tmp/x",
            "rm -f /etc",
            "rm -- -rf",
            "rm -rf ~/project",
            "rm -rf /usr/local/x",
        ] {
            assert_eq!(check(&words(command)), None, "{command}");
        }
    }

    #[test]
    fn the_rest_of_the_list() {
        assert_eq!(check(&words("mkfs.ext4 /dev/sda1")), Some(MAKE_FS));
        assert_eq!(check(&words("/sbin/mkfs -t xfs x")), Some(MAKE_FS));
        assert_eq!(check(&words("dd if=x of=/dev/sda")), Some(DD_DEVICE));
        assert_eq!(check(&words("dd if=/dev/sda of=x")), None);
        assert_eq!(check(&words("shutdown -h now")), Some(POWER));
        assert_eq!(check(&words("systemctl reboot")), Some(POWER));
        assert_eq!(check(&words("chmod 777 /")), Some(PERMISSIONS));
        assert_eq!(check(&words("chown -R me /usr")), Some(PERMISSIONS));
        assert_eq!(check(&words("chown -R me ./x")), None);
        assert_eq!(check(&words("tee /dev/nvme0n1")), Some(DISK_WRITE));
        assert!(is_disk("/dev/sda") && !is_disk("/dev/null"));
    }

    #[test]
    fn globs_that_can_name_a_system_path_are_system_paths() {
        for command in [
            "rm -rf /u*",
            "rm -rf /[e]tc",
            "rm -rf /??r",
            "rm -rf /[!a]sr/",
            "rm -rf /*/",
        ] {
            assert_eq!(check(&words(command)), Some(REMOVE_TREE), "{command}");
        }
        for command in [
            "rm -rf /tmp/*",
            "rm -rf ./u*",
            "rm -rf /x*",
            "rm -rf /[ac]in",
        ] {
            assert_eq!(check(&words(command)), None, "{command}");
        }
    }

    #[test]
    fn brace_expansion_makes_the_words_bash_runs() {
        assert_eq!(expand_braces("/{usr,etc}"), ["/usr", "/etc"]);
        assert_eq!(expand_braces("{rm,-rf,/}"), ["rm", "-rf", "/"]);
        assert_eq!(expand_braces("a{b,{c,d}}e"), ["abe", "ace", "ade"]);
        assert_eq!(expand_braces("{x}{,/}"), ["{x}", "{x}/"]);
        assert_eq!(expand_braces("{1..3}"), ["{1..3}"]);
        // A word that would make too many is left whole.
        let huge = "{a,b}".repeat(20);
        assert_eq!(expand_braces(&huge), std::slice::from_ref(&huge));
    }
}
