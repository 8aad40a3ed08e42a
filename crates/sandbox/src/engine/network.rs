//! A container's way out: what its init is told (see `helper::network`)
//! and the egress proxy that serves the sockets init sends back.
//!
//! Every networked container also gets its own CA (see
//! `shellgate_egress::intercept`: the proxy terminates its TLS to check
//! each request and put its secrets in), made in memory at its first start
//! in this process: its certificate, with the host's roots, becomes the
//! container's system trust store and the bundle the usual variables name,
//! and (in the `host` image, where the host has Java) Java's trust store
//! too.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shellgate_egress::intercept::Interceptor;
use shellgate_egress::policy::Allowlist;
use shellgate_egress::proxy::{ContainerEgress, Serving, Sockets};

use super::container::Container;
use super::lock;
use crate::error::{IoContext, SandboxError};
use crate::image::ImageStore;

/// The resolver every networked container uses: the proxy's DNS socket.
const RESOLV_CONF: &str = "# shellgate: names are answered by the egress proxy\n\
                           nameserver 127.0.0.1\noptions timeout:2 attempts:2\n";

/// The proxy as `HTTP(S)_PROXY` names it: its HTTP socket, which also
/// serves `CONNECT` and absolute-form requests.
const PROXY_URL: &str = "http://127.0.0.1:80";

/// The system trust store inside a container (Debian's path, which
/// OpenSSL, curl, Python's `ssl` and Go read).
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Java's trust store inside a container (Debian's; the JDK's own
/// `lib/security/cacerts` links to it).
const JAVA_STORE: &str = "/etc/ssl/certs/java/cacerts";
/// Where the host's `keytool` may be.
const KEYTOOLS: [&str; 2] = ["/usr/bin/keytool", "/usr/lib/jvm/default-java/bin/keytool"];

/// What init needs for a container's network: whether to make the proxy's
/// sockets, the variables commands get, and files bound over the image.
pub(super) struct NetworkSetup {
    pub egress: bool,
    pub env: Vec<(String, String)>,
    pub file_binds: Vec<(PathBuf, String)>,
}

/// The engine's networks: the egress proxy's settings every networked
/// container is served with, and the files their network namespaces see.
pub(super) struct Networks {
    /// `None`: no container may have network access.
    egress: Option<EgressSettings>,
    /// The networked containers' `resolv.conf` (see [`Networks::open`]).
    resolv_conf: PathBuf,
}

impl Networks {
    /// The networks of an engine on `data_dir`, writing the networked
    /// containers' `resolv.conf` there.
    pub fn open(data_dir: &Path, egress: Option<EgressSettings>) -> Result<Self, SandboxError> {
        let dir = data_dir.join("network");
        std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
        // Written only when it differs: running containers have it bound,
        // and an engine opens on every one-shot `exec`.
        let resolv_conf = dir.join("resolv.conf");
        if !std::fs::read(&resolv_conf).is_ok_and(|current| current == RESOLV_CONF.as_bytes()) {
            std::fs::write(&resolv_conf, RESOLV_CONF)
                .context(|| "write network/resolv.conf".into())?;
        }
        Ok(Self {
            egress,
            resolv_conf,
        })
    }

    /// Refuses a network policy this engine cannot enforce.
    pub fn check(&self, spec: &crate::backend::ContainerSpec) -> Result<(), SandboxError> {
        if spec.network.is_disabled() {
            return Ok(());
        }
        if self.egress.is_none() {
            return Err(egress_off());
        }
        Allowlist::parse(&spec.network.allowed_domains, &Allowlist::any())
            .map(drop)
            .map_err(|e| SandboxError::InvalidRequest {
                param: "network_policy.allowed_domains",
                message: e.to_string(),
            })
    }

    /// A network update's list as the proxy reads it (already within the
    /// operator's list; empty: every name refused).
    pub fn check_update(&self, allowed_domains: &[String]) -> Result<Allowlist, SandboxError> {
        if self.egress.is_none() {
            return Err(egress_off());
        }
        if allowed_domains.is_empty() {
            return Ok(Allowlist::default());
        }
        Allowlist::parse(allowed_domains, &Allowlist::any()).map_err(|e| {
            SandboxError::InvalidRequest {
                param: "network_policy.allowed_domains",
                message: e.to_string(),
            }
        })
    }

