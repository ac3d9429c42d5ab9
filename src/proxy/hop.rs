//! Hop-by-hop headers (RFC 9110 §7.6.1) and the proxy's own forwarding headers.
//!
//! A proxy must not forward `Connection`, the fields it names, or the classic hop-by-hop set
//! (`Keep-Alive`, `Proxy-Connection`, `Proxy-Authenticate`, `Proxy-Authorization`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`); hyper and reqwest frame each hop themselves.
//! Requests also lose `Expect` and the caller's `Host` (the upstream's is its own authority),
//! and gain `Via` and `X-Forwarded-For`/`-Proto`/`-Host`, so the upstream can tell who asked.

use std::net::IpAddr;

use http::header::{
    CONNECTION, CONTENT_LENGTH, EXPECT, Entry, HOST, HeaderName, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE, VIA,
};
use http::{HeaderMap, HeaderValue};

// Names and values made at compile time (statics: their bytes are never copied or counted).
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static PLAIN_HTTP: HeaderValue = HeaderValue::from_static("http");
/// This proxy in `Via`: protocol version and a pseudonym (RFC 9110 §7.6.3).
static VIA_ME: HeaderValue = HeaderValue::from_static("1.1 ratescope");

/// Whether a header frames the message (`Content-Length`, `Transfer-Encoding`), names the
/// target (`Host`) or belongs to one hop: the fields a proxy sets itself and never takes from
/// anyone's configuration.
pub(crate) fn is_framing_or_hop(name: &HeaderName) -> bool {
    is_hop_by_hop(name) || [HOST, CONTENT_LENGTH, EXPECT].contains(name)
}

/// The fixed hop-by-hop set (RFC 9110 §7.6.1), without those a `Connection` header names.
static HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHENTICATE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    PROXY_AUTHORIZATION,
];

/// Compared as names, not text: a standard header's name is a tag.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// Removes the hop-by-hop fields: those named in `Connection`, then the fixed set. A map
/// without any (most requests and answers) is read once and left alone.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    let present: Vec<HeaderName> = headers.keys().filter(|name| is_hop_by_hop(name)).cloned().collect();
    for name in present {
        headers.remove(name);
    }
}

/// The request headers sent upstream: hop-by-hop ones removed, `Host` the upstream's (`host`,
/// or none when the client sets it from the URL), forwarding headers added, and the route's
/// secrets in place of any caller header of the same name.
pub(crate) fn upstream_request_headers(
    mut headers: HeaderMap,
    peer: &HeaderValue,
    secrets: &HeaderMap,
    host: Option<&HeaderValue>,
) -> HeaderMap {
    strip_hop_by_hop(&mut headers);
    // The caller's `Expect: 100-continue` was answered by our server; the upstream hop has its own.
    headers.remove(EXPECT);
    // The caller's `Host` named this proxy: it goes on as `X-Forwarded-Host`.
    let host = match host {
        Some(upstream) => headers.insert(HOST, upstream.clone()),
        None => headers.remove(HOST),
    };
    append_list(&mut headers, X_FORWARDED_FOR.clone(), peer);
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST.clone(), host);
    }
    headers.insert(X_FORWARDED_PROTO.clone(), PLAIN_HTTP.clone());
    append_list(&mut headers, VIA, &VIA_ME);
    for (name, value) in secrets {
        // `insert` replaces every caller value of that name: the caller's key is never forwarded.
        headers.insert(name.clone(), value.clone());
    }
    headers
}

/// The response headers sent back to the caller: hop-by-hop removed, `Via` added.
pub(crate) fn caller_response_headers(mut headers: HeaderMap) -> HeaderMap {
    strip_hop_by_hop(&mut headers);
    append_list(&mut headers, VIA, &VIA_ME);
    headers
}

/// A caller's address as `X-Forwarded-For` names it: rendered once per connection.
pub(crate) fn forwarded_for(peer: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&peer.to_string()).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// Appends `item` to a comma-separated list field, joining existing values into one line.
fn append_list(headers: &mut HeaderMap, name: HeaderName, item: &HeaderValue) {
    let mut present = match headers.entry(name) {
        Entry::Vacant(vacant) => {
            vacant.insert(item.clone());
            return;
        }
        Entry::Occupied(present) => present,
    };
    let mut items: Vec<&str> = present.iter().filter_map(|value| value.to_str().ok()).collect();
    items.extend(item.to_str().ok());
    if let Ok(value) = HeaderValue::from_str(&items.join(", ")) {
        present.insert(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn hop_by_hop_and_connection_named_fields_are_dropped() {
        let mut headers = map(&[
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic abc"),
            ("accept", "application/json"),
        ]);
        strip_hop_by_hop(&mut headers);
        let names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept"]);
    }

    #[test]
    fn secrets_replace_caller_values_and_forwarding_headers_are_added() {
        let caller = map(&[
            ("host", "127.0.0.1:8788"),
            ("x-api-key", "caller-guess"),
            ("x-api-key", "another"),
            ("x-forwarded-for", "10.0.0.1"),
        ]);
        let secrets = map(&[("x-api-key", "the-real-key")]);
        let peer = forwarded_for("127.0.0.1".parse().unwrap());
        let sent = upstream_request_headers(caller.clone(), &peer, &secrets, None);
        let keys: Vec<&HeaderValue> = sent.get_all("x-api-key").iter().collect();
        assert_eq!(keys, [&HeaderValue::from_static("the-real-key")]);
        assert_eq!(sent["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(sent["x-forwarded-host"], "127.0.0.1:8788");
        assert_eq!(sent["via"], "1.1 ratescope");
        assert!(!sent.contains_key("host"));

        // A plain-HTTP upstream's own `Host` takes the caller's place.
        let upstream = HeaderValue::from_static("api.example:8080");
        let sent = upstream_request_headers(caller, &peer, &secrets, Some(&upstream));
        assert_eq!(sent.get_all("host").iter().collect::<Vec<_>>(), [&upstream]);
        assert_eq!(sent["x-forwarded-host"], "127.0.0.1:8788");
    }

    #[test]
    fn framing_and_hop_fields_are_named_as_such() {
        for name in ["content-length", "Transfer-Encoding", "host", "connection", "keep-alive", "te", "upgrade"] {
            assert!(is_framing_or_hop(&HeaderName::from_bytes(name.as_bytes()).unwrap()), "{name}");
        }
        for name in ["authorization", "x-api-key", "cookie", "content-type"] {
            assert!(!is_framing_or_hop(&HeaderName::from_bytes(name.as_bytes()).unwrap()), "{name}");
        }
    }
}
