//! `ProxyServer`: the proxy served over HTTP/1.1 by hyper, each request head within a deadline,
//! and its graceful shutdown (stop accepting, let requests in flight finish up to the drain
//! deadline, then cut the rest off).
//!
//! Connections are served by hyper's HTTP/1 connection builder rather than `axum::serve`, whose
//! h2c sniffing read had no deadline. The head deadline runs from the moment a connection has
//! no request in progress (on connecting, or once the previous answer's body is handed over)
//! until hyper has a whole head and calls the proxy, so a caller that trickles a head
//! (slowloris), sends nothing at all, or idles between requests is disconnected and its socket
//! freed. It is kept on the connection's one timer with its requests' upstream deadlines
//! (`deadlines::Watchdog`), not on a timer hyper would arm and drop for each head.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use url::Url;

use super::config::{ProxyConfig, Route};
use super::deadlines::{Deadlines, Expired, Watchdog};
use super::error::ProxyError;
use super::forward::{Proxy, Reloaded, Reloader, handle};
use super::hop::forwarded_for;
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
    /// The admin listener's address and task (stopped with the server).
    admin: Option<(SocketAddr, JoinHandle<()>)>,
    url: Url,
    proxy: Arc<Proxy>,
    connections: Arc<AtomicUsize>,
    /// The serving threads' runtimes (none when connections are served on the caller's).
    serving: Vec<tokio::runtime::Handle>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl ProxyServer {
    /// Validates `config`, binds its listen address and starts serving.
    pub async fn start(config: ProxyConfig) -> Result<Self, ProxyError> {
        config.validate()?;
        let addr = config.listen;
        let listener = TcpListener::bind(addr).await.map_err(|source| ProxyError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind { addr, source })?;
        let url = Url::parse(&format!("http://{addr}/"))
            .map_err(|err| ProxyError::Bind { addr, source: std::io::Error::other(err) })?;
        let builder = http1::Builder::new();
        let admin_listener = match config.admin {
            Some(admin) => {
                let listener =
                    TcpListener::bind(admin).await.map_err(|source| ProxyError::Bind { addr: admin, source })?;
                Some(listener)
            }
            None => None,
        };
        let proxy = Arc::new(Proxy::new(config)?);
        let admin = match admin_listener {
            Some(listener) => {
                let admin_addr = listener.local_addr().map_err(|source| ProxyError::Bind { addr, source })?;
                let router = super::admin::router(Arc::clone(&proxy));
                let task = tokio::spawn(async move {
                    if let Err(err) = axum::serve(listener, router).await {
                        tracing::warn!("the admin listener stopped: {err}");
                    }
                });
                Some((admin_addr, task))
            }
            None => None,
        };
        let connections = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = oneshot::channel::<()>();
        let threads = ServingThreads::start(proxy.config.threads);
        let serving = threads.threads.iter().map(|thread| thread.runtime.clone()).collect();
        let server = Server { proxy: Arc::clone(&proxy), builder, connections: Arc::clone(&connections), threads };
        let task = tokio::spawn(server.run(listener, stopped));
        Ok(Self { addr, admin, url, proxy, connections, serving, stop: Some(stop), task: Some(task) })
    }

    /// The admin listener's address (`/metrics`, `/healthz`, `/readyz`), when there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|(addr, _)| *addr)
    }

    /// The proxy's metrics as the admin listener serves them (Prometheus text, or OpenMetrics).
    pub fn metrics_text(&self, openmetrics: bool) -> Result<String, std::fmt::Error> {
        self.proxy.metrics.encode(openmetrics)
    }

    /// The address bound (with the chosen port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared store's state and counters, when budgets are shared through Redis.
    pub fn shared(&self) -> Option<&crate::store::SharedHandle> {
        self.proxy.shared.as_ref()
    }

    /// `http://ADDR/`; a route's requests go to `http://ADDR/PREFIX/...`.
    pub fn url(&self) -> Url {
        self.url.clone()
    }

    /// The routes it serves now.
    pub fn routes(&self) -> Vec<Route> {
        self.proxy.live.read().routes.clone()
    }

    /// Replaces the routes, limits and retry policies with `next`'s, in place: requests queued
    /// or in flight go on under the new limits, none is dropped. A refused `next` changes nothing.
    pub fn reload(&self, next: ProxyConfig) -> Result<Reloaded, ProxyError> {
        self.proxy.reload(next)
    }

    /// Reloads from the installed reloader (what SIGHUP and `POST /reload` do).
    pub fn reload_from_source(&self) -> Result<Reloaded, ProxyError> {
        self.proxy.reload_from_source()
    }

    /// What a reload without a new configuration (SIGHUP, `POST /reload` on the admin listener)
    /// rereads; without one, those reloads are refused.
    pub fn set_reloader(&self, reloader: Reloader) {
        *self.proxy.reloader.write() = Some(reloader);
    }

    /// Requests being handled right now (queued, upstream, or sending their body).
    pub fn in_flight(&self) -> usize {
        self.proxy.in_flight.load(Ordering::Acquire)
    }

    /// Caller connections open right now (busy or kept alive).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    /// Tokio tasks alive on the serving threads (callers' connections; each drives the upstream
    /// connections its requests use): with the tasks of the runtime that started the proxy,
    /// every task it has.
    pub fn serving_tasks(&self) -> usize {
        self.serving.iter().map(|runtime| runtime.metrics().num_alive_tasks()).sum()
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
                self.proxy.cut_off.cut();
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
        // The admin listener goes with the server (after the drain: `shutdown` consumes it).
        if let Some((_, task)) = self.admin.take() {
            task.abort();
        }
    }
}

