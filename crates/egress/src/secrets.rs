//! Secrets a container uses without ever holding them.
//!
//! A container with `domain_secrets` gets, in `$NAME`, a placeholder: a
//! random string that means nothing anywhere else. On the way to the
//! secret's domain (and only there) the proxy replaces the placeholder with
//! the value. The value lives in this process's memory only: it is never
//! serialized (the spec a container keeps on disk has the placeholder
//! alone), and its `Debug` prints nothing of it.
//!
//! Whatever comes back towards the container, the command output the
//! engine returns and the files the API hands out go through a [`Masker`]:
//! every value, and the forms a reflecting server or a command most easily
//! turns it into (base64 at each alignment, hex, percent- and
//! JSON-escaping), becomes its placeholder again, in one pass or as a
//! stream that holds back only as many bytes as the longest form.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

/// A secret's value. Cloning shares it; nothing prints or serializes it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Arc<str>);

impl SecretValue {
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place it is put on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(…)")
    }
}

/// One `domain_secrets` entry, as a container keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DomainSecret {
    /// The host name (or `*.` pattern) the value may be sent to.
    pub domain: String,
    /// The environment variable that holds the placeholder.
    pub name: String,
    pub placeholder: String,
    /// The value: `None` once this process no longer has it (after a
    /// restart of the server, a container's secrets are gone).
    #[serde(skip)]
    pub value: Option<SecretValue>,
    /// Where in a request the placeholder is replaced: empty means
    /// header values only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<InjectInto>,
    /// Only requests with one of these methods (uppercase) get the value;
    /// empty: every method.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Only requests whose path starts with one of these get the value;
    /// empty: every path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// A part of a request a secret's placeholder may be replaced in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectInto {
    /// Header values (the default).
    Header,
    /// The request target's query string.
    Query,
    /// The body, on every framing.
    Body,
}

/// A fresh placeholder for the secret named `name`: recognisable in a
/// shell, unguessable, and the same length whatever the value.
pub fn placeholder(name: &str) -> String {
    let mut random = [0u8; 12];
    fill_random(&mut random);
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("shellgate-secret-{}-{hex}", name.to_ascii_lowercase())
}

/// Whether `name` may be an environment variable's name.
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 128
}

fn fill_random(buffer: &mut [u8]) {
    let mut filled = 0;
    while filled < buffer.len() {
        // SAFETY: getrandom writes at most the length given into our buffer.
        let n = unsafe {
            libc::getrandom(
                buffer[filled..].as_mut_ptr().cast(),
                buffer.len() - filled,
                0,
            )
        };
        if n > 0 {
            filled += n as usize;
        }
    }
}

/// Turns every secret value (and its common encodings) back into its
/// placeholder. Cheap to share: the engine, the proxy and the file
/// downloads of one container use the same one.
pub struct Masker {
    automaton: AhoCorasick,
    /// What replaces each pattern, by pattern index.
    replacements: Vec<Arc<[u8]>>,
    /// The longest pattern: what a stream holds back.
    longest: usize,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("patterns", &self.replacements.len())
            .finish()
    }
}

