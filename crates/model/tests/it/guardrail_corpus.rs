//! The built-in guardrail rules measured on the two small corpora beside
//! the tests (`tests/guardrail_corpus/`): ordinary texts a model reads, texts
//! about prompt injection among them (`benign.txt`), and injections in
//! plain and disguised spellings (`attacks.txt`). It prints the
//! false-positive and detection rates (`cargo test -p shellgate-model
//! --test it guardrail_corpus:: -- --nocapture`; BENCHMARKS.md has them) and
//! fails on a regression: an injection marked `!` that is not blocked,
//! fewer injections blocked than [`DETECTED_AT_LEAST`], or more ordinary
//! texts blocked than [`FALSE_POSITIVES_AT_MOST`].
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use shellgate_model::guardrail::{Action, Guardrail};

/// Injections of `attacks.txt` the built-in rules block today: raise it
/// when they block more.
const DETECTED_AT_LEAST: usize = 65;
/// Texts of `benign.txt` the built-in rules block today: lower it when
/// they block fewer.
const FALSE_POSITIVES_AT_MOST: usize = 2;

/// A corpus line with its escapes undone (see the corpora's headers).
fn decode(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("\\n") {
            out.push('\n');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("\\u{") {
            let (hex, after) = after.split_once('}').unwrap();
            out.push(char::from_u32(u32::from_str_radix(hex, 16).unwrap()).unwrap());
            rest = after;
        } else if let Some(after) = rest.strip_prefix("{tags:") {
            let (text, after) = after.split_once('}').unwrap();
            out.extend(
                text.chars()
                    .map(|c| char::from_u32(0xE0000 + u32::from(c)).unwrap()),
            );
            rest = after;
        } else if let Some(after) = rest.strip_prefix("{reversed:") {
            let (text, after) = after.split_once('}').unwrap();
            out.push('\u{202E}');
            out.extend(text.chars().rev());
            out.push('\u{202C}');
            rest = after;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The texts of a corpus file, and whether each is marked `!`.
fn corpus(text: &str) -> Vec<(bool, String)> {
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| match line.strip_prefix('!') {
            Some(marked) => (true, decode(marked)),
            None => (false, decode(line)),
        })
        .collect()
}

fn percent(part: usize, whole: usize) -> f64 {
    100.0 * part as f64 / whole as f64
}

#[test]
fn the_built_in_rules_on_the_benign_and_attack_corpora() {
    let guardrail = Guardrail::defaults(Action::Block);
    let blocked = |text: &str| guardrail.check(text).action == Some(Action::Block);

    let benign = corpus(include_str!("../guardrail_corpus/benign.txt"));
    let false_positives: Vec<&String> = benign
        .iter()
        .map(|(_, text)| text)
        .filter(|text| blocked(text))
        .collect();
    let attacks = corpus(include_str!("../guardrail_corpus/attacks.txt"));
    let missed: Vec<&(bool, String)> = attacks.iter().filter(|(_, text)| !blocked(text)).collect();
    let detected = attacks.len() - missed.len();

    println!(
        "guardrail corpus: {} of {} benign texts blocked ({:.1} % false positives); \
         {} of {} injections blocked ({:.1} % detected), {} of {} marked ones",
        false_positives.len(),
        benign.len(),
        percent(false_positives.len(), benign.len()),
        detected,
        attacks.len(),
        percent(detected, attacks.len()),
        attacks
            .iter()
            .filter(|(marked, text)| *marked && blocked(text))
            .count(),
        attacks.iter().filter(|(marked, _)| *marked).count(),
    );
    for text in &false_positives {
        println!("  blocked benign: {text:?}");
    }
    for (_, text) in &missed {
        println!("  missed injection: {text:?}");
    }

    assert!(benign.len() >= 200 && attacks.len() >= 60);
    let missed_marked: Vec<&String> = missed
        .iter()
        .filter(|(marked, _)| *marked)
        .map(|(_, text)| text)
        .collect();
    assert!(
        missed_marked.is_empty(),
        "marked injections passed: {missed_marked:#?}"
    );
    assert!(
        detected >= DETECTED_AT_LEAST,
        "{detected} injections blocked, fewer than {DETECTED_AT_LEAST}"
    );
    assert!(
        false_positives.len() <= FALSE_POSITIVES_AT_MOST,
        "{} ordinary texts blocked, more than {FALSE_POSITIVES_AT_MOST}: {false_positives:#?}",
        false_positives.len()
    );
}
