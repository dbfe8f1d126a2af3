//! TLS to the server with libpq's meanings, through rustls (no OpenSSL at
//! build time): `sslmode=disable|prefer|require|verify-ca|verify-full`,
//! `sslrootcert` (a PEM file, or `system` for the web's public roots), and a
//! client certificate (`sslcert`, `sslkey`).
//!
//! The client library parses only `disable`, `prefer` and `require` and no
//! certificate option, so these options are taken out of the connection
//! string here (`split`) and the rest is handed to it. Then, as libpq does:
//! - `prefer` (the default) encrypts when the server offers TLS and verifies
//!   nothing; `require` insists on TLS and verifies nothing, unless a root
//!   certificate is named, when it verifies the chain as `verify-ca` does;
//! - `verify-ca` checks the server's chain against the roots, `verify-full`
//!   also that the certificate names the host connected to;
//! - the roots are `sslrootcert`, else `~/.postgresql/root.crt`
//!   (`%APPDATA%\postgresql\root.crt` on Windows); a verifying mode without
//!   any is refused before connecting.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::postgres::config::SslMode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};

/// What opens a connection's TLS session (used with `sslmode=disable` too: the
/// client then never asks for one).
pub(crate) type Connector = MakeRustlsConnect;

/// The options of a connection string that this module reads.
const OPTIONS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// How the connection is protected, as libpq names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    Disable,
    /// libpq's default.
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Mode> {
        Ok(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            // `allow` tries without TLS first: never worth the cleartext.
            other => {
                return Err(Error::InvalidInput {
                    what: "PostgreSQL URL",
                    // Not the value: a mistyped URL may have put a password there.
                    reason: format!(
                        "sslmode takes disable, prefer, require, verify-ca or verify-full{}",
                        if other == "allow" {
                            " (not allow: it tries cleartext first)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        })
    }
}

/// The TLS options of a connection string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Tls {
    pub(crate) mode: Mode,
    /// `sslrootcert`: a file, or `system`.
    root: Option<String>,
    /// `sslcert` and `sslkey`.
    client: (Option<PathBuf>, Option<PathBuf>),
}

/// `url` without its TLS options, and those options.
pub(crate) fn split(url: &str) -> Result<(String, Tls)> {
    let (rest, pairs) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_key_value(url)
    };
    let mut tls = Tls::default();
    let mut mode = None;
    for (key, value) in pairs {
        match key.as_str() {
            "sslmode" => mode = Some(Mode::parse(&value)?),
            "sslrootcert" => tls.root = Some(value),
            "sslcert" => tls.client.0 = Some(PathBuf::from(value)),
            _ => tls.client.1 = Some(PathBuf::from(value)),
        }
    }
    // The public roots vouch for anyone's own host name, so with them only
    // `verify-full` means anything: it is their default, and libpq (16 and
    // later) refuses a weaker mode beside them.
    tls.mode = match (mode, tls.root.as_deref()) {
        (None, Some("system")) => Mode::VerifyFull,
        (Some(m), Some("system")) if m != Mode::VerifyFull => {
            return Err(Error::InvalidInput {
                what: "PostgreSQL URL",
                reason: "sslrootcert=system goes with sslmode=verify-full only: any public \
                         certificate passes a weaker check"
                    .into(),
            })
        }
        (m, _) => m.unwrap_or(Mode::Prefer),
    };
    Ok((rest, tls))
}

/// A URL's query parameters that are ours, percent-decoded, cut out. The
/// query is found where the client finds it: after the credentials (which
/// end at the first `@`, whatever a password holds), the host (up to `/` or
/// `?`) and the database (up to `?`).
fn split_url(url: &str) -> (String, Vec<(String, String)>) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let after_credentials = url[after_scheme..]
        .find('@')
        .map_or(after_scheme, |i| after_scheme + i + 1);
    let Some(at) = url[after_credentials..].find('?').map(|i| after_credentials + i) else {
        return (url.to_owned(), Vec::new());
    };
    let (base, query) = (&url[..at], &url[at + 1..]);
    let (mut kept, mut ours) = (Vec::new(), Vec::new());
    for param in query.split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let key = decode(key);
        if OPTIONS.contains(&key.as_str()) {
            ours.push((key, decode(value)));
        } else {
            kept.push(param);
        }
    }
    let rest = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    (rest, ours)
}

fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// A `key=value` string's options that are ours, cut out; the rest kept as
/// written (libpq's syntax: a value is a word, or single-quoted with `\'`
/// and `\\` escapes).
fn split_key_value(text: &str) -> (String, Vec<(String, String)>) {
    let (mut kept, mut ours) = (String::new(), Vec::new());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let start = i;
        while i < chars.len() && chars[i] != '=' && !chars[i].is_whitespace() {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect();
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i < chars.len() && chars[i] == '=' {
            i += 1;
        }
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < chars.len() && chars[i] == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                value.push(chars[i]);
                i += 1;
            }
            i += 1;
        } else {
            while i < chars.len() && !chars[i].is_whitespace() {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                value.push(chars[i]);
                i += 1;
            }
        }
        let raw: String = chars[start..i.min(chars.len())].iter().collect();
        if key.is_empty() {
            continue;
        }
        if OPTIONS.contains(&key.as_str()) {
            ours.push((key, value));
        } else {
            kept.push_str(raw.trim());
            kept.push(' ');
        }
    }
    (kept.trim_end().to_owned(), ours)
}