impl Masker {
    /// A masker for the secrets that have values; `None` when none has
    /// (nothing to mask).
    pub fn new(secrets: &[DomainSecret]) -> Option<Self> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut replacements: Vec<Arc<[u8]>> = Vec::new();
        for secret in secrets {
            let Some(value) = &secret.value else { continue };
            let placeholder: Arc<[u8]> = Arc::from(secret.placeholder.as_bytes());
            for form in encoded_forms(value.expose().as_bytes()) {
                if form.is_empty() || patterns.contains(&form) {
                    continue;
                }
                patterns.push(form);
                replacements.push(Arc::clone(&placeholder));
            }
        }
        if patterns.is_empty() {
            return None;
        }
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        // Leftmost-longest: where a value and a longer one start at the
        // same byte, the longer is masked whole (no tail of it survives).
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()?;
        Some(Self {
            automaton,
            replacements,
            longest,
        })
    }

    /// `bytes` with every value masked.
    pub fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        self.mask_into(bytes, bytes.len(), &mut out);
        out
    }

    /// `text` with every value masked (placeholders are ASCII, so text
    /// stays text, but a value cut in a UTF-8 sequence is masked too).
    pub fn mask_str(&self, text: &str) -> String {
        String::from_utf8_lossy(&self.mask(text.as_bytes())).into_owned()
    }

    /// A stream: bytes pushed come out masked, less a tail held back until
    /// the next push shows whether it starts a value.
    pub fn stream(self: &Arc<Self>) -> MaskStream {
        MaskStream {
            masker: Arc::clone(self),
            pending: Vec::new(),
        }
    }

    /// Masks `bytes[..]`, deciding only matches that start before `safe`
    /// (every pattern starting there lies whole inside `bytes`, so the
    /// leftmost-longest choice is final); writes the decided part to `out`
    /// and returns how many bytes of `bytes` it consumed.
    fn mask_into(&self, bytes: &[u8], safe: usize, out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        for found in self.automaton.find_iter(bytes) {
            if found.start() >= safe {
                break;
            }
            out.extend_from_slice(&bytes[at..found.start()]);
            out.extend_from_slice(&self.replacements[found.pattern().as_usize()]);
            at = found.end();
        }
        let decided = safe.max(at);
        if at < decided {
            out.extend_from_slice(&bytes[at..decided]);
        }
        decided
    }
}

/// One stream through a [`Masker`] (a response body, a command's output).
pub struct MaskStream {
    masker: Arc<Masker>,
    pending: Vec<u8>,
}

impl MaskStream {
    /// Masks what `input` decides and appends it to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(input);
        let hold = self.masker.longest.saturating_sub(1);
        let safe = self.pending.len().saturating_sub(hold);
        if safe == 0 {
            return;
        }
        let consumed = self.masker.mask_into(&self.pending, safe, out);
        self.pending.drain(..consumed);
    }

    /// The held-back tail, masked: the stream's end.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        self.masker.mask_into(&pending, pending.len(), out);
    }

    /// Bytes pushed but not yet given out.
    pub fn held(&self) -> usize {
        self.pending.len()
    }
}

/// The forms of `value` a reflecting server or a one-line command most
/// easily makes: itself, base64 (standard and URL alphabets, at each of the
/// three alignments it can have inside a longer encoded string, so that
/// `base64("user:" + value)` is caught too), hex (both cases),
/// percent-encoding and JSON escaping.
fn encoded_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![value.to_vec()];
    for skip in 0..3 {
        if value.len() < skip + 3 {
            break;
        }
        let whole = (value.len() - skip) / 3 * 3;
        let aligned = &value[skip..skip + whole];
        let standard = base64(aligned, b"+/");
        let url = base64(aligned, b"-_");
        if url != standard {
            forms.push(url);
        }
        forms.push(standard);
    }
    let lower: Vec<u8> = value
        .iter()
        .flat_map(|b| hex_pair(*b, b"0123456789abcdef"))
        .collect();
    let upper: Vec<u8> = value
        .iter()
        .flat_map(|b| hex_pair(*b, b"0123456789ABCDEF"))
        .collect();
    forms.push(lower);
    forms.push(upper);
    let percent = percent_encoded(value);
    if percent != value {
        forms.push(percent);
    }
    if let Ok(text) = std::str::from_utf8(value) {
        if let Ok(json) = serde_json::to_string(text) {
            let json = json.as_bytes();
            let inner = &json[1..json.len() - 1];
            if inner != value {
                forms.push(inner.to_vec());
            }
        }
    }
    forms
}

fn hex_pair(byte: u8, digits: &[u8; 16]) -> [u8; 2] {
    [
        digits[usize::from(byte >> 4)],
        digits[usize::from(byte & 15)],
    ]
}

