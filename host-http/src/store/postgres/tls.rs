//! Connections to PostgreSQL with TLS as libpq makes them: `sslmode` and `sslrootcert` in the
//! `--db` URL, over rustls with the `ring` provider.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require` and verifies nothing itself, so
//! the two parameters are taken out of the URL here and the rest is handed to
//! [`tokio_postgres::Config`]. Every connection the program makes (the serving pool, `migrate`,
//! the `provider` commands, the test helpers) goes through [`PgConnector`].
//!
//! | `sslmode` | TLS | certificate chain | host name |
//! | --- | --- | --- | --- |
//! | `disable` | never | – | – |
//! | `allow` | only if the plain attempt is refused by the server | as `require` | – |
//! | `prefer` (default) | if the server offers it; plain when it declines or the handshake fails | as `require` | – |
//! | `require` | always | checked only when a root certificate file is there | – |
//! | `verify-ca` | always | checked | – |
//! | `verify-full` | always | checked | checked |
//!
//! The trusted roots: `sslrootcert=<file>` (PEM, one or more certificates);
//! `sslrootcert=system`, the webpki (Mozilla) roots, which like libpq 16 needs `verify-full`;
//! without `sslrootcert`, `~/.postgresql/root.crt` when that file exists (libpq's default), and
//! otherwise, for `verify-ca` and `verify-full` only, the webpki roots (libpq would refuse to
//! connect). As in libpq, `require`, `prefer` and `allow` check the chain (not the name) when a
//! root file is given or found.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::Digest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{Client, Socket};

use crate::store::StoreError;

/// The `sslmode` of a URL, libpq's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// Plain first; TLS if the server refuses the plain connection.
    Allow,
    /// TLS if the server offers it (libpq's default).
    Prefer,
    /// TLS, the certificate unchecked unless a root certificate file is given or found.
    Require,
    /// TLS, the certificate chain checked against the trusted roots, the host name not.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

impl SslMode {
    /// The URL's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl FromStr for SslMode {
    type Err = StoreError;
    fn from_str(text: &str) -> Result<SslMode, StoreError> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(StoreError::Config(format!(
                    "invalid sslmode {text:?} in the PostgreSQL URL: use disable, allow, prefer, \
                     require, verify-ca or verify-full"
                )));
            }
        })
    }
}

/// Where the trusted roots of a connection come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RootSource {
    /// `sslrootcert=<file>`.
    File(PathBuf),
    /// `~/.postgresql/root.crt`, found without `sslrootcert`.
    DefaultFile(PathBuf),
    /// The webpki (Mozilla) roots: `sslrootcert=system`, or `verify-*` with no file.
    System,
}

impl std::fmt::Display for RootSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootSource::File(path) => write!(f, "sslrootcert={}", path.display()),
            RootSource::DefaultFile(path) => write!(f, "{}", path.display()),
            RootSource::System => f.write_str("the system (webpki) roots"),
        }
    }
}

/// The URL without `sslmode` and `sslrootcert`, and what they said.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SplitUrl {
    rest: String,
    mode: Option<SslMode>,
    root_cert: Option<String>,
}

/// Parameters of libpq's that this program does not implement; named so that a URL with one
/// fails with a clear message rather than tokio-postgres's "unknown option".
const UNSUPPORTED: &[&str] = &[
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslcompression",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "requirepeer",
    "gssencmode",
];

fn split_url(url: &str) -> Result<SplitUrl, StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(SplitUrl {
            rest: url.to_owned(),
            mode: None,
            root_cert: None,
        });
    };
    let (mut mode, mut root_cert, mut kept) = (None, None, Vec::new());
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| {
                    StoreError::Config(format!(
                        "invalid percent-encoding in the PostgreSQL URL's parameter {key:?}"
                    ))
                })
        };
        match decode(key)?.as_str() {
            "sslmode" => mode = Some(decode(value)?.parse()?),
            "sslrootcert" => root_cert = Some(decode(value)?),
            other if UNSUPPORTED.contains(&other) => {
                return Err(StoreError::Config(format!(
                    "the PostgreSQL URL parameter {other} is not supported (supported for TLS: \
                     sslmode, sslrootcert)"
                )));
            }
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(SplitUrl {
        rest,
        mode,
        root_cert,
    })
}

