//! What of a container's answer reaches the client, by the form the port
//! was reached in.
//!
//! On the path form (`/v1/containers/{id}/ports/{port}/...`) the answer is
//! served from the server's own origin, the console's. A header there acts
//! for that whole origin, not for the container's pages: so every header
//! whose effect outlives the one response is removed — state the browser
//! keeps for the origin (cookies, `Clear-Site-Data`, HSTS, key pins,
//! `Alt-Svc`, network error logging, client hints, compression
//! dictionaries, origin keying, service worker scope), grants to other
//! origins to read it (CORS, `Timing-Allow-Origin`), and a credentials
//! prompt in its name (`WWW-Authenticate`). `Location` and `Refresh` are
//! kept only where they lead under the port's own prefix on the same
//! origin (a container's `/login` is sent to `{prefix}/login`); anywhere
//! else (another site, `/console`, dot segments climbing out) they are
//! dropped, so the server's origin is no open redirect. `Link` keeps its
//! navigational relations only (`next`, `alternate`, ...), never one that
//! makes the browser fetch, connect, cache or install something
//! (`preload`, `prefetch`, `preconnect`, `serviceworker`, ...). What acts
//! on the one document only (`Content-Type`, `Cache-Control`,
//! `X-Frame-Options`, `Permissions-Policy`, `Cross-Origin-*`, ...) passes;
//! the document runs in an opaque origin anyway (the `sandbox` policy
//! `ports.rs` adds).
//!
//! On the host form (`{port}-{id}.{ports_base_domain}`) the answer is the
//! port's own origin's, and all of it passes but what can reach other
//! hosts: a cookie's `Domain` attribute (which would set it for every host
//! of a shared parent domain, the console's included) is removed, so the
//! cookie stays the port host's; and a cookie under the name of the
//! server's own port token cookie is dropped.

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use url::Url;

/// Headers whose effect outlives the response or reaches past the
/// container's pages (see the module doc), removed on the path form.
const ORIGIN_WIDE: &[&str] = &[
    "set-cookie",
    "set-cookie2",
    "clear-site-data",
    "strict-transport-security",
    "public-key-pins",
    "public-key-pins-report-only",
    "expect-ct",
    "alt-svc",
    "nel",
    "report-to",
    "reporting-endpoints",
    "origin-agent-cluster",
    "service-worker-allowed",
    "timing-allow-origin",
    "accept-ch",
    "accept-ch-lifetime",
    "critical-ch",
    "use-as-dictionary",
    "speculation-rules",
    "supports-loading-mode",
    "www-authenticate",
    "x-permitted-cross-domain-policies",
];

/// Every CORS answer header starts so.
const CORS_PREFIX: &str = "access-control-";

/// `Link` relations that only name another resource: the ones kept.
const NAVIGATIONAL_RELATIONS: &[&str] = &[
    "about",
    "alternate",
    "author",
    "canonical",
    "collection",
    "describedby",
    "edit",
    "first",
    "help",
    "index",
    "item",
    "last",
    "license",
    "next",
    "prev",
    "previous",
    "related",
    "search",
    "self",
    "start",
    "up",
];

/// Where a path-form answer was asked for, as the browser sees it.
pub(super) struct PathForm<'a> {
    /// `{scheme}://{host}{path}` of the request, as the client sent it
    /// (`None` if it does not parse: then no redirect is kept).
    pub(super) request_url: Option<&'a Url>,
    /// The port's prefix, `/v1/containers/{id}/ports/{port}` (or under
    /// `/api`), as the client wrote it.
    pub(super) prefix: &'a str,
}

/// Removes or confines what would act on the server's origin (see the
/// module doc).
pub(super) fn path_form(headers: &mut HeaderMap, form: &PathForm<'_>) {
    let names: Vec<HeaderName> = headers.keys().cloned().collect();
    for name in names {
        let lower = name.as_str();
        if ORIGIN_WIDE.contains(&lower) || lower.starts_with(CORS_PREFIX) {
            headers.remove(&name);
        }
    }
    confine(headers, header::LOCATION, |value| form.contained(value));
    confine(headers, header::REFRESH, |value| refresh(value, form));
    confine(headers, header::LINK, navigational_links);
}

/// Keeps cookies to the port's own host (see the module doc).
pub(super) fn host_form(headers: &mut HeaderMap, token_cookie: &str) {
    confine(headers, header::SET_COOKIE, |cookie| {
        host_only(cookie, token_cookie)
    });
}