/// Base64 without padding of `bytes` (whose length is a multiple of 3).
fn base64(bytes: &[u8], last_two: &[u8; 2]) -> Vec<u8> {
    const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let symbol = |index: u32| -> u8 {
        let index = (index & 63) as usize;
        if index < 62 {
            ALPHABET[index]
        } else {
            last_two[index - 62]
        }
    };
    let mut out = Vec::with_capacity(bytes.len() / 3 * 4);
    for group in bytes.chunks_exact(3) {
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        out.extend([symbol(n >> 18), symbol(n >> 12), symbol(n >> 6), symbol(n)]);
    }
    out
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
fn percent_encoded(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.push(b'%');
            out.extend(hex_pair(byte, b"0123456789ABCDEF"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(value: &str, placeholder: &str) -> DomainSecret {
        DomainSecret {
            domain: "api.example.com".into(),
            name: "TOKEN".into(),
            placeholder: placeholder.into(),
            value: Some(SecretValue::new(value)),
            ..DomainSecret::default()
        }
    }

    #[test]
    fn values_and_their_encodings_are_masked() {
        let value = "sk-live-real-secret-value-4242";
        let masker = Masker::new(&[secret(value, "[P]")]).unwrap();
        assert_eq!(masker.mask_str(&format!("a {value} b")), "a [P] b");
        // base64 of the value inside a longer string, at every alignment.
        for prefix in ["", "u", "us", "use"] {
            let whole = format!("{prefix}:{value}");
            let encoded =
                String::from_utf8(base64(&whole.as_bytes()[..whole.len() / 3 * 3], b"+/")).unwrap();
            let masked = masker.mask_str(&encoded);
            assert!(masked.contains("[P]"), "{prefix}: {masked}");
        }
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        assert_eq!(masker.mask_str(&hex), "[P]");
        assert_eq!(masker.mask_str(&hex.to_uppercase()), "[P]");
        let odd = Masker::new(&[secret("a/b\"c&d=e+f%g h", "[Q]")]).unwrap();
        assert_eq!(odd.mask_str("x=a%2Fb%22c%26d%3De%2Bf%25g%20h"), "x=[Q]");
        assert_eq!(
            odd.mask_str(r#"{"v":"a/b\"c&d=e+f%g h"}"#),
            r#"{"v":"[Q]"}"#
        );
    }

    #[test]
    fn a_stream_masks_values_split_anywhere() {
        let value = "0123456789abcdefXYZ";
        let masker = Arc::new(
            Masker::new(&[
                secret(value, "<A>"),
                secret("0123456789abcdefXYZ-and-longer", "<B>"),
            ])
            .unwrap(),
        );
        let text = format!("start {value} mid 0123456789abcdefXYZ-and-longer end {value}");
        let whole = masker.mask_str(&text);
        assert_eq!(whole, "start <A> mid <B> end <A>");
        for split in 1..8 {
            let mut stream = masker.stream();
            let mut out = Vec::new();
            for piece in text.as_bytes().chunks(split) {
                stream.push(piece, &mut out);
                assert!(stream.held() < masker.longest + split);
            }
            stream.finish(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), whole, "pieces of {split}");
        }
        assert!(Masker::new(&[DomainSecret {
            value: None,
            ..secret("x", "y")
        }])
        .is_none());
    }

    #[test]
    fn values_never_print() {
        let value = SecretValue::new("hunter2");
        assert!(!format!("{value:?}").contains("hunter2"));
        let secret = DomainSecret {
            domain: "api.example.com".into(),
            name: "TOKEN".into(),
            placeholder: placeholder("TOKEN"),
            value: Some(value),
            ..DomainSecret::default()
        };
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!serde_json::to_string(&secret).unwrap().contains("hunter2"));
        let back: DomainSecret =
            serde_json::from_str(&serde_json::to_string(&secret).unwrap()).unwrap();
        assert_eq!(back.value, None);
    }

    #[test]
    fn placeholders_differ_and_names_are_checked() {
        assert_ne!(placeholder("A"), placeholder("A"));
        assert!(placeholder("TOKEN").starts_with("shellgate-secret-token-"));
        assert!(valid_name("GITHUB_TOKEN") && valid_name("_x1"));
        assert!(!valid_name("1X") && !valid_name("A-B") && !valid_name("") && !valid_name("A=B"));
    }
}