/// How the server's certificate is checked.
#[derive(Debug, Clone)]
enum Check {
    /// Not at all (`require`, `prefer`, `allow` without a root file).
    Nothing,
    /// The chain against these roots (`verify-ca`; or a root file with a weaker mode).
    Chain(RootSource),
    /// The chain and the host name (`verify-full`).
    Full(RootSource),
}

fn home_root_cert() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".postgresql").join("root.crt");
    path.is_file().then_some(path)
}

/// What the server's certificate must pass, from the mode and `sslrootcert`, as libpq decides.
fn check_of(mode: SslMode, root_cert: Option<&str>) -> Result<Check, StoreError> {
    let roots = match root_cert {
        Some("system") => {
            if mode != SslMode::VerifyFull {
                return Err(StoreError::Config(format!(
                    "sslrootcert=system needs sslmode=verify-full, not {} (the system roots \
                     vouch for any name they signed)",
                    mode.as_str()
                )));
            }
            Some(RootSource::System)
        }
        Some(path) => Some(RootSource::File(PathBuf::from(path))),
        None => home_root_cert().map(RootSource::DefaultFile),
    };
    Ok(match (mode, roots) {
        (SslMode::Disable, _) => Check::Nothing,
        (SslMode::VerifyFull, roots) => Check::Full(roots.unwrap_or(RootSource::System)),
        (SslMode::VerifyCa, roots) => Check::Chain(roots.unwrap_or(RootSource::System)),
        (_, Some(roots)) => Check::Chain(roots),
        (_, None) => Check::Nothing,
    })
}

fn load_roots(source: &RootSource) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    let path = match source {
        RootSource::System => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            return Ok(store);
        }
        RootSource::File(path) | RootSource::DefaultFile(path) => path,
    };
    let invalid = |detail: String| {
        StoreError::Config(match source {
            RootSource::DefaultFile(path) => format!(
                "root certificate file {} (libpq's default when the URL has no sslrootcert): \
                 {detail}",
                path.display()
            ),
            _ => format!("{source}: {detail}"),
        })
    };
    let bytes = std::fs::read(path).map_err(|e| invalid(format!("cannot be read: {e}")))?;
    let mut found = 0;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| invalid(format!("is not valid PEM: {e}")))?;
        store
            .add(cert)
            .map_err(|e| invalid(format!("holds an invalid certificate: {e}")))?;
        found += 1;
    }
    if found == 0 {
        return Err(invalid("holds no PEM certificate".to_owned()));
    }
    Ok(store)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls client configuration that checks what `check` says.
fn client_config(check: &Check) -> Result<Arc<rustls::ClientConfig>, StoreError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Config(format!("TLS setup: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(NoCertificateCheck(provider)),
        Check::Chain(roots) | Check::Full(roots) => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(load_roots(roots)?), provider)
                    .build()
                    .map_err(|e| StoreError::Config(format!("TLS setup ({roots}): {e}")))?;
            if matches!(check, Check::Full(_)) {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `require` without roots: any certificate, but the handshake's signatures are still checked
/// (the server holds the key of the certificate it showed).
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
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

/// `verify-ca`: webpki's check with a name mismatch forgiven. webpki checks the chain (and its
/// validity period) before the name, so a name mismatch is only reported for a chain that
/// passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A failed TLS set-up or handshake, worded for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// The [`MakeTlsConnect`] of every connection: rustls with the URL's checks.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<rustls::ClientConfig>,
    mode: SslMode,
    check: Arc<Check>,
}

impl std::fmt::Debug for MakeRustls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MakeRustls")
            .field("mode", &self.mode)
            .field("check", &self.check)
            .finish_non_exhaustive()
    }
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = TlsError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, TlsError> {
        // A Unix socket has no host name (and never uses TLS): a name that is no server name
        // only fails when TLS is actually attempted.
        Ok(RustlsConnect {
            config: self.config.clone(),
            mode: self.mode,
            check: self.check.clone(),
            host: domain.to_owned(),
        })
    }
}

