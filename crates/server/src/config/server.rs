//! The HTTP front: where the server listens and is reached, its keys,
//! its log, and the limits on connections and requests.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use shellgate_store::KeyRole;

use super::{default_data_dir, ConfigError, LogFormat, MIN_KEY_CHARS};

/// The HTTP front: where it listens and is reached (exposed ports
/// included), its keys and log, the limits on connections and requests.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Where the database, files and sandboxes live.
    pub data_dir: PathBuf,
    /// Keys to seed, comma separated: `KEY`, `KEY:PROJECT` (project
    /// `default`) or `KEY:PROJECT:admin` (a key that also sees every
    /// project in the console); each at least [`MIN_KEY_CHARS`] characters
    /// long (a shorter one is refused at start).
    pub api_keys: String,
    /// Log format: `auto` (text on a terminal or into systemd's journal,
    /// JSON elsewhere), `json` or `text`; `serve --log-format` overrides it.
    pub log_format: LogFormat,
    /// Open connections at most; past it, the oldest connection that has
    /// not yet sent a request is closed to make room.
    pub max_connections: usize,
    /// A connection must send a complete request header within this many
    /// seconds of opening or of its previous response: this bounds both
    /// slow (slow-loris) headers and idle keep-alive connections.
    pub header_read_timeout_secs: u64,
    /// A request body that sends nothing for this long, or less than
    /// 1 KiB/s on average after it, is cut off (408).
    pub body_read_timeout_secs: u64,
    /// Largest JSON request body.
    pub max_request_bytes: usize,
    /// Largest uploaded file.
    pub max_upload_bytes: usize,
    /// Requests per minute per project (0: unlimited).
    pub rate_limit_per_minute: u32,
    /// If set, `GET /metrics` needs `Authorization: Bearer <token>`.
    pub metrics_token: String,
    /// Where clients reach this server (`https://sandbox.example.com`), for
    /// the URLs the API shows (a container's exposed ports); empty: the
    /// `Host` a request came with, over `http`.
    pub public_url: String,
    /// The domain under which a container's exposed port is reached by host
    /// name: `{port}-{container_id}.{ports_base_domain}` (`*.localhost`
    /// resolves to loopback in browsers, without DNS).
    pub ports_base_domain: String,
    /// Longest silence (nothing either way) on a proxied port connection,
    /// waiting for the container's answer included, before it is closed.
    pub ports_idle_timeout_secs: u64,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: default_data_dir(),
            api_keys: String::new(),
            log_format: LogFormat::Auto,
            max_connections: 10_000,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            max_request_bytes: 16 << 20,
            max_upload_bytes: 512 << 20,
            rate_limit_per_minute: 0,
            metrics_token: String::new(),
            public_url: String::new(),
            ports_base_domain: "localhost".to_owned(),
            ports_idle_timeout_secs: 300,
        }
    }
}

impl ServerSettings {
    /// The configured `public_url` read, if set: (scheme, host[:port],
    /// path prefix without its trailing slash).
    pub fn public_base(&self) -> Result<Option<(String, String, String)>, ConfigError> {
        if self.public_url.is_empty() {
            return Ok(None);
        }
        let bad = || {
            ConfigError(format!(
                "public_url = {:?} is not a URL such as https://sandbox.example.com",
                self.public_url
            ))
        };
        let (scheme, rest) = self.public_url.split_once("://").ok_or_else(bad)?;
        if scheme != "http" && scheme != "https" {
            return Err(bad());
        }
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() || host.contains(['?', '#', '@', ' ']) || path.contains(['?', '#']) {
            return Err(bad());
        }
        let path = path.trim_end_matches('/');
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("/{path}")
        };
        Ok(Some((scheme.to_owned(), host.to_owned(), prefix)))
    }

    /// Refuses a configured key short enough to guess, naming its project
    /// (never the key).
    pub(super) fn check_keys(&self) -> Result<(), ConfigError> {
        for (index, (key, project, _)) in self.seeded_keys().iter().enumerate() {
            let length = key.chars().count();
            if length < MIN_KEY_CHARS {
                return Err(ConfigError(format!(
                    "api_keys: key {} (project {project:?}) has {length} characters; a key \
                     needs at least {MIN_KEY_CHARS} (`shellgate keys create` makes one, as \
                     does `openssl rand -hex 24`)",
                    index + 1
                )));
            }
        }
        Ok(())
    }

    /// The seeded keys: (key, project, role).
    pub fn seeded_keys(&self) -> Vec<(String, String, KeyRole)> {
        self.api_keys
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|entry| {
                let mut parts = entry.splitn(3, ':');
                let key = parts.next().unwrap_or_default().to_owned();
                let project = parts.next().filter(|p| !p.is_empty()).unwrap_or("default");
                let role = match parts.next() {
                    Some("admin") => KeyRole::Admin,
                    _ => KeyRole::Member,
                };
                (key, project.to_owned(), role)
            })
            .collect()
    }
}