/// Replaces each value of `name` by what `keep` makes of it (`None`: the
/// value is dropped).
fn confine(headers: &mut HeaderMap, name: HeaderName, keep: impl Fn(&str) -> Option<String>) {
    let kept: Vec<HeaderValue> = headers
        .get_all(&name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter_map(&keep)
        .filter_map(|value| HeaderValue::from_str(&value).ok())
        .collect();
    headers.remove(&name);
    for value in kept {
        headers.append(name.clone(), value);
    }
}

impl PathForm<'_> {
    /// `target` (a URL reference as a container wrote it) if it leads under
    /// the port's prefix on the request's own origin: a path-absolute one
    /// outside the prefix is put under it first (the container's `/x` is
    /// the prefix's `/x`). `None` for any other.
    fn contained(&self, target: &str) -> Option<String> {
        let target = target.trim();
        let path_absolute = target.starts_with('/')
            && !target.starts_with("//")
            && !target.starts_with("/\\")
            && !self.under_prefix(target);
        let candidate = if path_absolute {
            format!("{}{target}", self.prefix)
        } else {
            target.to_owned()
        };
        // Resolved as a browser resolves it (the WHATWG URL rules: `\` as
        // `/`, `%2e` as `.`, tabs and newlines removed).
        let request_url = self.request_url?;
        let resolved = request_url.join(&candidate).ok()?;
        let same_origin = resolved.origin() == request_url.origin();
        (same_origin && self.under_prefix(resolved.path())).then_some(candidate)
    }

    fn under_prefix(&self, path: &str) -> bool {
        path.strip_prefix(self.prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
    }
}

/// A `Refresh` value (`5`, `0; url=/next`) kept if it reloads the page or
/// leads under the prefix (its URL rewritten as [`PathForm::contained`]
/// does).
fn refresh(value: &str, form: &PathForm<'_>) -> Option<String> {
    let value = value.trim();
    let delay_end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (delay, rest) = value.split_at(delay_end);
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ';' || c == ',');
    if rest.is_empty() {
        return Some(value.to_owned());
    }
    let url = match rest.get(..3) {
        Some(word) if word.eq_ignore_ascii_case("url") => {
            rest[3..].trim_start().strip_prefix('=')?.trim()
        }
        _ => rest,
    };
    let url = url
        .strip_prefix(['"', '\''])
        .map_or(url, |inner| inner.trim_end_matches(['"', '\'']));
    form.contained(url)
        .map(|target| format!("{delay}; url={target}"))
}