/// One connection's handshake.
#[derive(Debug)]
pub struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    mode: SslMode,
    check: Arc<Check>,
    host: String,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = TlsError;
    type Future = BoxFuture<'static, Result<RustlsStream, TlsError>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let name = ServerName::try_from(self.host.clone()).map_err(|_| {
                TlsError(format!(
                    "sslmode={}: {:?} is not a host name TLS can check",
                    self.mode.as_str(),
                    self.host
                ))
            })?;
            tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await
                .map(|stream| RustlsStream(Box::new(stream)))
                .map_err(|error| handshake_error(&error, self.mode, &self.check, &self.host))
        })
    }
}

/// Words a failed handshake: which check failed, and against what.
fn handshake_error(error: &io::Error, mode: SslMode, check: &Check, host: &str) -> TlsError {
    let mode = mode.as_str();
    let roots = match check {
        Check::Chain(roots) | Check::Full(roots) => roots.to_string(),
        Check::Nothing => "no roots".to_owned(),
    };
    let Some(rustls::Error::InvalidCertificate(cert_error)) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return TlsError(format!("sslmode={mode}: TLS handshake failed: {error}"));
    };
    TlsError(match cert_error {
        CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
            "sslmode={mode}: the server's certificate is not signed by a trusted CA (unknown CA; \
             trusted: {roots})"
        ),
        CertificateError::NotValidForName => format!(
            "sslmode={mode}: the server's certificate does not name the host {host:?} (name \
             mismatch)"
        ),
        CertificateError::NotValidForNameContext { presented, .. } => format!(
            "sslmode={mode}: the server's certificate does not name the host {host:?} (name \
             mismatch; it names {})",
            presented.join(", ")
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("sslmode={mode}: the server's certificate has expired")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("sslmode={mode}: the server's certificate is not valid yet")
        }
        other => format!("sslmode={mode}: the server's certificate was rejected: {other:?}"),
    })
}

/// A TLS connection to the server.
#[derive(Debug)]
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    /// `tls-server-end-point` (RFC 5929) for SCRAM-SHA-256-PLUS: the hash of the server's
    /// certificate with its signature's hash (SHA-256 for MD5 and SHA-1), or none when that
    /// hash is not one of these (the server then offers no channel binding either).
    fn channel_binding(&self) -> ChannelBinding {
        let (_, connection) = self.0.get_ref();
        connection
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| server_end_point(cert))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

/// One DER element at the start of `der`: (tag, contents, what follows).
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |len, &byte| (len << 8) | usize::from(byte));
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The certificate's hash for `tls-server-end-point`, from its signatureAlgorithm.
fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let (SEQUENCE, certificate, _) = der_element(cert)? else {
        return None;
    };
    let (SEQUENCE, _tbs, rest) = der_element(certificate)? else {
        return None;
    };
    let (SEQUENCE, algorithm, _) = der_element(rest)? else {
        return None;
    };
    let (OID, oid, _) = der_element(algorithm)? else {
        return None;
    };
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA_SHA2: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
    const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
    let hash = if oid == ECDSA_SHA1 {
        256
    } else if let Some(&[last]) = oid.strip_prefix(RSA) {
        // md5WithRSA 4, sha1WithRSA 5, sha256 11, sha384 12, sha512 13.
        match last {
            4 | 5 | 11 => 256,
            12 => 384,
            13 => 512,
            _ => return None,
        }
    } else if let Some(&[last]) = oid.strip_prefix(ECDSA_SHA2) {
        // ecdsa-with-SHA256 2, SHA384 3, SHA512 4.
        match last {
            2 => 256,
            3 => 384,
            4 => 512,
            _ => return None,
        }
    } else {
        return None;
    };
    Some(match hash {
        256 => sha2::Sha256::digest(cert).to_vec(),
        384 => sha2::Sha384::digest(cert).to_vec(),
        _ => sha2::Sha512::digest(cert).to_vec(),
    })
}

/// What a `--db` URL says about connecting: the tokio-postgres configuration (without
/// `sslmode` and `sslrootcert`) and the TLS checks. Cheap to clone; every connection of the
/// program is made by one.
#[derive(Debug, Clone)]
pub struct PgConnector {
    config: tokio_postgres::Config,
    mode: SslMode,
    tls: MakeRustls,
}

