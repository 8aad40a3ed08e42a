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
//! turns it into (base64 at each alignment, base32, hex, UTF-16, in any
//! case, and any of these escaped a character at a time: percent, JSON
//! `\u`, backslash and HTML escapes, mixed, up to twice over), becomes its
//! placeholder again, in one pass or as a stream that holds back only as
//! many bytes as the longest form needs. What a server computes from a
//! value (reversed, cut in pieces, encrypted) is not a form of it: masking
//! cannot see it, and only a secret's domain, methods and paths bound
//! which servers get the value at all.
//!
//! What may be a secret is decided here, once, for every path that accepts
//! one ([`check_secret`]): a value long and varied enough that masking it
//! is no oracle and does not garble ordinary output, under a name that
//! cannot steer the shell, a loader, an interpreter or the proxy settings.
//!
//! A value never outlives the process that was given it; what persists is a
//! [`SecretVerifier`]: for the value and each of its encoded forms, its
//! length, 20 bits of a rolling hash and a salted SHA-256. A masker made after a
//! restart recognises the value by those (the rolling hash finds the
//! candidate windows, the digest confirms them), so output still never
//! shows a value the server once masked.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use sha2::{Digest, Sha256};

use crate::escapes;

/// Shortest value accepted: shorter ones would make masking an oracle (a
/// 4-digit value is found by printing every 4-digit number and watching
/// which one becomes the placeholder) and garble ordinary output.
pub const MIN_VALUE_BYTES: usize = 16;
/// Fewest distinct bytes a value must have (`aaaa…`, `1212…` are refused:
/// they are guessable and occur in ordinary output).
pub const MIN_DISTINCT_BYTES: usize = 6;
/// Largest value accepted (the seeds' limit).
pub const MAX_VALUE_BYTES: usize = 10 * 1024 * 1024;

/// Who reads a class of reserved names (the refusal says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedClass {
    /// Who reads these variables, for the refusal's message ("read by
    /// ...").
    pub read_by: &'static str,
    /// Whole names (compared without regard to case).
    pub names: &'static [&'static str],
    /// Name prefixes: whole families of variables.
    pub prefixes: &'static [&'static str],
}

/// The names no secret may take, by who reads them: a secret's variable
/// holds its placeholder in every command the container runs, so a name
/// that steers the shell, the dynamic loader, the C library, an
/// interpreter, a tool's configuration or the engine's own proxy and CA
/// settings would let a secret change what runs (or break it). Reviewed
/// class by class against what each reader documents; a name is checked
/// without regard to case (`https_proxy` is read as well as `HTTPS_PROXY`).
pub const RESERVED_CLASSES: &[ReservedClass] = &[
    ReservedClass {
        read_by: "the dynamic loader and the C library",
        // glibc's list of variables it drops for setuid programs (its
        // "unsecure" variables), the locale and time zone ones, the
        // resolver's and the allocator's.
        names: &[
            "GCONV_PATH",
            "GETCONF_DIR",
            "GLIBC_TUNABLES",
            "HOSTALIASES",
            "LOCALDOMAIN",
            "LOCPATH",
            "NIS_PATH",
            "NLSPATH",
            "RESOLV_HOST_CONF",
            "RES_OPTIONS",
            "TMPDIR",
            "TZ",
            "TZDIR",
            "LANG",
            "LANGUAGE",
            "POSIXLY_CORRECT",
        ],
        prefixes: &["LD_", "MALLOC_", "LC_", "DYLD_"],
    },
    ReservedClass {
        read_by: "the shell",
        names: &[
            "PATH",
            "HOME",
            "SHELL",
            "USER",
            "LOGNAME",
            "IFS",
            "ENV",
            "CDPATH",
            "FPATH",
            "GLOBIGNORE",
            "EXECIGNORE",
            "SHELLOPTS",
            "BASHOPTS",
            "PS1",
            "PS2",
            "PS3",
            "PS4",
            "PROMPT_COMMAND",
            "HISTFILE",
            "HISTFILESIZE",
            "INPUTRC",
            "PWD",
            "OLDPWD",
            "SHLVL",
            "HOSTNAME",
            "MAIL",
            "MAILPATH",
            "TMOUT",
            "ZDOTDIR",
        ],
        // `BASH_ENV`, `BASH_FUNC_name%%` (exported functions),
        // `BASH_XTRACEFD`, `BASH_LOADABLES_PATH`, ...
        prefixes: &["BASH_"],
    },
    ReservedClass {
        read_by: "terminals and the programs a shell starts for the user",
        names: &[
            "TERM",
            "TERMINFO",
            "TERMINFO_DIRS",
            "TERMCAP",
            "EDITOR",
            "VISUAL",
            "PAGER",
            "MANPAGER",
            "LESSOPEN",
            "LESSCLOSE",
            "BROWSER",
            "SSH_ASKPASS",
            "SUDO_ASKPASS",
        ],
        // Where tools look for their configuration.
        prefixes: &["XDG_"],
    },
    ReservedClass {
        read_by: "an interpreter",
        names: &[
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "CLASSPATH",
            "PHPRC",
            "PHP_INI_SCAN_DIR",
            "TCLLIBPATH",
            "GEM_HOME",
            "GEM_PATH",
            // Node's own variables, by name: `NODE_AUTH_TOKEN` (which an
            // `.npmrc` sends to a registry) is a secret like any other.
            "NODE_OPTIONS",
            "NODE_PATH",
            "NODE_TLS_REJECT_UNAUTHORIZED",
            "NODE_REPL_EXTERNAL_MODULE",
            "NODE_REPL_HISTORY",
            "NODE_REDIRECT_WARNINGS",
            "NODE_V8_COVERAGE",
            "NODE_ICU_DATA",
            "NODE_PRESERVE_SYMLINKS",
            "NODE_COMPILE_CACHE",
            "NODE_USE_ENV_PROXY",
            "NODE_DEBUG",
            "NODE_DEBUG_NATIVE",
        ],
        // `PYTHONPATH`, `PYTHONSTARTUP`; `PERL5OPT`, `PERL5LIB`, `PERLLIB`,
        // `PERL_UNICODE`; `RUBYOPT`, `RUBYLIB`; `LUA_INIT`, `LUA_PATH`.
        prefixes: &["PYTHON", "PERL", "RUBY", "LUA_"],
    },
    ReservedClass {
        read_by: "git, a package manager or a download tool",
        names: &["CURL_HOME", "WGETRC"],
        prefixes: &["GIT_", "NPM_CONFIG_", "PIP_"],
    },
    ReservedClass {
        read_by: "the container's proxy and CA settings",
        names: &[
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
            "ALL_PROXY",
            "FTP_PROXY",
            "SSL_CERT_DIR",
            "OPENSSL_CONF",
            "OPENSSL_MODULES",
            "OPENSSL_ENGINES",
            "SSLKEYLOGFILE",
        ],
        prefixes: &[],
    },
    ReservedClass {
        read_by: "shellgate itself",
        names: &[],
        prefixes: &["SHELLGATE_"],
    },
];