/// The link-values of a `Link` header whose relations are all
/// navigational ([`NAVIGATIONAL_RELATIONS`]); `None` when none is.
fn navigational_links(value: &str) -> Option<String> {
    let kept: Vec<&str> = split_outside_quotes(value, ',')
        .into_iter()
        .map(str::trim)
        .filter(|link| !link.is_empty())
        .filter(|link| {
            let relations = relations(link);
            !relations.is_empty()
                && relations
                    .iter()
                    .all(|rel| NAVIGATIONAL_RELATIONS.contains(&rel.as_str()))
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The `rel` tokens of one link-value (`<url>; rel="next prev"`),
/// lowercase.
fn relations(link: &str) -> Vec<String> {
    split_outside_quotes(link, ';')
        .into_iter()
        .skip(1)
        .filter_map(|param| param.split_once('='))
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case("rel"))
        .flat_map(|(_, value)| {
            value
                .trim()
                .trim_matches('"')
                .split_ascii_whitespace()
                .map(str::to_ascii_lowercase)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `text` split at `separator` where it is outside a quoted string and
/// outside `<...>` (a link's URL may hold either).
fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut bracketed, mut escaped) = (0, false, false, false);
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' if !bracketed => quoted = !quoted,
            '<' if !quoted => bracketed = true,
            '>' if !quoted => bracketed = false,
            c if c == separator && !quoted && !bracketed => {
                parts.push(&text[start..at]);
                start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A `Set-Cookie` value without its `Domain` attribute (the cookie then
/// belongs to the host that set it alone); `None` for a cookie named as
/// the server's own port token cookie.
fn host_only(cookie: &str, token_cookie: &str) -> Option<String> {
    let mut parts = cookie.split(';');
    let pair = parts.next()?.trim();
    let name = pair.split_once('=').map_or(pair, |(name, _)| name).trim();
    if name == token_cookie {
        return None;
    }
    let attributes = parts.map(str::trim).filter(|attribute| {
        let name = attribute.split_once('=').map_or(*attribute, |(n, _)| n);
        !name.trim().eq_ignore_ascii_case("domain")
    });
    Some(
        std::iter::once(pair)
            .chain(attributes)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/v1/containers/cntr_1/ports/8000";

    fn form_at(url: &Url) -> PathForm<'_> {
        PathForm {
            request_url: Some(url),
            prefix: PREFIX,
        }
    }

    fn request_url() -> Url {
        Url::parse(&format!("http://127.0.0.1:8080{PREFIX}/app/page")).unwrap()
    }

    #[test]
    fn a_location_stays_under_the_ports_prefix_on_the_same_origin() {
        let url = request_url();
        let form = form_at(&url);
        let under = |path: &str| Some(format!("{PREFIX}{path}"));
        assert_eq!(form.contained("/login"), under("/login"));
        assert_eq!(form.contained("/"), under("/"));
        assert_eq!(form.contained("/?a=1"), under("/?a=1"));
        assert_eq!(
            form.contained(&format!("{PREFIX}/already")),
            under("/already")
        );
        assert_eq!(form.contained("next"), Some("next".into()));
        assert_eq!(form.contained("?page=2"), Some("?page=2".into()));
        assert_eq!(form.contained("../sibling"), Some("../sibling".into()));
        let absolute = format!("http://127.0.0.1:8080{PREFIX}/abs");
        assert_eq!(form.contained(&absolute), Some(absolute.clone()));
        for away in [
            "https://evil.example/",
            "//evil.example/x",
            "/\\evil.example/x",
            "\\\\evil.example/x",
            "http://127.0.0.1:8080/console",
            "https://127.0.0.1:8080/v1/containers/cntr_1/ports/8000/",
            "http://127.0.0.1:8081/v1/containers/cntr_1/ports/8000/",
            "../../../../console",
            "../../../../../console",
            "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/console",
            "/..%2f..%2f..%2f..%2fconsole/",
            "./%2E%2E/%2e%2e/%2E%2E/../../console",
            "/v1/containers/cntr_1/ports/80000",
            "javascript:alert(1)",
            "data:text/html,hi",
            "ht\ttp://evil.example/",
        ] {
            let kept = form.contained(away);
            let resolved = kept.as_deref().map(|k| url.join(k).unwrap());
            assert!(
                resolved
                    .as_ref()
                    .is_none_or(|r| r.origin() == url.origin()
                        && r.path().starts_with(&format!("{PREFIX}/"))),
                "{away:?} kept as {kept:?}, leading to {resolved:?}"
            );
        }
        assert_eq!(form.contained("https://evil.example/"), None);
        assert_eq!(form.contained("../../../../console"), None);
    }

    #[test]
    fn origin_wide_headers_are_removed_on_the_path_form() {
        let url = request_url();
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("set-cookie", "a=1"),
            ("clear-site-data", "\"*\""),
            (
                "strict-transport-security",
                "max-age=31536000; includeSubDomains",
            ),
            ("alt-svc", "h2=\"evil.example:443\""),
            ("nel", "{\"report_to\":\"x\",\"max_age\":1}"),
            ("service-worker-allowed", "/"),
            ("access-control-allow-origin", "*"),
            ("access-control-allow-credentials", "true"),
            ("origin-agent-cluster", "?1"),
            ("www-authenticate", "Basic realm=\"x\""),
            ("location", "https://evil.example/"),
            ("refresh", "0; url=https://evil.example/"),
            (
                "link",
                "</sw.js>; rel=serviceworker, <https://evil.example/>; rel=preconnect",
            ),
            ("content-type", "text/html"),
            ("cache-control", "no-store"),
            ("x-frame-options", "DENY"),
            ("x-app", "1"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        path_form(&mut headers, &form_at(&url));
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["cache-control", "content-type", "x-app", "x-frame-options"]
        );
    }

    #[test]
    fn refresh_and_link_keep_only_what_stays_in_place() {
        let url = request_url();
        let form = form_at(&url);
        assert_eq!(refresh("5", &form), Some("5".into()));
        assert_eq!(
            refresh("0; url=/next", &form),
            Some(format!("0; url={PREFIX}/next"))
        );
        assert_eq!(
            refresh("0;URL='/next'", &form),
            Some(format!("0; url={PREFIX}/next"))
        );
        assert_eq!(refresh("0, https://evil.example/", &form), None);
        assert_eq!(refresh("1; url = \"//evil.example\"", &form), None);
        assert_eq!(
            navigational_links("<?page=2>; rel=\"next\", </app.js>; rel=preload; as=script"),
            Some("<?page=2>; rel=\"next\"".into())
        );
        assert_eq!(
            navigational_links("<https://x.example/a,b>; rel=\"next alternate\""),
            Some("<https://x.example/a,b>; rel=\"next alternate\"".into())
        );
        assert_eq!(
            navigational_links("</a>; rel=\"next prefetch\"; title=\"a, b\""),
            None
        );
        assert_eq!(navigational_links("</a>"), None);
    }

    #[test]
    fn cookies_on_the_host_form_stay_the_hosts() {
        let token = "shellgate_port_token";
        assert_eq!(
            host_only("sid=1; Domain=example.test; Path=/; HttpOnly", token),
            Some("sid=1; Path=/; HttpOnly".into())
        );
        assert_eq!(
            host_only("sid=1;domain =.example.test;Secure", token),
            Some("sid=1; Secure".into())
        );
        assert_eq!(
            host_only("app=1; Path=/", token),
            Some("app=1; Path=/".into())
        );
        assert_eq!(host_only("shellgate_port_token=x; Path=/", token), None);
        let mut headers = HeaderMap::new();
        headers.append(
            header::SET_COOKIE,
            HeaderValue::from_static("a=1; Domain=example.test"),
        );
        headers.append(header::SET_COOKIE, HeaderValue::from_static("b=2"));
        headers.append(
            HeaderName::from_static("clear-site-data"),
            HeaderValue::from_static("\"cookies\""),
        );
        host_form(&mut headers, token);
        let cookies: Vec<&str> = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert!(headers.contains_key("clear-site-data"));
    }
}
