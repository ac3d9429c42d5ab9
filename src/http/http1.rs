//! A lean HTTP/1.1 transport for plain `http://` hosts: hyper's connection API with a pool of
//! keep-alive connections per host, nothing else (no proxy, no redirects, no TLS). Raw bursts
//! use it, so ratescope measures an unthrottled server at load-generator speed.

use std::collections::HashMap;
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

use super::transport::{Exchanged, Transport, TransportError};

type Sender = SendRequest<Full<Bytes>>;

/// Keep-alive HTTP/1.1 connections to plain-HTTP hosts. Cheap to clone; clones share the pool.
#[derive(Debug, Clone, Default)]
pub struct Http1Transport {
    pool: Arc<Pool>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
}

/// Idle connections by `host:port`, most recently used last.
#[derive(Debug, Default)]
struct Pool {
    idle: Mutex<HashMap<Authority, Vec<Sender>>>,
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

    async fn send(self, request: http::Request<Bytes>) -> Exchanged {
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
        for fresh in [false, true] {
            let (mut sender, reused) = self.checkout(&authority, fresh).await?;
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map_err(|err| TransportError::Failed(format!("reading the response body failed: {err}")))?
                        .to_bytes();
                    self.checkin(authority, sender);
                    return Ok(http::Response::from_parts(parts, body));
                }
                Err(mut err) => match err.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(TransportError::Failed(describe(err.error()))),
                },
            }
        }
        Err(TransportError::Failed(format!("{authority} closed every connection before the request was sent")))
    }

    /// An idle connection to `authority` that is ready for a request (and whether it was
    /// reused), or a new one.
    async fn checkout(&self, authority: &Authority, fresh: bool) -> Result<(Sender, bool), TransportError> {
        if !fresh {
            loop {
                let Some(mut sender) = self.pool.idle.lock().get_mut(authority).and_then(Vec::pop) else { break };
                if sender.ready().await.is_ok() {
                    return Ok((sender, true));
                }
            }
        }
        let address =
            (authority.host().trim_start_matches('[').trim_end_matches(']'), authority.port_u16().unwrap_or(80));
        let connect = TcpStream::connect(address);
        let stream = match self.connect_timeout {
            Some(limit) => tokio::time::timeout(limit, connect).await.map_err(|_| TransportError::TimedOut)?,
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
        Ok((sender, false))
    }

    fn checkin(&self, authority: Authority, sender: Sender) {
        if !sender.is_closed() {
            self.pool.idle.lock().entry(authority).or_default().push(sender);
        }
    }
}

impl Transport for Http1Transport {
    fn exchange(&self, request: http::Request<Bytes>) -> BoxFuture<'static, Exchanged> {
        let this = self.clone();
        let deadline = self.request_timeout;
        Box::pin(async move {
            match deadline {
                Some(limit) => {
                    tokio::time::timeout(limit, this.send(request)).await.unwrap_or(Err(TransportError::TimedOut))
                }
                None => this.send(request).await,
            }
        })
    }
}

/// hyper's error with its causes, e.g. "connection closed before message completed".
fn describe(err: &hyper::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