impl PgConnector {
    /// Reads the URL; an invalid URL, `sslmode`, or root certificate file is refused here, before
    /// any connection, with a message for the operator.
    pub fn from_url(url: &str) -> Result<PgConnector, StoreError> {
        let split = split_url(url)?;
        let mut config = tokio_postgres::Config::from_str(&split.rest).map_err(|e| {
            StoreError::Config(format!(
                "invalid PostgreSQL URL: {}",
                super::describe_error(&e)
            ))
        })?;
        // libpq's default is prefer; sslrootcert=system makes it verify-full (libpq 16).
        let mode = split.mode.unwrap_or(match split.root_cert.as_deref() {
            Some("system") => SslMode::VerifyFull,
            _ => SslMode::Prefer,
        });
        let check = check_of(mode, split.root_cert.as_deref())?;
        config.ssl_mode(initial_ssl_mode(mode));
        let tls = MakeRustls {
            config: client_config(&check)?,
            mode,
            check: Arc::new(check),
        };
        Ok(PgConnector { config, mode, tls })
    }

    /// The sslmode in force.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// The tokio-postgres configuration, to set more options.
    pub fn config_mut(&mut self) -> &mut tokio_postgres::Config {
        &mut self.config
    }

    /// The tokio-postgres configuration.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Connects with this connector's configuration; the connection is driven by a task of
    /// its own (which ends when the client is dropped).
    pub async fn connect(&self) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
        self.connect_with(&self.config).await
    }

    /// Connects with `config` (this connector's, with options set by the caller), retrying as
    /// libpq does: `prefer` in plain when the TLS handshake fails, `allow` with TLS when the
    /// server refuses the plain connection.
    pub async fn connect_with(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
        let first = self.attempt(config).await;
        let retry = match (&first, self.mode) {
            (Err(error), SslMode::Prefer) if is_tls_error(error) => PgSslMode::Disable,
            (Err(error), SslMode::Allow) if error.as_db_error().is_some() => PgSslMode::Require,
            _ => return first,
        };
        let mut config = config.clone();
        config.ssl_mode(retry);
        self.attempt(&config).await
    }

    async fn attempt(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
        let (client, connection) = config.connect(self.tls.clone()).await?;
        let driver = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(error = %super::describe_error(&error), "PostgreSQL connection ended");
            }
        });
        Ok((client, driver))
    }
}

/// The first attempt's mode for tokio-postgres, which knows only three.
fn initial_ssl_mode(mode: SslMode) -> PgSslMode {
    match mode {
        SslMode::Disable | SslMode::Allow => PgSslMode::Disable,
        SslMode::Prefer => PgSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
    }
}

/// Whether the error is our handshake's (not the server declining TLS, nor a refusal).
fn is_tls_error(error: &tokio_postgres::Error) -> bool {
    std::error::Error::source(error).is_some_and(|source| source.is::<TlsError>())
}

impl deadpool_postgres::Connect for PgConnector {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let config = pg_config.clone();
        Box::pin(async move { self.connect_with(&config).await })
    }
}

