//! Who may ask the server anything: the checks every request passes before
//! a route sees it, as pure decisions on what the request says.
//!
//! - The `Host` header must name the address the server listens on (or
//!   `localhost` on loopback): a page of another site whose name was made to
//!   resolve to 127.0.0.1 (DNS rebinding) sends its own name and is refused.
//! - A random token, printed in the URL, is required on every request: given
//!   as `?token=` it is traded for a cookie (`HttpOnly`, `SameSite=Strict`) and
//!   a redirect to the same address without it; afterwards the cookie carries
//!   it. Other local users and other sites' pages cannot read the index.
//! - A write (`POST`) also carries the page's CSRF token in a header no form
//!   can set, comes from no other origin, and has no body to speak of.
//! - Sizes are capped before anything is read: the request line and the
//!   body.
//!
//! No CORS header is ever sent, so no other origin can read an answer.

use std::net::SocketAddr;

/// The longest request target taken (path and query): 414 past it.
pub const MAX_TARGET: usize = 4096;
/// The longest body taken: 413 past it (the one write, a retry, has none).
pub const MAX_BODY: usize = 1024;
/// The request header that carries the CSRF token of a write.
pub const CSRF_HEADER: &str = "X-Leasehold-Csrf";

/// The secrets of one server's life and the address they guard.
pub struct Access {
    token: String,
    csrf: String,
    addr: SocketAddr,
}

/// What the guard decides about a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// On to the routes.
    Pass,
    /// The token came in the URL: set the cookie and send the browser to
    /// `location` (the same address without the token).
    TradeForCookie { location: String },
    /// Refused with this status and a reason for the body.
    Refuse(u16, &'static str),
}

/// What the guard reads of a request.
pub struct Asked<'a> {
    pub method: &'a str,
    /// The request target as sent: path and query.
    pub target: &'a str,
    pub host: Option<&'a str>,
    pub cookie: Option<&'a str>,
    pub origin: Option<&'a str>,
    /// `Sec-Fetch-Site`, which browsers add to every request.
    pub fetch_site: Option<&'a str>,
    pub csrf: Option<&'a str>,
    pub body_length: Option<usize>,
}

impl Access {
    /// New secrets for a server at `addr`, from the system's random source.
    pub fn new(addr: SocketAddr) -> Access {
        Access {
            token: random_hex(),
            csrf: random_hex(),
            addr,
        }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The token a page's writes must carry in [`CSRF_HEADER`].
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The cookie's name: one per port, so two servers on one machine do
    /// not overwrite each other's (cookies do not tell ports apart).
    pub fn cookie_name(&self) -> String {
        format!("leasehold_{}", self.addr.port())
    }

    /// The `Set-Cookie` value that hands the token to the browser.
    pub fn cookie(&self) -> String {
        format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name(),
            self.token
        )
    }

