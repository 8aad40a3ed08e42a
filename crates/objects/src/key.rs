//! Objects' names, checked once for every backend.

use std::fmt;

use crate::error::ObjectError;

/// An object's name: relative, `/`-separated segments of ASCII letters,
/// digits and `-_.=+`, none empty, `.` or `..`, none starting with `.`
/// (names starting with a dot are the backends' own), at most 1024 bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    pub fn new(key: impl Into<String>) -> Result<Self, ObjectError> {
        let key = key.into();
        let invalid = |reason| ObjectError::InvalidKey {
            key: key.clone(),
            reason,
        };
        if key.is_empty() {
            return Err(invalid("empty"));
        }
        if key.len() > 1024 {
            return Err(invalid("longer than 1024 bytes"));
        }
        if key.starts_with('/') {
            return Err(invalid("absolute"));
        }
        for segment in key.split('/') {
            if segment.is_empty() {
                return Err(invalid("an empty segment"));
            }
            if segment.starts_with('.') {
                return Err(invalid("a segment starting with '.'"));
            }
            if !segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.=+".contains(&b))
            {
                return Err(invalid(
                    "only letters, digits and - _ . = + may name an object",
                ));
            }
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
