//! `POST /v1/responses/compact`: its request ([`CompactRequest`]), its
//! answer ([`CompactedResponse`]) and the `compaction` item
//! ([`Compaction`]) the answer ends with, which a later request carries as
//! input in place of the turns it summarizes.
//!
//! A compaction shellgate makes holds the summary an upstream model wrote
//! of the conversation, sealed into `encrypted_content` ([`Compaction::seal`]):
//! the client keeps it as an opaque string, shellgate opens it
//! ([`Compaction::summary`]) when it comes back and gives the summary to
//! the next turn's model, whatever its protocol. The seal is an encoding
//! (a version mark and the summary's bytes in hex), not a cipher: the
//! summary is of the client's own conversation and says nothing it did
//! not send or receive; the mark tells shellgate's compactions from
//! another server's (OpenAI's own), which are passed along whole.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::items::{Extra, Item};
use super::request::Input;
use super::response::ResponseUsage;

/// Fields of the SDK's `ResponseCompactParams` that are accepted and
/// carried (to a Responses upstream verbatim), not acted on.
pub const COMPACT_CARRIED: &[&str] = &[
    "image",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
];

/// `POST /v1/responses/compact`: the conversation to compact (`input`,
/// after that of `previous_response_id`). Fields are consumed, carried
/// ([`COMPACT_CARRIED`]) or refused, as for a create request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CompactRequest {
    /// The upstream model that writes the summary (required, checked by
    /// the server).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Input>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub carried: Map<String, Value>,
}

impl CompactRequest {
    /// The first key that is neither consumed nor carried.
    pub fn refused(&self) -> Option<&str> {
        super::request::first_refused(&self.carried, COMPACT_CARRIED)
    }
}

/// The answer of `POST /v1/responses/compact` (the SDK's
/// `CompactedResponse`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CompactedResponse {
    pub id: String,
    /// Always `response.compaction`.
    pub object: String,
    pub created_at: i64,
    /// The conversation's user messages, then one `compaction` item.
    pub output: Vec<Item>,
    pub usage: ResponseUsage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_identifier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
}

/// `object` of a [`CompactedResponse`].
pub const COMPACTED_OBJECT: &str = "response.compaction";

/// The `type` of a compaction item.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactionType {
    Compaction,
}

/// A `compaction` item (the SDK's `ResponseCompactionItem`, and its
/// `ResponseCompactionItemParam` as input).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Compaction {
    #[serde(rename = "type")]
    pub kind: CompactionType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub encrypted_content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// What starts the `encrypted_content` of a compaction shellgate made.
const SEAL_MARK: &str = "shellgate-compaction-v1:";

impl Compaction {
    /// A compaction item `id` holding `summary`.
    pub fn seal(id: String, summary: &str) -> Self {
        let mut sealed = String::with_capacity(SEAL_MARK.len() + summary.len() * 2);
        sealed.push_str(SEAL_MARK);
        for byte in summary.bytes() {
            sealed.push_str(&format!("{byte:02x}"));
        }
        Compaction {
            kind: CompactionType::Compaction,
            id: Some(id),
            encrypted_content: sealed,
            created_by: None,
        }
    }

    /// The compaction an item of another `type` ([`Item::Other`]) is, if it
    /// is one.
    pub fn read(item: &Extra) -> Option<Self> {
        serde_json::from_value(Value::Object(item.clone())).ok()
    }

    /// The summary this compaction holds; `None` for one shellgate did not
    /// make (or that was altered so it no longer reads).
    pub fn summary(&self) -> Option<String> {
        let hex = self.encrypted_content.strip_prefix(SEAL_MARK)?;
        if hex.len() % 2 != 0 {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|at| {
                hex.get(at..at + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()?;
        String::from_utf8(bytes).ok()
    }

    /// As a conversation item.
    pub fn into_item(self) -> Item {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => Item::Other(map),
            _ => Item::Other(Map::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_sealed_summary_reads_back_and_another_servers_does_not() {
        let summary = "The user wants a CSV of primes; 2, 3, 5 written to /tmp/p.csv. «ünïcode»";
        let item = Compaction::seal("cmp_1".into(), summary).into_item();
        let Item::Other(map) = &item else {
            panic!("a compaction is an item of its own type: {item:?}");
        };
        assert_eq!(map.get("type"), Some(&json!("compaction")), "{map:?}");
        let read = Compaction::read(map).expect("reads back");
        assert_eq!(read.summary().as_deref(), Some(summary), "{read:?}");
        assert!(
            !read.encrypted_content.contains("primes"),
            "opaque: {read:?}"
        );

        let foreign =
            json!({"type": "compaction", "encrypted_content": "gAAAAB...", "id": "cmp_x"});
        let foreign = Compaction::read(foreign.as_object().unwrap()).expect("a compaction");
        assert_eq!(foreign.summary(), None, "{foreign:?}");
        let altered = Compaction {
            encrypted_content: format!("{SEAL_MARK}zz"),
            ..foreign
        };
        assert_eq!(altered.summary(), None, "{altered:?}");
        let message = json!({"type": "message", "role": "user", "content": "hi"});
        assert_eq!(Compaction::read(message.as_object().unwrap()), None);
    }

    #[test]
    fn the_request_consumes_carries_or_refuses_each_field() {
        let request: CompactRequest = serde_json::from_value(json!({
            "model": "m", "input": "hi", "prompt_cache_key": "k", "service_tier": "auto"
        }))
        .unwrap();
        assert_eq!(request.refused(), None, "{request:?}");
        let request: CompactRequest =
            serde_json::from_value(json!({"model": "m", "tools": []})).unwrap();
        assert_eq!(request.refused(), Some("tools"), "{request:?}");
    }
}