    /// The address to print: the listening one, an IP literal every
    /// browser reaches without a lookup; on every interface, loopback's.
    pub fn origin(&self) -> String {
        let ip = match self.addr.ip() {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => {
                std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
            }
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
                std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
            }
            ip => ip,
        };
        format!("http://{}", std::net::SocketAddr::new(ip, self.addr.port()))
    }

    /// The decision for `asked`.
    pub fn judge(&self, asked: &Asked<'_>) -> Verdict {
        if asked.target.len() > MAX_TARGET {
            return Verdict::Refuse(414, "the request's address is too long");
        }
        if asked.body_length.unwrap_or(0) > MAX_BODY {
            return Verdict::Refuse(413, "the request's body is too large");
        }
        if !asked.host.is_some_and(|h| self.host_is_ours(h)) {
            return Verdict::Refuse(421, "the Host header does not name this server");
        }
        let given = query_token(asked.target);
        let carried = asked.cookie.and_then(|c| cookie_value(c, &self.cookie_name()));
        let valid = |t: Option<&str>| t.is_some_and(|t| same_secret(t, &self.token));
        if asked.method == "GET" && valid(given.as_deref()) {
            return Verdict::TradeForCookie {
                location: without_token(asked.target),
            };
        }
        if !valid(carried) {
            return Verdict::Refuse(
                401,
                "open the address leasehold serve printed (it holds the token)",
            );
        }
        match asked.method {
            "GET" | "HEAD" => Verdict::Pass,
            "POST" => self.judge_write(asked),
            _ => Verdict::Refuse(405, "only GET and POST are answered"),
        }
    }

    /// A write must come from our own page: its CSRF token, no other origin.
    fn judge_write(&self, asked: &Asked<'_>) -> Verdict {
        let ours = self.origin();
        if asked
            .origin
            .is_some_and(|o| o != ours && !self.is_localhost_origin(o))
        {
            return Verdict::Refuse(403, "a write from another origin");
        }
        if asked.fetch_site.is_some_and(|s| s != "same-origin") {
            return Verdict::Refuse(403, "a write from another site");
        }
        if !asked.csrf.is_some_and(|t| same_secret(t, &self.csrf)) {
            return Verdict::Refuse(403, "a write without the page's token");
        }
        Verdict::Pass
    }

    /// Whether `host` (a Host header) names this server: its address and
    /// port, or `localhost` and the port when it listens on loopback. On
    /// every interface (`0.0.0.0`, `::`) any address of the machine may be
    /// asked for, so any IP literal with the port is taken, never a name
    /// (a rebinding page sends its own name).
    fn host_is_ours(&self, host: &str) -> bool {
        if host.eq_ignore_ascii_case(&self.addr.to_string()) {
            return true;
        }
        let port = format!(":{}", self.addr.port());
        let Some(name) = host.strip_suffix(port.as_str()) else {
            return false;
        };
        let ip = name.trim_start_matches('[').trim_end_matches(']');
        let loopback = self.addr.ip().is_loopback() || self.addr.ip().is_unspecified();
        (loopback && name.eq_ignore_ascii_case("localhost"))
            || (self.addr.ip().is_unspecified() && ip.parse::<std::net::IpAddr>().is_ok())
    }

    fn is_localhost_origin(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.addr.ip().is_loopback() && self.host_is_ours(host))
    }
}

/// 256 random bits in hex, from the system's source (two v4 UUIDs' worth
/// of `getrandom`, their version bits dropped).
fn random_hex() -> String {
    let mut out = String::with_capacity(64);
    for _ in 0..2 {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out
}

/// Equal, compared in time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of the cookie `name` in a `Cookie` header.
fn cookie_value<'c>(header: &'c str, name: &str) -> Option<&'c str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The `token` parameter of a request target's query.
fn query_token(target: &str) -> Option<String> {
    let (_, query) = target.split_once('?')?;
    super::query::query_pairs(query)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v)
}

