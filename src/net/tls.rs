//! The only rustls user: client configuration and a non-blocking TLS stream.
//!
//! [`client_config`] builds one shared `ClientConfig` at start (bundled web PKI roots plus an
//! optional `--ca-file`, or the no-verification mode behind `--danger-accept-invalid-certs`).
//! [`TlsStream`] drives a rustls `ClientConnection` over a mio `TcpStream` and implements
//! `Read`/`Write` with `WouldBlock` passed through, so tungstenite's handshake and the relay can
//! both use it. It never blocks and never buffers more than rustls' own bounded buffers.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// Cap on rustls' queued plaintext and ciphertext per connection (bytes). Bounds memory per
/// upstream; writes past it return `WouldBlock` until the socket drains.
pub const TLS_BUFFER_LIMIT: usize = 32 * 1024;

/// Builds the shared client config.
///
/// * `ca_file`: PEM file whose certificates are added as trust anchors (test seam and private
///   fronts). Errors name the file.
/// * `accept_invalid`: skip certificate and host-name verification (signatures are still
///   checked so the handshake stays well-formed).
///
/// ALPN offers `http/1.1` like a browser opening a WebSocket.
pub fn client_config(
    ca_file: Option<&Path>,
    accept_invalid: bool,
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut config = if accept_invalid {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = ca_file {
            let mut added = 0;
            let iter = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
            for cert in iter {
                let cert = cert.map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!(
                    "--ca-file {}: no certificates found",
                    path.display()
                ));
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS client connection over a non-blocking socket.
pub struct TlsStream {
    /// The TCP socket (registered with the reactor by its owner).
    pub sock: TcpStream,
    tls: ClientConnection,
}

impl TlsStream {
    /// Starts a TLS client on a connected (or connecting) socket with SNI `host`.
    ///
    /// Errors: `host` is not a valid DNS name or IP literal.
    pub fn new(config: &Arc<ClientConfig>, host: &str, sock: TcpStream) -> io::Result<TlsStream> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad TLS server name"))?;
        let mut tls = ClientConnection::new(config.clone(), name).map_err(tls_error)?;
        tls.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
        Ok(TlsStream { sock, tls })
    }

    /// Writes queued TLS records to the socket until it would block. Returns `Ok(true)` when
    /// nothing is left queued.
    pub fn flush_tls(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// True while TLS records are queued for the socket.
    pub fn wants_write(&self) -> bool {
        self.tls.wants_write()
    }

    /// Queues a TLS close_notify (best effort; the caller flushes).
    pub fn send_close_notify(&mut self) {
        self.tls.send_close_notify();
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match self.tls.read_tls(&mut self.sock) {
                Ok(0) => {
                    // EOF from TCP: rustls now knows; the next reader() call reports it.
                    self.tls.process_new_packets().map_err(tls_error)?;
                    return match self.tls.reader().read(buf) {
                        Ok(n) => Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            Err(io::ErrorKind::UnexpectedEof.into())
                        }
                        Err(e) => Err(e),
                    };
                }
                Ok(_) => {
                    if let Err(e) = self.tls.process_new_packets() {
                        // Try to tell the peer why (alert), then fail.
                        let _ = self.flush_tls();
                        return Err(tls_error(e));
                    }
                    self.flush_tls()?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut n = self.tls.writer().write(buf)?;
        self.flush_tls()?;
        if n == 0 && !buf.is_empty() {
            n = self.tls.writer().write(buf)?;
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.flush_tls()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.flush_tls()? {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}

/// Marker text carried by every TLS failure so the connect engine can classify it.
pub const TLS_ERROR_PREFIX: &str = "TLS: ";

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{TLS_ERROR_PREFIX}{e}"))
}

/// True if `e` came from the TLS layer (bad certificate, alert, protocol error).
pub fn is_tls_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidData && e.to_string().starts_with(TLS_ERROR_PREFIX)
}

/// `--danger-accept-invalid-certs`: accepts any certificate and name, still checks signatures.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
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
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_builds_and_missing_ca_file_is_named() {
        assert!(client_config(None, false).is_ok());
        assert!(client_config(None, true).is_ok());
        let err = client_config(Some(Path::new("/nonexistent/ca.pem")), false).unwrap_err();
        assert!(err.contains("--ca-file"), "{err}");
    }

    #[test]
    fn tls_errors_are_classified() {
        let e = tls_error(rustls::Error::General("x".into()));
        assert!(is_tls_error(&e));
        assert!(!is_tls_error(&io::Error::from(io::ErrorKind::InvalidData)));
    }
}
