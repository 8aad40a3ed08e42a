//! A `reasoning` item of the Responses API (`shellgate_wire::responses::Reasoning`,
//! what the loop stores and clients replay) and the neutral [`Reasoning`]
//! an upstream reads and gives, in one place both ways.
//!
//! The sealed part of a reasoning travels in the item's `encrypted_content`
//! whatever protocol made it, so it survives any client that replays items
//! as it got them (Codex keeps only the fields it knows). OpenAI's is there
//! as OpenAI wrote it; Anthropic's carries a prefix naming what it is:
//! `anthropic-signature:` and a `thinking` block's `signature`, or
//! `anthropic-redacted:` and a `redacted_thinking` block's `data`. The `:`
//! is outside base64's alphabet, so no OpenAI value reads as Anthropic's.
//! Summaries are the item's `summary` (`summary_text` parts); the thinking
//! text its `content` (`reasoning_text` parts), as OpenAI writes them.

use shellgate_wire::responses::{Reasoning as ReasoningItem, ReasoningText};

use crate::turn::{Reasoning, Sealed};

/// The prefix of an Anthropic `thinking` block's signature.
const SIGNATURE: &str = "anthropic-signature:";
/// The prefix of an Anthropic `redacted_thinking` block's data.
const REDACTED: &str = "anthropic-redacted:";

impl Sealed {
    /// As an item's `encrypted_content`.
    pub fn encrypted_content(&self) -> String {
        match self {
            Sealed::OpenAi(text) => text.clone(),
            Sealed::AnthropicSignature(text) => format!("{SIGNATURE}{text}"),
            Sealed::AnthropicRedacted(text) => format!("{REDACTED}{text}"),
        }
    }

    /// An item's `encrypted_content`, read back.
    pub fn from_encrypted_content(text: &str) -> Self {
        if let Some(signature) = text.strip_prefix(SIGNATURE) {
            Sealed::AnthropicSignature(signature.to_owned())
        } else if let Some(data) = text.strip_prefix(REDACTED) {
            Sealed::AnthropicRedacted(data.to_owned())
        } else {
            Sealed::OpenAi(text.to_owned())
        }
    }
}

/// The texts of parts (each part's `text`).
fn texts(parts: &[ReasoningText]) -> Vec<String> {
    parts.iter().map(|part| part.text.clone()).collect()
}

/// A replayed or stored `reasoning` item, as the neutral reasoning.
pub fn from_item(item: &ReasoningItem) -> Reasoning {
    Reasoning {
        id: item.id.clone(),
        summary: texts(&item.summary),
        text: texts(item.content.as_deref().unwrap_or_default()).join("\n"),
        sealed: item
            .encrypted_content
            .as_deref()
            .map(Sealed::from_encrypted_content),
    }
}

/// An upstream's reasoning as a `reasoning` item (its `id` the upstream's,
/// if it gave one).
pub fn to_item(reasoning: &Reasoning) -> ReasoningItem {
    ReasoningItem {
        id: reasoning.id.clone(),
        summary: reasoning
            .summary
            .iter()
            .map(|text| ReasoningText::new(ReasoningText::SUMMARY, text.clone()))
            .collect(),
        content: (!reasoning.text.is_empty()).then(|| {
            vec![ReasoningText::new(
                ReasoningText::CONTENT,
                reasoning.text.clone(),
            )]
        }),
        encrypted_content: reasoning.sealed.as_ref().map(Sealed::encrypted_content),
        ..ReasoningItem::default()
    }
}

/// Whether a reasoning says anything (one with nothing in it means nothing
/// to any upstream).
pub fn is_empty(reasoning: &Reasoning) -> bool {
    reasoning.sealed.is_none() && reasoning.text.is_empty() && reasoning.summary.is_empty()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_protocols_sealed_part_reads_back_as_itself() {
        for sealed in [
            Sealed::OpenAi("gAAAAABo-x_y=".into()),
            Sealed::AnthropicSignature("EqQBCkYIBx==".into()),
            Sealed::AnthropicRedacted("EmwKAhgB".into()),
        ] {
            let reasoning = Reasoning {
                id: Some("rs_1".into()),
                summary: vec!["Looked.".into()],
                text: "Let me look.".into(),
                sealed: Some(sealed),
            };
            assert_eq!(from_item(&to_item(&reasoning)), reasoning);
        }
        let item: ReasoningItem = serde_json::from_value(json!({
            "id": "rs_2", "summary": [{"type": "summary_text", "text": "s"}],
            "content": [{"type": "reasoning_text", "text": "t"}],
            "encrypted_content": "anthropic-signature:sig"
        }))
        .unwrap();
        let read = from_item(&item);
        assert_eq!(read.text, "t");
        assert_eq!(read.summary, ["s"]);
        assert_eq!(read.sealed, Some(Sealed::AnthropicSignature("sig".into())));
        assert_eq!(
            serde_json::to_value(to_item(&read)).unwrap()["encrypted_content"],
            "anthropic-signature:sig"
        );
    }

    #[test]
    fn codex_s_replayed_item_reads_back_and_writes_back_the_same() {
        // As Codex replays it: `content: null`.
        let item: ReasoningItem = serde_json::from_value(json!({
            "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
            "content": null, "encrypted_content": "sealed"
        }))
        .unwrap();
        let read = from_item(&item);
        assert_eq!(
            read,
            Reasoning {
                id: Some("rs_1".into()),
                summary: vec!["plan".into()],
                text: String::new(),
                sealed: Some(Sealed::OpenAi("sealed".into())),
            }
        );
        assert_eq!(to_item(&read), item);
        assert!(is_empty(&from_item(&ReasoningItem::default())));
        assert!(!is_empty(&read));
    }
}
