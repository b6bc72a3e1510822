//! How rankflow connects to the archive's PostgreSQL (docs/history.md,
//! "TLS to PostgreSQL"): one [`Target`], made from `[archive] url` and
//! `[archive] ca_file`, opens every connection — the archiver's copies and
//! migrations ([`super::copy`]) and the reads ([`super::read`]) — so they
//! all treat the URL's `sslmode` the same way, as libpq does:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | if the server offers it, else plain | not checked; with a CA file, its chain is |
//! | `require` | always | not checked; with a CA file, its chain is |
//! | `verify-ca` | always | signed by the CA file (the system's trust store without one) |
//! | `verify-full` | always | the same, and it names the host of the URL |
//!
//! tokio-postgres itself knows `disable`, `prefer` and `require` only, and
//! its `NoTls` never encrypts: `sslmode` and `sslrootcert` (the CA file, or
//! `system`) are taken out of the URL here, in either form
//! ([`crate::config::conninfo`]), and the rest goes to the driver with an
//! OpenSSL connector (the OpenSSL librdkafka already links) built for the
//! mode. A bad `sslmode` or an unreadable CA file is a configuration fault
//! found at start-up, before any connection ([`Target::new`]).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::X509;
use openssl::x509::store::{X509Store, X509StoreBuilder};
use postgres_openssl::MakeTlsConnector;
use tokio_postgres::Client;
use tokio_postgres::config::{SslMode as DriverSslMode, SslNegotiation};

use super::ArchiveError;
use crate::config::ArchiveConfig;
use crate::config::conninfo;

/// libpq's `sslmode` values; `allow` (plain first, TLS if refused) is not
/// offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, else plain; the default.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, and the server's certificate chains to a trusted CA.
    VerifyCa,
    /// [`SslMode::VerifyCa`], and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The mode as the URL writes it.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<SslMode, String> {
        [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ]
        .into_iter()
        .find(|m| m.name() == value)
        .ok_or_else(|| {
            format!(
                "sslmode `{value}` is not one of disable, prefer, require, verify-ca, verify-full"
            )
        })
    }

    /// The driver's mode: it negotiates TLS, the connector checks.
    fn driver(self) -> DriverSslMode {
        match self {
            SslMode::Disable => DriverSslMode::Disable,
            SslMode::Prefer => DriverSslMode::Prefer,
            _ => DriverSslMode::Require,
        }
    }
}

/// What the server's certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// Nothing given.
    None,
    /// The CA certificates of a PEM file, and only those.
    File {
        path: PathBuf,
        /// The setting that named it, for messages.
        setting: Setting,
    },
    /// `sslrootcert=system`: the system's trust store.
    System,
}

/// Which setting a fault is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    Url,
    CaFile,
}

impl Setting {
    fn error(self, message: String) -> ArchiveError {
        match self {
            Setting::Url => ArchiveError::Url(message),
            Setting::CaFile => ArchiveError::CaFile(message),
        }
    }
}

/// Where the archive is and how to reach it: the driver's settings without
/// the TLS ones, the mode, and the connector made for it. Cheap to clone.
#[derive(Clone)]
pub struct Target {
    config: tokio_postgres::Config,
    mode: SslMode,
    roots: Roots,
    tls: MakeTlsConnector,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The driver's Config prints no password.
        f.debug_struct("Target")
            .field("sslmode", &self.mode)
            .field("roots", &self.roots)
            .field("config", &self.config)
            .finish()
    }
}

impl Target {
    /// Reads `url` (a URL or keyword/value pairs) and, when the URL names
    /// no CA file, takes `ca_file`; loads the CA file. Every fault is
    /// permanent and names its setting (`archive.url`, `archive.ca_file`),
    /// without quoting the URL.
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Target, ArchiveError> {
        let (rest, tls) = conninfo::without(url, &["sslmode", "sslrootcert"]).map_err(|b| {
            ArchiveError::Url(format!(
                "cannot be read as a PostgreSQL URL or key=value string: {} at byte {}",
                b.reason, b.at
            ))
        })?;
        let last = |key: &str| tls.iter().rev().find(|p| p.key == key).map(|p| &p.value);
        let mode = last("sslmode")
            .map(|v| SslMode::parse(v))
            .transpose()
            .map_err(ArchiveError::Url)?;
        let roots = match (last("sslrootcert"), ca_file) {
            (Some(v), _) if v == "system" => Roots::System,
            (Some(v), _) => Roots::File {
                path: PathBuf::from(v),
                setting: Setting::Url,
            },
            (None, Some(path)) => Roots::File {
                path: path.to_path_buf(),
                setting: Setting::CaFile,
            },
            (None, None) => Roots::None,
        };
        let mode = check_mode(mode, &roots)?;
        // The driver's reasons name options, never their values.
        let mut config = tokio_postgres::Config::from_str(&rest)
            .map_err(|e| ArchiveError::Url(super::pg_error_text(&e)))?;
        config.ssl_mode(mode.driver());
        let direct = config.get_ssl_negotiation() == SslNegotiation::Direct;
        let tls = connector(mode, &roots, direct)?;
        Ok(Target {
            config,
            mode,
            roots,
            tls,
        })
    }

