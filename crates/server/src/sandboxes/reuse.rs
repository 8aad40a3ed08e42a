//! [`Reuse::pick`]: which container a model request (Responses, Messages)
//! continues, decided once over the typed request. The node calls it to
//! choose the container its hosted tools run in; a cluster's replica calls
//! it to choose the node it forwards the request to, so both read a
//! conversation the same way.
//!
//! The order:
//! - a `container_reference` environment: that container;
//! - `container_auto` with a stable `session_id` (letters, digits, `_` and
//!   `-`; its last 20 characters): that session's container;
//! - else the *last* container the conversation names (the stored chain of
//!   `previous_response_id`, then the replayed `input`): a conversation
//!   that switched containers continues the one it switched to;
//! - else none: a new container.

use shellgate_model::tools::{Environment, Tools};
use shellgate_wire::responses::Item;

/// How many trailing characters of a `session_id` name its container.
pub const SESSION_ID_CHARS: usize = 20;

/// A request's `session_id`, as OpenRouter reads it: only letters, digits,
/// `_` and `-` (anything else: ignored, `None`), the last 20 characters.
pub fn session_key(id: Option<&str>) -> Option<String> {
    let id = id?;
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return None;
    }
    Some(id[id.len().saturating_sub(SESSION_ID_CHARS)..].to_owned())
}

/// The most recent container a conversation names: the `container_id` of
/// an OpenRouter item or a code interpreter call, or a `shell_call`'s
/// referenced container.
pub fn replayed_container(items: &[Item]) -> Option<String> {
    items
        .iter()
        .rev()
        .find_map(|item| item.container_id().map(str::to_owned))
}

/// Which container a model request's hosted tools run in.
#[derive(Debug, Clone, PartialEq)]
pub enum Reuse {
    /// None yet: a new container (made at the first command), or none at
    /// all when no tool runs in the sandbox.
    Fresh,
    /// The container a `container_reference` names (the project's, or the
    /// request's 404).
    Referenced(String),
    /// The container of this session key (made and recorded if none).
    Session(String),
    /// This container (OpenRouter's tools), if it is still there with the
    /// request's network policy and skills.
    Replayed(String),
    /// This container (OpenAI's `shell`), if it is still there and was made
    /// with all of the request's `container_auto` parameters.
    Continued(String),
}

impl Reuse {
    /// What these tools, this `session_id` and this conversation (the
    /// stored chain of `previous_response_id` and the replayed `input`, in
    /// that order) continue, in the order the module documents.
    pub fn pick(tools: &Tools, session: Option<&str>, items: &[Item]) -> Reuse {
        if let Some(Environment::ContainerReference(id)) = tools.hosted_environment() {
            return Reuse::Referenced(id.clone());
        }
        if let Some(key) = session_key(session) {
            return Reuse::Session(key);
        }
        match replayed_container(items) {
            Some(id) if tools.openrouter() => Reuse::Replayed(id),
            Some(id) => Reuse::Continued(id),
            None => Reuse::Fresh,
        }
    }

    /// The container it names, if it names one (a session's is the
    /// store's to say).
    pub fn container(&self) -> Option<&str> {
        match self {
            Reuse::Referenced(id) | Reuse::Replayed(id) | Reuse::Continued(id) => Some(id),
            Reuse::Fresh | Reuse::Session(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn tools(json: Value) -> Tools {
        let typed: Vec<shellgate_wire::responses::Tool> =
            serde_json::from_value(json).expect("tools");
        Tools::parse(&typed).expect("parsed tools")
    }

    /// A conversation whose shell call ran in `container`.
    fn ran_in(container: &str) -> Vec<Item> {
        serde_json::from_value(json!([
            {"type": "shell_call", "call_id": "call_1", "status": "completed",
             "action": {"commands": ["ls"]},
             "environment": {"type": "container_reference", "container_id": container}},
        ]))
        .expect("items")
    }

    #[test]
    fn a_conversation_that_switched_containers_continues_the_last() {
        let shell = tools(json!([{"type": "shell", "environment": {"type": "container_auto"}}]));
        let mut items = ran_in("cntr_a");
        items.extend(ran_in("cntr_b"));
        items.extend(ran_in("cntr_a"));
        items.extend(ran_in("cntr_b"));
        assert_eq!(
            Reuse::pick(&shell, None, &items),
            Reuse::Continued("cntr_b".into())
        );
        assert_eq!(
            Reuse::pick(&shell, None, &items).container(),
            Some("cntr_b")
        );
    }

    #[test]
    fn a_referenced_container_wins_over_the_session_and_the_conversation() {
        let referenced = tools(json!([{"type": "shell", "environment":
            {"type": "container_reference", "container_id": "cntr_ref"}}]));
        assert_eq!(
            Reuse::pick(&referenced, Some("s-1"), &ran_in("cntr_a")),
            Reuse::Referenced("cntr_ref".into())
        );
        let by_id = tools(json!([{"type": "code_interpreter", "container": "cntr_ci"}]));
        assert_eq!(
            Reuse::pick(&by_id, None, &ran_in("cntr_a")),
            Reuse::Referenced("cntr_ci".into())
        );
    }

    #[test]
    fn a_session_key_is_its_last_twenty_safe_characters() {
        assert_eq!(session_key(Some("abc")), Some("abc".into()));
        assert_eq!(
            session_key(Some(&"x".repeat(30))).map(|k| k.len()),
            Some(SESSION_ID_CHARS)
        );
        assert_eq!(session_key(Some("a b")), None);
        assert_eq!(session_key(Some("")), None);
        assert_eq!(session_key(None), None);
    }
}
