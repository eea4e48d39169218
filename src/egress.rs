//! Egress: the one way Gatehouse makes outbound HTTP requests (upstreams, embedding services) —
//! rustls with the ring provider, system roots plus an optional CA bundle, verification on unless
//! the operator turned it off, no redirects, no proxy.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::RootCertStore;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// What one outbound client needs to know.
pub struct Options<'a> {
    /// Who the client talks to, for log lines (`upstream bamboo`, `embeddings`).
    pub peer: &'a str,
    pub tls_verify: bool,
    pub ca_bundle: Option<&'a std::path::Path>,
    pub connect_timeout: Duration,
    /// Whole-request timeout (None: the caller bounds requests itself).
    pub timeout: Option<Duration>,
}

pub fn client(options: &Options<'_>) -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut tls = if options.tls_verify {
        let mut roots = system_roots().clone();
        if let Some(bundle) = options.ca_bundle {
            let certs =
                CertificateDer::pem_file_iter(bundle).map_err(|e| format!("CA bundle {}: {e}", bundle.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("CA bundle {}: {e}", bundle.display()))?;
                roots.add(cert).map_err(|e| format!("CA bundle {}: {e}", bundle.display()))?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        tracing::warn!(peer = options.peer, "tls_verify = false: the peer's certificate is not checked");
        let verifier = Arc::new(NoVerification(provider.signature_verification_algorithms));
        builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth()
    };
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(options.connect_timeout.min(Duration::from_secs(10)))
        .pool_idle_timeout(Duration::from_secs(60));
    if let Some(timeout) = options.timeout {
        builder = builder.timeout(timeout);
    }
    builder.build().map_err(|e| format!("HTTP client setup: {e}"))
}

fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for cert in found.certs {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            tracing::warn!("no system CA certificates found; https upstreams need ca_bundle_env");
        }
        roots
    })
}

/// `tls_verify = false`: accepts any certificate but still checks handshake signatures.
#[derive(Debug)]
struct NoVerification(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}