    /// What init is told of the container's network (`images`: whether
    /// its image lets the trust store be bound over its own).
    pub fn setup(
        &self,
        container: &Container,
        images: &ImageStore,
    ) -> Result<NetworkSetup, SandboxError> {
        let network = &container.spec.network;
        if container.network_off() {
            // Secrets not held: no proxy, but `$NAME` still holds the
            // placeholder scripts expect.
            return Ok(NetworkSetup {
                egress: false,
                env: network
                    .secrets
                    .iter()
                    .map(|s| (s.name.clone(), s.placeholder.clone()))
                    .collect(),
                file_binds: Vec::new(),
            });
        }
        let mut env = Vec::new();
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.push((name.to_owned(), PROXY_URL.to_owned()));
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
        }
        for secret in &network.secrets {
            env.push((secret.name.clone(), secret.placeholder.clone()));
        }
        let mut file_binds = vec![(self.resolv_conf.clone(), "/etc/resolv.conf".to_owned())];
        // Made by `prepare` for this start.
        if lock(&container.interceptor).is_some() {
            let bundle = container.dir.join(BUNDLE_FILE);
            if bundle.exists() && images.can_cover_etc_file(&container.spec.image, SYSTEM_BUNDLE) {
                file_binds.push((bundle, SYSTEM_BUNDLE.to_owned()));
                for name in shellgate_egress::secrets::CA_BUNDLE_VARIABLES {
                    env.push((name.to_owned(), SYSTEM_BUNDLE.to_owned()));
                }
            }
            let java = container.dir.join(JAVA_FILE);
            if java.exists() {
                file_binds.push((java, JAVA_STORE.to_owned()));
            }
        }
        Ok(NetworkSetup {
            egress: true,
            env,
            file_binds,
        })
    }

    /// Before a start: the container's interceptor (made at its first
    /// start in this process, for every networked container) and the trust
    /// stores that hold its CA, written off the async workers.
    pub async fn prepare(
        &self,
        container: &Container,
        images: &ImageStore,
    ) -> Result<(), SandboxError> {
        let Some((interceptor, new)) = self.interceptor(container)? else {
            return Ok(());
        };
        let dir = container.dir.clone();
        let java = container.spec.image == crate::image::HOST_IMAGE
            && images.can_cover_etc_file(&container.spec.image, JAVA_STORE);
        tokio::task::spawn_blocking(move || {
            write_trust_stores(
                &dir,
                &interceptor.ca_pem(),
                &interceptor.ca_der(),
                new,
                java,
            )
        })
        .await
        .map_err(|e| SandboxError::Setup(format!("the trust store writer failed: {e}")))?
    }

    /// The container's interceptor, and whether it was just made; `None`
    /// for a container without network.
    fn interceptor(
        &self,
        container: &Container,
    ) -> Result<Option<(Arc<Interceptor>, bool)>, SandboxError> {
        if container.spec.network.is_disabled() {
            return Ok(None);
        }
        let secrets = &container.secrets();
        let mut slot = lock(&container.interceptor);
        if let Some(interceptor) = slot.as_ref() {
            return Ok(Some((Arc::clone(interceptor), false)));
        }
        let settings = self.egress.as_ref().ok_or_else(|| {
            SandboxError::Setup("the container has a network policy but egress is off".into())
        })?;
        let interceptor =
            Interceptor::new(&container.id, secrets, Arc::clone(&settings.upstream_tls))
                .map(Arc::new)
                .map_err(|e| SandboxError::Setup(format!("the egress proxy's CA: {e}")))?;
        *slot = Some(Arc::clone(&interceptor));
        Ok(Some((interceptor, true)))
    }

    /// Serves a started container's proxy sockets (HTTP, HTTPS, DNS, as
    /// init sent them); `None` for a container without network.
    pub fn serve(
        &self,
        container: &Container,
        sockets: Vec<OwnedFd>,
    ) -> Result<Option<Serving>, SandboxError> {
        let network = &container.spec.network;
        if network.is_disabled() {
            return Ok(None);
        }
        let missing = container.secrets_missing();
        if !missing.is_empty() {
            self.note_network_off(container, &missing);
            return Ok(None);
        }
        let settings = self.egress.clone().ok_or_else(|| {
            SandboxError::Setup("the container has a network policy but egress is off".into())
        })?;
        let [http, https, dns]: [OwnedFd; 3] = sockets
            .try_into()
            .map_err(|_| SandboxError::Setup("init sent no egress proxy sockets".into()))?;
        // The list of its last network update, which may have emptied it
        // (every name refused, the proxy kept for the next update).
        let allowed_domains = container.allowed_domains();
        let allowlist = if allowed_domains.is_empty() {
            Allowlist::default()
        } else {
            Allowlist::parse(&allowed_domains, &Allowlist::any())
                .map_err(|e| SandboxError::Setup(format!("the network policy: {e}")))?
        };
        let interceptor = lock(&container.interceptor).clone();
        let egress = ContainerEgress::new(
            container.id.clone(),
            allowlist,
            settings,
            interceptor,
            // The container's one masker (the values it holds): the same
            // that masks its command output and files.
            container.masker(),
            &network.tls_passthrough,
        );
        egress
            .serve(Sockets {
                http: http.into(),
                https: https.into(),
                dns: dns.into(),
            })
            .map(Some)
            .context(|| "serve the egress proxy's sockets".into())
    }

    /// Tells the container's egress log why it has no network this start.
    fn note_network_off(&self, container: &Container, missing: &[String]) {
        let Some(settings) = &self.egress else {
            return;
        };
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        for secret in container
            .spec
            .network
            .secrets
            .iter()
            .filter(|s| missing.contains(&s.name))
        {
            let _ = settings.log.try_send(shellgate_egress::proxy::Attempt {
                time,
                container: container.id.clone(),
                kind: "secret",
                requested_name: Some(secret.domain.clone()),
                server_name: None,
                address: None,
                port: 0,
                verdict: shellgate_egress::proxy::Verdict::Notice,
                reason: format!(
                    "network off: secrets not re-supplied (the value of secret {} is gone: the \
                     server restarted since the container was created)",
                    secret.name
                ),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                unlogged: None,
            });
        }
    }
}