/// `target` without its `token` parameter (the rest kept as sent).
fn without_token(target: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_owned();
    };
    // Judged by the decoded name, as the token was read (`%74oken` too).
    let is_token = |pair: &str| {
        let name = pair.split('=').next().unwrap_or_default();
        super::query::query_pairs(name)
            .next()
            .is_some_and(|(k, _)| k == "token")
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !is_token(p))
        .collect();
    match kept.is_empty() {
        true => path.to_owned(),
        false => format!("{path}?{}", kept.join("&")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access::new("127.0.0.1:8123".parse().unwrap())
    }

    fn get<'a>(target: &'a str, cookie: Option<&'a str>) -> Asked<'a> {
        Asked {
            method: "GET",
            target,
            host: Some("127.0.0.1:8123"),
            cookie,
            origin: None,
            fetch_site: None,
            csrf: None,
            body_length: None,
        }
    }

    #[test]
    fn the_token_in_the_address_is_traded_for_a_cookie() {
        let a = access();
        let target = format!("/?q=tide&token={}&type=pdf", a.token());
        assert_eq!(
            a.judge(&get(&target, None)),
            Verdict::TradeForCookie {
                location: "/?q=tide&type=pdf".into()
            }
        );
        let cookie = format!("other=1; {}={}", a.cookie_name(), a.token());
        assert_eq!(a.judge(&get("/api/search?q=x", Some(&cookie))), Verdict::Pass);
        assert!(matches!(a.judge(&get("/", None)), Verdict::Refuse(401, _)));
        let wrong = format!("{}={}x", a.cookie_name(), a.token());
        assert!(matches!(
            a.judge(&get("/", Some(&wrong))),
            Verdict::Refuse(401, _)
        ));
        assert!(matches!(
            a.judge(&get("/?token=nope", None)),
            Verdict::Refuse(401, _)
        ));
    }

    #[test]
    fn another_host_a_long_target_and_a_body_are_refused() {
        let a = access();
        let cookie = a.cookie();
        let cookie = cookie.split(';').next().unwrap();
        let mut asked = get("/", Some(cookie));
        for host in ["evil.example:8123", "127.0.0.1:9999", "localhost.evil:8123"] {
            asked.host = Some(host);
            assert!(matches!(a.judge(&asked), Verdict::Refuse(421, _)), "{host}");
        }
        asked.host = None;
        assert!(matches!(a.judge(&asked), Verdict::Refuse(421, _)));
        asked.host = Some("LOCALHOST:8123");
        assert_eq!(a.judge(&asked), Verdict::Pass);
        let long = format!("/api/search?q={}", "a".repeat(MAX_TARGET));
        assert!(matches!(
            a.judge(&get(&long, Some(cookie))),
            Verdict::Refuse(414, _)
        ));
        let mut big = get("/", Some(cookie));
        big.body_length = Some(MAX_BODY + 1);
        assert!(matches!(a.judge(&big), Verdict::Refuse(413, _)));
    }

    #[test]
    fn on_every_interface_any_address_of_the_machine_but_no_name() {
        let a = Access::new("0.0.0.0:8123".parse().unwrap());
        assert_eq!(a.origin(), "http://127.0.0.1:8123");
        let cookie = a.cookie();
        let mut asked = get("/", Some(cookie.split(';').next().unwrap()));
        for host in [
            "192.168.1.20:8123",
            "[fe80::1]:8123",
            "localhost:8123",
            "127.0.0.1:8123",
        ] {
            asked.host = Some(host);
            assert_eq!(a.judge(&asked), Verdict::Pass, "{host}");
        }
        for host in ["evil.example:8123", "192.168.1.20:80", "192.168.1.20"] {
            asked.host = Some(host);
            assert!(matches!(a.judge(&asked), Verdict::Refuse(421, _)), "{host}");
        }
    }

    #[test]
    fn a_write_needs_the_page_token_and_our_origin() {
        let a = access();
        let cookie = a.cookie();
        let cookie = cookie.split(';').next().unwrap();
        let mut post = get("/api/retry?key=a", Some(cookie));
        post.method = "POST";
        assert!(matches!(a.judge(&post), Verdict::Refuse(403, _)), "no CSRF token");
        post.csrf = Some(a.csrf());
        assert_eq!(a.judge(&post), Verdict::Pass);
        post.origin = Some("http://evil.example");
        assert!(matches!(a.judge(&post), Verdict::Refuse(403, _)));
        post.origin = Some("http://127.0.0.1:8123");
        post.fetch_site = Some("cross-site");
        assert!(matches!(a.judge(&post), Verdict::Refuse(403, _)));
        post.fetch_site = Some("same-origin");
        assert_eq!(a.judge(&post), Verdict::Pass);
        let encoded = format!("/?q=x&%74oken={}", a.token());
        assert_eq!(
            a.judge(&get(&encoded, None)),
            Verdict::TradeForCookie {
                location: "/?q=x".into()
            },
            "an encoded name is the token too, and taken out"
        );
        let target = format!("/api/retry?key=a&token={}", a.token());
        let mut by_token = get(&target, None);
        by_token.method = "POST";
        by_token.csrf = Some(a.csrf());
        assert!(
            matches!(a.judge(&by_token), Verdict::Refuse(401, _)),
            "a write never by URL token"
        );
    }
}
