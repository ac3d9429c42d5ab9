//! The proxy's wire to its upstreams: a plain-HTTP upstream over the lean HTTP/1.1 pool the
//! raw bursts use ([`Http1Pool`]: bodies streamed both ways, a connection back in the pool once
//! the caller has read the whole answer), an HTTPS one through reqwest (TLS, HTTP/2).

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Method};
use http_body_util::BodyExt;
use url::Url;

use super::error::ProxyError;
use crate::http::client::error_chain;
use crate::http::http1::origin_form;
use crate::http::transport::TransportError;
use crate::http::{Http1Pool, Pooled};

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
        Ok(Self { plain: Http1Pool::new(connect_timeout), tls, timeout })
    }

    /// One attempt: `method url` with `headers` (hop-by-hop ones already out) and `body`,
    /// bounded by the upstream timeout until the answer's head arrives.
    pub(crate) async fn send(&self, method: &Method, url: &Url, headers: &HeaderMap, body: Outgoing) -> Upstream {
        let exchange = async {
            if url.scheme() == "http" {
                self.send_plain(method, url, headers, body).await
            } else {
                self.send_tls(method, url, headers, body).await
            }
        };
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, exchange).await.unwrap_or(Upstream::TimedOut),
            None => exchange.await,
        }
    }

    async fn send_plain(&self, method: &Method, url: &Url, headers: &HeaderMap, body: Outgoing) -> Upstream {
        let uri = match url.as_str().parse::<http::Uri>() {
            Ok(uri) => uri,
            Err(err) => return Upstream::Unreachable(format!("the upstream URL is not a URI: {err}")),
        };
        let body = match body {
            Outgoing::Empty => Body::empty(),
            Outgoing::Bytes(bytes) => Body::from(bytes),
            Outgoing::Stream(body) => body,
        };
        let mut request = http::Request::new(body);
        *request.method_mut() = method.clone();
        *request.uri_mut() = uri;
        *request.headers_mut() = headers.clone();
        let (mut parts, body) = request.into_parts();
        let authority = match origin_form(&mut parts) {
            Ok(authority) => authority,
            Err(err) => return unreachable(err),
        };
        match self.plain.send(&authority, http::Request::from_parts(parts, body)).await {
            Ok((response, pooled)) => Upstream::Response(response.map(|body| {
                let back = CheckIn(Some((self.plain.clone(), pooled)));
                Body::new(body.map_frame(move |frame| {
                    let _back = &back;
                    frame
                }))
            })),
            Err(err) => unreachable(err),
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

fn unreachable(err: TransportError) -> Upstream {
    match err {
        TransportError::TimedOut => Upstream::TimedOut,
        TransportError::Failed(message) => Upstream::Unreachable(message),
    }
}

/// Gives a plain-HTTP connection back to its pool when the answer's body is dropped: after the
/// caller has read it all, the connection is ready for the next request (one dropped half-read
/// is closed by hyper, and the pool drops it in turn).
struct CheckIn(Option<(Http1Pool<Body>, Pooled<Body>)>);

impl Drop for CheckIn {
    fn drop(&mut self) {
        if let Some((pool, pooled)) = self.0.take() {
            pool.checkin(pooled);
        }
    }
}
