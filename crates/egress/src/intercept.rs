//! TLS terminated inside the proxy, so that every HTTPS request is one it
//! read: its `Host` checked against the SNI (no domain fronting to another
//! virtual host of the same server), a secret's placeholder replaced where
//! the secret's policy allows it, the answer masked.
//!
//! Every networked container gets its own CA (made in memory when it
//! starts; only that container trusts it) and every TLS connection to an
//! allowed name is terminated with a certificate for that name, unless the
//! policy lets the name through untouched (`tls_passthrough_domains`: then
//! only the SNI is checked). The request is read strictly
//! ([`wire::request_head`]), sent on over a new TLS connection to the
//! checked address, verified against the host's roots (plus any the
//! operator adds), one request per connection; only HTTP/1.1 is offered.
//!
//! A secret's value goes to its own domain only, and only where its policy
//! says: header values by default, the query string and the body when
//! listed in `inject`, and only for the listed `methods` and `paths`. A
//! redirect elsewhere is followed by the client, which only ever held the
//! placeholder.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::connection::{connect_to, read_head, Seen};
use crate::exchange::{self, error_response, Answering, Outgoing, Substitution};
use crate::exchange::{ExchangeError, Exchanged};
use crate::policy::Pattern;
use crate::secrets::Masker;
use crate::secrets::{DomainSecret, InjectInto, SecretValue};
use crate::wire::{self, Head};

