//! TLS to Postgres: the server's certificate verified against the host's
//! trusted roots (`/etc/ssl/certs/ca-certificates.crt`) and, for a private
//! CA, the PEM file `ca_file` names. Whether TLS is used is the URL's
//! `sslmode`: `prefer` (the default) uses it when the server offers it,
//! `require` refuses a server without it, `disable` never asks. When TLS is
//! used the certificate is always verified (as libpq's `verify-full`): a
//! server whose certificate no trusted CA signed is refused, never talked
//! to in the clear or unverified.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Result, StoreError};

const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The connector every connection of the store uses.
pub(crate) fn connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    let system = Path::new(SYSTEM_ROOTS);
    let files = ca_file.into_iter().chain(system.exists().then_some(system));
    for path in files {
        let unreadable = |e: &dyn std::fmt::Display| {
            StoreError::Config(format!("database CA file {}: {e}", path.display()))
        };
        for certificate in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
            // A root the library cannot use is skipped, as browsers do.
            let _ = roots.add(certificate.map_err(|e| unreadable(&e))?);
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| StoreError::Config(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