/// Variables the engine sets in every networked container to name its CA
/// bundle, for the tools that do not read the system store (Python
/// `requests`, Node, pip, git, curl builds): reserved too, from this one
/// list, so a variable the engine starts setting can never be a secret.
pub const CA_BUNDLE_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
];

/// Who reads `name` (any case), if a secret may not take it.
pub fn reserved_by(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if CA_BUNDLE_VARIABLES.contains(&upper.as_str()) {
        return Some("the container's proxy and CA settings");
    }
    RESERVED_CLASSES
        .iter()
        .find(|class| {
            class.names.contains(&upper.as_str())
                || class.prefixes.iter().any(|p| upper.starts_with(p))
        })
        .map(|class| class.read_by)
}

/// Why a `domain_secrets` entry is refused (the message names the secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRefused {
    #[error(
        "{0:?} is not an environment variable name (letters, digits and _, not starting with a \
         digit, at most 128 characters)"
    )]
    InvalidName(String),
    #[error(
        "{name} is a reserved variable name (read by {read_by}); give the secret another name"
    )]
    ReservedName { name: String, read_by: &'static str },
    #[error(
        "the value of secret {name} is {length} bytes; at least {MIN_VALUE_BYTES} are required \
         (a shorter value would be revealed by the masking of command output)"
    )]
    TooShort { name: String, length: usize },
    #[error("the value of secret {name} is longer than {MAX_VALUE_BYTES} bytes")]
    TooLong { name: String },
    #[error(
        "the value of secret {name} has {distinct} distinct bytes; at least \
         {MIN_DISTINCT_BYTES} are required (it would be guessable, and found in ordinary output)"
    )]
    TooPlain { name: String, distinct: usize },
    #[error(
        "the value of secret {name} may not contain line breaks or NUL (it goes into HTTP headers)"
    )]
    LineBreak { name: String },
}

/// Checks a secret's name: a valid variable name and not a reserved one.
pub fn check_name(name: &str) -> Result<(), SecretRefused> {
    if !valid_name(name) {
        return Err(SecretRefused::InvalidName(name.to_owned()));
    }
    match reserved_by(name) {
        Some(read_by) => Err(SecretRefused::ReservedName {
            name: name.to_owned(),
            read_by,
        }),
        None => Ok(()),
    }
}

/// The one rule for every path that accepts a secret (the Containers API,
/// the Responses API's `shell` and `openrouter:shell`, the Messages API,
/// the CLI): its name, then its value.
pub fn check_secret(name: &str, value: &str) -> Result<(), SecretRefused> {
    check_name(name)?;
    let name = name.to_owned();
    if value.len() > MAX_VALUE_BYTES {
        return Err(SecretRefused::TooLong { name });
    }
    if value.len() < MIN_VALUE_BYTES {
        return Err(SecretRefused::TooShort {
            name,
            length: value.len(),
        });
    }
    if value.contains(['\r', '\n', '\0']) {
        return Err(SecretRefused::LineBreak { name });
    }
    let mut seen = [false; 256];
    let mut distinct = 0;
    for byte in value.bytes() {
        if !std::mem::replace(&mut seen[usize::from(byte)], true) {
            distinct += 1;
        }
    }
    if distinct < MIN_DISTINCT_BYTES {
        return Err(SecretRefused::TooPlain { name, distinct });
    }
    Ok(())
}

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

