//! [`RateLimitMiddleware`]: a [`LimitedClient`]'s whole request life as a
//! `reqwest_middleware::Middleware`, so a profile tuned in the app drops into an existing
//! `reqwest_middleware::ClientWithMiddleware` chain.
//!
//! Each request runs the client's own steps (the same code as [`LimitedClient::send`]): the
//! cache, coalescing, the key's limiter and shared budget, then the rest of the chain as the
//! wire, its rate-limit headers read (adaptive keys learn from them), the key paused on a
//! 429/503, and retries that wait what `Retry-After` says. What differs is the wire and the
//! answer: the chain's next middleware (and finally reqwest) sends each attempt, and the
//! caller gets reqwest's own `Response`. A client with nothing to read in a plain answer (no
//! cache, coalescing, listener or cost rules, a key neither adaptive nor shared) sends on a
//! direct path (`direct.rs`) that skips the steps for a 2xx and hands them anything else.
//!
//! Bodies stream through untouched unless the client needs them: a response cache, coalescing
//! (both share one body among callers) or cost rules (which read the answer) make the
//! middleware read the body and hand the caller a response rebuilt around it. A streamed
//! response keeps its concurrency slot until the caller has read the body to its end (or
//! dropped it), like the proxy. A request whose body is a stream cannot be sent twice: it is
//! never retried (its 429 goes back to the caller as it came).
//!
//! When the retry policy gives up on a response (a 429 after the last retry, a status it does
//! not retry), the caller gets that response, as reqwest alone would give it; a request that
//! got no response at all fails with the chain's own error; the limiter's or the shared
//! budget's refusal is a `reqwest_middleware::Error::Middleware` holding a [`ClientError`].

mod direct;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Extensions, Version};
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{Error, Next};
use tokio::time::Instant;
use url::Url;

use self::direct::Direct;
use super::request::{Answer, Received, Request, Sent};
use super::wire::{WireOutcome, classify};
use super::{ClientError, LimitedClient, LimitedResponse, RequestSpec};
use crate::engine::Permit;
use crate::http::admission::Admission;
use crate::http::attempts::{self, Face, Steps};
use crate::http::coalesce::Role;
use crate::http::extensions::limits_of;
use crate::http::report::SharedDue;
use crate::http::retry::{Decision, GiveUpReason};

/// A [`LimitedClient`]'s limits, retries, adaptive learning, cache, coalescing and events, as a
/// middleware. Build the client as usual (from a profile with `Profile::client_builder`, or
/// [`LimitedClient::builder`]), then add `RateLimitMiddleware::new(client)` to a
/// `reqwest_middleware::ClientBuilder`. The client's own reqwest settings (timeouts,
/// redirects) do not apply here: the chain's reqwest client sends.
///
/// Per request, `http::Extensions` may carry an `engine::Priority`, a
/// [`RequestCost`](crate::http::RequestCost) and [`CostRules`](crate::http::CostRules).
#[derive(Debug, Clone)]
pub struct RateLimitMiddleware {
    client: LimitedClient,
}

impl RateLimitMiddleware {
    /// The middleware of `client`: its registry, retry policy, cache and events.
    pub fn new(client: LimitedClient) -> Self {
        Self { client }
    }

    /// The client whose limits this middleware applies (its registry changes apply at once).
    pub fn client(&self) -> &LimitedClient {
        &self.client
    }
}

impl From<LimitedClient> for RateLimitMiddleware {
    fn from(client: LimitedClient) -> Self {
        Self::new(client)
    }
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for RateLimitMiddleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        // Boxed: the direct path's future then carries a pointer, not the request's copy.
        let pending = Box::new(Outgoing::new(request, extensions));
        match Direct::admit(&self.client, &pending.0) {
            Some(direct) => Outgoing::direct(pending, &self.client, direct, extensions, next).await,
            // Boxed: the steps' state is large, and the direct path's future should not carry it.
            None => {
                let (spec, outgoing) = *pending;
                Box::pin(self.stepped(spec, outgoing, extensions, next)).await
            }
        }
    }
}

