//! Denials told to the program that met them: each connection or lookup a
//! container's proxy refused, kept briefly (the last [`KEPT`]) so the
//! command path can add one line per denial to the stderr of the command
//! that was running, e.g.
//! `shellgate: egress denied: CONNECT example.com:443: example.com is not in this container's allowlist`.
//! Beside them, *notes* on requests that went out but not as the program
//! may think (`shellgate: egress note: ...`): a secret's placeholder sent
//! where its value is not put in (another host, plain HTTP, outside its
//! scope), which the far side answers with a 401 that says nothing of why.
//!
//! Without it a program sees only what its client makes of the refusal
//! (curl: `CONNECT tunnel failed, response 403`; a reset; a name that does
//! not resolve), the same for every reason, and the model reading the
//! output cannot tell an unlisted name from a typo. The egress log keeps
//! every denial with its reason regardless; this is the short version, in
//! the place the program and the model already read.
//!
//! How a command hears of its denials: it takes a [`DenialMark`] before
//! it starts and asks [`Denials::since`] when it ends. The proxy notes a
//! denial *before* the client learns of the refusal (its 403, its reset,
//! its NXDOMAIN), and a note before the request is forwarded, so what the
//! program saw before it exited is always there when its command ends.
//! (One exception: a TLS handshake the program itself breaks off, say for
//! a CA it does not trust, is noted as soon as the proxy sees it fail,
//! which races with the program's exit.)
//!
//! Commands running at the same time in one container cannot be told
//! apart: the proxy sees sockets, not processes. Every command whose run
//! overlapped a denial is told of it (so a denial may show in two
//! commands' stderr), which is honest where picking one would be a guess;
//! a denial while no command runs (a background process between commands)
//! is in the egress log only.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Denials remembered for the commands that are running.
const KEPT: usize = 256;
/// Distinct lines one command's report shows; the rest are counted.
pub const REPORTED_LINES: usize = 10;
/// Longest reason kept (in characters): a reason may quote what the
/// program sent, and a report must stay short whatever it sent.
const MAX_REASON: usize = 300;
/// Longest target kept (a DNS name is at most 253 characters).
const MAX_TARGET: usize = 260;

/// What a refusal's line starts with (the engine's other notes say
/// `shellgate: ...` too).
const DENIED: &str = "shellgate: egress denied: ";
/// What a note's line starts with.
const NOTE: &str = "shellgate: egress note: ";

/// What a line tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// The connection or lookup was refused.
    Denied,
    /// It went out, but something in it was not as the program may
    /// expect (see the module's documentation).
    Note,
}

/// One refusal (or note), as a command's stderr shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub told: Told,
    /// `dns`, `http`, `https` or `connect`, as in the egress log.
    pub kind: &'static str,
    /// The name asked for (or the address, when no name was given); `None`
    /// when nothing of the connection was read (reset over the limit).
    pub target: Option<String>,
    pub port: u16,
    pub reason: String,
}

impl Denial {
    /// A denial of `kind` to `target`:`port`, with its reason; both texts
    /// made safe for one line (no control characters) and bounded.
    pub fn new(kind: &'static str, target: Option<&str>, port: u16, reason: &str) -> Self {
        Self {
            told: Told::Denied,
            kind,
            target: target.map(|t| one_line(t, MAX_TARGET)),
            port,
            reason: one_line(reason, MAX_REASON),
        }
    }

    /// The same for a note (see [`Told::Note`]).
    pub fn note(kind: &'static str, target: Option<&str>, port: u16, reason: &str) -> Self {
        Self {
            told: Told::Note,
            ..Self::new(kind, target, port, reason)
        }
    }