impl DomainSecret {
    /// Its scope (where the value goes, for which methods and paths) in
    /// one canonical form: two secrets with equal keys are put into the
    /// same requests, whatever order or defaults their lists were given in.
    pub fn scope_key(&self) -> String {
        scope_key(&self.inject, &self.methods, &self.paths)
    }
}

/// The canonical form of a scope (see [`DomainSecret::scope_key`]): no
/// `inject` is header values only; no methods or paths are all of them.
pub fn scope_key(inject: &[InjectInto], methods: &[String], paths: &[String]) -> String {
    let mut parts: Vec<&str> = inject
        .iter()
        .map(|part| match part {
            InjectInto::Header => "header",
            InjectInto::Query => "query",
            InjectInto::Body => "body",
        })
        .collect();
    if parts.is_empty() {
        parts.push("header");
    }
    let sorted = |list: &[String]| {
        let mut list: Vec<String> = list.to_vec();
        list.sort();
        list.dedup();
        list
    };
    parts.sort_unstable();
    parts.dedup();
    serde_json::json!([parts, sorted(methods), sorted(paths)]).to_string()
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
    /// The values this process holds and their forms, matched without
    /// regard to ASCII case; `None` when it holds none (only verifiers).
    automaton: Option<AhoCorasick>,
    /// What replaces each pattern, by pattern index (the automaton's
    /// patterns first, then the verifiers' forms).
    replacements: Vec<Arc<[u8]>>,
    /// Forms of values this process no longer holds, by their digests.
    digests: Vec<DigestForm>,
    /// The longest pattern: a stream holds back one byte less than it, in
    /// every reading of its text.
    longest: usize,
}

/// What persists of a secret's value: for the value and each of its
/// encoded forms, a [`FormDigest`]; never the value.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SecretVerifier {
    /// The secret's variable name (which secret this verifies).
    pub name: String,
    /// Random salt of the digests, hex.
    pub salt: String,
    /// Odd multiplier of the rolling hashes (random per secret).
    pub base: u64,
    /// The value itself first (exact: [`SecretVerifier::matches`] reads
    /// it), then its forms.
    pub forms: Vec<FormDigest>,
}

impl std::fmt::Debug for SecretVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretVerifier")
            .field("name", &self.name)
            .field("forms", &self.forms.len())
            .finish()
    }
}

/// One form of a value: its length, the low [`PREFILTER_BITS`] bits of its
/// rolling hash (the prefilter) and `SHA-256(salt ‖ form)` in hex (the
/// proof).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FormDigest {
    pub length: usize,
    /// Truncated: a whole 64-bit polynomial hash with its known base is a
    /// linear equation in the value's bytes that lattice reduction solves
    /// for a short value far faster than the salted digest could be
    /// searched; 20 bits tell a reader of the store little, and still make
    /// the digest a rare check (one window in a million).
    pub rolling: u64,
    pub sha256: String,
    /// Hashed with ASCII letters in lower case, and so matched whatever
    /// their case (a verifier written before forms were folded has none).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
}

/// Bits of a form's rolling hash that persist (see [`FormDigest::rolling`]).
pub const PREFILTER_BITS: u32 = 20;

/// The prefilter of a rolling hash: its low [`PREFILTER_BITS`] bits (the
/// same for a hash stored whole by an earlier version).
fn prefilter(hash: u64) -> u64 {
    hash & ((1 << PREFILTER_BITS) - 1)
}

/// A verifier's form, ready to scan for.
struct DigestForm {
    length: usize,
    base: u64,
    /// `base^(length-1)`, to roll the first byte out.
    top: u64,
    rolling: u64,
    salt: Vec<u8>,
    sha256: [u8; 32],
    /// Compared with the text's letters in lower case.
    folded: bool,
    /// Index into `Masker::replacements`.
    replacement: usize,
}

impl SecretVerifier {
    /// The verifier of a secret whose value this process holds.
    pub fn of(secret: &DomainSecret) -> Option<Self> {
        let value = secret.value.as_ref()?;
        let mut salt = [0u8; 16];
        fill_random(&mut salt);
        let mut base_bytes = [0u8; 8];
        fill_random(&mut base_bytes);
        let base = u64::from_le_bytes(base_bytes) | 1;
        let digest = |form: &[u8], folded: bool| FormDigest {
            length: form.len(),
            rolling: prefilter(rolling_hash(form, base)),
            sha256: to_hex(&salted_sha256(&salt, form)),
            folded,
        };
        let mut forms = vec![digest(value.expose().as_bytes(), false)];
        for form in encoded_forms(value.expose().as_bytes()) {
            let form = form.to_ascii_lowercase();
            let folded = digest(&form, true);
            if !form.is_empty() && !forms.contains(&folded) {
                forms.push(folded);
            }
        }
        Some(Self {
            name: secret.name.clone(),
            salt: to_hex(&salt),
            base,
            forms,
        })
    }

    /// Whether `value` is the value this verifies (a re-supplied value).
    pub fn matches(&self, value: &str) -> bool {
        let Some(salt) = from_hex(&self.salt) else {
            return false;
        };
        let digest = to_hex(&salted_sha256(&salt, value.as_bytes()));
        self.forms
            .first()
            .is_some_and(|f| !f.folded && f.length == value.len() && f.sha256 == digest)
    }
}