impl RateLimitMiddleware {
    /// A request through the client's steps: the cache, coalescing, then its attempts.
    async fn stepped(
        &self,
        spec: RequestSpec,
        outgoing: Outgoing,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        // Boxed: the request's state then moves as a pointer through the nested futures.
        let mut life = Box::new(Request::prepare(&self.client, spec).map_err(Error::middleware)?);
        if let Some(cached) = life.cached() {
            return rebuilt(cached, &life.spec().url, Version::HTTP_11, Extensions::new());
        }
        // The flight key only when there is a coalescer to look it up in.
        let coalescing =
            self.client.inner.coalescer.as_ref().and_then(|coalescer| Some((coalescer, life.flight_key()?)));
        let Some((coalescer, key)) = coalescing else {
            let buffered = self.client.inner.cache.is_some() || !life.spec().cost_rules.is_empty();
            return outgoing.attempts(life, extensions, next, buffered, None).await?.into_reqwest();
        };
        let url = life.spec().url.clone();
        let mut role = coalescer.join(key);
        loop {
            match role {
                Role::Leader(leader) => {
                    let finished = outgoing.attempts(life, extensions, next, true, None).await;
                    leader.land(&landed(&finished, &url));
                    return finished?.into_reqwest();
                }
                Role::Follower(follower) => match follower.outcome().await {
                    Ok(outcome) => {
                        let response = (*life).followed(outcome).map_err(Error::middleware)?;
                        return rebuilt(response, &url, Version::HTTP_11, Extensions::new());
                    }
                    Err(next_role) => role = next_role,
                },
            }
        }
    }
}

/// How a request that went down the chain ended, before it becomes reqwest's response.
enum Finished {
    /// Streamed: reqwest's own response (its body holding the slot).
    Streamed(reqwest::Response),
    /// Read: the response the client's steps made, and what reqwest's response carried.
    Read(Box<ReadResponse>),
}

/// A response whose body was read: what the client's steps made of it, and what reqwest's
/// response carried besides.
struct ReadResponse {
    response: LimitedResponse,
    url: Url,
    version: Version,
    extensions: Extensions,
}

impl Finished {
    fn into_reqwest(self) -> reqwest_middleware::Result<reqwest::Response> {
        match self {
            Self::Streamed(response) => Ok(response),
            Self::Read(read) => rebuilt(read.response, &read.url, read.version, read.extensions),
        }
    }
}

/// What a coalescing leader hands its followers: a copy of its read response, or its error
/// as the client would name it.
fn landed(finished: &reqwest_middleware::Result<Finished>, url: &Url) -> Result<LimitedResponse, ClientError> {
    match finished {
        Ok(Finished::Read(read)) => Ok(read.response.clone()),
        // A leader always reads; a streamed answer can only be a caller's stream body.
        Ok(Finished::Streamed(response)) => Err(ClientError::GaveUp {
            reason: GiveUpReason::NotRetryable,
            last_status: Some(response.status().as_u16()),
            attempts: 1,
        }),
        Err(Error::Middleware(err)) => match err.downcast_ref::<ClientError>() {
            Some(err) => Err(err.clone()),
            None => Err(ClientError::Middleware(err.to_string())),
        },
        Err(err) => Err(ClientError::Transport {
            host: url.host_str().unwrap_or_default().to_owned(),
            message: err.to_string(),
            attempts: 1,
        }),
    }
}

/// The request as it came down the chain: sent itself by the first attempt; a retry sends a
/// request rebuilt from the spec (the same method, URL, headers and body), when its body is
/// bytes and not a stream.
struct Outgoing {
    first: Option<reqwest::Request>,
    /// What a retry needs besides the spec, `None` when the body cannot be sent again.
    replay: Option<Replay>,
    /// Whether the client adds headers (defaults, the host's secrets) to the caller's.
    adds_headers: bool,
}

/// What of reqwest's request a retry keeps that the spec does not hold: its own timeout (the
/// whole of its per-request settings) and HTTP version.
struct Replay {
    timeout: Option<Duration>,
    version: Version,
}

/// An attempt already sent when the steps take the request over: how it was admitted, when
/// it left, and what the chain answered.
struct FirstAttempt {
    admission: Admission,
    sent_at: Instant,
    answer: reqwest_middleware::Result<reqwest::Response>,
}

