//! Putting secrets in on the wire.
//!
//! TLS towards a domain that has a secret is the one connection the proxy
//! terminates: with a certificate for that name from the container's own
//! CA (made in memory when the container starts; only that container
//! trusts it). Each request's placeholders are replaced by the values — in
//! the request target, the header values and a small text body — and the
//! request goes on over a new TLS connection to the checked address,
//! verified against the host's roots (plus any the operator adds). The
//! response comes back with any echo of a value turned back into its
//! placeholder. One request per connection (`Connection: close`), so every
//! request is one the proxy rewrote; only HTTP/1.1 is offered.
//!
//! A value is sent to its own domain only: the replacement applies to the
//! secrets whose domain matches the connection's checked name, and a
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
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::policy::{normalize, Pattern};
use crate::proxy::{connect_to, read_head, relay, ContainerEgress, Seen, Verdict};
use crate::secrets::{DomainSecret, SecretValue};
use crate::wire::{self, Head, ResponseParse};

/// Largest request body whose placeholders are replaced (bigger ones are
/// streamed as they are).
const MAX_REWRITTEN_BODY: usize = 64 * 1024;
/// Largest response body searched for echoed values.
const MAX_MASKED_BODY: usize = 1 << 20;
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
    placeholder: String,
    value: SecretValue,
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
                    placeholder: secret.placeholder.clone(),
                    value: secret.value.clone()?,
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

    /// Whether `name` has a secret to put in.
    pub fn applies(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s.pattern.matches(name))
    }

    /// Replaces the placeholders of `name`'s secrets in `text`.
    fn inject(&self, name: &str, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in self.secrets.iter().filter(|s| s.pattern.matches(name)) {
            if text.contains(&secret.placeholder) {
                text = text.replace(&secret.placeholder, secret.value.expose());
            }
        }
        text
    }

    /// Turns every value back into its placeholder in `bytes`.
    fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for secret in &self.secrets {
            out = replace_bytes(
                &out,
                secret.value.expose().as_bytes(),
                secret.placeholder.as_bytes(),
            );
        }
        out
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
        egress: &ContainerEgress,
        client: TcpStream,
        hello: Vec<u8>,
        name: String,
        destination: SocketAddr,
        seen: Seen,
        started: Instant,
    ) {
        match self.exchange(client, hello, &name, destination).await {
            Ok(bytes) => egress.record(
                "https",
                seen,
                Verdict::Allowed,
                "allowed; secret put in".into(),
                bytes,
                started,
            ),
            Err(reason) => egress.record("https", seen, Verdict::Denied, reason, (0, 0), started),
        }
    }

    async fn exchange(
        &self,
        client: TcpStream,
        hello: Vec<u8>,
        name: &str,
        destination: SocketAddr,
    ) -> Result<(u64, u64), String> {
        let config = self.server_config(name).map_err(|e| e.to_string())?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let mut client = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            acceptor.accept(Rewind {
                prefix: hello,
                at: 0,
                inner: client,
            }),
        )
        .await
        .map_err(|_| "the container's TLS handshake timed out".to_owned())?
        .map_err(|e| format!("the container's TLS handshake failed: {e}"))?;

        let mut buffer = Vec::new();
        let head = read_head(&mut client, &mut buffer, |bytes| {
            match wire::request_head(bytes) {
                Head::Incomplete => None,
                other => Some(other),
            }
        })
        .await;
        let Some(Head::Request(mut head)) = head else {
            return Err("not an HTTP/1 request inside TLS".into());
        };
        let host = head
            .host
            .as_deref()
            .map(|h| normalize(&wire::split_authority(h).0));
        if host.as_deref() != Some(name) {
            return Err(format!(
                "the TLS connection to {name} carried a request for {host:?}"
            ));
        }
        let mut body = buffer.split_off(head.length);
        let expects_continue = head
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        head.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("expect"));
        let length: Option<usize> = head.header("content-length").and_then(|v| v.parse().ok());
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let rewritable = !chunked
            && length.is_some_and(|l| l <= MAX_REWRITTEN_BODY)
            && head.header("content-encoding").is_none()
            && head.header("content-type").is_some_and(textual);
        if expects_continue {
            client
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(|e| e.to_string())?;
        }
        if rewritable {
            let length = length.unwrap_or(0);
            while body.len() < length {
                let mut chunk = vec![0u8; length - body.len()];
                let n = tokio::time::timeout(HANDSHAKE_TIMEOUT, client.read(&mut chunk))
                    .await
                    .map_err(|_| "the request body stalled".to_owned())?
                    .map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("the request body ended early".into());
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(length);
            if let Ok(text) = std::str::from_utf8(&body) {
                body = self.inject(name, text).into_bytes();
            }
            for (n, v) in head.headers.iter_mut() {
                if n.eq_ignore_ascii_case("content-length") {
                    *v = body.len().to_string();
                }
            }
        }
        let target = self.inject(name, &wire::origin_form(&head.target));
        let mut request = head.forwarded(&target, |value| self.inject(name, value));
        request.extend_from_slice(&body);

        let upstream = connect_to(destination).await?;
        let server_name =
            ServerName::try_from(name.to_owned()).map_err(|e| format!("{name}: {e}"))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.upstream));
        let mut upstream =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(server_name, upstream))
                .await
                .map_err(|_| format!("the TLS handshake with {name} timed out"))?
                .map_err(|e| format!("{name}'s certificate was not accepted: {e}"))?;
        upstream
            .write_all(&request)
            .await
            .map_err(|e| e.to_string())?;
        let mut bytes = (request.len() as u64, 0u64);
        if !rewritable && (chunked || length.unwrap_or(0) > 0) {
            // A large or streamed body: the rest goes as it comes, and so
            // does the answer.
            let (out, back) = relay(&mut client, &mut upstream).await;
            return Ok((bytes.0 + out, back));
        }

        // The answer: its head (and a small body) with values masked.
        let mut answer = Vec::new();
        let response = read_head(
            &mut upstream,
            &mut answer,
            |bytes| match wire::response_head(bytes) {
                ResponseParse::Incomplete => None,
                ResponseParse::NotHttp => Some(None),
                ResponseParse::Response(head) => Some(Some(head)),
            },
        )
        .await;
        // (A 1xx interim answer is not searched: the rest is relayed.)
        let Some(Some(response)) = response.filter(|r| r.as_ref().is_some_and(|r| r.status >= 200))
        else {
            client.write_all(&answer).await.map_err(|e| e.to_string())?;
            let (_, back) = relay(&mut client, &mut upstream).await;
            return Ok((bytes.0, answer.len() as u64 + back));
        };
        let mut rest = answer.split_off(response.length);
        let head_bytes = self.mask(&answer);
        let maskable = response
            .content_length
            .is_some_and(|l| l <= MAX_MASKED_BODY)
            && !response.encoded
            && !response.chunked;
        if maskable {
            let length = response.content_length.unwrap_or(0);
            while rest.len() < length {
                let mut chunk = vec![0u8; (length - rest.len()).min(64 * 1024)];
                let n = upstream.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                rest.extend_from_slice(&chunk[..n]);
            }
            let masked = self.mask(&rest);
            let head_text = String::from_utf8_lossy(&head_bytes).into_owned();
            let head_text = set_content_length(&head_text, masked.len());
            client
                .write_all(head_text.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            client.write_all(&masked).await.map_err(|e| e.to_string())?;
            bytes.1 = (answer.len() + rest.len()) as u64;
        } else {
            client
                .write_all(&head_bytes)
                .await
                .map_err(|e| e.to_string())?;
            client.write_all(&rest).await.map_err(|e| e.to_string())?;
            let (out, back) = relay(&mut client, &mut upstream).await;
            bytes.0 += out;
            bytes.1 = (answer.len() + rest.len()) as u64 + back;
        }
        let _ = client.shutdown().await;
        Ok(bytes)
    }
}