impl Tls {
    /// The client library's own mode: it negotiates; the verifying modes
    /// insist on TLS as `require` does, and the verifier does the rest.
    pub(crate) fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector, with the verifier of this mode and the client's
    /// certificate. `label` names the database in errors.
    pub(crate) fn connector(&self, label: &str) -> Result<Connector> {
        let refused = |reason: String| Error::InvalidInput {
            what: "PostgreSQL TLS settings",
            reason: format!("{label}: {reason}"),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| refused(e.to_string()))?;
        // Nothing is read for a connection that will not be encrypted, and
        // the roots only where the mode checks the server with them.
        let roots = match self.mode {
            Mode::Disable | Mode::Prefer => None,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => self.roots().map_err(refused)?,
        };
        let chain = match (self.mode, roots) {
            (Mode::VerifyCa | Mode::VerifyFull, None) => {
                return Err(refused(format!(
                    "sslmode={} needs the certificate of the authority that signed the server's: \
                     name it with sslrootcert=FILE (or sslrootcert=system for the public roots), \
                     or put it in {}",
                    if self.mode == Mode::VerifyCa {
                        "verify-ca"
                    } else {
                        "verify-full"
                    },
                    default_root().map_or("~/.postgresql/root.crt".into(), |p| p.display().to_string())
                )))
            }
            (Mode::Disable | Mode::Prefer, _) | (Mode::Require, None) => None,
            (_, Some(roots)) => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| refused(e.to_string()))?,
            ),
        };
        let verifier = Arc::new(ModeVerifier {
            chain,
            names: self.mode == Mode::VerifyFull,
            provider,
        });
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        let config = match &self.client {
            _ if self.mode == Mode::Disable => builder.with_no_client_auth(),
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let certs = read(cert)
                    .and_then(|pem| {
                        CertificateDer::pem_slice_iter(&pem)
                            .collect::<std::result::Result<Vec<_>, _>>()
                            .map_err(|e| format!("{}: {e}", cert.display()))
                    })
                    .map_err(refused)?;
                let key = read(key)
                    .and_then(|pem| {
                        PrivateKeyDer::from_pem_slice(&pem).map_err(|e| format!("{}: {e}", key.display()))
                    })
                    .map_err(refused)?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| refused(format!("the client certificate: {e}")))?
            }
            _ => return Err(refused("sslcert and sslkey go together: name both".into())),
        };
        Ok(MakeRustlsConnect::new(config))
    }

    /// The roots named by `sslrootcert`, else those of the default file when
    /// it exists; `None` when there are none.
    fn roots(&self) -> std::result::Result<Option<RootCertStore>, String> {
        let file = match self.root.as_deref() {
            Some("system") => {
                let mut store = RootCertStore::empty();
                store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                return Ok(Some(store));
            }
            Some(file) => PathBuf::from(file),
            None => match default_root().filter(|p| p.exists()) {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let pem = read(&file)?;
        let mut store = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{}: {e}", file.display()))?;
            store.add(cert).map_err(|e| format!("{}: {e}", file.display()))?;
        }
        if store.is_empty() {
            return Err(format!("{}: no certificate in it", file.display()));
        }
        Ok(Some(store))
    }
}

