//! The built-in deny list: destructive commands denied whatever else is
//! allowed, in every approval mode, matched on a simple command's words
//! after quote removal (`rm -rf "/"` is `rm -rf /`, `mk""fs` is `mkfs`),
//! with long and short options alike (`rm --recursive --force /` is
//! `rm -rf /`): a recursive removal of `/`, a home (`~`, `~root`) or a
//! system directory (by `rm -r` or `find -delete`), `mkfs`, writes to
//! disks (`dd`, `shred`, ...) and to the kernel's controls
//! (`/proc/sysrq-trigger`), a kill of init or of every process, shutdown,
//! recursive `chmod`/`chown` of system paths. A guard against accidents, not a boundary: a command that
//! builds its words at run time (`$(echo rm) ...`) is not seen here, and
//! `--approve auto` never runs such a command unasked anyway.

pub const REMOVE_TREE: &str = "builtin:rm-recursive-system-path";
pub const MAKE_FS: &str = "builtin:mkfs";
pub const DD_DEVICE: &str = "builtin:dd-to-device";
pub const DISK_WRITE: &str = "builtin:write-to-disk";
pub const FORK_BOMB: &str = "builtin:fork-bomb";
pub const POWER: &str = "builtin:shutdown";
pub const PERMISSIONS: &str = "builtin:chmod-chown-system-path";
pub const KILL_ALL: &str = "builtin:kill-init-or-every-process";
pub const KERNEL_CONTROL: &str = "builtin:write-to-kernel-control";

/// Top-level directories whose removal (or recursive re-permissioning)
/// wrecks the machine.
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
    "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// Files whose writing drives the kernel (or the hardware) directly:
/// `echo c > /proc/sysrq-trigger` crashes the machine, `echo o` powers it
/// off; `/dev/mem` and `/dev/port` are the machine's memory and I/O ports.
const KERNEL_CONTROLS: &[&str] = &[
    "/proc/sysrq-trigger",
    "/proc/sys/kernel/sysrq",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/sys/power/state",
    "/sys/kernel/kexec_load",
];

/// Programs that overwrite or discard what a device holds.
const DEVICE_WIPERS: &[&str] = &[
    "shred",
    "blkdiscard",
    "sgdisk",
    "sfdisk",
    "fdisk",
    "parted",
    "hdparm",
    "badblocks",
    "cryptsetup",
];

/// The built-in rule a command's words (assignments left out) break.
pub fn check(words: &[&str]) -> Option<&'static str> {
    let (name, args) = words.split_first()?;
    let name = basename(name);
    match name {
        "rm" if has_option(args, 'r', "recursive") || has_option(args, 'R', "recursive") => {
            operands(args).any(is_system_path).then_some(REMOVE_TREE)
        }
        // `find / -delete` removes the tree under each starting point, as
        // `rm -r` would (what `-exec` runs is judged by the caller with
        // `{}` as each starting point).
        "find" if args.contains(&"-delete") => find_starts(args)
            .into_iter()
            .any(is_system_path)
            .then_some(REMOVE_TREE),
        "kill" | "pkill" | "killall" | "killall5" => {
            kills_everything(name, args).then_some(KILL_ALL)
        }
        _ if DEVICE_WIPERS.contains(&name) => args
            .iter()
            .any(|a| is_disk(a) || a.split_once('=').is_some_and(|(_, v)| is_disk(v)))
            .then_some(DISK_WRITE),
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(POWER),
        "systemctl" | "init" | "telinit"
            if args
                .iter()
                .any(|a| matches!(*a, "poweroff" | "reboot" | "halt" | "kexec" | "0" | "6")) =>
        {
            Some(POWER)
        }
        "dd" => {
            let target = args.iter().find_map(|a| a.strip_prefix("of="));
            if target.is_some_and(is_kernel_control) {
                Some(KERNEL_CONTROL)
            } else {
                target
                    .is_some_and(|t| t.starts_with("/dev/"))
                    .then_some(DD_DEVICE)
            }
        }
        "tee" | "cp" => {
            if operands(args).any(is_kernel_control) {
                Some(KERNEL_CONTROL)
            } else {
                args.iter().any(|a| is_disk(a)).then_some(DISK_WRITE)
            }
        }
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

/// `find`'s starting points: the words before its first expression (an
/// option, a test, `(` or `!`), past its own `-H`, `-L`, `-P`, `-D opts`
/// and `-Olevel`; `.` when there are none.
pub fn find_starts<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut rest = args;
    loop {
        match rest.first() {
            Some(&"-H" | &"-L" | &"-P") => rest = &rest[1..],
            Some(&"-D") => rest = rest.get(2..).unwrap_or_default(),
            Some(option) if option.starts_with("-O") => rest = &rest[1..],
            _ => break,
        }
    }
    let starts: Vec<&str> = rest
        .iter()
        .copied()
        .take_while(|a| !(a.starts_with('-') || matches!(*a, "(" | "!" | ",")))
        .collect();
    if starts.is_empty() {
        vec!["."]
    } else {
        starts
    }
}

