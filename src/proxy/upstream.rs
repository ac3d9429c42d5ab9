//! The proxy's wire to its upstreams: a plain-HTTP upstream over the lean HTTP/1.1 pool the
//! raw bursts use ([`Http1Pool`]: bodies streamed both ways, a connection back in the pool once
//! the caller has read the whole answer, closed if it has not), an HTTPS one through reqwest (TLS, HTTP/2).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Method};
use hyper::body::Incoming;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use url::Url;

use super::error::ProxyError;
use crate::http::client::error_chain;
use crate::http::transport::TransportError;
use crate::http::{Http1Pool, Pooled, origin_request};

/// How long an idle upstream connection is kept (reqwest's default, longer than most servers'
/// keep-alive), and how many per upstream and serving thread (nginx's `keepalive` of our bench).
const IDLE_FOR_AT_MOST: Duration = Duration::from_secs(90);
const IDLE_AT_MOST: usize = 64;

/// What one attempt upstream produced.
pub(crate) enum Upstream {
    /// The upstream's answer, its body still streaming.
    Response(http::Response<Body>),
    /// No connection, or the exchange broke before an answer.
    Unreachable(String),
    /// No answer within the upstream timeout.
    TimedOut,
}

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
    timeout: Option<Duration>,
}

impl Upstreams {
    /// `connect_timeout` bounds making a connection, `timeout` the wait for an answer's head.
    pub(crate) fn new(connect_timeout: Option<Duration>, timeout: Option<Duration>) -> Result<Self, ProxyError> {
        crate::http::install_tls_provider();
        let mut tls = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(limit) = connect_timeout {
            tls = tls.connect_timeout(limit);
        } else {
            // Paused-time tests: no idle-connection sweeps either.
            tls = tls.pool_idle_timeout(None);
        }
        let tls = tls.build().map_err(|err| ProxyError::Client(err.to_string()))?;
        let plain = Http1Pool::new(connect_timeout).keeping_idle(IDLE_FOR_AT_MOST, IDLE_AT_MOST);
        Ok(Self { plain, tls, timeout })
    }

    /// One attempt: `method url` with `headers` (hop-by-hop ones already out) and `body`, to
    /// `origin` (a plain-`http` upstream's authority and `Host`) or else over TLS, bounded by
    /// the upstream timeout until the answer's head arrives.
    pub(crate) async fn send(
        &self,
        method: &Method,
        url: &Url,
        origin: Option<&(Authority, HeaderValue)>,
        headers: &HeaderMap,
        body: Outgoing,
    ) -> Upstream {
        let exchange = async {
            match origin {
                Some(origin) => self.send_plain(method, url, origin, headers, body).await,
                None => self.send_tls(method, url, headers, body).await,
            }
        };
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, exchange).await.unwrap_or(Upstream::TimedOut),
            None => exchange.await,
        }
    }

    /// Over a pooled connection to `authority`: the request in origin form (its path and query
    /// only, already checked to lie on the route), `Host` the route's (the caller's was removed
    /// with the hop-by-hop fields).
    async fn send_plain(
        &self,
        method: &Method,
        url: &Url,
        (authority, host): &(Authority, HeaderValue),
        headers: &HeaderMap,
        body: Outgoing,
    ) -> Upstream {
        let body = match body {
            Outgoing::Empty => Body::empty(),
            Outgoing::Bytes(bytes) => Body::from(bytes),
            Outgoing::Stream(body) => body,
        };
        let request = match origin_request(method, url, host, headers, body) {
            Ok(request) => request,
            Err(err) => return no_answer(err),
        };
        match self.plain.send(authority, request).await {
            Ok((response, pooled)) => Upstream::Response(
                response
                    .map(|body| Body::new(PooledBody { body, back: Some((self.plain.clone(), pooled)), ended: false })),
            ),
            Err(err) => no_answer(err),
        }
    }

    async fn send_tls(&self, method: &Method, url: &Url, headers: &HeaderMap, body: Outgoing) -> Upstream {
        let request = self.tls.request(method.clone(), url.clone()).headers(headers.clone());
        let request = match body {
            Outgoing::Empty => request,
            Outgoing::Bytes(bytes) => request.body(bytes),
            Outgoing::Stream(body) => request.body(reqwest::Body::wrap_stream(body.into_data_stream())),
        };
        match request.send().await {
            Ok(response) => Upstream::Response(http::Response::from(response).map(Body::new)),
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

/// An upstream answer's body that gives its connection back to the pool once read to the end
/// (then it is ready for the next request); dropped before that (a caller that hung up mid-body,
/// an endless stream), the connection is closed instead, never handed to another request.
struct PooledBody {
    body: Incoming,
    back: Option<(Http1Pool<Body>, Pooled<Body>)>,
    ended: bool,
}

impl HttpBody for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.ended = true,
            Poll::Ready(Some(Ok(_))) => self.ended = self.body.is_end_stream(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if let Some((pool, pooled)) = self.back.take()
            && self.ended
        {
            pool.checkin(pooled);
        }
    }
}
