//! TLS to upstream endpoints: the public roots by default, or only the private CA bundle
//! the admin names (air-gapped networks run their own CA), and an optional client
//! certificate. rustls with ring, the provider ureq is built with.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::config::TlsSettings;

/// The client configuration for `tls`.
pub fn client_config(tls: &TlsSettings) -> Result<rustls::ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    match &tls.ca_file {
        Some(path) => {
            let shown = path.display();
            let certificates = CertificateDer::pem_file_iter(path)
                .map_err(|err| format!("CA bundle {shown}: {err}"))?;
            for certificate in certificates {
                let certificate = certificate.map_err(|err| format!("CA bundle {shown}: {err}"))?;
                roots
                    .add(certificate)
                    .map_err(|err| format!("CA bundle {shown}: {err}"))?;
            }
            if roots.is_empty() {
                return Err(format!("CA bundle {shown} holds no certificate"));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    // ring is the provider ureq is built with; rustls 0.23.48 deprecates it only because it
    // lacks post-quantum key exchange, which private-CA upstreams do not negotiate anyway.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?
        .with_root_certificates(roots);
    match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|err| format!("client certificate {}: {err}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|err| format!("client key {}: {err}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|err| format!("client certificate: {err}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}
