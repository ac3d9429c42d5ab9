//! `ProxyServer`: the proxy served by axum, and its graceful shutdown (stop accepting, let
//! requests in flight finish up to the drain deadline, then cut the rest off).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use url::Url;

use super::config::{ProxyConfig, Route};
use super::error::ProxyError;
use super::forward::{Proxy, handle};
use crate::http::cache::CacheStats;

/// How a shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Requests in flight when shutdown began.
    pub in_flight_at_start: usize,
    /// Requests still unfinished at the deadline (cut off).
    pub cut_off: usize,
}

/// A running proxy. Dropping it stops accepting at once.
#[derive(Debug)]
pub struct ProxyServer {
    addr: SocketAddr,
    url: Url,
    proxy: Arc<Proxy>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl ProxyServer {
    /// Validates `config`, binds its listen address and starts serving.
    pub async fn start(config: ProxyConfig) -> Result<Self, ProxyError> {
        config.validate()?;
        let addr = config.listen;
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ProxyError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind { addr, source })?;
        let url = Url::parse(&format!("http://{addr}/"))
            .map_err(|err| ProxyError::Bind { addr, source: std::io::Error::other(err) })?;
        let proxy = Arc::new(Proxy::new(config)?);
        let app = Router::new().fallback(handle).with_state(Arc::clone(&proxy));
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
        let task = tokio::spawn(async move { serve.await });
        Ok(Self { addr, url, proxy, stop: Some(stop), task: Some(task) })
    }

    /// The address bound (with the chosen port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/`; a route's requests go to `http://ADDR/PREFIX/...`.
    /// The shared store's state and counters, when budgets are shared through Redis.
    pub fn shared(&self) -> Option<&crate::store::SharedHandle> {
        self.proxy.shared.as_ref()
    }

    pub fn url(&self) -> Url {
        self.url.clone()
    }

    pub fn routes(&self) -> &[Route] {
        &self.proxy.config.routes
    }

    /// Requests being handled right now (queued, upstream, or sending their body).
    pub fn in_flight(&self) -> usize {
        self.proxy.in_flight.load(Ordering::Acquire)
    }

    /// Cache counters (all zero without a cache).
    pub fn cache_stats(&self) -> CacheStats {
        self.proxy.cache.as_ref().map(|cache| cache.stats()).unwrap_or_default()
    }

    /// Stops accepting connections, lets requests in flight finish for up to the drain
    /// deadline, then answers the unfinished ones 503 (a body already streaming runs on).
    pub async fn shutdown(mut self) -> Result<Drained, ProxyError> {
        let in_flight_at_start = self.in_flight();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(mut task) = self.task.take() else { return Ok(Drained { in_flight_at_start, cut_off: 0 }) };
        match tokio::time::timeout(self.proxy.config.drain_deadline, &mut task).await {
            Ok(Ok(Ok(()))) => Ok(Drained { in_flight_at_start, cut_off: 0 }),
            Ok(Ok(Err(err))) => Err(ProxyError::Serve(err)),
            Ok(Err(join)) => Err(ProxyError::Serve(std::io::Error::other(join))),
            Err(_) => {
                let cut_off = self.in_flight();
                self.proxy.cut_off.send_replace(true);
                task.abort();
                Ok(Drained { in_flight_at_start, cut_off })
            }
        }
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