fn salted_sha256(salt: &[u8], bytes: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(bytes);
    hasher.finalize().into()
}

/// `sum(bytes[i] * base^(n-1-i))`, wrapping.
fn rolling_hash(bytes: &[u8], base: u64) -> u64 {
    bytes.iter().fold(0u64, |h, &b| {
        h.wrapping_mul(base).wrapping_add(u64::from(b))
    })
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("patterns", &self.replacements.len())
            .finish()
    }
}

/// How many times over a text's escapes are undone (see [`escapes`]): a
/// value percent-encoded in a URL that is percent-encoded again in a
/// query (`%2573`), or JSON inside a JSON string (`\\u0073`), is found.
const DECODING_ROUNDS: usize = 2;

/// How much of a text [`Masker::mask`] reads at a time.
const ONE_PASS_PIECE: usize = 64 * 1024;

/// A match: the raw span it covers and its replacement's index.
type Found = (usize, usize, usize);

impl Masker {
    /// A masker for the secrets that have values; `None` when none has
    /// (nothing to mask).
    pub fn new(secrets: &[DomainSecret]) -> Option<Self> {
        Self::with_verifiers(secrets, &[])
    }

    /// A masker for the secrets that have values and, for those that have
    /// none (this process was not given them), their verifiers; `None`
    /// when there is nothing to mask.
    pub fn with_verifiers(secrets: &[DomainSecret], verifiers: &[SecretVerifier]) -> Option<Self> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut replacements: Vec<Arc<[u8]>> = Vec::new();
        for secret in secrets {
            let Some(value) = &secret.value else { continue };
            let placeholder: Arc<[u8]> = Arc::from(secret.placeholder.as_bytes());
            for form in encoded_forms(value.expose().as_bytes()) {
                // Matched without regard to case: one pattern a spelling.
                let form = form.to_ascii_lowercase();
                if form.is_empty() || patterns.contains(&form) {
                    continue;
                }
                patterns.push(form);
                replacements.push(Arc::clone(&placeholder));
            }
        }
        let mut digests = Vec::new();
        for secret in secrets.iter().filter(|s| s.value.is_none()) {
            let Some(verifier) = verifiers.iter().find(|v| v.name == secret.name) else {
                continue;
            };
            let Some(salt) = from_hex(&verifier.salt) else {
                continue;
            };
            let placeholder: Arc<[u8]> = Arc::from(secret.placeholder.as_bytes());
            for form in &verifier.forms {
                let Some(sha256) =
                    from_hex(&form.sha256).and_then(|d| <[u8; 32]>::try_from(d).ok())
                else {
                    continue;
                };
                if form.length == 0 {
                    continue;
                }
                let top = (1..form.length).fold(1u64, |p, _| p.wrapping_mul(verifier.base));
                digests.push(DigestForm {
                    length: form.length,
                    base: verifier.base,
                    top,
                    rolling: prefilter(form.rolling),
                    salt: salt.clone(),
                    sha256,
                    folded: form.folded,
                    replacement: replacements.len(),
                });
                replacements.push(Arc::clone(&placeholder));
            }
        }
        if patterns.is_empty() && digests.is_empty() {
            return None;
        }
        let longest = patterns
            .iter()
            .map(Vec::len)
            .chain(digests.iter().map(|d| d.length))
            .max()
            .unwrap_or(0);
        let automaton = if patterns.is_empty() {
            None
        } else {
            // Every match, overlapping ones too: the masked spans are
            // their union (where a value and a longer one start at the
            // same byte, the longer is masked whole).
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .ascii_case_insensitive(true)
                    .build(&patterns)
                    .ok()?,
            )
        };
        Some(Self {
            automaton,
            replacements,
            digests,
            longest,
        })
    }

    /// `bytes` with every value masked.
    pub fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        // Read as a stream of pieces: the readings with escapes undone
        // are made of one piece at a time, not of the whole text.
        let mut out = Vec::with_capacity(bytes.len());
        let (mut pending, mut masked) = (Vec::new(), 0);
        for piece in bytes.chunks(ONE_PASS_PIECE) {
            pending.extend_from_slice(piece);
            let consumed = self.mask_into(&pending, false, &mut masked, &mut out);
            pending.drain(..consumed);
        }
        self.mask_into(&pending, true, &mut masked, &mut out);
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
            masked: 0,
        }
    }

    /// Masks the start of `pending` (all of it once the stream is
    /// `finished`):
    /// writes the decided part to `out` and returns how many bytes of
    /// `pending` that was. `masked` is how many of its first bytes a match
    /// decided earlier already covers (given out as nothing: the match's
    /// placeholder went before them); it is left as the count for what
    /// remains.
    ///
    /// The text is read as it is and with its escapes undone
    /// ([`DECODING_ROUNDS`] times over); a match in any reading masks the
    /// raw bytes it came from. What is decided is every match starting
    /// before a point behind which each reading holds at least the
    /// longest pattern less one byte (so every match starting before it
    /// lies whole in what has arrived), and which starts an escape in
    /// every reading (so the next push reads the rest as this one did).
    fn mask_into(
        &self,
        pending: &[u8],
        finished: bool,
        masked: &mut usize,
        out: &mut Vec<u8>,
    ) -> usize {
        let hold = if finished {
            0
        } else {
            self.longest.saturating_sub(1)
        };
        let mut found: Vec<Found> = Vec::new();
        self.find(pending, None, &mut found);
        let mut safe = pending.len().saturating_sub(hold);
        let mut reading: Option<escapes::Decoded> = None;
        for _ in 0..DECODING_ROUNDS {
            let (bytes, starts, decided) = match &reading {
                None => (pending, None, pending.len()),
                Some(r) => (r.bytes.as_slice(), Some(r.starts.as_slice()), r.end),
            };
            if !escapes::has_escapes(bytes) {
                break;
            }
            let decoded = escapes::decode(bytes, starts, decided, finished);
            if !finished {
                // Each reading's bytes come from at least as many raw
                // ones, so a deeper reading's point is never after a
                // shallower one's: the smallest starts an escape in all.
                let count = decoded.bytes.len();
                safe = safe.min(if count > hold {
                    decoded.starts[count - hold]
                } else {
                    0
                });
            }
            self.find(&decoded.bytes, Some(&decoded), &mut found);
            reading = Some(decoded);
        }
        found.retain(|&(start, _, _)| start < safe);
        found.sort_unstable_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        let mut at = 0;
        let plain = |at: &mut usize, masked: usize, to: usize, out: &mut Vec<u8>| {
            let from = (*at).max(masked);
            if from < to {
                out.extend_from_slice(&pending[from..to]);
            }
            *at = (*at).max(to);
        };
        for (start, end, replacement) in found {
            plain(&mut at, *masked, start, out);
            // A match overlapping the one before (a value's form inside
            // another's, two secrets' forms) is masked up to its end: no
            // tail of it survives, and one placeholder stands for both.
            if start >= *masked {
                out.extend_from_slice(&self.replacements[replacement]);
            }
            *masked = (*masked).max(end);
        }
        plain(&mut at, *masked, safe, out);
        *masked = masked.saturating_sub(safe);
        safe
    }

    /// Every match in one reading of a text (`reading` maps its bytes back
    /// to the raw text; `None`: `bytes` is the raw text), as raw spans.
    fn find(&self, bytes: &[u8], reading: Option<&escapes::Decoded>, found: &mut Vec<Found>) {
        let raw = |from: usize, to: usize| match reading {
            Some(reading) => reading.raw_span(from, to),
            None => (from, to),
        };
        if let Some(automaton) = &self.automaton {
            for m in automaton.find_overlapping_iter(bytes) {
                let (start, end) = raw(m.start(), m.end());
                found.push((start, end, m.pattern().as_usize()));
            }
        }
        if self.digests.is_empty() {
            return;
        }
        let lower = self
            .digests
            .iter()
            .any(|d| d.folded)
            .then(|| bytes.to_ascii_lowercase());
        for form in &self.digests {
            let text = match (&lower, form.folded) {
                (Some(lower), true) => lower.as_slice(),
                _ => bytes,
            };
            for start in digest_windows(text, form) {
                let (from, to) = raw(start, start + form.length);
                found.push((from, to, form.replacement));
            }
        }
    }
}