/// The accept loop and what every connection task needs.
struct Server {
    proxy: Arc<Proxy>,
    builder: http1::Builder,
    connections: Arc<AtomicUsize>,
    threads: ServingThreads,
}

/// The threads connections are served on: one single-threaded runtime per core when the
/// proxy starts on a multi-threaded runtime, as nginx has a worker per core. A connection,
/// its requests and their upstream connections then stay on one thread, and no request waits
/// for a wake-up from another core. On a single-threaded runtime (a test's paused clock)
/// connections are served where the proxy runs.
struct ServingThreads {
    threads: Vec<ServingThread>,
    next: usize,
    /// Tells every thread to end once its connections have (dropped with the accept loop).
    _stop: tokio_util::sync::DropGuard,
}

struct ServingThread {
    runtime: tokio::runtime::Handle,
    /// Held by each connection task of the thread: the thread ends when all are gone.
    alive: watch::Receiver<()>,
}

impl ServingThreads {
    /// `count` threads (`None`: one per core), or none on a single-threaded runtime.
    fn start(count: Option<usize>) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let flavor = tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor());
        let count = match flavor {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                count.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
            }
            _ => 0,
        };
        let threads = (0..count).filter_map(|index| Self::spawn(index, stop.clone())).collect();
        Self { threads, next: 0, _stop: stop.drop_guard() }
    }

    /// One serving thread, or `None` (connections are then served on the proxy's runtime).
    fn spawn(index: usize, stop: tokio_util::sync::CancellationToken) -> Option<ServingThread> {
        let built = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let runtime = match built {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::warn!("serving thread {index} could not start its runtime: {err}");
                return None;
            }
        };
        let handle = runtime.handle().clone();
        let (alive_tx, alive) = watch::channel(());
        let spawned = std::thread::Builder::new().name(format!("ratescope-proxy-{index}")).spawn(move || {
            runtime.block_on(async {
                stop.cancelled().await;
                alive_tx.closed().await;
            });
        });
        match spawned {
            Ok(_) => Some(ServingThread { runtime: handle, alive }),
            Err(err) => {
                tracing::warn!("serving thread {index} could not start: {err}");
                None
            }
        }
    }

    /// The next thread in turn, if there are any.
    fn next(&mut self) -> Option<&ServingThread> {
        let count = self.threads.len();
        if count == 0 {
            return None;
        }
        self.next = (self.next + 1) % count;
        self.threads.get(self.next)
    }
}