    /// The target of `[archive]`; `None` without `url`.
    pub fn from_config(archive: &ArchiveConfig) -> Result<Option<Target>, ArchiveError> {
        archive
            .url
            .as_deref()
            .map(|url| Target::new(url, archive.ca_file.as_deref()))
            .transpose()
    }

    /// The `sslmode` in force (the URL's, or `prefer`).
    pub fn ssl_mode(&self) -> SslMode {
        self.mode
    }

    /// What TLS the connections use, in words (no secret in it): the mode,
    /// what the server's certificate is checked against, for `rankflow
    /// check` and the logs.
    pub fn tls_summary(&self) -> String {
        let roots = match &self.roots {
            Roots::None => "the system's trust store".to_string(),
            Roots::System => "the system's trust store (sslrootcert=system)".to_string(),
            Roots::File { path, setting } => {
                let from = match setting {
                    Setting::Url => "sslrootcert",
                    Setting::CaFile => "archive.ca_file",
                };
                format!("the CA file {} ({from})", path.display())
            }
        };
        let mode = self.mode.name();
        match (self.mode, &self.roots) {
            (SslMode::Disable, _) => format!("sslmode {mode}: no TLS"),
            (SslMode::Prefer, Roots::None) => format!(
                "sslmode {mode}: TLS if the server offers it, else plain; certificate not checked"
            ),
            (SslMode::Prefer, _) => format!(
                "sslmode {mode}: TLS if the server offers it, else plain; certificate checked against {roots}, host name not"
            ),
            (SslMode::Require, Roots::None) => {
                format!("sslmode {mode}: TLS always; certificate not checked")
            }
            (SslMode::Require | SslMode::VerifyCa, _) => format!(
                "sslmode {mode}: TLS always; certificate checked against {roots}, host name not"
            ),
            (SslMode::VerifyFull, _) => format!(
                "sslmode {mode}: TLS always; certificate checked against {roots}, and it must name the host"
            ),
        }
    }

    /// The driver's settings, to set time-outs and keepalives on.
    pub(crate) fn config_mut(&mut self) -> &mut tokio_postgres::Config {
        &mut self.config
    }

    /// Opens a connection, drives it on its own task (its end is logged
    /// at debug level as `what`'s) and returns its client.
    pub(crate) async fn connect(
        &self,
        what: &'static str,
    ) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(self.tls.clone()).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, connection = what, "An archive connection ended.");
            }
        });
        Ok(client)
    }
}

/// The mode in force, and whether it fits the CA given: libpq's rules for
/// `sslrootcert=system` (only with `verify-full`, which it then implies),
/// and a CA file with `sslmode=disable` is a mistake (it would never be
/// used).
fn check_mode(mode: Option<SslMode>, roots: &Roots) -> Result<SslMode, ArchiveError> {
    match (mode, roots) {
        (None | Some(SslMode::VerifyFull), Roots::System) => Ok(SslMode::VerifyFull),
        (Some(m), Roots::System) => Err(ArchiveError::Url(format!(
            "sslrootcert=system needs sslmode=verify-full, not {}",
            m.name()
        ))),
        (Some(SslMode::Disable), Roots::File { setting, .. }) => Err(setting.error(
            "a CA file is given, but archive.url has sslmode=disable, so TLS would not be used"
                .into(),
        )),
        (mode, _) => Ok(mode.unwrap_or(SslMode::Prefer)),
    }
}

/// The OpenSSL connector of `mode`: the certificate chain checked when a
/// CA is given or the mode asks for it, the host name with `verify-full`.
fn connector(mode: SslMode, roots: &Roots, direct: bool) -> Result<MakeTlsConnector, ArchiveError> {
    let openssl = |e: openssl::error::ErrorStack| ArchiveError::Url(format!("TLS set-up: {e}"));
    // Trusts the system's store and checks the chain, unless told otherwise.
    let mut builder = SslConnector::builder(SslMethod::tls()).map_err(openssl)?;
    if let Roots::File { path, setting } = roots {
        builder.set_cert_store(ca_store(path).map_err(|m| setting.error(m))?);
    }
    let chain = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => *roots != Roots::None,
        SslMode::VerifyCa | SslMode::VerifyFull => true,
    };
    if !chain {
        builder.set_verify(SslVerifyMode::NONE);
    }
    if direct {
        postgres_openssl::set_postgresql_alpn(&mut builder).map_err(openssl)?;
    }
    let mut tls = MakeTlsConnector::new(builder.build());
    let host = mode == SslMode::VerifyFull;
    tls.set_callback(move |connection, _host| {
        connection.set_verify_hostname(host);
        Ok(())
    });
    Ok(tls)
}

