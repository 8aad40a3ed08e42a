//! The Models API (`GET /v1/models`, `GET /v1/models/{id}`): what shellgate
//! answers (OpenAI's shapes, as the `openai` SDK's `types/model.py` has
//! them; Anthropic's, as the `anthropic` SDK's `types/model_info.py` has
//! them, to a client that sends `anthropic-version`), and what it reads of an upstream's own list (OpenAI's, or
//! Anthropic's `{"data": [{"id", "created_at", ...}]}`), leniently: an
//! upstream's list only has to name its models.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One model: `{"id", "object": "model", "created", "owned_by"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Model {
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// When the model was made (Unix seconds; 0 when its upstream does not say).
    pub created: i64,
    pub owned_by: String,
}

impl Model {
    pub fn new(id: impl Into<String>, created: i64, owned_by: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            object: "model".to_owned(),
            created,
            owned_by: owned_by.into(),
        }
    }
}

/// `{"object": "list", "data": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<Model>,
}

impl ModelList {
    pub fn new(data: Vec<Model>) -> Self {
        Self {
            object: "list".to_owned(),
            data,
        }
    }
}

/// One model in Anthropic's shape: `{"type": "model", "id",
/// "display_name", "created_at", "lifecycle"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AnthropicModel {
    /// Always `model`.
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    /// The id (shellgate has no other name for a model).
    pub display_name: String,
    /// RFC 3339 (the Unix epoch when the upstream does not say).
    pub created_at: String,
    /// Always `active`: a model shellgate lists is served.
    pub lifecycle: String,
}

impl From<&Model> for AnthropicModel {
    fn from(model: &Model) -> Self {
        AnthropicModel {
            kind: "model".to_owned(),
            id: model.id.clone(),
            display_name: model.id.clone(),
            created_at: crate::time::rfc3339(model.created),
            lifecycle: "active".to_owned(),
        }
    }
}

/// Anthropic's page of models: `{"data", "has_more", "first_id",
/// "last_id"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AnthropicModelList {
    pub data: Vec<AnthropicModel>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

impl AnthropicModelList {
    /// A page of `data` (`has_more`: models follow it).
    pub fn page(data: Vec<AnthropicModel>, has_more: bool) -> Self {
        AnthropicModelList {
            first_id: data.first().map(|model| model.id.clone()),
            last_id: data.last().map(|model| model.id.clone()),
            data,
            has_more,
        }
    }
}

/// The query of Anthropic's `GET /v1/models`: a page of `limit` models
/// (1 to 1000, default 20) after `after_id` or before `before_id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AnthropicModelsQuery {
    #[serde(default)]
    pub limit: Option<String>,
    #[serde(default)]
    pub after_id: Option<String>,
    #[serde(default)]
    pub before_id: Option<String>,
}

/// An upstream's answer to `GET {url}/models` (OpenAI's, Anthropic's and
/// most model servers' alike): only `data[].id` is needed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct UpstreamModelList {
    #[serde(default)]
    pub data: Vec<UpstreamModel>,
}

/// One model of an upstream's list.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct UpstreamModel {
    pub id: String,
    /// OpenAI's (Unix seconds).
    #[serde(default, deserialize_with = "lenient_integer")]
    pub created: Option<i64>,
    /// Anthropic's (RFC 3339).
    #[serde(default, deserialize_with = "lenient_text")]
    pub created_at: Option<String>,
    #[serde(default, deserialize_with = "lenient_text")]
    pub owned_by: Option<String>,
}

impl UpstreamModel {
    /// When it was made, in Unix seconds: `created`, else `created_at`
    /// read as an RFC 3339 time, else 0.
    pub fn created_seconds(&self) -> i64 {
        self.created
            .or_else(|| self.created_at.as_deref().and_then(rfc3339_seconds))
            .unwrap_or(0)
    }
}

/// A value of any other type than expected is `None`: a model server's
/// list is read for its ids, whatever else it says.
#[derive(Deserialize)]
#[serde(untagged)]
enum OrOther<T> {
    Wanted(T),
    Other(serde::de::IgnoredAny),
}

fn lenient_integer<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    Ok(match OrOther::<i64>::deserialize(deserializer)? {
        OrOther::Wanted(value) => Some(value),
        OrOther::Other(_) => None,
    })
}

fn lenient_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Ok(match OrOther::<String>::deserialize(deserializer)? {
        OrOther::Wanted(value) => Some(value),
        OrOther::Other(_) => None,
    })
}

/// `2025-02-19T00:00:00Z` (any fraction or offset after the seconds is
/// ignored: a day's precision is all a model list needs) as Unix seconds.
fn rfc3339_seconds(text: &str) -> Option<i64> {
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    Some(crate::time::unix_seconds(
        year, month, day, hour, minute, second,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_and_anthropic_lists_are_read_for_their_ids() {
        let openai: UpstreamModelList = serde_json::from_value(json!({
            "object": "list",
            "data": [{"id": "gpt-4.1", "object": "model", "created": 1686935002, "owned_by": "openai"}],
        }))
        .unwrap();
        assert_eq!(openai.data[0].created_seconds(), 1686935002);
        assert_eq!(openai.data[0].owned_by.as_deref(), Some("openai"));
        let anthropic: UpstreamModelList = serde_json::from_value(json!({
            "data": [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude",
                      "created_at": "2025-09-29T00:00:00Z"}],
            "has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5",
        }))
        .unwrap();
        assert_eq!(anthropic.data[0].created_seconds(), 1_759_104_000);
        let odd: UpstreamModelList = serde_json::from_value(json!({
            "data": [{"id": "m", "created": "yesterday", "owned_by": 7, "created_at": "soon"}],
        }))
        .unwrap();
        assert_eq!(odd.data[0].created_seconds(), 0);
        assert_eq!(odd.data[0].owned_by, None);
    }

    #[test]
    fn a_list_is_openai_s_shape() {
        let list = ModelList::new(vec![Model::new("m", 3, "shellgate")]);
        assert_eq!(
            serde_json::to_value(list).unwrap(),
            json!({"object": "list", "data": [{"id": "m", "object": "model", "created": 3, "owned_by": "shellgate"}]})
        );
    }
}
