//! TLS to PostgreSQL, configured as libpq users expect. Invariants:
//! - `sslmode` means what it means to libpq: `disable` never encrypts; `prefer` (the default)
//!   encrypts when the server offers it and verifies nothing; `require` encrypts, verifying the
//!   chain only when root certificates are given (as libpq does with a root certificate file);
//!   `verify-ca` verifies the chain to the given roots; `verify-full` also the server's name
//!   (a DNS name or an IP address in the certificate);
//! - a mode that verifies never connects without roots: `verify-ca`/`verify-full` without
//!   `sslrootcert` (or [`TlsRoots`]) is refused when the store opens, naming the setting;
//! - a certificate that does not verify, or a server that cannot meet the mode, is a
//!   configuration error ([`crate::Error::ConnectionRejected`], classified in
//!   `postgres/errors.rs`), never `Unavailable`. Only this module names `rustls`.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::fleet::{TlsMode, TlsRoots};
use crate::error::{Error, InvalidInput, Result};

/// The TLS half of a store's settings: the mode, and the roots when given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tls {
    pub(crate) mode: TlsMode,
    pub(crate) roots: Option<TlsRoots>,
}

impl Default for Tls {
    fn default() -> Self {
        Tls {
            mode: TlsMode::Prefer,
            roots: None,
        }
    }
}

impl Tls {
    /// The mode tokio-postgres negotiates with (it knows disable, prefer and require; what is
    /// verified is the connector's business).
    pub(crate) fn ssl_mode(&self) -> SslMode {
        match self.mode {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector for these settings: its roots loaded now, so that a missing or unreadable
    /// CA file fails the open, not every later connection.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, &self.roots) {
            (TlsMode::VerifyCa | TlsMode::VerifyFull, None) => {
                return Err(InvalidInput::Config(format!(
                    "sslmode={} verifies the server's certificate and needs the CA that signed \
                     it: add sslrootcert=FILE (or sslrootcert=system) to the URL, or call \
                     Config::tls_roots",
                    self.mode.as_str()
                ))
                .into())
            }
            (TlsMode::Disable | TlsMode::Prefer, _) | (TlsMode::Require, None) => {
                Arc::new(NoVerification(provider.clone()))
            }
            (mode, Some(roots)) => {
                let store = Arc::new(load_roots(roots)?);
                let webpki = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                    .build()
                    .map_err(|e| config(format!("the TLS roots cannot be used: {e}")))?;
                if mode == TlsMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(ChainOnly(webpki))
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| config(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

fn config(m: String) -> Error {
    InvalidInput::Config(m).into()
}

fn load_roots(roots: &TlsRoots) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match roots {
        TlsRoots::File(path) => {
            let certs = read_pem(path)?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(config(format!(
                    "sslrootcert {} holds no usable CA certificate",
                    path.display()
                )));
            }
        }
        TlsRoots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(config(format!(
                    "sslrootcert=system: no trusted roots found on this system ({:?})",
                    found.errors
                )));
            }
        }
    }
    Ok(store)
}

fn read_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs: std::result::Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| {
            config(format!(
                "sslrootcert {} cannot be read: {e}",
                path.display()
            ))
        })?
        .collect();
    certs.map_err(|e| {
        config(format!(
            "sslrootcert {} is not a PEM certificate file: {e}",
            path.display()
        ))
    })
}

/// `prefer`, and `require` without roots: the channel is encrypted, the peer not verified (as
/// libpq). The handshake's signatures are still checked, so the session is with whoever holds the
/// certificate's key.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`, and `require` with roots: the chain must lead to a trusted root; the name in the
/// certificate is not compared with the host.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Whether a connection error came from TLS itself (a certificate, a protocol the two sides do
/// not share): a configuration problem, not a network one.
pub(crate) fn is_tls_rejection(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
            {
                return true;
            }
        }
        cur = err.source();
    }
    false
}
