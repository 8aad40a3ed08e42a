//! The Messages API's stream: each SSE event's data is a [`StreamEvent`]
//! (its `event:` name is the data's `type`): `message_start`, `ping`, each
//! content block's `content_block_start` / `_delta` / `_stop`, then
//! `message_delta` and `message_stop`, or an `error`.
//!
//! An event or delta of a `type` not listed is kept raw (`Unknown`):
//! Anthropic adds event types, and a reader of an upstream skips them.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::blocks::{ContentBlock, Extra, Raw};
use super::response::{Container, ErrorObject, Message, StopReason};
use crate::param::{unknown_type, Tagged};

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        message: Message,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDelta,
        usage: DeltaUsage,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorObject,
    },
    /// An event of another `type`, whole.
    #[serde(untagged)]
    Unknown(Raw),
}

impl StreamEvent {
    /// Its `type` (the SSE `event:` name).
    pub fn kind(&self) -> &str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
            StreamEvent::Ping => "ping",
            StreamEvent::Error { .. } => "error",
            StreamEvent::Unknown(raw) => raw.kind(),
        }
    }
}

/// The fields of each event with fields (to read them with derived serde).
mod fields {
    use super::*;

    #[derive(Deserialize)]
    pub struct MessageStart {
        pub message: Message,
    }
    #[derive(Deserialize)]
    pub struct BlockStart {
        pub index: usize,
        pub content_block: ContentBlock,
    }
    #[derive(Deserialize)]
    pub struct BlockDelta {
        pub index: usize,
        pub delta: Delta,
    }
    #[derive(Deserialize)]
    pub struct BlockStop {
        pub index: usize,
    }
    #[derive(Deserialize)]
    pub struct MessageDelta {
        pub delta: super::MessageDelta,
        pub usage: DeltaUsage,
    }
    #[derive(Deserialize)]
    pub struct Error {
        pub error: ErrorObject,
    }
}

impl<'de> Deserialize<'de> for StreamEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let event = Tagged::deserialize(deserializer)?;
        let tag = event.tag()?;
        Ok(match tag.as_deref() {
            Some("message_start") => {
                let fields::MessageStart { message } = event.variant()?;
                StreamEvent::MessageStart { message }
            }
            Some("content_block_start") => {
                let fields::BlockStart {
                    index,
                    content_block,
                } = event.variant()?;
                StreamEvent::ContentBlockStart {
                    index,
                    content_block,
                }
            }
            Some("content_block_delta") => {
                let fields::BlockDelta { index, delta } = event.variant()?;
                StreamEvent::ContentBlockDelta { index, delta }
            }
            Some("content_block_stop") => {
                let fields::BlockStop { index } = event.variant()?;
                StreamEvent::ContentBlockStop { index }
            }
            Some("message_delta") => {
                let fields::MessageDelta { delta, usage } = event.variant()?;
                StreamEvent::MessageDelta { delta, usage }
            }
            Some("message_stop") => StreamEvent::MessageStop,
            Some("ping") => StreamEvent::Ping,
            Some("error") => {
                let fields::Error { error } = event.variant()?;
                StreamEvent::Error { error }
            }
            Some(_) => StreamEvent::Unknown(Raw(event.object)),
            None => return Err(unknown_type(None, "a stream event type")),
        })
    }
}

/// A piece of an open content block.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    /// More of a text block.
    TextDelta {
        text: String,
    },
    /// More of a `tool_use`'s input, as JSON text.
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    /// A delta of another `type`, whole.
    #[serde(untagged)]
    Unknown(Raw),
}

/// The deltas this crate knows, read with derived serde.
#[derive(Deserialize)]
#[serde(tag = "type")]
enum KnownDelta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "signature_delta")]
    Signature { signature: String },
}

impl<'de> Deserialize<'de> for Delta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let delta = Tagged::deserialize(deserializer)?;
        let tag = delta.tag()?;
        Ok(match tag.as_deref() {
            Some("text_delta" | "input_json_delta" | "thinking_delta" | "signature_delta") => {
                match delta.whole()? {
                    KnownDelta::Text { text } => Delta::TextDelta { text },
                    KnownDelta::InputJson { partial_json } => {
                        Delta::InputJsonDelta { partial_json }
                    }
                    KnownDelta::Thinking { thinking } => Delta::ThinkingDelta { thinking },
                    KnownDelta::Signature { signature } => Delta::SignatureDelta { signature },
                }
            }
            Some(_) => Delta::Unknown(Raw(delta.object)),
            None => return Err(unknown_type(None, "a delta type")),
        })
    }
}

/// `message_delta`'s `delta`: how the message ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessageDelta {
    pub stop_reason: Option<StopReason>,
    pub stop_sequence: Option<String>,
    /// The container the server tools ran in (shellgate's and Anthropic's
    /// code execution).
    #[serde(default)]
    pub container: Option<Container>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}

/// `message_delta`'s `usage`: the totals so far (`input_tokens` may be
/// absent from an upstream's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeltaUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tool_cost: Option<f64>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Extra,
}
