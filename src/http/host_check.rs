//! Which `Host` a request may name. A web page on another site can make a browser send
//! requests to Warden by pointing its own domain at Warden's address (DNS rebinding); such
//! a request carries that domain in `Host`. So a request is answered only when its `Host`
//! is an IP address, `localhost`, or a name from a `--public-origin` URL; everything else
//! gets 421 with a message naming the flag. A request without `Host` (HTTP/1.0) cannot come
//! from a browser and is let through.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use axum::extract::{Request, State};
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use super::AppState;

/// The host names requests may use, besides IP addresses and `localhost`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: BTreeSet<String>,
}

impl AllowedHosts {
    /// The host names of `origins` (`http(s)://name[:port]`, nothing after the authority
    /// but an optional `/`); an error names the first that is not such a URL.
    pub fn from_origins(origins: &[String]) -> Result<Self, String> {
        let mut names = BTreeSet::new();
        for origin in origins.iter().flat_map(|o| o.split(',')).map(str::trim) {
            if origin.is_empty() {
                continue;
            }
            let name = origin_host(origin).ok_or_else(|| {
                format!(
                    "--public-origin `{origin}` is not an origin like https://warden.example.org"
                )
            })?;
            names.insert(name);
        }
        Ok(Self { names })
    }

    /// Whether a request naming `host` (a `Host` header value) is answered.
    pub fn allows(&self, host: &str) -> bool {
        match host_name(host) {
            Some(Name::Address) => true,
            Some(Name::Domain(name)) => name == "localhost" || self.names.contains(&name),
            None => false,
        }
    }

    /// The names listed, for the start-up log.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// Middleware: refuses a request whose `Host` is missing or not allowed.
pub async fn require_allowed_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // A browser always names the host; a request without one (HTTP/1.0, an in-process
    // test) cannot come from a rebinding page.
    let host = match request.headers().get(HOST) {
        None => None,
        Some(value) => Some(value.to_str().unwrap_or("")),
    };
    let host = host.or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host.filter(|host| !state.network.allowed_hosts.allows(host)) {
        tracing::warn!(host = %crate::store::escape_untrusted(host), "refused a request for a host this server does not answer to");
        return Err(ApiError::HostNotAllowed(
            "this server does not answer to that host name; an administrator can allow it by \
             starting Warden with --public-origin https://NAME"
                .to_owned(),
        ));
    }
    Ok(next.run(request).await)
}

enum Name {
    Address,
    Domain(String),
}

/// The name part of a `Host` value (lower case, without port or trailing dot).
fn host_name(host: &str) -> Option<Name> {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        let (address, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return (port_ok && address.parse::<std::net::Ipv6Addr>().is_ok()).then_some(Name::Address);
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return None,
        None => host,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !valid {
        return None;
    }
    if name.parse::<Ipv4Addr>().is_ok() {
        return Some(Name::Address);
    }
    Some(Name::Domain(name))
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// The host name of an origin URL.
fn origin_host(origin: &str) -> Option<String> {
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '@', '?', '#']) {
        return None;
    }
    match host_name(authority)? {
        Name::Domain(name) => Some(name),
        // An address is always allowed; listing one is harmless.
        Name::Address => Some(authority.to_ascii_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_localhost_always_and_listed_names_only() {
        let hosts = AllowedHosts::from_origins(&[
            "https://Warden.Example.org".into(),
            "http://ops:8080/".into(),
        ])
        .unwrap();
        for allowed in [
            "127.0.0.1:8080",
            "10.1.2.3",
            "[::1]:8080",
            "[fe80::1]",
            "localhost:8080",
            "warden.example.org",
            "WARDEN.example.org.:443",
            "ops:9999",
        ] {
            assert!(hosts.allows(allowed), "{allowed}");
        }
        for refused in [
            "",
            "evil.example",
            "warden.example.org.evil.example",
            "127.0.0.1.nip.io",
            "localhost.evil",
            "[::1",
            "[not-an-address]",
            "warden.example.org:http",
            "a b",
            "ops:123456",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        assert!(!AllowedHosts::default().allows("warden.example.org"));
    }

    #[test]
    fn origins_must_be_plain_urls() {
        for bad in [
            "warden.example.org",
            "ftp://x",
            "https://x/path",
            "https://u@x",
            "https://",
        ] {
            assert!(AllowedHosts::from_origins(&[bad.into()]).is_err(), "{bad}");
        }
        let both =
            AllowedHosts::from_origins(&["https://a.example, https://b.example".into()]).unwrap();
        assert_eq!(both.names().collect::<Vec<_>>(), ["a.example", "b.example"]);
    }
}
