//! The wire of one attempt: reqwest, the HTTP/1.1 wire of raw bursts, or a transport of the
//! caller's; the client's headers for a host; and redirects, followed alike on every wire.

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use url::Url;

use super::{LimitedClient, RequestSpec, error_chain};
use crate::http::http1::Http1Transport;
use crate::http::redirect;
use crate::http::transport::{Exchanged, Transport, TransportError};

/// The entry of `map` for `url`'s host: `host:port` first when the URL names a port, then `host`.
pub(super) fn per_host<'a, T>(map: &'a HashMap<String, T>, url: &Url) -> Option<&'a T> {
    if map.is_empty() {
        return None;
    }
    let host = url.host_str()?.to_ascii_lowercase();
    let with_port = url.port().and_then(|port| map.get(&format!("{host}:{port}")));
    with_port.or_else(|| map.get(&host))
}

/// Whether the environment asks for an HTTP proxy (reqwest would honour it).
pub(super) fn proxy_configured() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// What one attempt on the wire produced.
pub(super) enum WireOutcome {
    /// `body` is `None` when it was left unread (streamed on to the caller).
    Response {
        status: StatusCode,
        headers: HeaderMap,
        body: Option<Bytes>,
    },
    ConnectionError(String),
    Timeout,
}

/// A wire other than reqwest.
enum Wire<'a> {
    InProcess(&'a dyn Transport),
    /// Awaited directly, without the boxed future of [`Transport::exchange`], and given the
    /// URL's parts rather than an absolute URI.
    Http1(&'a Http1Transport),
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// The request of one attempt for a transport other than reqwest, or why it cannot be sent.
fn wire_request(spec: &RequestSpec, headers: &HeaderMap) -> Result<http::Request<Bytes>, String> {
    let mut request = http::Request::new(spec.body.clone().unwrap_or_default());
    *request.method_mut() = spec.method.clone();
    *request.headers_mut() = headers.clone();
    match spec.url.as_str().parse() {
        Ok(uri) => *request.uri_mut() = uri,
        Err(err) => return Err(format!("'{}' is not a URI: {err}", crate::redact::redact_url(&spec.url))),
    }
    Ok(request)
}

/// What a transport's exchange means for the attempt.
fn outcome_of(exchanged: Exchanged) -> WireOutcome {
    match exchanged {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            WireOutcome::Response { status: parts.status, headers: parts.headers, body: Some(body) }
        }
        Err(TransportError::TimedOut) => WireOutcome::Timeout,
        Err(TransportError::Failed(message)) => WireOutcome::ConnectionError(message),
    }
}

/// A connection that could not be made (a connect timeout included) is a connection error; a
/// timeout after that is a missing response.
pub(super) fn classify(err: &reqwest::Error) -> WireOutcome {
    if err.is_timeout() && !err.is_connect() {
        return WireOutcome::Timeout;
    }
    let message = error_chain(err);
    // reqwest names the URL, query and all: a key in it stays out of the message.
    let message = match err.url() {
        Some(url) => message.replace(url.as_str(), &crate::redact::redact_url(url)),
        None => message,
    };
    WireOutcome::ConnectionError(message)
}

impl LimitedClient {
    /// The wire other than reqwest that carries a request to `url`, if any: the in-process
    /// transport when one is set, else the direct HTTP/1.1 wire for a plain-http host (a
    /// loopback one only, when a proxy is configured).
    fn wire_for(&self, url: &url::Url) -> Option<Wire<'_>> {
        if let Some(transport) = &self.inner.transport {
            return Some(Wire::InProcess(transport.as_ref()));
        }
        let (wire, proxied) = self.inner.http1.as_ref()?;
        (Http1Transport::serves(url) && (!proxied || is_loopback(url))).then_some(Wire::Http1(wire))
    }

    /// Whether [`headers_for`](Self::headers_for) adds anything to a caller's headers for `url`.
    #[cfg(feature = "middleware")]
    pub(super) fn adds_headers_for(&self, url: &Url) -> bool {
        !self.inner.default_headers.is_empty() || per_host(&self.inner.host_headers, url).is_some()
    }

    /// The client's headers for `url` (its defaults, then its host's), then the caller's.
    pub(super) fn headers_for(&self, url: &Url, caller: &HeaderMap) -> HeaderMap {
        let inner = &*self.inner;
        let extra = per_host(&inner.host_headers, url);
        if inner.default_headers.is_empty() && extra.is_none() {
            return caller.clone();
        }
        let mut headers = inner.default_headers.clone();
        if let Some(extra) = extra {
            headers.extend(extra.clone());
        }
        headers.extend(caller.clone());
        headers
    }

    /// One attempt: the request, and the redirects its host's policy follows
    /// ([`redirect::next_hop`]). A hop to another origin carries the caller's headers without
    /// credentials plus the client's headers for that origin, never the first host's.
    pub(super) async fn send_once(&self, spec: &RequestSpec, headers: &HeaderMap) -> WireOutcome {
        // The hop being sent (none: the request itself).
        let mut hop: Option<(RequestSpec, HeaderMap)> = None;
        let mut followed = 0;
        loop {
            let (current, carried) = hop.as_ref().map_or((spec, headers), |(spec, headers)| (spec, headers));
            let outcome = self.exchange_once(current, carried).await;
            if followed == redirect::MAX_REDIRECTS {
                return outcome;
            }
            let WireOutcome::Response { status, headers: answer, .. } = &outcome else { return outcome };
            let policy = per_host(&self.inner.redirects, &current.url).copied().unwrap_or_default();
            let Some(next) = redirect::next_hop(policy, &current.url, &current.method, *status, answer) else {
                return outcome;
            };
            let next_headers = if next.cross_origin {
                self.headers_for(&next.url, &redirect::strip_credentials(&spec.headers))
            } else {
                carried.clone()
            };
            let next_spec = RequestSpec {
                method: next.method,
                url: next.url,
                headers: spec.headers.clone(),
                body: if next.keeps_body { current.body.clone() } else { None },
                priority: spec.priority,
                cost: spec.cost,
                cost_rules: Vec::new(),
            };
            hop = Some((next_spec, next_headers));
            followed += 1;
        }
    }

    async fn exchange_once(&self, spec: &RequestSpec, headers: &HeaderMap) -> WireOutcome {
        match self.wire_for(&spec.url) {
            Some(Wire::Http1(wire)) => {
                let body = spec.body.clone().unwrap_or_default();
                outcome_of(wire.exchange_url(&spec.method, &spec.url, headers, body).await)
            }
            Some(Wire::InProcess(transport)) => match wire_request(spec, headers) {
                Ok(request) => outcome_of(transport.exchange(request).await),
                Err(message) => WireOutcome::ConnectionError(message),
            },
            None => {
                // Boxed: reqwest's state is the largest, and the raw wire's requests need none of it.
                Box::pin(self.exchange_reqwest(spec, headers)).await
            }
        }
    }

    async fn exchange_reqwest(&self, spec: &RequestSpec, headers: &HeaderMap) -> WireOutcome {
        let mut request = self.inner.http.request(spec.method.clone(), spec.url.clone()).headers(headers.clone());
        if let Some(body) = &spec.body {
            request = request.body(body.clone());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => return classify(&err),
        };
        let status = response.status();
        let mut response = response;
        let headers = std::mem::take(response.headers_mut());
        match response.bytes().await {
            Ok(body) => WireOutcome::Response { status, headers, body: Some(body) },
            Err(err) => classify(&err),
        }
    }
}
