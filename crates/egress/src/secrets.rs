//! Secrets a container uses without ever holding them.
//!
//! A container with `domain_secrets` gets, in `$NAME`, a placeholder: a
//! random string that means nothing anywhere else. On the way to the
//! secret's domain (and only there) the proxy replaces the placeholder with
//! the value. The value lives in this process's memory only: it is never
//! serialized (the spec a container keeps on disk has the placeholder
//! alone), and its `Debug` prints nothing of it.

use std::sync::Arc;

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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_never_print() {
        let value = SecretValue::new("hunter2");
        assert!(!format!("{value:?}").contains("hunter2"));
        let secret = DomainSecret {
            domain: "api.example.com".into(),
            name: "TOKEN".into(),
            placeholder: placeholder("TOKEN"),
            value: Some(value),
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