/// Where the interceptor reports the connections it serves (the
/// container's proxy, which logs them).
pub(crate) trait ConnectionLog {
    /// The connection was refused: `reason` says why. Logged, and noted
    /// for the running commands: called before the client is told.
    fn deny(&self, kind: &'static str, seen: Seen, started: Instant, reason: String);
    /// An answer is about to be refused (see `Answering::on_refusal`):
    /// noted for the running commands only (its exchange is logged with
    /// [`Self::log_exchange`]).
    fn note_denial(&self, kind: &'static str, seen: &Seen, reason: &str);
    /// A request that goes out with a placeholder that stays one (see
    /// [`Interceptor::stray_placeholders`]): noted for the running commands.
    fn note_stray(&self, kind: &'static str, seen: &Seen, reason: &str);
    /// The masker of the container's secret values, if it has any.
    fn masker(&self) -> Option<&Arc<Masker>>;
    /// The connection's exchange, as it ended.
    fn log_exchange(
        &self,
        kind: &'static str,
        seen: Seen,
        started: Instant,
        outcome: (Exchanged, Result<(), ExchangeError>),
        note: Option<&str>,
    );
}

/// How long the TLS handshakes may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the interceptor could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    #[error("make the container's CA: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("TLS settings: {0}")]
    Tls(#[from] rustls::Error),
    #[error("read trusted roots from {path}: {message}")]
    Roots { path: String, message: String },
}

struct Injected {
    pattern: Pattern,
    /// The domain and variable as the policy names them (for notes).
    domain: String,
    name: String,
    placeholder: String,
    value: SecretValue,
    /// Where it may be put in (never empty: header values by default).
    into: Vec<InjectInto>,
    /// Uppercase methods; empty: every one.
    methods: Vec<String>,
    /// Path prefixes; empty: every path.
    paths: Vec<String>,
}

impl Injected {
    fn applies(&self, name: &str, method: &str, path: &str) -> bool {
        self.pattern.matches(name)
            && (self.methods.is_empty() || self.methods.iter().any(|m| m == method))
            && path_allowed(&self.paths, path)
    }
}

/// Whether `path` is under one of `prefixes` (always, without any). A
/// path a server could read as another one is under none (see
/// [`ambiguous_path`]): `/v1/../admin` must not get a secret scoped to
/// `/v1/`.
fn path_allowed(prefixes: &[String], path: &str) -> bool {
    if prefixes.is_empty() {
        return true;
    }
    !ambiguous_path(path)
        && prefixes
            .iter()
            .any(|prefix| path.starts_with(prefix.as_str()))
}

/// Escapes (lowercase) that some server decodes into a path separator, a
/// dot or a path parameter, or decodes twice: `%2e`, `%2f`, `%5c`, `%3b`,
/// `%25` (a double encoding, `%252e`), and overlong UTF-8 forms of `.` and
/// `/` (`%c0%ae`, `%e0%80%ae`, ...), which old servers decode.
const AMBIGUOUS_ESCAPES: [&str; 8] = ["%2e", "%2f", "%5c", "%3b", "%25", "%c0", "%c1", "%e0%80"];

/// Whether a server could read `path` as another path than its text says
/// (so a secret scoped to a path prefix must not go with it): a dot
/// segment, also with a path parameter (`..;`, which Tomcat and Spring read
/// as `..`), an empty segment (`//`), a backslash, or an
/// [`AMBIGUOUS_ESCAPES`] escape.
pub fn ambiguous_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    path.split('/').any(|segment| {
        let name = segment.split(';').next().unwrap_or(segment);
        name == "." || name == ".."
    }) || lower.contains('\\')
        || lower.contains("//")
        || AMBIGUOUS_ESCAPES.iter().any(|bad| lower.contains(bad))
}

/// One container's CA and secrets.
pub struct Interceptor {
    issuer: CertifiedIssuer<'static, KeyPair>,
    secrets: Vec<Injected>,
    /// Server settings per name, each with a certificate for that name.
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    upstream: Arc<rustls::ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// How the proxy verifies the servers it sends secrets to: the host's
/// trusted roots (`/etc/ssl/certs/ca-certificates.crt`) and `extra` PEM
/// files.
pub fn upstream_tls(extra: &[std::path::PathBuf]) -> Result<rustls::ClientConfig, InterceptError> {
    let mut roots = rustls::RootCertStore::empty();
    let system = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
    let mut files: Vec<&std::path::Path> = extra.iter().map(|p| p.as_path()).collect();
    if system.exists() {
        files.push(system);
    }
    for path in files {
        let certificates =
            CertificateDer::pem_file_iter(path).map_err(|e| InterceptError::Roots {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        for certificate in certificates {
            let certificate = certificate.map_err(|e| InterceptError::Roots {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            // A root the library cannot use is skipped, as browsers do.
            let _ = roots.add(certificate);
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

impl Interceptor {
    /// A fresh CA for `container` and the secrets that have values.
    pub fn new(
        container: &str,
        secrets: &[DomainSecret],
        upstream: Arc<rustls::ClientConfig>,
    ) -> Result<Self, InterceptError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(
            DnType::CommonName,
            format!("shellgate egress proxy, container {container}"),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let issuer = CertifiedIssuer::self_signed(params, key)?;
        let secrets = secrets
            .iter()
            .filter_map(|secret| {
                Some(Injected {
                    pattern: Pattern::parse(&secret.domain, false).ok()?,
                    domain: secret.domain.clone(),
                    name: secret.name.clone(),
                    placeholder: secret.placeholder.clone(),
                    value: secret.value.clone()?,
                    into: if secret.inject.is_empty() {
                        vec![InjectInto::Header]
                    } else {
                        secret.inject.clone()
                    },
                    methods: secret.methods.clone(),
                    paths: secret.paths.clone(),
                })
            })
            .collect();
        Ok(Self {
            issuer,
            secrets,
            leaves: Mutex::new(HashMap::new()),
            upstream,
        })
    }

    /// The CA certificate the container trusts, PEM.
    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The same certificate, DER.
    pub fn ca_der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// The secrets a request of `method` for `path` on `name` may carry
    /// in `part`.
    fn applicable<'a>(
        &'a self,
        name: &'a str,
        method: &'a str,
        path: &'a str,
        part: InjectInto,
    ) -> impl Iterator<Item = &'a Injected> + 'a {
        self.secrets
            .iter()
            .filter(move |s| s.into.contains(&part) && s.applies(name, method, path))
    }

    /// Why the placeholders `head` carries (in header values or the query
    /// string) to `name` stay placeholders there, one reason per secret:
    /// another host, plain HTTP (`tls` false: no secret is ever put into
    /// plain HTTP), a method or path outside its scope, a part of the
    /// request its policy does not put it in. Not refusals: the placeholder
    /// is worthless away from its place, and a request that carries one
    /// (a custom header kept across a redirect, say) may well work; but
    /// when it does not, the far side's 401 says nothing of why. (A body
    /// is not searched: it streams.)
    pub(crate) fn stray_placeholders(
        &self,
        head: &wire::RequestHead,
        name: &str,
        tls: bool,
    ) -> Vec<String> {
        let (path, query) = match head.origin_form.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (head.origin_form.as_str(), None),
        };
        let method = head.method.to_ascii_uppercase();
        let mut reasons = Vec::new();
        for secret in &self.secrets {
            let in_header = head
                .headers
                .iter()
                .any(|(_, value)| value.contains(&secret.placeholder));
            let in_query = query.is_some_and(|q| q.contains(&secret.placeholder));
            let part = match (in_header, in_query) {
                (false, false) => continue,
                (true, _) if !secret.into.contains(&InjectInto::Header) => Some("a header"),
                (_, true) if !secret.into.contains(&InjectInto::Query) => Some("the query string"),
                _ => None,
            };
            let carried = format!("carried the placeholder of ${}", secret.name);
            let why = if !secret.pattern.matches(name) {
                format!("{carried}, which is put in only for {}", secret.domain)
            } else if !tls {
                format!("{carried} over plain HTTP, where no secret is put in (use https)")
            } else if !secret.applies(name, &method, path) {
                let methods = match secret.methods.as_slice() {
                    [] => "requests".to_owned(),
                    methods => format!("{} requests", methods.join("/")),
                };
                let paths = match secret.paths.as_slice() {
                    [] => String::new(),
                    paths if ambiguous_path(path) => format!(
                        " under {} (a path a server may read as another, as {path}, is under none)",
                        paths.join(", ")
                    ),
                    paths => format!(" under {}", paths.join(", ")),
                };
                format!("{carried}, which its policy puts in only for {methods}{paths}")
            } else if let Some(part) = part {
                format!("{carried} in {part}, where its policy does not put it in")
            } else {
                continue;
            };
            reasons.push(format!("{why}: sent as the placeholder"));
        }
        reasons
    }

    /// `text` with the placeholders of the applicable secrets replaced;
    /// whether any was.
    fn put_in(&self, text: &str, secrets: &[&Injected]) -> (String, bool) {
        let mut text = text.to_owned();
        let mut put = false;
        for secret in secrets {
            if text.contains(&secret.placeholder) {
                text = text.replace(&secret.placeholder, secret.value.expose());
                put = true;
            }
        }
        (text, put)
    }

    fn server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, InterceptError> {
        if let Some(config) = self
            .leaves
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Ok(Arc::clone(config));
        }
        let mut params = CertificateParams::new(vec![name.to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &self.issuer)?;
        let chain = vec![certificate.der().clone(), self.issuer.der().clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if leaves.len() > 256 {
            leaves.clear();
        }
        leaves.insert(name.to_owned(), Arc::clone(&config));
        Ok(config)
    }

    /// Serves one intercepted connection: `hello` is what was already
    /// read from `client` (its ClientHello), `name` the checked name and
    /// `destination` the checked address.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn serve(
        self: Arc<Self>,
        egress: &(impl ConnectionLog + Sync),
        kind: &'static str,
        client: TcpStream,
        hello: Vec<u8>,
        name: String,
        destination: SocketAddr,
        mut seen: Seen,
        started: Instant,
    ) {
        let config = match self.server_config(&name) {
            Ok(config) => config,
            Err(e) => return egress.deny(kind, seen, started, e.to_string()),
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let accepted = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            acceptor.accept(Rewind {
                prefix: hello,
                at: 0,
                inner: client,
            }),
        )
        .await;
        let mut client = match accepted {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let reason = format!("the container's TLS handshake failed: {e}");
                return egress.deny(kind, seen, started, reason);
            }
            Err(_) => {
                let reason = "the container's TLS handshake timed out".to_owned();
                return egress.deny(kind, seen, started, reason);
            }
        };
        let mut buffer = Vec::new();
        let head = read_head(&mut client, &mut buffer, |bytes| {
            match wire::request_head(bytes) {
                Head::Incomplete => None,
                other => Some(other),
            }
        })
        .await;
        let refuse =
            |status: u16, code: &str, reason: &str| error_response(status, code, reason, None);
        let mut head = match head {
            Some(Head::Request(head)) if !head.method.eq_ignore_ascii_case("CONNECT") => head,
            Some(Head::Request(_)) => {
                let reason = "a CONNECT inside TLS".to_owned();
                let answer = refuse(400, "bad_request", &reason);
                egress.deny(kind, seen, started, reason);
                let _ = client.write_all(&answer).await;
                return;
            }
            Some(Head::Bad(reason)) => {
                let reason = format!("a malformed request inside TLS: {reason}");
                let answer = refuse(400, "bad_request", &reason);
                egress.deny(kind, seen, started, reason);
                let _ = client.write_all(&answer).await;
                return;
            }
            Some(Head::Incomplete) | None => {
                let reason = "not an HTTP/1 request inside TLS".to_owned();
                return egress.deny(kind, seen, started, reason);
            }
        };
        // The request must be for the name the TLS connection was checked
        // for: another virtual host of the same server is another name.
        if head.host.host != name || head.host.port.is_some_and(|port| port != 443) {
            let reason = format!(
                "the TLS connection to {name} carried a request for {}",
                head.host.host
            );
            let answer = error_response(421, "policy_denied", &reason, Some(&head.host.host));
            seen.server_name = Some(name.clone());
            egress.deny(kind, seen, started, reason);
            let _ = client.write_all(&answer).await;
            return;
        }
        if egress.masker().is_some() {
            // Frames after an upgrade would reach the container unmasked.
            head.websocket = false;
        }
        let method = head.method.clone();
        let (path, query) = match head.origin_form.split_once('?') {
            Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
            None => (head.origin_form.clone(), None),
        };
        let in_headers: Vec<&Injected> = self
            .applicable(&name, &method, &path, InjectInto::Header)
            .collect();
        let in_query: Vec<&Injected> = self
            .applicable(&name, &method, &path, InjectInto::Query)
            .collect();
        let in_body: Vec<(&str, &SecretValue)> = self
            .applicable(&name, &method, &path, InjectInto::Body)
            .map(|s| (s.placeholder.as_str(), &s.value))
            .collect();
        let mut put = false;
        let target = match &query {
            Some(query) => {
                let (query, put_here) = self.put_in(query, &in_query);
                put |= put_here;
                format!("{path}?{query}")
            }
            None => path.clone(),
        };
        let lines = head.forwarded_lines(&target, egress.masker().is_some(), |_, value| {
            // (The Host is never passed here: it goes as it was checked.)
            let (value, put_here) = self.put_in(value, &in_headers);
            put |= put_here;
            value
        });
        let outgoing = Outgoing {
            head: lines,
            framing: head.framing,
            body: Substitution::new(&in_body),
            http11: head.version == "HTTP/1.1",
        };
        let mut upstream = match self.connect(&name, destination).await {
            Ok(upstream) => upstream,
            Err(reason) => {
                let answer = error_response(502, "upstream_unreachable", &reason, Some(&name));
                egress.deny(kind, seen, started, reason);
                let _ = client.write_all(&answer).await;
                return;
            }
        };
        // Told before anything is forwarded, so before the program can
        // have its answer.
        let strays = self.stray_placeholders(&head, &name, true);
        for stray in &strays {
            egress.note_stray(kind, &seen, stray);
        }
        let leftover = buffer.split_off(head.length);
        let on_refusal = |reason: &str| egress.note_denial(kind, &seen, reason);
        let result = exchange::exchange(
            &mut client,
            leftover,
            outgoing,
            head.expect_continue,
            &mut upstream,
            Answering {
                method: &method,
                masker: egress.masker(),
                websocket: head.websocket,
                client_http11: head.version == "HTTP/1.1",
                on_refusal: Some(&on_refusal),
            },
        )
        .await;
        let put = put || result.0.replaced > 0;
        let notes: Vec<&str> = put
            .then_some("secret put in")
            .into_iter()
            .chain(strays.iter().map(String::as_str))
            .collect();
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        egress.log_exchange(kind, seen, started, result, note.as_deref());
    }

    /// TLS to the checked address, verified for `name`.
    async fn connect(
        &self,
        name: &str,
        destination: SocketAddr,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let upstream = connect_to(destination).await?;
        let server_name =
            ServerName::try_from(name.to_owned()).map_err(|e| format!("{name}: {e}"))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.upstream));
        tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(server_name, upstream))
            .await
            .map_err(|_| format!("the TLS handshake with {name} timed out"))?
            .map_err(|e| format!("{name}'s certificate was not accepted: {e}"))
    }
}

/// The password every JDK's `cacerts` has.
const JAVA_STORE_PASSWORD: &str = "changeit";

/// The keyed SHA-1 a JKS file ends with: over the password (UTF-16BE),
/// the JDK's fixed salt and every byte before it.
fn jks_digest(body: &[u8]) -> ring::digest::Digest {
    let mut context = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    for unit in JAVA_STORE_PASSWORD.encode_utf16() {
        context.update(&unit.to_be_bytes());
    }
    context.update(b"Mighty Aphrodite");
    context.update(body);
    context.finish()
}

/// Java's trust store `store` (a JKS file, as Debian's `cacerts` is) with
/// `certificate` (DER) added as the trusted entry `alias`, made without a
/// JVM; `None` if `store` is not a JKS file whose digest checks out with
/// the usual password (the caller then runs `keytool`).
pub fn java_store_with(
    store: &[u8],
    alias: &str,
    certificate: &[u8],
    created_millis: u64,
) -> Option<Vec<u8>> {
    const HEAD: [u8; 8] = [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2];
    let digest_at = store.len().checked_sub(20)?;
    if digest_at < 12 || store[..8] != HEAD {
        return None;
    }
    let (body, digest) = store.split_at(digest_at);
    if jks_digest(body).as_ref() != digest {
        return None;
    }
    let count = u32::from_be_bytes(body[8..12].try_into().ok()?).checked_add(1)?;
    let alias_length = u16::try_from(alias.len()).ok()?;
    let certificate_length = u32::try_from(certificate.len()).ok()?;
    let mut out = Vec::with_capacity(store.len() + certificate.len() + 64);
    out.extend_from_slice(&body[..8]);
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&body[12..]);
    out.extend_from_slice(&2u32.to_be_bytes()); // a trusted certificate
    out.extend_from_slice(&alias_length.to_be_bytes());
    out.extend_from_slice(alias.as_bytes());
    out.extend_from_slice(&created_millis.to_be_bytes());
    out.extend_from_slice(&5u16.to_be_bytes());
    out.extend_from_slice(b"X.509");
    out.extend_from_slice(&certificate_length.to_be_bytes());
    out.extend_from_slice(certificate);
    let digest = jks_digest(&out);
    out.extend_from_slice(digest.as_ref());
    Some(out)
}

/// A stream whose first bytes were already read: they are read again.
struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interceptor(secret: DomainSecret) -> Interceptor {
        let upstream = Arc::new(upstream_tls(&[]).unwrap());
        Interceptor::new("cntr_test", &[secret], upstream).unwrap()
    }

    fn secret() -> DomainSecret {
        DomainSecret {
            domain: "api.secret.test".into(),
            name: "TOKEN".into(),
            placeholder: "PLACEHOLDER".into(),
            value: Some(SecretValue::new("real-value")),
            ..DomainSecret::default()
        }
    }

    fn parts(interceptor: &Interceptor, name: &str, method: &str, path: &str) -> Vec<InjectInto> {
        [InjectInto::Header, InjectInto::Query, InjectInto::Body]
            .into_iter()
            .filter(|part| {
                interceptor
                    .applicable(name, method, path, *part)
                    .next()
                    .is_some()
            })
            .collect()
    }

    #[test]
    fn values_go_to_their_domain_in_headers_only_by_default() {
        let interceptor = interceptor(secret());
        assert_eq!(
            parts(&interceptor, "api.secret.test", "POST", "/x"),
            vec![InjectInto::Header]
        );
        assert!(parts(&interceptor, "other.test", "GET", "/").is_empty());
        let secrets: Vec<&Injected> = interceptor
            .applicable("api.secret.test", "GET", "/", InjectInto::Header)
            .collect();
        assert_eq!(
            interceptor.put_in("Bearer PLACEHOLDER", &secrets),
            ("Bearer real-value".to_owned(), true)
        );
        assert!(interceptor
            .ca_pem()
            .starts_with("-----BEGIN CERTIFICATE-----"));
        // Leaf certificates are made once per name.
        let a = interceptor.server_config("api.secret.test").unwrap();
        let b = interceptor.server_config("api.secret.test").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_placeholder_that_stays_one_is_explained() {
        let scoped = DomainSecret {
            methods: vec!["POST".into()],
            paths: vec!["/v1/".into()],
            ..secret()
        };
        let interceptor = interceptor(scoped);
        let strays = |request: &str, name: &str, tls: bool| {
            let wire::Head::Request(head) = wire::request_head(request.as_bytes()) else {
                panic!("{request}");
            };
            interceptor.stray_placeholders(&head, name, tls)
        };
        let header = |host: &str, method: &str, path: &str| {
            format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer PLACEHOLDER\r\n\r\n")
        };
        // Put in: nothing to say; nor without a placeholder.
        assert!(strays(
            &header("api.secret.test", "POST", "/v1/x"),
            "api.secret.test",
            true
        )
        .is_empty());
        assert!(strays(
            "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
            "other.test",
            true
        )
        .is_empty());
        for (request, name, tls, why) in [
            (header("other.test", "POST", "/v1/x"), "other.test", true,
             "carried the placeholder of $TOKEN, which is put in only for api.secret.test"),
            (header("api.secret.test", "POST", "/v1/x"), "api.secret.test", false,
             "carried the placeholder of $TOKEN over plain HTTP, where no secret is put in (use https)"),
            (header("api.secret.test", "GET", "/v2/x"), "api.secret.test", true,
             "carried the placeholder of $TOKEN, which its policy puts in only for POST requests under /v1/"),
            (header("api.secret.test", "POST", "/v1/../admin"), "api.secret.test", true,
             "carried the placeholder of $TOKEN, which its policy puts in only for POST requests under /v1/ \
              (a path a server may read as another, as /v1/../admin, is under none)"),
            ("POST /v1/x?key=PLACEHOLDER HTTP/1.1\r\nHost: api.secret.test\r\n\r\n".to_owned(),
             "api.secret.test", true,
             "carried the placeholder of $TOKEN in the query string, where its policy does not put it in"),
        ] {
            assert_eq!(strays(&request, name, tls), vec![format!("{why}: sent as the placeholder")]);
        }
    }

    /// The host's Java store (where it has one) gains the CA, and the
    /// result is one `keytool` reads (where it has one too).
    #[test]
    fn the_ca_joins_javas_store_without_a_jvm() {
        let interceptor = interceptor(secret());
        assert!(java_store_with(b"not a store at all, twenty+ bytes", "a", b"c", 0).is_none());
        let Ok(store) = std::fs::read("/etc/ssl/certs/java/cacerts") else {
            return;
        };
        let Some(with) = java_store_with(&store, "shellgate-egress", &interceptor.ca_der(), 1)
        else {
            // Not JKS here (PKCS12, say): keytool does it instead.
            return;
        };
        let mut tampered = with.clone();
        tampered[20] ^= 1;
        assert!(java_store_with(&tampered, "x", b"c", 0).is_none());
        let keytool = std::path::Path::new("/usr/bin/keytool");
        if !keytool.exists() {
            return;
        }
        let path = std::env::temp_dir().join(format!("jks-test-{}", std::process::id()));
        std::fs::write(&path, &with).unwrap();
        let listed = std::process::Command::new(keytool)
            .args([
                "-list",
                "-storepass",
                "changeit",
                "-alias",
                "shellgate-egress",
                "-keystore",
            ])
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let text = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.status.success() && text.contains("trustedCertEntry"),
            "{text}"
        );
    }

    #[test]
    fn methods_paths_and_parts_scope_a_secret() {
        let interceptor = interceptor(DomainSecret {
            inject: vec![InjectInto::Query, InjectInto::Body],
            methods: vec!["POST".into()],
            paths: vec!["/v1/".into()],
            ..secret()
        });
        let name = "api.secret.test";
        assert_eq!(
            parts(&interceptor, name, "POST", "/v1/chat"),
            vec![InjectInto::Query, InjectInto::Body]
        );
        for (method, path) in [
            ("GET", "/v1/chat"),
            ("POST", "/v2/chat"),
            ("POST", "/v1/../admin"),
            ("POST", "/v1/%2e%2e/admin"),
            ("POST", "/v1/%2E%2E%2Fadmin"),
            ("POST", "/v1//x"),
            ("POST", "/v1/.%2fx"),
            ("POST", "/v1/a\\..\\b"),
            // What Tomcat and Spring read as a dot segment, what servers
            // that decode twice or decode overlong UTF-8 read as one.
            ("POST", "/v1/..;/admin"),
            ("POST", "/v1/..;jsessionid=x/admin"),
            ("POST", "/v1/.;/x"),
            ("POST", "/v1/..%3b/admin"),
            ("POST", "/v1/%252e%252e/admin"),
            ("POST", "/v1/%c0%ae%c0%ae/admin"),
            ("POST", "/v1/%e0%80%ae%e0%80%ae/admin"),
        ] {
            assert!(
                parts(&interceptor, name, method, path).is_empty(),
                "{method} {path}"
            );
        }
        // Path parameters that are not dot segments stay in scope.
        assert!(!parts(&interceptor, name, "POST", "/v1/chat;v=2").is_empty());
    }
}
