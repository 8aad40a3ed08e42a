//! Text in the order it is displayed where bidirectional overrides reorder
//! it. A right-to-left override (U+202E ... U+202C) draws its characters
//! right to left, so `U+202E snoitcurtsni suoiverp erongi` renders, and is
//! read by a model, as "ignore previous instructions": the guardrail reads
//! it in that order. Only the explicit overrides reorder here (Latin
//! letters keep their order in an embedding or an isolate); embeddings,
//! isolates and their ends are tracked so that each end closes the right
//! run, and a paragraph's end closes them all, as the Unicode
//! bidirectional algorithm does.

/// One character of a text and the byte range of the original it came
/// from.
pub(super) type Unit = (char, usize, usize);

/// Deepest nesting of runs followed (the Unicode algorithm's own limit);
/// controls past it are ignored, as it ignores them.
const MAX_DEPTH: usize = 125;

/// Whether `text` has an override that reorders it.
pub(super) fn has_overrides(text: &str) -> bool {
    text.contains(['\u{202D}', '\u{202E}'])
}

/// A run opened by a bidirectional control.
struct Run {
    /// Drawn right to left (an RLO): its contents in reverse order.
    reversed: bool,
    /// Opened by an isolate (closed by U+2069, not U+202C).
    isolate: bool,
    children: Vec<Node>,
}

enum Node {
    Unit(Unit),
    /// A nested run, by index.
    Run(usize),
}

/// `units` in display order, without the bidirectional controls.
pub(super) fn visual_order(units: Vec<Unit>) -> Vec<Unit> {
    let mut runs = vec![Run {
        reversed: false,
        isolate: false,
        children: Vec::new(),
    }];
    // The open runs, innermost last (the paragraph's own run first).
    let mut open: Vec<usize> = vec![0];
    // Openings past MAX_DEPTH, whose ends are ignored too.
    let mut overflow = 0usize;
    for unit in units {
        let (c, _, _) = unit;
        let opens = match c {
            '\u{202E}' => Some((true, false)),
            '\u{202A}' | '\u{202B}' | '\u{202D}' => Some((false, false)),
            '\u{2066}'..='\u{2068}' => Some((false, true)),
            _ => None,
        };
        if let Some((reversed, isolate)) = opens {
            if open.len() > MAX_DEPTH {
                overflow += 1;
                continue;
            }
            let index = runs.len();
            runs.push(Run {
                reversed,
                isolate,
                children: Vec::new(),
            });
            if let Some(parent) = open.last().and_then(|&p| runs.get_mut(p)) {
                parent.children.push(Node::Run(index));
            }
            open.push(index);
            continue;
        }
        match c {
            '\u{202C}' | '\u{2069}' => {
                if overflow > 0 {
                    overflow -= 1;
                } else if c == '\u{202C}' {
                    // Closes an override or embedding, never an isolate.
                    if open.len() > 1 && open.last().is_some_and(|&r| !runs[r].isolate) {
                        open.pop();
                    }
                } else if let Some(at) = open.iter().rposition(|&r| runs[r].isolate) {
                    // Closes the innermost isolate and all inside it.
                    open.truncate(at);
                }
            }
            _ => {
                if matches!(c, '\n' | '\r' | '\u{2029}' | '\u{85}') {
                    open.truncate(1);
                    overflow = 0;
                }
                if let Some(current) = open.last().and_then(|&r| runs.get_mut(r)) {
                    current.children.push(Node::Unit(unit));
                }
            }
        }
    }
    let mut out = Vec::new();
    render(&runs, 0, &mut out);
    out
}

/// Appends run `index` as displayed: its children in order, or reversed
/// if it is drawn right to left (a nested run stays whole, in its place).
fn render(runs: &[Run], index: usize, out: &mut Vec<Unit>) {
    let Some(run) = runs.get(index) else { return };
    let mut visit = |node: &Node| match node {
        Node::Unit(unit) => out.push(*unit),
        Node::Run(nested) => render(runs, *nested, out),
    };
    if run.reversed {
        run.children.iter().rev().for_each(&mut visit);
    } else {
        run.children.iter().for_each(&mut visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        let units: Vec<Unit> = text
            .char_indices()
            .map(|(at, c)| (c, at, at + c.len_utf8()))
            .collect();
        visual_order(units).into_iter().map(|(c, _, _)| c).collect()
    }

    #[test]
    fn overrides_are_read_in_the_order_they_are_drawn() {
        assert_eq!(shown("a \u{202E}cba\u{202C} d"), "a abc d");
        // To the paragraph's end when no PDF closes it.
        assert_eq!(shown("x \u{202E}zy\nnext"), "x yz\nnext");
        // A left-to-right override inside stays in its order, in its place.
        assert_eq!(shown("\u{202E}c\u{202D}ab\u{202C}d\u{202C}"), "dabc");
        // A PDF does not close an isolate; a PDI closes it and all inside.
        assert_eq!(shown("\u{202E}b\u{2067}xy\u{202C}\u{2069}a"), "axyb");
        // Embeddings and isolates alone reorder nothing.
        assert_eq!(shown("\u{202B}abc\u{202C} \u{2067}def\u{2069}"), "abc def");
        assert!(has_overrides("\u{202E}") && !has_overrides("\u{2067}abc"));
        // Deeper than the algorithm follows: no panic, every letter kept.
        let deep = format!("{}abc", "\u{202E}".repeat(1000));
        assert_eq!(shown(&deep).len(), 3);
    }
}