/// A store of the PEM certificates in `path`, and nothing else.
fn ca_store(path: &Path) -> Result<X509Store, String> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("cannot read the CA file {shown}: {e}"))?;
    let certs = X509::stack_from_pem(&pem)
        .map_err(|e| format!("the CA file {shown} is not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!("the CA file {shown} holds no certificate"));
    }
    let mut store = X509StoreBuilder::new().map_err(|e| e.to_string())?;
    for cert in certs {
        store.add_cert(cert).map_err(|e| e.to_string())?;
    }
    Ok(store.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<SslMode, String> {
        Target::new(url, None)
            .map(|t| t.ssl_mode())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn sslmode_is_read_from_either_form_and_defaults_to_prefer() {
        assert_eq!(mode("postgres://u@h/db"), Ok(SslMode::Prefer));
        assert_eq!(
            mode("postgres://u@h/db?sslmode=verify-full"),
            Ok(SslMode::VerifyFull)
        );
        assert_eq!(
            mode("postgresql://u@h/db?connect_timeout=3&sslmode=verify-ca"),
            Ok(SslMode::VerifyCa)
        );
        assert_eq!(mode("host=h sslmode=require"), Ok(SslMode::Require));
        assert_eq!(mode("host=h sslmode='disable'"), Ok(SslMode::Disable));
        assert_eq!(mode("host=h"), Ok(SslMode::Prefer));
        // The last one wins, as in the driver.
        assert_eq!(
            mode("host=h sslmode=disable sslmode=require"),
            Ok(SslMode::Require)
        );
        assert_eq!(mode("host=h sslrootcert=system"), Ok(SslMode::VerifyFull));
    }

    #[test]
    fn bad_tls_settings_are_permanent_faults_naming_the_setting() {
        for (url, ca, setting, says) in [
            (
                "postgres://u@h/db?sslmode=allow",
                None,
                "archive.url",
                "sslmode `allow`",
            ),
            (
                "host=h sslmode=verify_full",
                None,
                "archive.url",
                "verify-full",
            ),
            (
                "host=h sslrootcert=/nonexistent/ca.pem",
                None,
                "archive.url",
                "/nonexistent/ca.pem",
            ),
            (
                "host=h",
                Some("/nonexistent/ca.pem"),
                "archive.ca_file",
                "/nonexistent/ca.pem",
            ),
            (
                "host=h sslmode=disable",
                Some("/ca.pem"),
                "archive.ca_file",
                "sslmode=disable",
            ),
            (
                "host=h sslmode=require sslrootcert=system",
                None,
                "archive.url",
                "verify-full",
            ),
            (
                "host=h sslcert=/client.pem password=s3cret",
                None,
                "archive.url",
                "unknown option `sslcert`",
            ),
            (
                "host=h password='s3cret",
                None,
                "archive.url",
                "closing quote",
            ),
        ] {
            let err = Target::new(url, ca.map(Path::new)).unwrap_err();
            assert!(!err.is_retriable(), "{url}: {err}");
            assert_eq!(err.kind(), "config");
            let text = err.to_string();
            assert!(text.starts_with(setting), "{url}: {text}");
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("s3cret"), "{url}: {text}");
        }
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("rankflow-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("empty.pem");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let err = Target::new("host=h sslmode=verify-ca", Some(&file)).unwrap_err();
        assert!(err.to_string().starts_with("archive.ca_file"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_summary_says_what_is_checked() {
        let summary = |url: &str, ca: Option<&Path>| Target::new(url, ca).unwrap().tls_summary();
        assert_eq!(
            summary("host=h sslmode=disable", None),
            "sslmode disable: no TLS"
        );
        assert!(summary("postgres://h/db", None).contains("else plain; certificate not checked"));
        assert!(
            summary("host=h sslmode=require", None).contains("TLS always; certificate not checked")
        );
        assert!(
            summary("host=h sslrootcert=system", None)
                .contains("sslmode verify-full: TLS always; certificate checked against the system's trust store (sslrootcert=system), and it must name the host")
        );
        assert!(
            summary("host=h sslmode=verify-ca", None)
                .contains("the system's trust store, host name not")
        );
    }

    #[test]
    fn debug_shows_no_password() {
        let t = Target::new("host=h password='s3 cret' sslmode=require", None).unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains("s3"), "{shown}");
        assert!(shown.contains("Require"), "{shown}");
    }
}
