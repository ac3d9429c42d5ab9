//! The proxy's wire to its upstreams: a plain-HTTP upstream over the lean HTTP/1.1 pool the
//! raw bursts use ([`Http1Pool`]: bodies streamed both ways, the connection driven by the
//! caller's own connection as it reads the answer, back in the pool once the caller has read
//! it whole, closed if it has not), an HTTPS one through reqwest (TLS, HTTP/2).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::Either;
use tokio::time::Instant;
use url::Url;

use super::error::ProxyError;
use crate::http::client::error_chain;
use crate::http::transport::TransportError;
use crate::http::{Http1Pool, PooledBody, origin_request};

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
    timeout: Option<Duration>,
    /// The upstream wait is armed in steps of this long at most: the callers' head timeout.
    step: Option<Duration>,
}

impl Upstreams {
    /// `connect_timeout` bounds making a connection, `timeout` the wait for an answer's head;
    /// `head_timeout` is the callers' (see [`wait_for_answer`]).
    pub(crate) fn new(
        connect_timeout: Option<Duration>,
        timeout: Option<Duration>,
        head_timeout: Option<Duration>,
    ) -> Result<Self, ProxyError> {
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
        Ok(Self { plain, tls, timeout, step: head_timeout.filter(|step| !step.is_zero()) })
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
        // Pinned where it is made: the exchange is most of a request's state, and each move
        // copies all of it.
        let exchange = std::pin::pin!(async {
            match origin {
                Some(origin) => self.send_plain(method, url, origin, headers, body).await,
                None => self.send_tls(method, url, headers, body).await,
            }
        });
        match self.timeout {
            Some(limit) => wait_for_answer(limit, self.step, exchange).await,
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
            // Its body drives the connection and gives it back to the pool once read.
            Ok(response) => Upstream::Response(response.map(|body| Either::Left(Box::new(body)))),
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
            Ok(response) => {
                Upstream::Response(http::Response::from(response).map(|body| Either::Right(Box::new(body))))
            }
            Err(err) if err.is_timeout() => Upstream::TimedOut,
            Err(err) => Upstream::Unreachable(error_chain(&err)),
        }
    }
}

/// `exchange` bounded by `limit`, its timer armed `step` ahead at most and re-armed until the
/// deadline. A serving thread then arms every timer the same distance ahead (a caller
/// connection's head timer is `step`): a new one never falls before the thread's next
/// wake-up, which tokio would otherwise move earlier by waking the thread through its poller,
/// two system calls a request. A slow upstream costs one more timer each `step`.
async fn wait_for_answer(
    limit: Duration,
    step: Option<Duration>,
    mut exchange: Pin<&mut impl Future<Output = Upstream>>,
) -> Upstream {
    let mut now = Instant::now();
    // A deadline past what the clock can tell is none.
    let Some(deadline) = now.checked_add(limit) else { return exchange.await };
    loop {
        let wake = step.and_then(|step| now.checked_add(step)).map_or(deadline, |wake| wake.min(deadline));
        match tokio::time::timeout_at(wake, exchange.as_mut()).await {
            Ok(answer) => return answer,
            Err(_) if wake >= deadline => return Upstream::TimedOut,
            Err(_) => now = Instant::now(),
        }
    }
}

fn no_answer(err: TransportError) -> Upstream {
    match err {
        TransportError::TimedOut => Upstream::TimedOut,
        TransportError::Failed(message) => Upstream::Unreachable(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exchange that answers after `after` (never, for `None`).
    async fn answering(after: Option<Duration>) -> Upstream {
        match after {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending::<()>().await,
        }
        Upstream::Unreachable("answered".to_owned())
    }

    #[tokio::test(start_paused = true)]
    async fn the_upstream_wait_armed_in_steps_ends_at_its_whole_deadline() {
        let (limit, step) = (Duration::from_millis(3_500), Some(Duration::from_secs(1)));
        let start = Instant::now();
        let answer = wait_for_answer(limit, step, std::pin::pin!(answering(Some(Duration::from_millis(2_500))))).await;
        assert!(
            matches!(answer, Upstream::Unreachable(text) if text == "answered"),
            "an answer within the limit, after two steps"
        );
        assert_eq!(start.elapsed(), Duration::from_millis(2_500));

        let start = Instant::now();
        assert!(matches!(wait_for_answer(limit, step, std::pin::pin!(answering(None))).await, Upstream::TimedOut));
        assert_eq!(start.elapsed(), limit, "the deadline is the limit's, not a step's multiple");

        let start = Instant::now();
        assert!(matches!(wait_for_answer(limit, None, std::pin::pin!(answering(None))).await, Upstream::TimedOut));
        assert_eq!(start.elapsed(), limit);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_past_the_clocks_range_is_no_deadline() {
        let answering = std::pin::pin!(answering(Some(Duration::from_secs(1_000))));
        let answer = wait_for_answer(Duration::MAX, Some(Duration::MAX), answering);
        assert!(matches!(answer.await, Upstream::Unreachable(text) if text == "answered"));
    }
}
