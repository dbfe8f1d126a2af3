//! A PostgreSQL database location: the parsed connection settings, and the
//! name the database goes by in every message, which never holds the password.
//!
//! The name is rebuilt from the parsed settings (user, hosts, ports, database)
//! rather than cut out of the text the user gave, so no spelling of a
//! password (in the URL's user info, in `?password=`, in the `key=value`
//! form, percent-encoded or quoted) can reach it.

use std::time::Duration;

use ::postgres::config::Host;
use ::postgres::Config;

use super::tls::Tls;
use crate::error::{Error, Result};
use crate::secret::Secret;

/// How long a connection attempt may take when the URL does not say
/// (`connect_timeout`): an unreachable host must not hang an opening process.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server's `pg_stat_activity` shows for our sessions when the URL
/// does not name an application.
const APPLICATION_NAME: &str = "leasehold";
/// The client's own default for `keepalives_idle`, which we replace.
const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);
/// Idle time before the first TCP keepalive probe.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);
/// Longest unacknowledged data may wait before the connection is dropped.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// A database to connect to.
pub(crate) struct Target {
    /// The settings the client connects with (password included).
    pub(crate) config: Config,
    /// The URL without its password, for messages.
    pub(crate) label: String,
    /// How the connection is protected (`sslmode` and the certificates).
    pub(crate) tls: Tls,
}

impl Target {
    /// Parse a `postgres://` URL or a `key=value` connection string.
    ///
    /// # Failure
    /// [`Error::InvalidInput`] when the text is not a connection string; the
    /// reason is the client's, which names options, never their values.
    pub(crate) fn parse(url: &str) -> Result<Target> {
        // The TLS options the client does not know are ours (`tls.rs`).
        let (rest, tls) = super::tls::split(url)?;
        let mut config: Config = rest.parse().map_err(|e: ::postgres::Error| Error::InvalidInput {
            what: "PostgreSQL URL",
            reason: e.to_string(),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name(APPLICATION_NAME);
        }
        // A server that vanished (a crash, a cut network) must not hold a
        // caller for the operating system's two hours: probe an idle
        // connection after 30 s, and give up on unacknowledged data after a
        // minute. A URL's own settings win.
        if config.get_keepalives_idle() == DEFAULT_KEEPALIVES_IDLE {
            config.keepalives_idle(KEEPALIVES_IDLE);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        if let Some(password) = config.get_password() {
            // Known to `secret::redact` from here on, like every password of
            // the process: text bound for a notice or a log loses it.
            Secret::new(String::from_utf8_lossy(password).into_owned());
        }
        config.ssl_mode(tls.ssl_mode());
        // As libpq: TLS is never asked of a Unix socket, and an address
        // given without a host name is the name TLS is told (the client
        // would otherwise have none to give the handshake and fail).
        let hosts = config.get_hosts();
        let no_host = hosts.is_empty();
        #[cfg(unix)]
        let sockets_only = !no_host && hosts.iter().all(|h| matches!(h, Host::Unix(_)));
        #[cfg(not(unix))]
        let sockets_only = false;
        if sockets_only {
            config.ssl_mode(::postgres::config::SslMode::Disable);
        }
        if no_host {
            for addr in config.get_hostaddrs().to_vec() {
                config.host(&addr.to_string());
            }
        }
        let label = label(&config);
        Ok(Target { config, label, tls })
    }
}

/// `postgres://user@host:port,host:port/database`, from the parsed settings.
/// Defaults the client would fill in (user, port) are left out rather than
/// guessed.
fn label(config: &Config) -> String {
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(dir) => dir.display().to_string(),
            };
            // One port applies to every host; otherwise one port per host.
            let port = if ports.len() == 1 {
                ports.first()
            } else {
                ports.get(i)
            };
            match port {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect();
    let database = config.get_dbname().unwrap_or_default();
    format!("postgres://{user}{}/{database}", hosts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_user_host_port_and_database() {
        let t = Target::parse("postgres://alice:pw@db.example:5433/queue").unwrap();
        assert_eq!(t.label, "postgres://alice@db.example:5433/queue");
    }

    #[test]
    fn no_spelling_of_the_password_reaches_the_label() {
        let urls = [
            "postgres://alice:s3cret-horse@127.0.0.1:5432/q",
            "postgresql://alice:s3cret%2Dhorse@127.0.0.1/q",
            "postgres://alice@127.0.0.1/q?password=s3cret-horse",
            "host=127.0.0.1 user=alice password=s3cret-horse dbname=q",
            "host=127.0.0.1 user=alice password='s3cret-horse' dbname=q",
        ];
        for url in urls {
            let t = Target::parse(url).unwrap();
            assert_eq!(t.config.get_password(), Some(&b"s3cret-horse"[..]), "{url}");
            assert!(!t.label.contains("s3cret"), "{url} -> {}", t.label);
            assert!(!t.label.contains("horse"), "{url} -> {}", t.label);
            assert!(
                t.label.starts_with("postgres://alice@127.0.0.1"),
                "{url} -> {}",
                t.label
            );
        }
    }

    #[test]
    fn several_hosts_and_a_socket_directory_are_named() {
        let t = Target::parse("host=/run/pg,db2 port=5432,5433 user=bob dbname=q").unwrap();
        assert_eq!(t.label, "postgres://bob@/run/pg:5432,db2:5433/q");
    }

    #[test]
    fn a_bad_url_is_refused_without_echoing_it() {
        let err = Target::parse("postgres://alice:s3cret@127.0.0.1:notaport/q")
            .err()
            .unwrap();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn unset_timeouts_and_names_get_defaults_and_set_ones_are_kept() {
        let t = Target::parse("postgres://a@h/q").unwrap();
        assert_eq!(t.config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        assert_eq!(t.config.get_application_name(), Some(APPLICATION_NAME));
        let t = Target::parse("postgres://a@h/q?connect_timeout=3&application_name=x").unwrap();
        assert_eq!(t.config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(t.config.get_application_name(), Some("x"));
    }
}