/// Whether a `kill` (or `pkill`, `killall`) sends a signal to init or to
/// every process: a pid of 1 or -1 (`kill -9 -1`, `kill -- -1`, `kill -s
/// KILL 1`), `killall5`, or a name of init's (`pkill systemd`). Signal 0
/// only asks whether a process exists.
fn kills_everything(name: &str, args: &[&str]) -> bool {
    match name {
        "killall5" => !args.contains(&"-0"),
        "pkill" | "killall" => operands(args).any(|a| matches!(a, "init" | "systemd" | "1")),
        _ => {
            let mut signal_zero = false;
            let mut pids = Vec::new();
            let mut signal_given = false;
            let mut after_dashes = false;
            let mut words = args.iter();
            while let Some(&word) = words.next() {
                if after_dashes {
                    pids.push(word);
                } else if word == "--" {
                    after_dashes = true;
                } else if matches!(word, "-s" | "-n") {
                    signal_zero |= words.next().is_some_and(|s| *s == "0");
                    signal_given = true;
                } else if matches!(word, "-l" | "-L" | "--list" | "--table") {
                    return false;
                } else if let Some(signal) = word.strip_prefix('-').filter(|_| !signal_given) {
                    // The first `-X` is the signal (`-9`, `-KILL`, `-0`);
                    // after it, `-1` is a pid (every process).
                    signal_zero |= signal == "0";
                    signal_given = true;
                } else {
                    pids.push(word);
                }
            }
            !signal_zero && pids.iter().any(|p| matches!(*p, "1" | "-1"))
        }
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
/// or another user's home (`~root`, `~alice`) written as `~`.
fn normalise(path: &str) -> String {
    let (root, rest) = if let Some(rest) = path.strip_prefix('/') {
        ("/", rest)
    } else if let Some(rest) = ["$HOME", "${HOME}"]
        .iter()
        .find_map(|home| path.strip_prefix(home))
        .or_else(|| home_of_a_user(path))
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

/// What follows `~` or `~USER` (a user name as bash reads one in a tilde
/// prefix), if `path` starts with one: a home directory, the current
/// user's or another's (`~root` is `/root`).
fn home_of_a_user(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('~')?;
    let name_end = rest.find('/').unwrap_or(rest.len());
    let name = &rest[..name_end];
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        .then_some(&rest[name_end..])
        // `~+` and `~-` are the current and the previous directory.
        .filter(|_| !name.starts_with(['-', '+']))
}

/// A file whose writing drives the kernel or the hardware directly.
pub fn is_kernel_control(path: &str) -> bool {
    let path = normalise(path);
    KERNEL_CONTROLS.contains(&path.as_str())
}

/// `/`, `~` (or a user's home), a top-level system directory, or
/// everything in one (`/*`); a glob is one if it can match one (`/u*`,
/// `/[e]tc`, `/??r`).
pub fn is_system_path(path: &str) -> bool {
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
    fn kills_homes_devices_and_kernel_controls() {
        for (command, rule) in [
            ("kill -9 1", KILL_ALL),
            ("kill -9 -1", KILL_ALL),
            ("kill -HUP -- -1", KILL_ALL),
            ("kill -n 9 1", KILL_ALL),
            ("/bin/kill 1", KILL_ALL),
            ("rm -rf ~root", REMOVE_TREE),
            ("rm -rf ~bob/.", REMOVE_TREE),
            ("chown -R me ~root", PERMISSIONS),
            ("shred /dev/sda", DISK_WRITE),
            ("sgdisk --zap-all /dev/nvme0n1", DISK_WRITE),
            ("cp /dev/zero /dev/sda", DISK_WRITE),
            ("tee /proc/sysrq-trigger", KERNEL_CONTROL),
            ("dd of=/dev/port", KERNEL_CONTROL),
            ("find / -delete", REMOVE_TREE),
            ("find -H /etc -delete", REMOVE_TREE),
        ] {
            assert_eq!(check(&words(command)), Some(rule), "{command}");
        }
        for command in [
            "kill -9 1234",
            "kill -1",
            "kill -0 1",
            "kill -s 0 -1",
            "kill -l 1",
            "rm -rf ~+",
            "rm -rf ~root/.cache",
            "shred ./secret",
            "find . -delete",
            "find / -name x",
        ] {
            assert_eq!(check(&words(command)), None, "{command}");
        }
        assert_eq!(find_starts(&["-L", "/a", "b", "-name", "x"]), ["/a", "b"]);
        assert_eq!(find_starts(&["-name", "x"]), ["."]);
        assert!(is_kernel_control("/proc/./sysrq-trigger") && !is_kernel_control("/proc/cpuinfo"));
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
