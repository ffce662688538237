//! Where a request comes from and which names it may use: the host names the server
//! answers to, and the one reverse proxy whose `X-Forwarded-For` is believed. Without
//! `--trusted-proxy` the client address is the connection's peer; with it, a connection
//! from that proxy is attributed to the address the proxy appended last to
//! `X-Forwarded-For` (anything before it was written by the client and is not believed).

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};

use super::host_check::AllowedHosts;

/// The server's network settings the HTTP layer applies.
#[derive(Debug, Clone, Default)]
pub struct NetworkPolicy {
    pub allowed_hosts: AllowedHosts,
    /// The reverse proxy whose `X-Forwarded-For` counts.
    pub trusted_proxy: Option<IpAddr>,
}

impl NetworkPolicy {
    /// The client's address: the peer's, or behind the trusted proxy the last address in
    /// `X-Forwarded-For`. `None` when not known (in-process tests).
    pub fn client_address(&self, extensions: &Extensions, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| address.ip())?;
        if Some(peer) != self.trusted_proxy {
            return Some(peer);
        }
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|line| line.split(','))
            .last()
            .and_then(|last| last.trim().parse::<IpAddr>().ok());
        Some(forwarded.unwrap_or(peer))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn from_peer(peer: &str) -> Extensions {
        let mut extensions = Extensions::new();
        let address: SocketAddr = format!("{peer}:40000").parse().unwrap();
        extensions.insert(ConnectInfo(address));
        extensions
    }

    #[test]
    fn forwarded_for_counts_only_from_the_trusted_proxy() {
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 10.0.0.9"),
        );
        headers.append("x-forwarded-for", HeaderValue::from_static("192.168.1.20"));
        let direct = NetworkPolicy::default();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            direct.client_address(&from_peer("10.0.0.5"), &headers),
            ip("10.0.0.5")
        );
        let proxied = NetworkPolicy {
            trusted_proxy: ip("10.0.0.5"),
            ..NetworkPolicy::default()
        };
        assert_eq!(
            proxied.client_address(&from_peer("10.0.0.5"), &headers),
            ip("192.168.1.20")
        );
        // Another peer's header is the client's own word.
        assert_eq!(
            proxied.client_address(&from_peer("10.0.0.6"), &headers),
            ip("10.0.0.6")
        );
        // A proxy that sent no valid address: the proxy itself.
        let mut bad = HeaderMap::new();
        bad.insert("x-forwarded-for", HeaderValue::from_static("unknown"));
        assert_eq!(
            proxied.client_address(&from_peer("10.0.0.5"), &bad),
            ip("10.0.0.5")
        );
        assert_eq!(direct.client_address(&Extensions::new(), &headers), None);
    }
}