/// The container's copies of the system bundle and (with `java`) of Java's
/// store, each with `ca` added; made again when the CA is `new`.
fn write_trust_stores(
    dir: &std::path::Path,
    ca: &str,
    ca_der: &[u8],
    new: bool,
    java: bool,
) -> Result<(), SandboxError> {
    let bundle = dir.join(BUNDLE_FILE);
    if new || !bundle.exists() {
        let mut contents = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
        if !contents.is_empty() && !contents.ends_with('\n') {
            contents.push('\n');
        }
        contents.push_str(ca);
        std::fs::write(&bundle, contents).context(|| format!("write {}", bundle.display()))?;
    }
    let store = dir.join(JAVA_FILE);
    if !java || (!new && store.exists()) {
        return Ok(());
    }
    let _ = std::fs::remove_file(&store);
    // The host's store, copied, with the CA added: Java reads only its own
    // format. Without it Java programs would refuse the proxy's
    // certificates. A JKS store (Debian's) is extended here, in a few
    // milliseconds; any other goes through a `keytool` run (a JVM start).
    let staging = dir.join(format!("{JAVA_FILE}.new"));
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let extended = std::fs::read(JAVA_STORE).ok().and_then(|host| {
        shellgate_egress::intercept::java_store_with(&host, "shellgate-egress", ca_der, created)
    });
    if let Some(extended) = extended {
        std::fs::write(&staging, extended).context(|| format!("write {}", staging.display()))?;
        return std::fs::rename(&staging, &store).context(|| format!("rename {}", store.display()));
    }
    let Some(keytool) = KEYTOOLS.iter().find(|k| std::path::Path::new(k).exists()) else {
        return Ok(());
    };
    let ca_file = dir.join("egress-ca-only.pem");
    std::fs::copy(JAVA_STORE, &staging).context(|| format!("copy {JAVA_STORE}"))?;
    std::fs::write(&ca_file, ca).context(|| format!("write {}", ca_file.display()))?;
    let imported = std::process::Command::new(keytool)
        .args(["-importcert", "-noprompt", "-alias", "shellgate-egress"])
        .arg("-file")
        .arg(&ca_file)
        .arg("-keystore")
        .arg(&staging)
        .args(["-storepass", "changeit"])
        .stdin(std::process::Stdio::null())
        .output();
    let _ = std::fs::remove_file(&ca_file);
    match imported {
        Ok(output) if output.status.success() => {
            std::fs::rename(&staging, &store).context(|| format!("rename {}", store.display()))
        }
        Ok(output) => {
            let _ = std::fs::remove_file(&staging);
            tracing::warn!(
                "could not add the egress CA to Java's trust store: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&staging);
            tracing::warn!("could not run {keytool}: {e}");
            Ok(())
        }
    }
}

/// The container's system bundle (host roots and its CA) and Java store.
const BUNDLE_FILE: &str = "egress-ca.pem";
const JAVA_FILE: &str = "egress-java-cacerts";

/// The proxy's settings, shared by every container of an engine.
pub type EgressSettings = Arc<shellgate_egress::proxy::Settings>;

/// The refusal of network access by a server whose egress proxy is off.
fn egress_off() -> SandboxError {
    SandboxError::InvalidRequest {
        param: "network_policy",
        message: "this server's egress proxy is off, so containers cannot have network access \
                  here (the operator can turn it on)"
            .into(),
    }
}
