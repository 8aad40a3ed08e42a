//! Where clients reach this server, for the URLs the API shows (a
//! container's exposed ports): the configured `public_url`, else the `Host`
//! a request came with. Read by the handlers that show a container and by
//! the port proxy.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::{self, HeaderMap};
use axum::http::request::Parts;
use shellgate_wire::ExposedPort;

use crate::state::AppState;

/// Where clients reach this server, for the URLs the API shows: the
/// configured `public_url`, else the `Host` the request came with.
#[derive(Debug, Clone)]
pub struct PublicBase {
    pub(crate) scheme: String,
    /// `host[:port]`.
    authority: String,
    /// A path prefix (from `public_url`), without its trailing slash.
    prefix: String,
}

impl FromRequestParts<Arc<AppState>> for PublicBase {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(PublicBase::of(state, &parts.headers))
    }
}

impl PublicBase {
    pub fn of(state: &AppState, headers: &HeaderMap) -> Self {
        // Checked at start-up (`Config::validate`).
        if let Ok(Some((scheme, authority, prefix))) = state.config.server.public_base() {
            return Self {
                scheme,
                authority,
                prefix,
            };
        }
        let authority = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| valid_authority(h))
            .map(str::to_owned)
            .unwrap_or_else(|| state.config.server.listen.to_string());
        Self {
            scheme: "http".to_owned(),
            authority,
            prefix: String::new(),
        }
    }

    /// The URL of `path` (absolute, beginning with `/`) on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}{path}", self.scheme, self.authority, self.prefix)
    }

    /// The domain below which `{port}-{id}.` names a container's port,
    /// with the server's port when clients reach it on one
    /// (`localhost:8080`), as E2B's `domain` is.
    pub fn sandbox_domain(&self, base_domain: &str) -> String {
        let server_port = authority_port(&self.authority)
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        format!("{base_domain}{server_port}")
    }

    /// An exposed port of container `id`, with where it is reached.
    pub fn exposed(&self, base_domain: &str, id: &str, port: u16) -> ExposedPort {
        let Self {
            scheme,
            authority,
            prefix,
        } = self;
        let server_port = authority_port(authority)
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        ExposedPort {
            port,
            url: format!("{scheme}://{port}-{id}.{base_domain}{server_port}/"),
            path_url: format!("{scheme}://{authority}{prefix}/v1/containers/{id}/ports/{port}/"),
        }
    }
}

/// A `Host` value made of what an authority may hold (it is shown back).
pub(crate) fn valid_authority(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_:[]".contains(c))
}

/// The port of `host[:port]` (`[v6]:port` too), if it names one.
fn authority_port(authority: &str) -> Option<&str> {
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.1,
        None => authority.rsplit_once(':').map_or("", |(_, p)| p),
    };
    let port = after_host.strip_prefix(':').unwrap_or(after_host);
    (!port.is_empty() && port.chars().all(|c| c.is_ascii_digit())).then_some(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_the_servers_port() {
        let base = PublicBase {
            scheme: "http".into(),
            authority: "127.0.0.1:8080".into(),
            prefix: String::new(),
        };
        let port = base.exposed("localhost", "cntr_1", 8000);
        assert_eq!(port.url, "http://8000-cntr_1.localhost:8080/");
        assert_eq!(
            port.path_url,
            "http://127.0.0.1:8080/v1/containers/cntr_1/ports/8000/"
        );
        assert_eq!(authority_port("[::1]:9"), Some("9"));
        assert_eq!(authority_port("[::1]"), None);
        assert_eq!(authority_port("example.com"), None);
        let public = PublicBase {
            scheme: "https".into(),
            authority: "sandbox.example.com".into(),
            prefix: "/sg".into(),
        };
        let port = public.exposed("ports.example.com", "cntr_1", 3000);
        assert_eq!(port.url, "https://3000-cntr_1.ports.example.com/");
        assert_eq!(
            port.path_url,
            "https://sandbox.example.com/sg/v1/containers/cntr_1/ports/3000/"
        );
    }
}