/// Connects to `url` (one connection, not pooled) with the URL's TLS settings; for
/// `migrate`, the `provider` commands and the test helpers.
pub async fn connect(url: &str) -> Result<(Client, JoinHandle<()>), StoreError> {
    Ok(PgConnector::from_url(url)?.connect().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> SplitUrl {
        split_url(url).expect("valid URL")
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url() {
        assert_eq!(
            split(
                "postgres://u:p@h:5/db?sslmode=verify-full&application_name=a&sslrootcert=%2Ftmp%2Fca.pem"
            ),
            SplitUrl {
                rest: "postgres://u:p@h:5/db?application_name=a".to_owned(),
                mode: Some(SslMode::VerifyFull),
                root_cert: Some("/tmp/ca.pem".to_owned()),
            }
        );
        assert_eq!(
            split("postgres://h/db?sslmode=require").rest,
            "postgres://h/db"
        );
        assert_eq!(split("postgres://h/db").mode, None);
        for mode in [
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            let url = format!("postgres://h/db?sslmode={mode}");
            assert_eq!(split(&url).mode.map(SslMode::as_str), Some(mode));
        }
    }

    #[test]
    fn an_unknown_sslmode_or_an_unsupported_parameter_is_a_clear_error() {
        let message = split_url("postgres://h/db?sslmode=verify")
            .unwrap_err()
            .to_string();
        assert!(message.contains("invalid sslmode \"verify\""), "{message}");
        assert!(message.contains("verify-full"), "{message}");
        let message = split_url("postgres://h/db?sslcert=c.pem")
            .unwrap_err()
            .to_string();
        assert!(message.contains("sslcert is not supported"), "{message}");
    }

    #[test]
    fn the_mode_and_root_file_decide_the_check_as_libpq_does() {
        // Every case names its roots, so ~/.postgresql/root.crt plays no part.
        let file = Some("/nonexistent/ca.pem");
        let path = || RootSource::File(PathBuf::from("/nonexistent/ca.pem"));
        assert!(matches!(
            check_of(SslMode::Disable, file),
            Ok(Check::Nothing)
        ));
        assert!(matches!(check_of(SslMode::Require, file), Ok(Check::Chain(r)) if r == path()));
        assert!(matches!(check_of(SslMode::Prefer, file), Ok(Check::Chain(r)) if r == path()));
        assert!(matches!(check_of(SslMode::VerifyCa, file), Ok(Check::Chain(r)) if r == path()));
        assert!(matches!(check_of(SslMode::VerifyFull, file), Ok(Check::Full(r)) if r == path()));
        assert!(matches!(
            check_of(SslMode::VerifyFull, Some("system")),
            Ok(Check::Full(RootSource::System))
        ));
        let message = check_of(SslMode::Require, Some("system"))
            .unwrap_err()
            .to_string();
        assert!(message.contains("needs sslmode=verify-full"), "{message}");
    }

    #[test]
    fn an_unreadable_or_invalid_root_file_is_refused_before_connecting() {
        let message = PgConnector::from_url(
            "postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem",
        )
        .unwrap_err()
        .to_string();
        assert!(
            message.contains("sslrootcert=/nonexistent/ca.pem: cannot be read"),
            "{message}"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, "not a certificate\n").expect("write");
        let url = format!(
            "postgres://h/db?sslmode=verify-full&sslrootcert={}",
            file.display()
        );
        let message = PgConnector::from_url(&url).unwrap_err().to_string();
        assert!(message.contains("holds no PEM certificate"), "{message}");
        std::fs::write(
            &file,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let message = PgConnector::from_url(&url).unwrap_err().to_string();
        assert!(message.contains("invalid certificate"), "{message}");
    }

    #[test]
    fn the_channel_binding_hash_follows_the_signature_algorithm() {
        // A minimal certificate-shaped DER: SEQUENCE { SEQUENCE {}, SEQUENCE { OID } }.
        let cert = |oid: &[u8]| {
            let mut algorithm = vec![0x06, u8::try_from(oid.len()).expect("short")];
            algorithm.extend_from_slice(oid);
            let mut body = vec![
                0x30,
                0x00,
                0x30,
                u8::try_from(algorithm.len()).expect("short"),
            ];
            body.extend_from_slice(&algorithm);
            let mut der = vec![0x30, u8::try_from(body.len()).expect("short")];
            der.extend_from_slice(&body);
            der
        };
        let ecdsa_sha256 = cert(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]);
        assert_eq!(
            server_end_point(&ecdsa_sha256),
            Some(sha2::Sha256::digest(&ecdsa_sha256).to_vec())
        );
        let rsa_sha384 = cert(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c]);
        assert_eq!(
            server_end_point(&rsa_sha384),
            Some(sha2::Sha384::digest(&rsa_sha384).to_vec())
        );
        let rsa_sha1 = cert(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05]);
        assert_eq!(
            server_end_point(&rsa_sha1),
            Some(sha2::Sha256::digest(&rsa_sha1).to_vec())
        );
        let ed25519 = cert(&[0x2b, 0x65, 0x70]);
        assert_eq!(server_end_point(&ed25519), None);
        assert_eq!(server_end_point(&[0x30, 0x05]), None);
    }
}
