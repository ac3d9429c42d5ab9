//! The proxy's wire to its upstreams: a plain-HTTP upstream over the lean HTTP/1.1 pool the
//! raw bursts use ([`Http1Pool`]: bodies streamed both ways, the connection driven by the
//! caller's own connection as it reads the answer, back in the pool once the caller has read
//! it whole, closed if it has not), an HTTPS one through reqwest (TLS, HTTP/2).

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::Either;
use url::Url;

use super::config::Route;
use super::error::ProxyError;
use crate::http::client::error_chain;
use crate::http::transport::TransportError;
use crate::http::{Http1Pool, PooledBody, target_request};

/// How long an idle upstream connection is kept (reqwest's default, longer than most servers'
/// keep-alive), and how many per upstream and serving thread (nginx's `keepalive` of our bench).
const IDLE_FOR_AT_MOST: Duration = Duration::from_secs(90);
const IDLE_AT_MOST: usize = 64;

/// What one attempt upstream produced.
pub(crate) enum Upstream {
    /// The upstream's answer, its body still streaming.
    Response(http::Response<UpstreamBody>),
    /// No connection, or the exchange broke before an answer.
    Unreachable(String),
    /// No answer within the upstream timeout.
    TimedOut,
}

/// An upstream answer's body as it streams to the caller: straight from the plain-HTTP pool's
/// connection (which it drives as it is read, and gives back at its end), or from reqwest.
/// One concrete type, so the caller's body calls it directly, not through a second dynamic
/// body of its own. Each side is boxed: a request's answer is moved a few times on its way,
/// and a small one moves in registers.
pub(crate) type UpstreamBody = Either<Box<PooledBody<Body>>, Box<reqwest::Body>>;

/// A request body as it goes upstream.
pub(crate) enum Outgoing {
    /// None at all (a bodiless GET's).
    Empty,
    /// Read whole before sending (it can be sent again on a retry).
    Bytes(Bytes),
    /// The caller's, streamed through as it arrives (once).
    Stream(Body),
}

/// The wires to every upstream, shared by all requests.
#[derive(Debug)]
pub(crate) struct Upstreams {
    plain: Http1Pool<Body>,
    tls: reqwest::Client,
}

impl Upstreams {
    /// `connect_timeout` bounds making a connection (the wait for an answer is bounded by the
    /// caller's connection: `deadlines::Deadlines::within_upstream_timeout`).
    pub(crate) fn new(connect_timeout: Option<Duration>) -> Result<Self, ProxyError> {
        crate::http::install_tls_provider();
        let mut tls = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(limit) = connect_timeout {
            tls = tls.connect_timeout(limit);
        } else {
            // Paused-time tests: no idle-connection sweeps either.
            tls = tls.pool_idle_timeout(None);
        }
        let tls = tls.build().map_err(|err| ProxyError::Client(err.to_string()))?;
        // Each caller's connection drives the upstream connection its request is on: the answer
        // goes back in the wake-up that read it, its head and body in one write.
        let plain = Http1Pool::new(connect_timeout).keeping_idle(IDLE_FOR_AT_MOST, IDLE_AT_MOST).driving_connections();
        Ok(Self { plain, tls })
    }

    /// One attempt: `method target` with `headers` (hop-by-hop ones already out) and `body`, to
    /// `route`'s upstream: over a pooled connection to a plain-`http` one's origin, or else
    /// over TLS (the one case a URL is made).
    pub(crate) async fn send(
        &self,
        method: &Method,
        route: &Route,
        target: &PathAndQuery,
        headers: &HeaderMap,
        body: Outgoing,
    ) -> Upstream {
        match route.origin() {
            Some(origin) => self.send_plain(method, target, origin, headers, body).await,
            None => match route.url_of(target) {
                Ok(url) => self.send_tls(method, url, headers, body).await,
                Err(err) => Upstream::Unreachable(format!("cannot make the upstream URL: {err}")),
            },
        }
    }

    /// Over a pooled connection to `authority`: the request in origin form (`target`, its path
    /// and query, already checked to lie on the route), `Host` the route's (the caller's was
    /// removed with the hop-by-hop fields).
    async fn send_plain(
        &self,
        method: &Method,
        target: &PathAndQuery,
        (authority, host): &(Authority, HeaderValue),
        headers: &HeaderMap,
        body: Outgoing,
    ) -> Upstream {
        let body = match body {
            Outgoing::Empty => Body::empty(),
            Outgoing::Bytes(bytes) => Body::from(bytes),
            Outgoing::Stream(body) => body,
        };
        let request = target_request(method, target.clone(), host, headers, body);
        match self.plain.send(authority, request).await {
            // Its body drives the connection and gives it back to the pool once read.
            Ok(response) => Upstream::Response(response.map(|body| Either::Left(Box::new(body)))),
            Err(err) => no_answer(err),
        }
    }

    async fn send_tls(&self, method: &Method, url: Url, headers: &HeaderMap, body: Outgoing) -> Upstream {
        let request = self.tls.request(method.clone(), url).headers(headers.clone());
        let request = match body {
            Outgoing::Empty => request,
            Outgoing::Bytes(bytes) => request.body(bytes),
            Outgoing::Stream(body) => request.body(reqwest::Body::wrap_stream(body.into_data_stream())),
        };
        match request.send().await {
            Ok(response) => {
                Upstream::Response(http::Response::from(response).map(|body| Either::Right(Box::new(body))))
            }
            Err(err) if err.is_timeout() => Upstream::TimedOut,
            Err(err) => Upstream::Unreachable(error_chain(&err)),
        }
    }
}

fn no_answer(err: TransportError) -> Upstream {
    match err {
        TransportError::TimedOut => Upstream::TimedOut,
        TransportError::Failed(message) => Upstream::Unreachable(message),
    }
}