/// Counts a connection open for as long as its task lives.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Server {
    /// Accepts until `stopped` (a send, or the sender dropped), then tells every connection to
    /// finish its current request and close, and returns once all have.
    async fn run(mut self, listener: TcpListener, stopped: oneshot::Receiver<()>) -> std::io::Result<()> {
        let (draining, drain) = watch::channel(false);
        // Every connection task holds a receiver; the sender sees `closed` when the last ends.
        let (open, open_watch) = watch::channel(());
        let mut stopped = std::pin::pin!(stopped);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => self.spawn_connection(stream, peer, drain.clone(), open_watch.clone()),
                    // The caller gave up between connecting and our accept: nothing to do.
                    Err(err) if is_connection_error(&err) => {}
                    Err(err) => {
                        // Out of file descriptors, say: accepting again at once would spin.
                        tracing::warn!("cannot accept a connection ({err}); trying again in 1 s");
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = &mut stopped => break,
                        }
                    }
                },
                _ = &mut stopped => break,
            }
        }
        drop(listener);
        draining.send_replace(true);
        drop(open_watch);
        open.closed().await;
        Ok(())
    }

    fn spawn_connection(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        drain: watch::Receiver<bool>,
        open_watch: watch::Receiver<()>,
    ) {
        // A response's head and body may go out in separate writes: Nagle's algorithm would
        // hold the second until the caller acknowledged the first (nginx's `tcp_nodelay on`).
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY for {peer}: {err}");
        }
        self.connections.fetch_add(1, Ordering::AcqRel);
        let open = Open(Arc::clone(&self.connections));
        let proxy = Arc::clone(&self.proxy);
        let builder = self.builder.clone();
        let Some(thread) = self.threads.next() else {
            tokio::spawn(serve(builder, proxy, stream, peer, drain, (open, open_watch)));
            return;
        };
        // The socket moves to the serving thread's runtime: it leaves this one's poller here
        // and joins that one's there.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => {
                tracing::debug!("connection from {peer} could not be handed over: {err}");
                return;
            }
        };
        let alive = thread.alive.clone();
        thread.runtime.spawn(async move {
            let _alive = alive;
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(builder, proxy, stream, peer, drain, (open, open_watch)).await,
                Err(err) => tracing::debug!("connection from {peer} could not be handed over: {err}"),
            }
        });
    }
}

/// Serves one caller connection until it closes, or until a shutdown lets its request in
/// progress finish. `counted` is dropped at the end: the connection counts as open until then.
async fn serve(
    builder: http1::Builder,
    proxy: Arc<Proxy>,
    stream: TcpStream,
    peer: SocketAddr,
    mut drain: watch::Receiver<bool>,
    counted: (Open, watch::Receiver<()>),
) {
    let forwarded_for = forwarded_for(peer.ip());
    let deadlines = Deadlines::new(proxy.config.head_timeout, proxy.config.upstream_timeout);
    let (draining, requests) = (Arc::clone(&proxy), Arc::clone(&deadlines));
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let (proxy, forwarded_for, answering) = (Arc::clone(&proxy), forwarded_for.clone(), requests.answering());
        async move { Ok::<_, std::convert::Infallible>(handle(proxy, forwarded_for, answering, request).await) }
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    // The drain is looked at on the first poll (which leaves its waiter registered, waking
    // this task when the drain begins) and then only once the watch has moved: an atomic load
    // a wake-up, where polling the watch each time would take its lock four times a request.
    let moved = drain.clone();
    let mut drained = std::pin::pin!(drain.wait_for(|draining| *draining));
    let mut first_look = true;
    // Once draining: the request in progress finishes, or is cut off at the drain deadline.
    let mut cut_off = std::pin::pin!(draining.cut_off.cut_at_last());
    let mut stage = Stage::Serving;
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut watchdog = Watchdog::new(&deadlines, timer.as_mut());
    let result = std::future::poll_fn(|cx| {
        loop {
            if let Poll::Ready(result) = connection.as_mut().poll(cx) {
                return Poll::Ready(result.map_err(|err| err.to_string()));
            }
            match stage {
                Stage::Serving => {
                    let look = std::mem::take(&mut first_look) || !matches!(moved.has_changed(), Ok(false));
                    if look && drained.as_mut().poll(cx).is_ready() {
                        // Shutdown (or the accept loop gone): finish the request in progress, then close.
                        connection.as_mut().graceful_shutdown();
                        stage = Stage::Draining;
                        continue;
                    }
                }
                Stage::Draining => {
                    if cut_off.as_mut().poll(cx).is_ready() {
                        // Past the drain deadline, its request answers 503 once polled again (`handle`).
                        stage = Stage::CutOff;
                        continue;
                    }
                }
                Stage::CutOff => {}
            }
            return match watchdog.poll(cx) {
                Poll::Pending => Poll::Pending,
                // Its request's attempt ends (a 504, or a retry) once polled again.
                Poll::Ready(Expired::Upstream) => continue,
                Poll::Ready(Expired::Head) => Poll::Ready(Err("no request head within the head timeout".to_owned())),
            };
        }
    })
    .await;
    if let Err(err) = result {
        // Timeouts, malformed heads (hyper answered 400 itself), callers hanging up.
        tracing::debug!("connection from {peer} ended: {err}");
    }
    drop(counted);
}

/// Where a connection is in the proxy's shutdown.
#[derive(Clone, Copy)]
enum Stage {
    Serving,
    Draining,
    CutOff,
}

/// Errors of one pending connection, not of the listener.
fn is_connection_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(err.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}
