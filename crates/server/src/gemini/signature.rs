//! A part's `thoughtSignature` as shellgate writes it: the model's
//! reasoning that came before the part (the loop's `reasoning` items, with
//! what seals them for their own protocol: OpenAI's `encrypted_content`,
//! Anthropic's thinking signature), so a client that echoes the part back
//! as Google asks gives the upstream its reasoning back in place.
//!
//! Google's signature is opaque bytes the client keeps as base64; so is
//! this one: a marker then the items as JSON, base64 (URL-safe, as the
//! `google-genai` SDK writes bytes back). A signature without the marker
//! (Google's own, from another service) is nothing an upstream here can
//! read: the handler reports it.

use base64::Engine as _;
use shellgate_wire::responses::Reasoning;

/// What a shellgate signature's bytes begin with.
const MARKER: &[u8] = b"shellgate.reasoning.v1:";

/// The signature carrying `reasoning`.
pub(super) fn write(reasoning: &[Reasoning]) -> String {
    let mut bytes = MARKER.to_vec();
    // Serializing plain serde structs into a Vec cannot fail.
    bytes.extend(serde_json::to_vec(reasoning).unwrap_or_default());
    base64::engine::general_purpose::URL_SAFE.encode(bytes)
}

/// The reasoning a signature carries: `None` for one shellgate did not
/// write (or that is not base64 at all).
pub(super) fn read(signature: &str) -> Option<Vec<Reasoning>> {
    // Either alphabet, padded or not: clients re-encode the bytes they
    // keep with the one they like.
    let normalized: String = signature
        .trim()
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(normalized)
        .ok()?;
    let json = bytes.strip_prefix(MARKER)?;
    serde_json::from_slice(json).ok()
}

/// The reasoning read since the last part was given out: it signs the
/// next part that is not itself a thought.
#[derive(Debug, Default)]
pub(super) struct Signer {
    pending: Vec<Reasoning>,
}

impl Signer {
    /// Keeps a reasoning item for the next part.
    pub(super) fn keep(&mut self, reasoning: &Reasoning) {
        let neutral = shellgate_model::reasoning::from_item(reasoning);
        if !shellgate_model::reasoning::is_empty(&neutral) {
            self.pending.push(reasoning.clone());
        }
    }

    /// Signs the first part of `parts` that is not a thought with the
    /// reasoning kept so far.
    pub(super) fn sign(&mut self, parts: &mut [shellgate_wire::gemini::Part]) {
        if self.pending.is_empty() {
            return;
        }
        if let Some(part) = parts.iter_mut().find(|part| part.thought != Some(true)) {
            part.thought_signature = Some(write(&std::mem::take(&mut self.pending)));
        }
    }

    /// The reasoning no part came after, as an empty text part signed with
    /// it (as Google ends an answer whose last words were thoughts).
    pub(super) fn rest(&mut self) -> Option<shellgate_wire::gemini::Part> {
        if self.pending.is_empty() {
            return None;
        }
        Some(shellgate_wire::gemini::Part {
            thought_signature: Some(write(&std::mem::take(&mut self.pending))),
            ..shellgate_wire::gemini::Part::text("")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shellgate_wire::gemini::Part;
    use shellgate_wire::responses::ReasoningText;

    fn sealed(sealed: &str) -> Reasoning {
        Reasoning {
            id: Some("rs_1".into()),
            summary: vec![ReasoningText::new(ReasoningText::SUMMARY, "Looked.")],
            encrypted_content: Some(sealed.into()),
            ..Reasoning::default()
        }
    }

    #[test]
    fn a_signature_reads_back_as_the_reasoning_it_carries_in_either_alphabet() {
        let reasoning = vec![sealed("anthropic-signature:EqQB+/x=="), sealed("gAAAA")];
        let signature = write(&reasoning);
        assert_eq!(read(&signature), Some(reasoning.clone()), "{signature}");
        let standard = base64::engine::general_purpose::STANDARD.encode(
            base64::engine::general_purpose::URL_SAFE
                .decode(&signature)
                .expect("base64"),
        );
        assert_eq!(read(&standard), Some(reasoning), "{standard}");
        assert_eq!(
            read(signature.trim_end_matches('=')).map(|r| r.len()),
            Some(2)
        );
    }

    #[test]
    fn a_signature_shellgate_did_not_write_reads_as_none() {
        assert_eq!(read("c2ln"), None);
        assert_eq!(read("not base64 at all!"), None);
    }

    #[test]
    fn the_next_part_not_a_thought_is_signed_and_what_is_left_ends_the_answer() {
        let mut signer = Signer::default();
        signer.keep(&Reasoning::default());
        let mut parts = vec![Part::text("x")];
        signer.sign(&mut parts);
        assert_eq!(
            parts[0].thought_signature, None,
            "an empty reasoning signs nothing"
        );
        signer.keep(&sealed("s"));
        let mut parts = vec![
            Part {
                thought: Some(true),
                ..Part::text("thinking")
            },
            Part::text("answer"),
        ];
        signer.sign(&mut parts);
        assert_eq!(parts[0].thought_signature, None);
        let signed = parts[1].thought_signature.as_deref().map(read);
        assert_eq!(signed, Some(Some(vec![sealed("s")])));
        assert_eq!(signer.rest(), None);
        signer.keep(&sealed("t"));
        let rest = signer.rest().expect("a part");
        assert_eq!(rest.text.as_deref(), Some(""));
        assert!(rest.thought_signature.is_some());
    }
}