/// What a TLS refusal means, when the client's words are rustls's terse
/// ones.
pub(crate) fn hint(e: &::postgres::Error) -> Option<&'static str> {
    // The client's own text names the handshake; rustls's reason is below it.
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&c.to_string());
        cause = c.source();
    }
    if text.contains("UnknownIssuer") {
        Some("the server's certificate is not signed by an authority among the root certificates (sslrootcert)")
    } else if text.contains("certificate expired") || text.contains("Expired") {
        Some("the server's certificate has expired")
    } else {
        None
    }
}

fn read(path: &Path) -> std::result::Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// libpq's default root certificate file.
fn default_root() -> Option<PathBuf> {
    #[cfg(windows)]
    let dir = std::env::var_os("APPDATA").map(|d| PathBuf::from(d).join("postgresql"));
    #[cfg(not(windows))]
    let dir = std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".postgresql"));
    dir.map(|d| d.join("root.crt"))
}

/// The verifier of a mode: no check of the certificate (`prefer`, and
/// `require` without roots: encrypted, the server not verified, as libpq
/// means them), the chain against the roots (`verify-ca`), or the chain and
/// the name connected to (`verify-full`). The handshake's signatures are
/// checked in every mode.
#[derive(Debug)]
struct ModeVerifier {
    /// The roots' verifier; `None`: the certificate is not checked.
    chain: Option<Arc<WebPkiServerVerifier>>,
    /// Whether the certificate must name the host.
    names: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ModeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_options_leave_a_url_and_the_rest_stays() {
        let (rest, tls) = split(
            "postgres://u:p%40ss@db.example:5432/app?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p%40ss@db.example:5432/app?application_name=x");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root.as_deref(), Some("/etc/ca.pem"));
        let (rest, tls) = split("postgresql://h/db?sslmode=require").unwrap();
        assert_eq!((rest.as_str(), tls.mode), ("postgresql://h/db", Mode::Require));
        let (rest, tls) = split("postgres://h/db").unwrap();
        assert_eq!((rest.as_str(), tls), ("postgres://h/db", Tls::default()));
    }

    #[test]
    fn the_tls_options_leave_a_key_value_string() {
        let (rest, tls) = split(
            "host=db port=5432 sslmode = verify-ca password='it\\'s here' sslcert='/a b/c.crt' sslkey=/k.key dbname=x",
        )
        .unwrap();
        assert_eq!(rest, "host=db port=5432 password='it\\'s here' dbname=x");
        assert_eq!(tls.mode, Mode::VerifyCa);
        assert_eq!(
            tls.client,
            (Some(PathBuf::from("/a b/c.crt")), Some(PathBuf::from("/k.key")))
        );
    }

    #[test]
    fn an_unknown_mode_and_a_verifying_mode_without_roots_are_refused() {
        let err = split("postgres://h/db?sslmode=allow").unwrap_err().to_string();
        assert!(err.contains("not allow") && !err.contains("\"allow\""), "{err}");
        let err = split("postgres://h/db?sslmode=require&sslrootcert=system")
            .unwrap_err()
            .to_string();
        assert!(err.contains("verify-full only"), "{err}");
        let (_, tls) = split("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(tls.mode, Mode::VerifyFull);
        // A `?` in the password is the password's: the query is after the host.
        let (rest, tls) = split("postgres://u:pa?ss@db/app?sslmode=require&x=1").unwrap();
        assert_eq!(
            (rest.as_str(), tls.mode),
            ("postgres://u:pa?ss@db/app?x=1", Mode::Require)
        );
        let (_, tls) = split("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem").unwrap();
        let err = tls.connector("postgres://h/db").err().unwrap().to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let (_, tls) = split("postgres://h/db?sslmode=require&sslcert=/c.crt").unwrap();
        let err = tls.connector("postgres://h/db").err().unwrap().to_string();
        assert!(err.contains("sslcert and sslkey go together"), "{err}");
    }
}
