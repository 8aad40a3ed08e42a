//! What a request asked that its upstream cannot carry (a hosted tool
//! shellgate does not run, a field the upstream's protocol has no place
//! for): dropped visibly, never silently and never with a 400 that would
//! break a client working against the real API. Every client-facing API
//! reports the same way: the `x-shellgate-uncarried` header (the names,
//! comma-separated, as the client wrote them: `tools[7] (web_search)`,
//! `reasoning`) and one log line.

// Its users are the Responses, Messages and Chat Completions handlers.
#![allow(dead_code)]

use axum::http::HeaderValue;

/// The response header naming what was dropped.
pub const HEADER: &str = "x-shellgate-uncarried";

/// The header's value for `names` (`None`: nothing was dropped). Names are
/// the client's own keys; anything a header cannot hold is replaced.
pub fn header_value(names: &[String]) -> Option<HeaderValue> {
    if names.is_empty() {
        return None;
    }
    let text: String = names
        .join(", ")
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    HeaderValue::from_str(&text).ok()
}

/// Logs what was dropped for a request of `api` to `model`.
pub fn log(api: &str, model: &str, names: &[String]) {
    if !names.is_empty() {
        tracing::warn!(
            api,
            model,
            uncarried = %names.join(", "),
            "the upstream cannot carry parts of this request; they were left out"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_header_and_nothing_is_no_header() {
        assert!(header_value(&[]).is_none());
        let value = header_value(&["tools[7] (web_search)".into(), "reasoning\n".into()]);
        assert_eq!(
            value.as_ref().and_then(|v| v.to_str().ok()),
            Some("tools[7] (web_search), reasoning?")
        );
    }
}
