//! The shared rustls client configuration ([`client_config_with`]: bundled web PKI roots plus
//! an optional `--ca-file`, or the no-verification mode behind
//! `--danger-accept-invalid-certs`) and the cipher preference (`--tls-cipher`,
//! [`CipherPref`]): AES-GCM first where the CPU has AES instructions ([`cpu_has_aes`]),
//! ChaCha20-Poly1305 first elsewhere. Part of `net::tls`, the only rustls user, which
//! re-exports all of it; the stream lives there.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CipherSuite, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    SupportedCipherSuite,
};
/// Which AEAD family the client offers first (`--tls-cipher auto|aes-gcm|chacha20`). The
/// server picks, but Telegram's and Cloudflare's fronts honour a client that puts ChaCha20
/// first; the fake front in `tests/common` follows the client's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CipherPref {
    /// AES-GCM first when [`cpu_has_aes`] says the CPU has AES instructions, else ChaCha20.
    #[default]
    Auto,
    /// AES-GCM (256, then 128) first, whatever the CPU.
    AesGcm,
    /// ChaCha20-Poly1305 first, whatever the CPU.
    Chacha20,
}

/// A cipher family, as resolved from a [`CipherPref`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CipherFamily {
    /// AES-GCM (TLS 1.3 `TLS13_AES_*_GCM_*`, TLS 1.2 `ECDHE_*_WITH_AES_*_GCM_*`).
    AesGcm,
    /// ChaCha20-Poly1305 (TLS 1.3 and TLS 1.2 ECDHE suites).
    Chacha20,
}

impl CipherPref {
    /// Parses a flag value: `auto`, `aes-gcm` (also `aes`), `chacha20` (also `chacha`).
    /// Errors name the accepted values.
    pub fn parse(s: &str) -> Result<CipherPref, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(CipherPref::Auto),
            "aes-gcm" | "aes" => Ok(CipherPref::AesGcm),
            "chacha20" | "chacha" => Ok(CipherPref::Chacha20),
            _ => Err(format!(
                "unknown cipher preference {s:?} (auto, aes-gcm or chacha20)"
            )),
        }
    }

    /// The flag spelling (`auto`, `aes-gcm`, `chacha20`).
    pub fn name(self) -> &'static str {
        match self {
            CipherPref::Auto => "auto",
            CipherPref::AesGcm => "aes-gcm",
            CipherPref::Chacha20 => "chacha20",
        }
    }

    /// The family put first, `Auto` deciding by `cpu_has_aes`.
    pub fn resolve(self, cpu_has_aes: bool) -> CipherFamily {
        match self {
            CipherPref::AesGcm => CipherFamily::AesGcm,
            CipherPref::Chacha20 => CipherFamily::Chacha20,
            CipherPref::Auto if cpu_has_aes => CipherFamily::AesGcm,
            CipherPref::Auto => CipherFamily::Chacha20,
        }
    }
}

impl CipherFamily {
    /// `aes-gcm` or `chacha20`.
    pub fn name(self) -> &'static str {
        match self {
            CipherFamily::AesGcm => "aes-gcm",
            CipherFamily::Chacha20 => "chacha20",
        }
    }

    /// The family of a suite (every suite of the ring provider is AES-GCM or ChaCha20).
    pub(super) fn of(suite: CipherSuite) -> CipherFamily {
        match suite {
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => CipherFamily::Chacha20,
            _ => CipherFamily::AesGcm,
        }
    }
}

/// True if this CPU has AES instructions that ring uses for AES-GCM: x86/x86_64 with AES-NI
/// and PCLMULQDQ, aarch64 with the `aes` and `pmull` features (std's run-time detection);
/// 32-bit ARM when `/proc/cpuinfo`'s `Features` lines list `aes` (the crypto extension; std's
/// detection is not stable there); false on MIPS and every other target.
pub fn cpu_has_aes() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(target_arch = "arm")]
    {
        std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|t| cpuinfo_has_aes(&t))
    }
    #[cfg(not(any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "arm"
    )))]
    {
        false
    }
}

/// True if `/proc/cpuinfo` text (Linux ARM format: `Features\t: half thumb … aes pmull …`) has
/// at least one `Features` line and every one lists `aes`.
pub fn cpuinfo_has_aes(cpuinfo: &str) -> bool {
    let mut seen = false;
    for line in cpuinfo.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() != "Features" {
            continue;
        }
        if !value.split_whitespace().any(|f| f == "aes") {
            return false;
        }
        seen = true;
    }
    seen
}

/// `suites` reordered: TLS 1.3 suites before TLS 1.2 ones (as rustls lists them), and within
/// each version the `first` family ahead of the other; otherwise the given order is kept.
pub fn order_suites(
    suites: &[SupportedCipherSuite],
    first: CipherFamily,
) -> Vec<SupportedCipherSuite> {
    let mut out = suites.to_vec();
    out.sort_by_key(|s| {
        let tls12 = matches!(s, SupportedCipherSuite::Tls12(_));
        (tls12, CipherFamily::of(s.suite()) != first)
    });
    out
}

/// [`client_config_with`] with the `auto` cipher preference.
pub fn client_config(
    ca_file: Option<&Path>,
    accept_invalid: bool,
) -> Result<Arc<ClientConfig>, String> {
    client_config_with(ca_file, accept_invalid, CipherPref::Auto)
}

/// Builds the shared client config.
///
/// * `ca_file`: PEM file whose certificates are added as trust anchors (test seam and private
///   fronts). Errors name the file.
/// * `accept_invalid`: skip certificate and host-name verification (signatures are still
///   checked so the handshake stays well-formed).
/// * `cipher`: which family the ClientHello lists first ([`order_suites`]); the choice is
///   logged once at debug level.
///
/// ALPN offers `http/1.1` like a browser opening a WebSocket.
pub fn client_config_with(
    ca_file: Option<&Path>,
    accept_invalid: bool,
    cipher: CipherPref,
) -> Result<Arc<ClientConfig>, String> {
    let has_aes = cpu_has_aes();
    let first = cipher.resolve(has_aes);
    log::debug!(
        "TLS: {} suites first (--tls-cipher {}; CPU AES instructions: {})",
        first.name(),
        cipher.name(),
        if has_aes { "yes" } else { "no" }
    );
    let base = rustls::crypto::ring::default_provider();
    let provider = Arc::new(CryptoProvider {
        cipher_suites: order_suites(&base.cipher_suites, first),
        ..base
    });
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
