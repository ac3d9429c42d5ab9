//! A lean HTTP/1.1 transport for plain `http://` hosts: hyper's connection API with a pool of
//! keep-alive connections per host, nothing else (no proxy, no redirects, no TLS). Raw bursts
//! use it, so ratescope measures an unthrottled server at load-generator speed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{HOST, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use super::client::error_chain;
use super::transport::{Exchanged, Transport, TransportError};

type Sender = SendRequest<Full<Bytes>>;

/// Keep-alive HTTP/1.1 connections to plain-HTTP hosts. Cheap to clone; clones share the pool.
#[derive(Debug, Clone, Default)]
pub struct Http1Transport {
    pool: Arc<Pool>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
}

/// Idle connections by owner and `host:port`, most recently used last. A list, not a hash
/// map: it holds a handful of keys, and comparing them is cheaper than hashing one.
#[derive(Debug, Default)]
struct Pool {
    idle: Mutex<Vec<(PoolKey, Vec<Sender>)>>,
}

type PoolKey = (Owner, Authority);

/// Which runtime drives a connection: a connection is a task of the runtime that opened it
/// and dies with it, so a single-threaded runtime (one per load thread, see `run::load`)
/// keeps its connections to itself. Multi-threaded runtimes share theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Any multi-threaded runtime (they share their connections).
    Common,
    /// The single-threaded runtime of this thread.
    Thread(std::thread::ThreadId),
}

impl Owner {
    fn current() -> Self {
        match tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => Owner::Thread(std::thread::current().id()),
            _ => Owner::Common,
        }
    }
}

impl Http1Transport {
    /// A transport with a deadline for connecting and one for a whole exchange (`None`: none).
    pub fn new(connect_timeout: Option<Duration>, request_timeout: Option<Duration>) -> Self {
        Self { pool: Arc::default(), connect_timeout, request_timeout }
    }

    /// Whether this transport can carry requests to `url` (plain `http` with a host).
    pub fn serves(url: &url::Url) -> bool {
        url.scheme() == "http" && url.host_str().is_some()
    }

    /// One exchange under the request deadline: the same as [`Transport::exchange`], without
    /// boxing the future (the client's hot path awaits this directly).
    pub async fn exchange_within_deadline(&self, request: http::Request<Bytes>) -> Exchanged {
        match self.request_timeout {
            Some(limit) => {
                tokio::time::timeout(limit, self.send(request)).await.unwrap_or(Err(TransportError::TimedOut))
            }
            None => self.send(request).await,
        }
    }

    async fn send(&self, request: http::Request<Bytes>) -> Exchanged {
        let (mut parts, body) = request.into_parts();
        if parts.uri.scheme() != Some(&Scheme::HTTP) {
            return Err(TransportError::Failed(format!("'{}' is not a plain http:// URL", parts.uri)));
        }
        let Some(authority) = parts.uri.authority().cloned() else {
            return Err(TransportError::Failed(format!("'{}' has no host", parts.uri)));
        };
        if !parts.headers.contains_key(HOST) {
            let host = HeaderValue::from_str(authority.as_str())
                .map_err(|_| TransportError::Failed(format!("'{authority}' is not a valid Host header")))?;
            parts.headers.insert(HOST, host);
        }
        // HTTP/1.1 to an origin server takes the path and query only.
        let target = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
        parts.uri = http::Uri::from(target);
        let mut request = http::Request::from_parts(parts, Full::new(body));
        // A pooled connection the server closed meanwhile hands the request back unsent:
        // send it once more on a fresh connection.
        let key = (Owner::current(), authority);
        for fresh in [false, true] {
            let (mut sender, reused) = self.checkout(&key, fresh).await?;
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map_err(|err| TransportError::Failed(format!("reading the response body failed: {err}")))?
                        .to_bytes();
                    self.checkin(key, sender);
                    return Ok(http::Response::from_parts(parts, body));
                }
                Err(mut err) => match err.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(TransportError::Failed(error_chain(err.error()))),
                },
            }
        }
        Err(TransportError::Failed(format!("{} closed every connection before the request was sent", key.1)))
    }

    /// An idle connection to `authority` that is ready for a request (and whether it was
    /// reused), or a new one.
    async fn checkout(&self, key: &PoolKey, fresh: bool) -> Result<(Sender, bool), TransportError> {
        let authority = &key.1;
        if !fresh {
            loop {
                let popped =
                    self.pool.idle.lock().iter_mut().find(|(held, _)| held == key).and_then(|(_, idle)| idle.pop());
                let Some(mut sender) = popped else { break };
                if sender.ready().await.is_ok() {
                    return Ok((sender, true));
                }
            }
        }
        // Boxed: connecting is rare and its future large, and every exchange would carry it.
        Box::pin(self.connect(authority)).await.map(|sender| (sender, false))
    }

    /// A new connection to `authority`, its connection task spawned on the current runtime.
    async fn connect(&self, authority: &Authority) -> Result<Sender, TransportError> {
        let address =
            (authority.host().trim_start_matches('[').trim_end_matches(']'), authority.port_u16().unwrap_or(80));
        let connect = TcpStream::connect(address);
        let stream = match self.connect_timeout {
            Some(limit) => tokio::time::timeout(limit, connect)
                .await
                .map_err(|_| TransportError::Failed(format!("connecting to {authority} took longer than {limit:?}")))?,
            None => connect.await,
        }
        .map_err(|err| TransportError::Failed(format!("connecting to {authority} failed: {err}")))?;
        stream.set_nodelay(true).map_err(|err| TransportError::Failed(format!("setting TCP_NODELAY failed: {err}")))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| TransportError::Failed(format!("HTTP/1.1 handshake with {authority} failed: {err}")))?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!("connection closed: {err}");
            }
        });
        Ok(sender)
    }

    fn checkin(&self, key: PoolKey, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.pool.idle.lock();
        if let Some((_, senders)) = idle.iter_mut().find(|(held, _)| *held == key) {
            senders.push(sender);
            return;
        }
        // A new owner or host: forget the connections of runtimes that have ended.
        idle.retain_mut(|(_, senders)| {
            senders.retain(|sender| !sender.is_closed());
            !senders.is_empty()
        });
        idle.push((key, vec![sender]));
    }
}

impl Transport for Http1Transport {
    fn exchange(&self, request: http::Request<Bytes>) -> BoxFuture<'static, Exchanged> {
        let this = self.clone();
        Box::pin(async move { this.exchange_within_deadline(request).await })
    }
}