    /// What was refused: `CONNECT example.com:443`, `DNS lookup of
    /// example.com`, `HTTPS to example.com:443`, `HTTP to example.com:80`.
    pub fn what(&self) -> String {
        let at = match &self.target {
            Some(target) => format!("{target}:{}", self.port),
            None => format!("port {}", self.port),
        };
        match self.kind {
            "dns" => format!(
                "DNS lookup of {}",
                self.target.as_deref().unwrap_or("a name")
            ),
            "connect" => format!("CONNECT {at}"),
            "https" => format!("HTTPS to {at}"),
            "http" => format!("HTTP to {at}"),
            other => format!("{other} {at}"),
        }
    }

    /// The line, without its newline.
    fn line(&self) -> String {
        let prefix = match self.told {
            Told::Denied => DENIED,
            Told::Note => NOTE,
        };
        format!("{prefix}{}: {}", self.what(), self.reason)
    }
}

/// `text` on one line: control characters (a newline would let a
/// program's name forge a line of its own) shown as `?`, at most `max`
/// characters (then `...`).
fn one_line(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().nth(max).is_some() {
        out.push_str("...");
    }
    out
}

/// Where a command started in a container's sequence of denials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DenialMark(u64);

/// One container's recent denials (see the module's documentation).
#[derive(Debug, Default)]
pub struct Denials {
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    /// Denials noted since the container's proxy started.
    total: u64,
    /// The last [`KEPT`] of them: numbers `total - kept.len()` to `total - 1`.
    kept: VecDeque<Denial>,
}

impl Denials {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where the sequence is now: what a command takes before it starts.
    pub fn mark(&self) -> DenialMark {
        DenialMark(self.lock().total)
    }

    /// Notes a denial (before the client is told, see the module's
    /// documentation).
    pub fn note(&self, denial: Denial) {
        let mut recent = self.lock();
        if recent.kept.len() == KEPT {
            recent.kept.pop_front();
        }
        recent.kept.push_back(denial);
        recent.total += 1;
    }