/// Whether a `Content-Type` is text whose placeholders may be replaced.
fn textual(content_type: &str) -> bool {
    let content_type = content_type.to_ascii_lowercase();
    content_type.starts_with("text/")
        || content_type.contains("json")
        || content_type.contains("x-www-form-urlencoded")
        || content_type.contains("xml")
}

fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut at = 0;
    while at < haystack.len() {
        if haystack[at..].starts_with(needle) {
            out.extend_from_slice(with);
            at += needle.len();
        } else {
            out.push(haystack[at]);
            at += 1;
        }
    }
    out
}

/// `head` with its `Content-Length` set to `length`.
fn set_content_length(head: &str, length: usize) -> String {
    let mut out = String::with_capacity(head.len());
    for line in head.split_inclusive("\r\n") {
        match line.split_once(':') {
            Some((name, _)) if name.eq_ignore_ascii_case("content-length") => {
                out.push_str(&format!("{name}: {length}\r\n"));
            }
            _ => out.push_str(line),
        }
    }
    out
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

    fn interceptor() -> Interceptor {
        let upstream = Arc::new(upstream_tls(&[]).unwrap());
        Interceptor::new(
            "cntr_test",
            &[DomainSecret {
                domain: "api.secret.test".into(),
                name: "TOKEN".into(),
                placeholder: "PLACEHOLDER".into(),
                value: Some(SecretValue::new("real-value")),
            }],
            upstream,
        )
        .unwrap()
    }

    #[test]
    fn values_go_to_their_domain_only_and_echoes_are_masked() {
        let interceptor = interceptor();
        assert!(interceptor.applies("api.secret.test"));
        assert!(!interceptor.applies("other.test"));
        assert_eq!(
            interceptor.inject("api.secret.test", "Bearer PLACEHOLDER"),
            "Bearer real-value"
        );
        assert_eq!(
            interceptor.inject("other.test", "Bearer PLACEHOLDER"),
            "Bearer PLACEHOLDER"
        );
        assert_eq!(
            interceptor.mask(b"{\"auth\":\"Bearer real-value\"}"),
            b"{\"auth\":\"Bearer PLACEHOLDER\"}".to_vec()
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
    fn content_length_is_rewritten() {
        assert_eq!(
            set_content_length("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nX: y\r\n\r\n", 12),
            "HTTP/1.1 200 OK\r\ncontent-length: 12\r\nX: y\r\n\r\n"
        );
        assert_eq!(replace_bytes(b"aXXbXX", b"XX", b"-"), b"a-b-".to_vec());
        assert!(textual("application/json; charset=utf-8") && !textual("image/png"));
    }
}
