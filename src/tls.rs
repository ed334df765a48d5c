//! TLS for the crate's HTTP clients (the webhook sink, the binary's OTLP export): rustls
//! with the ring crypto provider, the same stack the SQL drivers use, so a build carries
//! one TLS implementation. Trust comes from the system's certificate store (`/etc/ssl`,
//! what `update-ca-certificates` manages; the container image ships Debian's), plus an
//! optional PEM file of the operator's own CAs.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A client config for https: the system's roots (those that load; a store with none left
/// still reaches plain http and a server signed by `ca_file`), plus every certificate of
/// the PEM file `ca_file`. The error names the file and what is wrong with it.
pub fn client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_file {
        let shown = path.display();
        let pem = std::fs::read(path).map_err(|error| format!("cannot read {shown}: {error}"))?;
        let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|error| format!("{shown} is not a PEM certificate file: {error}"))?;
        if certificates.is_empty() {
            return Err(format!("{shown} holds no PEM certificate"));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|error| format!("{shown}: a certificate cannot be trusted: {error}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("no TLS version in common with the crypto provider: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