/// What an attempt leaves the caller besides what the client's steps read.
enum Kept {
    /// The response whose body was not read: it streams on to the caller.
    Streaming(reqwest::Response),
    /// The body was read into the answer; the response's URL, version and extensions.
    Read { url: Url, version: Version, extensions: Extensions },
    /// No response: the chain's error.
    Failed(Error),
}

impl Outgoing {
    /// What the client's steps need of `request` (a [`RequestSpec`]), and the request to send.
    fn new(request: reqwest::Request, extensions: &Extensions) -> (RequestSpec, Self) {
        let (priority, cost, cost_rules) = limits_of(extensions);
        let body = request.body().map(reqwest::Body::as_bytes);
        // A request can be sent again exactly when its body is bytes, not a stream.
        let replay = (!matches!(body, Some(None)))
            .then(|| Replay { timeout: request.timeout().copied(), version: request.version() });
        let spec = RequestSpec {
            method: request.method().clone(),
            url: request.url().clone(),
            headers: request.headers().clone(),
            body: body.flatten().map(Bytes::copy_from_slice),
            priority,
            cost,
            cost_rules,
        };
        (spec, Self { first: Some(request), replay, adds_headers: false })
    }

    /// The request for the next attempt, with the headers it goes out with: the caller's own
    /// request first, then (when its body allows) one rebuilt per retry.
    fn next_try(&mut self, life: &Request<'_>) -> Option<reqwest::Request> {
        if let Some(mut first) = self.first.take() {
            // The client's headers for the host (defaults, secrets) join the caller's.
            if self.adds_headers {
                *first.headers_mut() = life.headers().clone();
            }
            return Some(first);
        }
        let replay = self.replay.as_ref()?;
        let spec = life.spec();
        let mut request = reqwest::Request::new(spec.method.clone(), spec.url.clone());
        *request.headers_mut() = life.headers().clone();
        *request.body_mut() = spec.body.clone().map(reqwest::Body::from);
        *request.timeout_mut() = replay.timeout;
        *request.version_mut() = replay.version;
        Some(request)
    }

    /// The direct path ([`Direct`]): the caller's request down the chain with its permit. An
    /// answer the steps must see continues through them as the request's first attempt.
    async fn direct(
        mut pending: Box<(RequestSpec, Self)>,
        client: &LimitedClient,
        direct: Direct<'_>,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let Some(request) = pending.1.first.take() else {
            return Err(Error::middleware(ClientError::BodyConsumed));
        };
        let answer = match next.clone().run(request, extensions).await {
            Ok(response) if direct.passes_on(response.status()) => return holding(response, direct.permit),
            answer => answer,
        };
        let first = FirstAttempt { admission: Admission::at_once(direct.permit), sent_at: Instant::now(), answer };
        let (spec, outgoing) = *pending;
        let life = Box::new(Request::prepare(client, spec).map_err(Error::middleware)?);
        Box::pin(outgoing.attempts(life, extensions, next, false, Some(first))).await?.into_reqwest()
    }

    /// Every attempt of a request that goes down the chain itself (after `first`, when one
    /// was sent before the steps took over), to the response or error the caller gets.
    async fn attempts(
        mut self,
        life: Box<Request<'_>>,
        extensions: &mut Extensions,
        next: Next<'_>,
        buffered: bool,
        first: Option<FirstAttempt>,
    ) -> reqwest_middleware::Result<Finished> {
        self.adds_headers = life.adds_headers();
        attempts::run(DownTheChain {
            life,
            outgoing: self,
            extensions,
            next,
            buffered,
            first,
            sent_first: None,
            kept: None,
        })
        .await
    }
}

/// The middleware's face: each attempt down the rest of the chain; the caller gets reqwest's
/// response (streamed, or rebuilt around the body the steps read) or the chain's error.
struct DownTheChain<'r, 'c, 'e> {
    life: Box<Request<'c>>,
    outgoing: Outgoing,
    extensions: &'e mut Extensions,
    next: Next<'r>,
    /// Whether the body of every answer is read (a cache, coalescing or cost rules need it).
    buffered: bool,
    /// An attempt sent before the steps took over (the direct path's), not yet admitted here.
    first: Option<FirstAttempt>,
    /// That attempt once admitted: when it left and what the chain answered.
    sent_first: Option<(Instant, reqwest_middleware::Result<reqwest::Response>)>,
    /// What the last attempt leaves the caller besides what the steps read.
    kept: Option<Kept>,
}