/// Where in `text` a window is the form known by its digest: a rolling
/// hash finds the candidates, the salted SHA-256 confirms them.
fn digest_windows(text: &[u8], form: &DigestForm) -> Vec<usize> {
    let mut starts = Vec::new();
    if text.len() < form.length {
        return starts;
    }
    let last_start = text.len() - form.length;
    let mut hash = rolling_hash(&text[..form.length], form.base);
    let mut start = 0;
    loop {
        if prefilter(hash) == form.rolling
            && salted_sha256(&form.salt, &text[start..start + form.length]) == form.sha256
        {
            starts.push(start);
        }
        if start >= last_start {
            return starts;
        }
        hash = hash
            .wrapping_sub(u64::from(text[start]).wrapping_mul(form.top))
            .wrapping_mul(form.base)
            .wrapping_add(u64::from(text[start + form.length]));
        start += 1;
    }
}

/// One stream through a [`Masker`] (a response body, a command's output).
pub struct MaskStream {
    masker: Arc<Masker>,
    pending: Vec<u8>,
    /// How many of `pending`'s first bytes a decided match covers.
    masked: usize,
}

impl MaskStream {
    /// Masks what `input` decides and appends it to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(input);
        let consumed = self
            .masker
            .mask_into(&self.pending, false, &mut self.masked, out);
        self.pending.drain(..consumed);
    }

    /// The held-back tail, masked: the stream's end.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        self.masker.mask_into(&pending, true, &mut self.masked, out);
    }

    /// Bytes pushed but not yet given out.
    pub fn held(&self) -> usize {
        self.pending.len()
    }
}

