//! The origin a worker signs at login: which coordinator it meant to reach.
//!
//! Since `protocol_version` 2 the text a worker signs names the coordinator
//! it dialled, taken from its own configuration (as Sign-In with Ethereum
//! binds `domain`), so a server that relays a coordinator's challenge to a
//! worker gets a signature that coordinator refuses. Both ends reduce a URL
//! to one canonical string with [`worker_origin`] and compare those
//! strings byte for byte. The rules (also in `docs/worker-protocol.md`):
//!
//! - the scheme is `ws` or `wss`; `http` is taken as `ws` and `https` as
//!   `wss` (an operator may write its HTTP base URL), and the two stay
//!   apart: a worker that dialled `ws://` never matches a `wss://`
//!   coordinator, so a plain-text hop cannot pass for a TLS one;
//! - the host is lowercased (IDNA to punycode, IPv6 in brackets, IPv4 in
//!   dotted form), as the WHATWG URL standard parses it;
//! - the port is written only when it is not the scheme's default (80 for
//!   `ws`, 443 for `wss`);
//! - user info, path, query and fragment are dropped: the origin names a
//!   server, not an endpoint on it.

use url::Url;

/// Longest URL taken, in bytes; a hostname is at most 253.
pub const URL_BYTES_MAX: usize = 2048;

/// Why a URL has no worker origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("{url:?} is not a URL ({reason})")]
    NotUrl { url: String, reason: String },
    #[error("{url:?}: the scheme must be ws, wss, http or https")]
    Scheme { url: String },
    #[error("{url:?} names no host")]
    NoHost { url: String },
    #[error("URL of {bytes} bytes is over the {URL_BYTES_MAX}-byte limit")]
    TooLong { bytes: usize },
}

/// The canonical origin of `url`: `ws://host[:port]` or `wss://host[:port]`.
pub fn worker_origin(url: &str) -> Result<String, OriginError> {
    if url.len() > URL_BYTES_MAX {
        return Err(OriginError::TooLong { bytes: url.len() });
    }
    let parsed = Url::parse(url.trim()).map_err(|e| OriginError::NotUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    let scheme = match parsed.scheme() {
        "ws" | "http" => "ws",
        "wss" | "https" => "wss",
        _ => {
            return Err(OriginError::Scheme {
                url: url.to_owned(),
            })
        }
    };
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| OriginError::NoHost {
            url: url.to_owned(),
        })?;
    // `port()` is `None` for the scheme's default, and http and ws (https
    // and wss) share theirs, so the mapping above keeps it right.
    Ok(match parsed.port() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equivalent_urls_have_one_origin() {
        let cases = [
            ("ws://127.0.0.1:8080/v1/workers/ws", "ws://127.0.0.1:8080"),
            ("http://127.0.0.1:8080", "ws://127.0.0.1:8080"),
            ("http://127.0.0.1:8080/", "ws://127.0.0.1:8080"),
            (
                "wss://Coord.Example.COM/v1/workers/ws",
                "wss://coord.example.com",
            ),
            (
                "https://coord.example.com:443/prefix/",
                "wss://coord.example.com",
            ),
            ("ws://coord.example.com:80", "ws://coord.example.com"),
            ("http://coord.example.com:443", "ws://coord.example.com:443"),
            ("https://coord.example.com:80", "wss://coord.example.com:80"),
            (
                "ws://user:pw@host.example:9000/x?y#z",
                "ws://host.example:9000",
            ),
            ("ws://[::1]:8080/v1/workers/ws", "ws://[::1]:8080"),
            ("ws://[0:0:0:0:0:0:0:1]:8080", "ws://[::1]:8080"),
            ("ws://bücher.example", "ws://xn--bcher-kva.example"),
            ("  https://coord.example.com  ", "wss://coord.example.com"),
        ];
        for (url, origin) in cases {
            assert_eq!(worker_origin(url).as_deref(), Ok(origin), "{url}");
        }
    }

    #[test]
    fn tls_and_plain_text_stay_apart() {
        assert_ne!(
            worker_origin("ws://coord.example.com").unwrap(),
            worker_origin("wss://coord.example.com").unwrap()
        );
    }

    #[test]
    fn what_is_not_a_coordinator_url_is_refused() {
        assert!(matches!(
            worker_origin("127.0.0.1:8080"),
            Err(OriginError::Scheme { .. } | OriginError::NotUrl { .. })
        ));
        assert!(matches!(
            worker_origin("ftp://coord.example.com"),
            Err(OriginError::Scheme { .. })
        ));
        assert!(matches!(
            worker_origin("coord.example.com"),
            Err(OriginError::NotUrl { .. })
        ));
        assert!(matches!(
            worker_origin("ws://"),
            Err(OriginError::NotUrl { .. } | OriginError::NoHost { .. })
        ));
        let long = format!("ws://{}.example", "a".repeat(URL_BYTES_MAX));
        assert!(matches!(
            worker_origin(&long),
            Err(OriginError::TooLong { .. })
        ));
    }
}
