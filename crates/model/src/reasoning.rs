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

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shellgate_wire::responses::Reasoning as ReasoningItem;

use crate::upstream::{Reasoning, Sealed};

/// The prefix of an Anthropic `thinking` block's signature.
const SIGNATURE: &str = "anthropic-signature:";
/// The prefix of an Anthropic `redacted_thinking` block's data.
const REDACTED: &str = "anthropic-redacted:";

/// A text part of `summary` or `content` (`summary_text`, `reasoning_text`).
#[derive(Debug, Serialize, Deserialize)]
struct TextPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: String,
}

/// The texts of `parts` (parts that are not text are left out).
fn texts(parts: &[Value]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|part| TextPart::deserialize(part).ok())
        .map(|part| part.text)
        .collect()
}

/// Parts of `kind` for `texts`.
fn parts(kind: &str, texts: impl IntoIterator<Item = String>) -> Vec<Value> {
    texts
        .into_iter()
        .filter_map(|text| {
            serde_json::to_value(TextPart {
                kind: kind.to_owned(),
                text,
            })
            .ok()
        })
        .collect()
}

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

/// The keys of a `reasoning` item beside its `summary` (kept in its
/// `extra`), read; one of another type is left out.
#[derive(Debug, Default, Deserialize)]
struct ItemParts {
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    encrypted_content: Option<String>,
}

/// A replayed or stored `reasoning` item, as the neutral reasoning.
pub fn from_item(item: &ReasoningItem) -> Reasoning {
    let parts: ItemParts =
        serde_json::from_value(Value::Object(item.extra.clone())).unwrap_or_default();
    Reasoning {
        id: item.id.clone(),
        summary: texts(&item.summary),
        text: texts(&parts.content).join("\n"),
        sealed: parts
            .encrypted_content
            .as_deref()
            .map(Sealed::from_encrypted_content),
    }
}

/// An upstream's reasoning as a `reasoning` item.
pub fn to_item(reasoning: &Reasoning) -> ReasoningItem {
    let mut extra = shellgate_wire::responses::Extra::new();
    if !reasoning.text.is_empty() {
        extra.insert(
            "content".into(),
            Value::Array(parts("reasoning_text", [reasoning.text.clone()])),
        );
    }
    if let Some(sealed) = &reasoning.sealed {
        extra.insert(
            "encrypted_content".into(),
            Value::String(sealed.encrypted_content()),
        );
    }
    ReasoningItem {
        id: reasoning.id.clone(),
        summary: parts("summary_text", reasoning.summary.iter().cloned()),
        extra,
    }
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
}