/// The forms of `value` a reflecting server or a one-line command most
/// easily makes: itself, base64 (standard and URL alphabets, at each of the
/// three alignments it can have inside a longer encoded string, so that
/// `base64("user:" + value)` is caught too), base32 (at each of its five
/// alignments), hex, UTF-16 (either byte order), percent-encoding and JSON
/// escaping. Each is matched whatever the case of its letters; escapes
/// applied a character at a time (`%73`, `\u0073`, `&#115;`) are undone in
/// the text rather than listed here.
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
    for skip in 0..5 {
        if value.len() < skip + 5 {
            break;
        }
        let whole = (value.len() - skip) / 5 * 5;
        forms.push(base32(&value[skip..skip + whole]));
    }
    forms.push(
        value
            .iter()
            .flat_map(|b| hex_pair(*b, b"0123456789abcdef"))
            .collect(),
    );
    if let Ok(text) = std::str::from_utf8(value) {
        forms.push(text.encode_utf16().flat_map(u16::to_le_bytes).collect());
        forms.push(text.encode_utf16().flat_map(u16::to_be_bytes).collect());
    }
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

/// Base32 (RFC 4648's alphabet) without padding of `bytes` (whose length is
/// a multiple of 5).
fn base32(bytes: &[u8]) -> Vec<u8> {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = Vec::with_capacity(bytes.len() / 5 * 8);
    for group in bytes.chunks_exact(5) {
        let n = group.iter().fold(0u64, |n, &b| n << 8 | u64::from(b));
        out.extend(
            (0..8)
                .rev()
                .map(|i| ALPHABET[((n >> (i * 5)) & 31) as usize]),
        );
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

    /// Every spelling of `value` in scope, as a reflecting server writes
    /// it: case changed, escaped a character at a time (all of it or some,
    /// in one scheme or several), escaped twice, UTF-16, base32.
    fn reflected_spellings(value: &str) -> Vec<(&'static str, String)> {
        let every = |f: &dyn Fn(u8) -> String| value.bytes().map(f).collect::<String>();
        let some = |f: &dyn Fn(u8) -> String| {
            value
                .bytes()
                .enumerate()
                .map(|(i, b)| {
                    if i % 3 == 1 {
                        f(b)
                    } else {
                        char::from(b).to_string()
                    }
                })
                .collect::<String>()
        };
        let utf16 = |le: bool| {
            value
                .encode_utf16()
                .flat_map(|u| if le { u.to_le_bytes() } else { u.to_be_bytes() })
                .map(char::from)
                .collect::<String>()
        };
        vec![
            ("upper case", value.to_uppercase()),
            (
                "mixed case",
                value
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if i % 2 == 0 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect(),
            ),
            ("percent, all", every(&|b| format!("%{b:02X}"))),
            ("percent, lower hex", every(&|b| format!("%{b:02x}"))),
            ("percent, some", some(&|b| format!("%{b:02X}"))),
            ("JSON \\u, all", every(&|b| format!("\\u{b:04x}"))),
            ("JSON \\u, some", some(&|b| format!("\\u{b:04X}"))),
            ("\\x", every(&|b| format!("\\x{b:02x}"))),
            ("HTML decimal", every(&|b| format!("&#{b};"))),
            ("HTML hex", some(&|b| format!("&#x{b:x};"))),
            (
                "schemes mixed",
                value
                    .bytes()
                    .enumerate()
                    .map(|(i, b)| match i % 4 {
                        0 => format!("%{b:02x}"),
                        1 => format!("\\u{b:04x}"),
                        2 => format!("&#{b};"),
                        _ => char::from(b).to_string(),
                    })
                    .collect(),
            ),
            ("percent, twice", every(&|b| format!("%25{b:02X}"))),
            ("JSON in JSON", every(&|b| format!("\\\\u{b:04x}"))),
            (
                "upper-cased escapes",
                every(&|b| format!("%{b:02X}")).to_uppercase(),
            ),
            ("UTF-16LE", utf16(true)),
            ("UTF-16BE", utf16(false)),
            (
                "base32",
                String::from_utf8(base32(&value.as_bytes()[..value.len() / 5 * 5])).unwrap(),
            ),
            (
                "base32, lower case",
                String::from_utf8(base32(&value.as_bytes()[..value.len() / 5 * 5]))
                    .unwrap()
                    .to_lowercase(),
            ),
            (
                "base64, upper case",
                String::from_utf8(base64(&value.as_bytes()[..value.len() / 3 * 3], b"+/"))
                    .unwrap()
                    .to_uppercase(),
            ),
        ]
    }

    /// `text` read every way the masker reads it, lower case: a value in
    /// none of these readings reached no one.
    fn readings(text: &[u8]) -> Vec<String> {
        let mut readings = vec![String::from_utf8_lossy(text).to_lowercase()];
        let once = escapes::decode(text, None, text.len(), true);
        let twice = escapes::decode(&once.bytes, Some(&once.starts), once.end, true);
        for reading in [once.bytes, twice.bytes] {
            readings.push(String::from_utf8_lossy(&reading).to_lowercase());
        }
        readings
    }

    #[test]
    fn reflected_spellings_are_masked_whole_and_split_anywhere() {
        let value = "sk-live-real-secret-value-4242";
        let masker = Arc::new(Masker::new(&[secret(value, "[P]")]).unwrap());
        for (name, spelling) in reflected_spellings(value) {
            let text = format!("{{\"echo\": \"{spelling}\", \"then\": 100%}}");
            let whole = masker.mask_str(&text);
            assert_eq!(whole, "{\"echo\": \"[P]\", \"then\": 100%}", "{name}");
            for split in (1..=13).chain([64, 1000]) {
                let mut stream = masker.stream();
                let mut out = Vec::new();
                for piece in text.as_bytes().chunks(split) {
                    stream.push(piece, &mut out);
                    // Bounded: the longest form less one byte, in the
                    // deepest reading, plus the piece.
                    assert!(stream.held() < 18 * masker.longest + split, "{name}");
                }
                stream.finish(&mut out);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    whole,
                    "{name}, pieces of {split}"
                );
            }
        }
        // Inside a longer base32 text, at each alignment.
        for prefix in ["", "u", "us", "use", "user"] {
            let whole = format!("{prefix}:{value}");
            let encoded =
                String::from_utf8(base32(&whole.as_bytes()[..whole.len() / 5 * 5])).unwrap();
            let masked = masker.mask_str(&encoded);
            assert!(masked.contains("[P]"), "{prefix}: {masked}");
        }
    }

    #[test]
    fn escaped_text_without_a_value_is_left_byte_for_byte() {
        let value = "sk-live-real-secret-value-4242";
        let masker = Arc::new(Masker::new(&[secret(value, "[P]")]).unwrap());
        let text = "GET /a%20b?q=%73k-live&x=\\u0041 &amp; &#x263a; \\\\ 100% \\uD83D\\uDE00 \
                    \\uD83D %2 & \\u12 SK-LIVE-REAL-SECRET-VALUE-424 tail";
        assert_eq!(masker.mask_str(text), text);
        for split in 1..=9 {
            let mut stream = masker.stream();
            let mut out = Vec::new();
            for piece in text.as_bytes().chunks(split) {
                stream.push(piece, &mut out);
            }
            stream.finish(&mut out);
            assert_eq!(String::from_utf8_lossy(&out), text, "pieces of {split}");
        }
    }

    #[test]
    fn no_mixture_of_spellings_and_splits_lets_a_value_through() {
        // Random texts of noise, values in every spelling, and partial
        // escapes; streamed in random pieces, they come out as in one pass,
        // and no reading of what comes out holds the value.
        let value = "Tok3n-with-MiXed_case/and+plus~";
        let masker = Arc::new(Masker::new(&[secret(value, "<P>")]).unwrap());
        let spellings: Vec<String> = reflected_spellings(value)
            .into_iter()
            .map(|(_, s)| s)
            .chain([value.to_owned()])
            .collect();
        let noise = [
            "%", "\\", "&", "\\u00", "%7", "&#", "x", " ", "\\\\", "%25", "T", "Tok3n",
        ];
        let mut seed = 0x5eed_u64;
        let mut next = |bound: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % bound
        };
        for _ in 0..300 {
            let mut text = String::new();
            for _ in 0..1 + next(6) {
                if next(3) == 0 {
                    text.push_str(&spellings[next(spellings.len())]);
                } else {
                    text.push_str(noise[next(noise.len())]);
                }
            }
            let whole = masker.mask(text.as_bytes());
            for reading in readings(&whole) {
                assert!(
                    !reading.contains(&value.to_lowercase()),
                    "{text:?} -> {reading:?}"
                );
            }
            let mut stream = masker.stream();
            let mut out = Vec::new();
            let mut rest = text.as_bytes();
            while !rest.is_empty() {
                let (piece, tail) = rest.split_at((1 + next(12)).min(rest.len()));
                stream.push(piece, &mut out);
                rest = tail;
            }
            stream.finish(&mut out);
            assert_eq!(out, whole, "{text:?}");
        }
    }

    #[test]
    fn a_verifier_masks_reflected_spellings_too() {
        let value = "sk-live-real-secret-value-4242";
        let held = secret(value, "[P]");
        let verifier = SecretVerifier::of(&held).unwrap();
        let gone = DomainSecret {
            value: None,
            ..held
        };
        let masker =
            Arc::new(Masker::with_verifiers(std::slice::from_ref(&gone), &[verifier]).unwrap());
        for (name, spelling) in reflected_spellings(value) {
            let text = format!("<{spelling}>");
            assert_eq!(masker.mask_str(&text), "<[P]>", "{name}");
            let mut stream = masker.stream();
            let mut out = Vec::new();
            for piece in text.as_bytes().chunks(5) {
                stream.push(piece, &mut out);
            }
            stream.finish(&mut out);
            assert_eq!(String::from_utf8_lossy(&out), "<[P]>", "{name}");
        }
        // A verifier stored before forms were folded still masks the exact
        // forms it has.
        let mut old = SecretVerifier::of(&secret(value, "[P]")).unwrap();
        let salt = from_hex(&old.salt).unwrap();
        old.forms = vec![FormDigest {
            length: value.len(),
            rolling: prefilter(rolling_hash(value.as_bytes(), old.base)),
            sha256: to_hex(&salted_sha256(&salt, value.as_bytes())),
            folded: false,
        }];
        let stored = serde_json::to_string(&old).unwrap();
        assert!(!stored.contains("folded"));
        let old: SecretVerifier = serde_json::from_str(&stored).unwrap();
        assert!(old.matches(value));
        let masker = Masker::with_verifiers(std::slice::from_ref(&gone), &[old]).unwrap();
        assert_eq!(masker.mask_str(&format!("a {value} b")), "a [P] b");
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

    #[test]
    fn weak_values_and_dangerous_names_are_refused() {
        let good = "sk-live-real-secret-value-4242";
        assert_eq!(check_secret("API_TOKEN", good), Ok(()));
        assert!(matches!(
            check_secret("T", "1234"),
            Err(SecretRefused::TooShort { length: 4, .. })
        ));
        assert!(matches!(
            check_secret("T", "x"),
            Err(SecretRefused::TooShort { .. })
        ));
        assert!(matches!(
            check_secret("T", "abababababababababab"),
            Err(SecretRefused::TooPlain { distinct: 2, .. })
        ));
        assert!(matches!(
            check_secret("T", "sk-live-real-secret\nvalue"),
            Err(SecretRefused::LineBreak { .. })
        ));
        for name in [
            "PATH",
            "path",
            "HOME",
            "SHELL",
            "USER",
            "IFS",
            "ENV",
            "BASH_ENV",
            "BASH_FUNC_x",
            "PS1",
            "PS4",
            "PROMPT_COMMAND",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "NODE_OPTIONS",
            "PERL5OPT",
            "RUBYOPT",
            "JAVA_TOOL_OPTIONS",
            "GIT_CONFIG_COUNT",
            "GIT_SSH_COMMAND",
            "HTTP_PROXY",
            "https_proxy",
            "No_Proxy",
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
            "PIP_CERT",
            "GIT_SSL_CAINFO",
            // The loader's and the C library's, by class.
            "LOCPATH",
            "locpath",
            "GCONV_PATH",
            "NLSPATH",
            "HOSTALIASES",
            "RESOLV_HOST_CONF",
            "RES_OPTIONS",
            "LOCALDOMAIN",
            "TZDIR",
            "GLIBC_TUNABLES",
            "MALLOC_ARENA_MAX",
            "LC_ALL",
            "LD_AUDIT",
            // The shell's.
            "BASH_XTRACEFD",
            "SHELLOPTS",
            "BASHOPTS",
            "CDPATH",
            "FPATH",
            "ZDOTDIR",
            // Programs started for the user, and where tools read their
            // configuration.
            "LESSOPEN",
            "PAGER",
            "SSH_ASKPASS",
            "XDG_CONFIG_HOME",
            "TERMINFO",
            // Interpreters'.
            "PERL5LIB",
            "PERL_UNICODE",
            "RUBYLIB",
            "LUA_INIT",
            "PHPRC",
            "NODE_PATH",
            "GEM_PATH",
            "SHELLGATE_TOKEN",
        ] {
            assert!(
                matches!(
                    check_secret(name, good),
                    Err(SecretRefused::ReservedName { .. })
                ),
                "{name}"
            );
        }
        // The refusal says who reads the name.
        assert_eq!(
            check_secret("LOCPATH", good).unwrap_err().to_string(),
            "LOCPATH is a reserved variable name (read by the dynamic loader and the C \
             library); give the secret another name"
        );
        assert!(matches!(
            check_secret("1X", good),
            Err(SecretRefused::InvalidName(_))
        ));
        for name in [
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
            "API_TOKEN",
            "PATHFINDER_KEY",
            "NODE_AUTH_TOKEN",
            "GEM_HOST_API_KEY",
            "NPM_TOKEN",
            "HOMEBREW_GITHUB_API_TOKEN",
        ] {
            assert_eq!(check_secret(name, good), Ok(()), "{name}");
        }
    }

    #[test]
    fn a_verifier_masks_a_value_no_longer_held_whole_and_streamed() {
        let value = "sk-live-real-secret-value-4242";
        let held = secret(value, "<P>");
        let verifier = SecretVerifier::of(&held).unwrap();
        let persisted = serde_json::to_string(&verifier).unwrap();
        // (Not a short piece such as "4242": the verifier's random salt and
        // hashes, written in hex, hold any four digits now and then.)
        assert!(!persisted.contains(value) && !persisted.contains("secret-value"));
        let verifier: SecretVerifier = serde_json::from_str(&persisted).unwrap();
        assert!(verifier.matches(value) && !verifier.matches("sk-live-real-secret-value-4243"));
        // Of each form's rolling hash only a prefilter persists, never an
        // equation that gives the value back.
        assert!(verifier
            .forms
            .iter()
            .all(|f| f.rolling < 1 << PREFILTER_BITS));
        // After a restart: the secret without its value, the verifier only.
        let gone = DomainSecret {
            value: None,
            ..held.clone()
        };
        assert!(Masker::new(std::slice::from_ref(&gone)).is_none());
        let masker =
            Arc::new(Masker::with_verifiers(std::slice::from_ref(&gone), &[verifier]).unwrap());
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let text = format!("a {value} b {hex} c {value}{value} sk-live-real-secret-value-4243");
        let whole = masker.mask_str(&text);
        assert_eq!(whole, "a <P> b <P> c <P><P> sk-live-real-secret-value-4243");
        // The same as the masker holding the value.
        assert_eq!(Masker::new(&[held]).unwrap().mask_str(&text), whole);
        for split in 1..9 {
            let mut stream = masker.stream();
            let mut out = Vec::new();
            for piece in text.as_bytes().chunks(split) {
                stream.push(piece, &mut out);
            }
            stream.finish(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), whole, "pieces of {split}");
        }
    }
}