impl Face for DownTheChain<'_, '_, '_> {
    type Held = Received;
    type Output = reqwest_middleware::Result<Finished>;

    fn steps(&self) -> Steps<'_> {
        self.life.steps()
    }

    /// A request whose body is a stream cannot be sent twice.
    fn replayable(&self) -> bool {
        self.outgoing.replay.is_some()
    }

    async fn admit(&mut self, attempt: u32) -> Result<Admission, Self::Output> {
        if let Some(first) = self.first.take() {
            self.sent_first = Some((first.sent_at, first.answer));
            return Ok(first.admission);
        }
        self.life.admission(attempt).await.map_err(|err| Err(Error::middleware(err)))
    }

    async fn send(&mut self, attempt: u32, admission: &Admission) -> Sent {
        let (sent_at, answer) = match self.sent_first.take() {
            Some(first) => first,
            None => match self.outgoing.next_try(&self.life) {
                Some(outgoing) => {
                    let sent_at = self.life.sending(attempt);
                    (sent_at, self.next.clone().run(outgoing, self.extensions).await)
                }
                // Only a retry asks again, and a request that cannot be sent again is never retried.
                None => (Instant::now(), Err(Error::middleware(ClientError::BodyConsumed))),
            },
        };
        let (result, kept) = received(answer, self.buffered).await;
        self.kept = Some(kept);
        self.life.answered(attempt, sent_at, result, admission)
    }

    fn record(
        &mut self,
        attempt: u32,
        admission: &mut Admission,
        sent: &Sent,
        decision: &Decision,
    ) -> Option<SharedDue> {
        // The caller gets reqwest's response, not the attempt log: none is kept.
        self.life.record(attempt, admission, sent, decision, None)
    }

    fn retrying(&mut self) {
        self.kept = None;
    }

    async fn finish(self, attempt: u32, sent: Sent, admission: Admission) -> Self::Output {
        let kept = self.kept.ok_or_else(|| Error::middleware(ClientError::BodyConsumed))?;
        delivered(*self.life, attempt, sent, kept, admission.permit)
    }

    async fn give_up(self, attempt: u32, sent: Sent, admission: Admission, reason: GiveUpReason) -> Self::Output {
        let kept = self.kept.ok_or_else(|| Error::middleware(ClientError::BodyConsumed))?;
        given_up(*self.life, attempt, sent, kept, admission.permit, reason)
    }
}

/// What the rest of the chain answered an attempt, for the steps: the body read when
/// `buffered` or when the answer is an error status (small, and it may carry retry hints).
async fn received(answer: reqwest_middleware::Result<reqwest::Response>, buffered: bool) -> (WireOutcome, Kept) {
    let response = match answer {
        Ok(response) => response,
        Err(Error::Reqwest(err)) => return (classify(&err), Kept::Failed(Error::Reqwest(err))),
        Err(err) => return (WireOutcome::ConnectionError(err.to_string()), Kept::Failed(err)),
    };
    let status = response.status();
    let mut response = response;
    if !buffered && status.as_u16() < 400 {
        // Lent to the client's steps, and put back before the caller gets the response.
        let headers = std::mem::take(response.headers_mut());
        return (WireOutcome::Response { status, headers, body: None }, Kept::Streaming(response));
    }
    let (url, version) = (response.url().clone(), response.version());
    let extensions = std::mem::take(response.extensions_mut());
    let headers = std::mem::take(response.headers_mut());
    match response.bytes().await {
        Ok(body) => {
            (WireOutcome::Response { status, headers, body: Some(body) }, Kept::Read { url, version, extensions })
        }
        Err(err) => (classify(&err), Kept::Failed(Error::Reqwest(err))),
    }
}

/// The response of an attempt the policy is done with: the streamed one with its slot riding
/// on the body, or the one the client's last step made (from the cache after a 304, stored in
/// it otherwise).
fn delivered(
    life: Request<'_>,
    attempt: u32,
    sent: Sent,
    kept: Kept,
    permit: Option<Permit>,
) -> reqwest_middleware::Result<Finished> {
    match kept {
        Kept::Streaming(mut response) => {
            *response.headers_mut() = life.finish_streamed(attempt, sent);
            holding(response, permit).map(Finished::Streamed)
        }
        Kept::Read { url, version, extensions } => {
            let response = life.finish(attempt, sent).map_err(Error::middleware)?;
            Ok(Finished::Read(Box::new(ReadResponse { response, url, version, extensions })))
        }
        Kept::Failed(err) => Err(err),
    }
}