    /// The denials noted since `mark`.
    pub fn since(&self, mark: DenialMark) -> DenialsSince {
        let recent = self.lock();
        let new = recent.total.saturating_sub(mark.0);
        let kept = (new as usize).min(recent.kept.len());
        DenialsSince {
            kept: recent
                .kept
                .iter()
                .skip(recent.kept.len() - kept)
                .cloned()
                .collect(),
            forgotten: new - kept as u64,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The denials of one command's run, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DenialsSince {
    pub kept: Vec<Denial>,
    /// Denials in that time no longer kept (more than [`KEPT`]).
    pub forgotten: u64,
}

impl DenialsSince {
    /// The lines for the command's stderr (empty for none): one per
    /// distinct denial in the order first seen, repeats counted, at most
    /// [`REPORTED_LINES`], then one line counting the rest.
    pub fn report(&self) -> String {
        let mut distinct: Vec<(String, u64)> = Vec::new();
        for denial in &self.kept {
            let text = denial.line();
            match distinct.iter_mut().find(|(seen, _)| *seen == text) {
                Some((_, count)) => *count += 1,
                None => distinct.push((text, 1)),
            }
        }
        let mut report = String::new();
        for (text, count) in distinct.iter().take(REPORTED_LINES) {
            report.push_str(text);
            if *count > 1 {
                report.push_str(&format!(" ({count} times)"));
            }
            report.push('\n');
        }
        let more: u64 = distinct
            .iter()
            .skip(REPORTED_LINES)
            .map(|(_, count)| count)
            .sum::<u64>()
            + self.forgotten;
        if more > 0 {
            report.push_str(&format!(
                "shellgate: egress: ... and {more} more (the container's egress log has every one)\n"
            ));
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(target: &str, reason: &str) -> Denial {
        Denial::new("connect", Some(target), 443, reason)
    }

    #[test]
    fn each_kind_names_what_was_refused_and_why() {
        let cases = [
            (
                connect(
                    "example.com",
                    "example.com is not in this container's allowlist",
                ),
                "CONNECT example.com:443: example.com is not in this container's allowlist",
            ),
            (
                Denial::new(
                    "dns",
                    Some("nowhere.test"),
                    53,
                    "nowhere.test does not resolve",
                ),
                "DNS lookup of nowhere.test: nowhere.test does not resolve",
            ),
            (
                Denial::new(
                    "https",
                    Some("loop.test"),
                    443,
                    "loop.test resolves to 127.0.0.1, a loopback address",
                ),
                "HTTPS to loop.test:443: loop.test resolves to 127.0.0.1, a loopback address",
            ),
            (
                Denial::new(
                    "http",
                    None,
                    80,
                    "over the limit of 256 connections open at once",
                ),
                "HTTP to port 80: over the limit of 256 connections open at once",
            ),
        ];
        for (denial, line) in cases {
            let since = DenialsSince {
                kept: vec![denial],
                forgotten: 0,
            };
            assert_eq!(
                since.report(),
                format!("shellgate: egress denied: {line}\n")
            );
        }
        let note = Denial::note(
            "https",
            Some("other.test"),
            443,
            "carried the placeholder of $API_TOKEN, which is put in only for api.secret.test",
        );
        let since = DenialsSince {
            kept: vec![note],
            forgotten: 0,
        };
        assert_eq!(
            since.report(),
            "shellgate: egress note: HTTPS to other.test:443: carried the placeholder of \
             $API_TOKEN, which is put in only for api.secret.test\n"
        );
    }

    #[test]
    fn a_command_hears_of_the_denials_during_its_run_only() {
        let denials = Denials::new();
        denials.note(connect("before.test", "before"));
        let mark = denials.mark();
        assert_eq!(denials.since(mark).report(), "");
        denials.note(connect("during.test", "during"));
        let later = denials.mark();
        denials.note(connect("overlap.test", "overlap"));
        // A command that started earlier and one that started later both
        // hear of what happened while both ran.
        let first = denials.since(mark).report();
        assert!(!first.contains("before.test"), "{first}");
        assert!(first.contains("during.test") && first.contains("overlap.test"));
        let second = denials.since(later).report();
        assert!(!second.contains("during.test") && second.contains("overlap.test"));
    }

    #[test]
    fn repeats_are_counted_and_a_report_is_bounded() {
        let denials = Denials::new();
        let mark = denials.mark();
        for _ in 0..3 {
            denials.note(Denial::new("dns", Some("a.test"), 53, "not listed"));
        }
        for i in 0..KEPT + 50 {
            denials.note(connect(&format!("n{i}.test"), "not listed"));
        }
        let report = denials.since(mark).report();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), REPORTED_LINES + 1, "{report}");
        // The first three were forgotten (more than KEPT came after them).
        assert_eq!(
            lines[0],
            "shellgate: egress denied: CONNECT n50.test:443: not listed"
        );
        let more = KEPT + 53 - REPORTED_LINES;
        assert_eq!(
            lines[REPORTED_LINES],
            format!(
                "shellgate: egress: ... and {more} more (the container's egress log has every \
                 one)"
            )
        );
        let repeated = Denials::new();
        let mark = repeated.mark();
        for _ in 0..3 {
            repeated.note(Denial::new("dns", Some("a.test"), 53, "not listed"));
        }
        assert_eq!(
            repeated.since(mark).report(),
            "shellgate: egress denied: DNS lookup of a.test: not listed (3 times)\n"
        );
    }

    #[test]
    fn what_a_program_chose_cannot_forge_lines_or_grow_without_bound() {
        let long = "x".repeat(5000);
        let denial = Denial::new("connect", Some("a\nshellgate: fake"), 443, &long);
        let since = DenialsSince {
            kept: vec![denial],
            forgotten: 0,
        };
        let report = since.report();
        assert_eq!(report.lines().count(), 1, "{report}");
        assert!(report.contains("a?shellgate: fake"));
        assert!(report.len() < MAX_REASON + MAX_TARGET + 100);
    }
}