/// The policy gave up: a response goes back to the caller as it came (a 429 after the last
/// retry is still an answer), no response fails with the chain's error.
fn given_up(
    life: Request<'_>,
    attempt: u32,
    mut sent: Sent,
    kept: Kept,
    permit: Option<Permit>,
    reason: GiveUpReason,
) -> reqwest_middleware::Result<Finished> {
    // The failure report needs only the status: the rest goes back to the caller.
    let answer = match &mut sent.answer {
        Answer::Response { status, info, held: Received { headers, body } } => {
            Some((*status, std::mem::take(headers), body.take(), info.clone()))
        }
        _ => None,
    };
    let service_time = sent.service_time;
    // Reported as the request's failure, whatever the caller gets.
    let err = life.give_up(attempt, sent, reason);
    match (kept, answer) {
        (Kept::Streaming(mut response), answer) => {
            if let Some((_, headers, ..)) = answer {
                *response.headers_mut() = headers;
            }
            holding(response, permit).map(Finished::Streamed)
        }
        (Kept::Read { url, version, extensions }, Some((status, headers, body, rate_limit))) => {
            let response = LimitedResponse {
                status,
                headers,
                body: body.unwrap_or_default(),
                rate_limit,
                attempts: attempt,
                from_cache: false,
                coalesced: false,
                queue_wait: Duration::ZERO,
                service_time,
                total: service_time,
            };
            Ok(Finished::Read(Box::new(ReadResponse { response, url, version, extensions })))
        }
        (Kept::Failed(err), _) => Err(err),
        (Kept::Read { .. }, None) => Err(Error::middleware(err)),
    }
}

/// `response` with `permit` released when its body ends or is dropped.
fn holding(response: reqwest::Response, permit: Option<Permit>) -> reqwest_middleware::Result<reqwest::Response> {
    let Some(permit) = permit else { return Ok(response) };
    let url = response.url().clone();
    // Back and forth through `http::Response`, the one way to swap a reqwest response's body:
    // the head stays where it is, and the URL, which the way there drops, goes back in.
    let (mut parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
    parts.extensions = with_url(std::mem::take(&mut parts.extensions), url)?;
    let body = reqwest::Body::wrap(SlotBody { body, permit: Some(permit) });
    Ok(http::Response::from_parts(parts, body).into())
}

/// `extensions` with the URL a reqwest response built from an `http::Response` reports:
/// reqwest names its type only in the builder's `url` setter, so the extensions pass through a
/// builder (moved in and out, not merged).
fn with_url(extensions: Extensions, url: Url) -> reqwest_middleware::Result<Extensions> {
    let mut builder = http::Response::builder();
    if let Some(slot) = builder.extensions_mut() {
        *slot = extensions;
    }
    let carrier = builder.url(url).body(()).map_err(|err| Error::middleware(ClientError::Build(err.to_string())))?;
    Ok(carrier.into_parts().0.extensions)
}

/// A [`LimitedResponse`] (cached, coalesced or read) as reqwest's response.
fn rebuilt(
    response: LimitedResponse,
    url: &Url,
    version: Version,
    extensions: Extensions,
) -> reqwest_middleware::Result<reqwest::Response> {
    let mut rebuilt = http::Response::new(reqwest::Body::from(response.body));
    *rebuilt.status_mut() = response.status;
    *rebuilt.version_mut() = version;
    *rebuilt.headers_mut() = response.headers;
    *rebuilt.extensions_mut() = with_url(extensions, url.clone())?;
    Ok(rebuilt.into())
}

/// A response body that holds its request's limiter permit (its concurrency slot) until the
/// body has been read to the end, failed, or been dropped.
struct SlotBody {
    body: reqwest::Body,
    permit: Option<Permit>,
}

impl http_body::Body for SlotBody {
    type Data = Bytes;
    type Error = reqwest::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, reqwest::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
