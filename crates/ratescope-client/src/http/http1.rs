//! A lean HTTP/1.1 wire for plain `http://` hosts: hyper's connection API with a pool of
//! keep-alive connections per host, nothing else (no proxy, no redirects, no TLS). Raw bursts
//! use it, so ratescope measures an unthrottled server at load-generator speed, and the proxy
//! forwards to plain-HTTP upstreams over the same pool with bodies streamed both ways.
//!
//! A connection runs as a task of its own (the raw bursts': the fewest polls a request, for
//! throughput), or, in a pool that [drives its connections](Http1Pool::driving_connections)
//! (the proxy's), has none: the request that holds it drives it (writes the request, reads the
//! answer) in its own polls, and its answer's body drives it on until read. Nothing hops
//! between tasks on the way, so an answer reaches its reader in the wake-up that read it off
//! the socket, its head and first bytes together: less latency, a few more polls.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use crossbeam_utils::CachePadded;
use futures_util::future::BoxFuture;
use http::header::{HOST, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Instant;
use url::Position;

use super::client::error_chain;
use super::transport::{Exchanged, Transport, TransportError};

/// Keep-alive HTTP/1.1 connections to plain-HTTP hosts. Cheap to clone; clones share the pool.
#[derive(Debug, Clone, Default)]
pub struct Http1Transport {
    pool: Http1Pool<Full<Bytes>>,
    request_timeout: Option<Duration>,
}

/// Idle keep-alive HTTP/1.1 connections by owner and `host:port`, most recently used last,
/// for requests with bodies of type `B`: the raw bursts' wire and the proxy's share it. Cheap
/// to clone; clones share the connections. A list, not a hash map: it holds a handful of keys,
/// and comparing them is cheaper than hashing one. The lists are sharded by owner (one
/// for multi-threaded runtimes, one per single-threaded runtime's thread), so single-threaded
/// runtimes on other cores never take the same lock.
#[derive(Debug)]
pub struct Http1Pool<B: RequestBody> {
    idle: Arc<[CachePadded<Mutex<IdleWires<B>>>]>,
    connect_timeout: Option<Duration>,
    /// How long an idle connection is kept and how many are kept per key (`None`: as long as
    /// the server keeps them, all of them).
    keep_idle: Option<KeepIdle>,
    /// Whether a request drives its connection itself (no task for the connection).
    drive_in_request: bool,
}

/// Bounds on the idle connections a pool keeps.
#[derive(Debug, Clone, Copy)]
struct KeepIdle {
    for_at_most: Duration,
    at_most: usize,
}

impl<B: RequestBody> Clone for Http1Pool<B> {
    fn clone(&self) -> Self {
        Self { idle: Arc::clone(&self.idle), ..*self }
    }
}

impl<B: RequestBody> Default for Http1Pool<B> {
    fn default() -> Self {
        Self::new(None)
    }
}

/// How many idle lists a pool keeps: one for multi-threaded runtimes, the rest for
/// single-threaded ones, each on the list its thread was numbered for.
const SHARDS: usize = 8;

fn idle_shards<B: RequestBody>() -> Arc<[CachePadded<Mutex<IdleWires<B>>>]> {
    std::iter::repeat_with(|| CachePadded::new(Mutex::new(Vec::new()))).take(SHARDS).collect()
}

/// What a request body sent over an [`Http1Pool`] must be: a body hyper can send from any
/// thread (every `B` below stands for one).
pub trait RequestBody:
    Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
{
}

impl<B> RequestBody for B where
    B: Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
{
}

/// A connection taken from an [`Http1Pool`] (or newly made) for one exchange.
#[derive(Debug)]
struct Pooled<B: RequestBody> {
    key: PoolKey,
    wire: Wire<B>,
    /// Whether it had served a request before (a server may have closed it meanwhile: a
    /// request it hands back unsent may go once more on a fresh one).
    reused: bool,
    /// The idle list it goes back to.
    shard: usize,
}

/// One keep-alive connection: its request handle, what runs the connection, and (held) the
/// waker it is driven with.
struct Wire<B: RequestBody> {
    sender: SendRequest<B>,
    driver: Driver<B>,
    wakes: OwnWakes,
    /// The deadline of the request on it, when it has one.
    deadline: Deadline,
}

/// The deadline of a connection's request: one timer the connection keeps for all its
/// requests, moved later for each. tokio extends an armed timer in place (its wheel sees the
/// later time only once the earlier one comes, and then files it again), so a request neither
/// registers a timer of its own nor removes it, as `tokio::time::timeout` around each did.
/// While the connection is idle the timer stays armed at its last request's deadline, and
/// fires there for nothing (once: nothing polls it again until a request sets a new one).
/// Kept only by a single-threaded runtime's connections, which never leave it: one shared by
/// multi-threaded runtimes drops its timer when it goes back to the pool.
#[derive(Default)]
struct Deadline(Option<Pin<Box<tokio::time::Sleep>>>);

impl Deadline {
    /// The request now on the connection must be answered (its body read) by `due`.
    fn set(&mut self, due: Instant) {
        match &mut self.0 {
            Some(timer) => timer.as_mut().reset(due),
            None => self.0 = Some(Box::pin(tokio::time::sleep_until(due))),
        }
    }

    /// Whether the deadline set has passed; if not, `cx` is woken when it does. A connection
    /// whose requests have no deadline never has one.
    fn passed(&mut self, cx: &mut Context<'_>) -> bool {
        self.0.as_mut().is_some_and(|timer| timer.as_mut().poll(cx).is_ready())
    }
}

/// What runs a connection.
enum Driver<B: RequestBody> {
    /// A task of its own.
    Task,
    /// Whoever holds it ([`Wire::drive`]).
    Held(Box<http1::Connection<TokioIo<TcpStream>, B>>),
    /// Nothing: a held connection that has ended (closed by either side, or broken).
    Ended,
}

impl<B: RequestBody> std::fmt::Debug for Wire<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let driver = match self.driver {
            Driver::Task => "task",
            Driver::Held(_) => "held",
            Driver::Ended => "ended",
        };
        f.debug_struct("Wire").field("driver", &driver).finish_non_exhaustive()
    }
}

impl<B: RequestBody> Driver<B> {
    /// Takes the connection as far as it can go now (writes what is queued, reads what has
    /// come, hands a read answer to its request), waking `cx` when it can go further.
    /// A connection with a task of its own has it do this.
    fn drive(&mut self, cx: &mut Context<'_>) {
        let Driver::Held(connection) = self else { return };
        if let Poll::Ready(ended) = Pin::new(&mut **connection).poll(cx) {
            connection_ended(ended);
            *self = Driver::Ended;
        }
    }
}

impl<B: RequestBody> Wire<B> {
    /// Whether the connection can take a request, driven first (a held one becomes ready only
    /// as it is driven).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        let Self { sender, driver, wakes, .. } = self;
        wakes.pass(cx, |cx| {
            driver.drive(cx);
            sender.poll_ready(cx)
        })
    }

    /// Whether the connection can go back to the pool: open, and (a held one, driven once to
    /// find out) ready for a new request, so a server that closed it meanwhile is seen here,
    /// and one still sending a request body the server answered early is not kept.
    /// A held one that already asks for its next request is not driven again here.
    fn is_idle_and_open(&mut self) -> bool {
        if self.held_and_asking() {
            return true;
        }
        self.driver.drive(&mut Context::from_waker(Waker::noop()));
        match self.driver {
            Driver::Task => !self.sender.is_closed(),
            Driver::Held(_) => self.sender.is_ready(),
            Driver::Ended => false,
        }
    }

    /// Whether it is held and already asks for its next request (most often its answer's last
    /// read left it so): it needs no drive to go back to the pool or to be taken from it, as the
    /// exchange's first pass drives it, reading before it writes, and a close that came
    /// meanwhile hands the request back unsent (`send_via` then takes a new connection).
    fn held_and_asking(&self) -> bool {
        matches!(self.driver, Driver::Held(_)) && self.sender.is_ready()
    }
}

/// The waker a held connection is driven with. A connection held by a request is driven in
/// that request's task, and most of what it wakes it wakes during those very polls: queuing
/// the request wakes the connection's reader, the connection hands the answer over and wakes
/// its receiver, the answer's body asks for more and wakes the connection. Passed on, each of
/// those wakes would poll the whole task again (the caller's connection, its request, this
/// connection) for nothing: the steps they concern run later in the same pass.
/// So a wake during a pass ([`OwnWakes::pass`]) is only noted, and a pass that ends waiting
/// with one noted runs again; a wake from outside a pass (the socket, from the poller) goes
/// to the task. Each connection's own: another connection's wakes pass through untouched.
struct OwnWakes(Option<(Arc<WakeFilter>, Waker)>);

/// Where a held connection's driving stands, for its waker.
#[derive(Debug)]
struct WakeFilter {
    state: std::sync::atomic::AtomicU8,
    /// The task that drives the connection now (its request's, then its answer's reader's).
    task: Mutex<Waker>,
}

/// Not in a pass: a wake goes to the task.
const OUTSIDE: u8 = 0;
/// In a pass: a wake is noted.
const PASSING: u8 = 1;
/// In a pass, and woken during it.
const WOKEN_IN_PASS: u8 = 2;

/// How many passes run back to back for wakes noted during them before the task is woken
/// instead: a step that yields (tokio's budget spent, hyper's read loop) wakes its task at
/// once and would otherwise never stop passing.
const PASSES_AT_MOST: u32 = 4;

impl std::task::Wake for WakeFilter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let noted = self.state.compare_exchange(PASSING, WOKEN_IN_PASS, Ordering::AcqRel, Ordering::Acquire);
        if noted == Err(OUTSIDE) {
            self.task.lock().wake_by_ref();
        }
    }
}

impl OwnWakes {
    /// For a connection held by its requests; `none` for one with a task of its own.
    fn held() -> Self {
        let filter = Arc::new(WakeFilter { state: OUTSIDE.into(), task: Mutex::new(Waker::noop().clone()) });
        let waker = Waker::from(Arc::clone(&filter));
        Self(Some((filter, waker)))
    }

    fn none() -> Self {
        Self(None)
    }

    /// Runs `steps` (driving the connection, then polling what it feeds) with the connection's
    /// own waker, again while they wait with a wake noted during them; a finished pass returns
    /// at once (what it noted concerns the connection, which its holder drives on its next
    /// poll). The task behind `cx` is the one woken from outside.
    fn pass<T>(&self, cx: &mut Context<'_>, mut steps: impl FnMut(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
        let Some((filter, waker)) = &self.0 else { return steps(cx) };
        {
            let mut task = filter.task.lock();
            if !task.will_wake(cx.waker()) {
                task.clone_from(cx.waker());
            }
        }
        let mut own = Context::from_waker(waker);
        for _ in 0..PASSES_AT_MOST {
            filter.state.store(PASSING, Ordering::Release);
            let polled = steps(&mut own);
            let woken = filter.state.swap(OUTSIDE, Ordering::AcqRel) == WOKEN_IN_PASS;
            if polled.is_ready() || !woken {
                return polled;
            }
        }
        // Still woken after as many passes: the task runs again once the others have had a turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Forgets the wakes noted so far in this pass (the steps they concern come next in it).
    fn forget(&self) {
        if let Some((filter, _)) = &self.0 {
            filter.state.store(PASSING, Ordering::Release);
        }
    }
}

/// How a connection ended, for the debug log.
fn connection_ended(ended: hyper::Result<()>) {
    if let Err(err) = ended {
        tracing::debug!("connection closed: {err}");
    }
}

type PoolKey = (Owner, Authority);

/// Idle connections by key, oldest first, each with when it went idle (when the pool bounds that).
type IdleWires<B> = Vec<(PoolKey, Vec<(Wire<B>, Option<Instant>)>)>;

/// Which runtime a connection belongs to: its socket is registered with the runtime that
/// opened it and works only while that runtime runs, so a single-threaded runtime (one per
/// load thread, see `run::load`, or per proxy thread) keeps its connections to itself.
/// Multi-threaded runtimes share theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Any multi-threaded runtime (they share their connections).
    Common,
    /// The single-threaded runtime of this thread.
    Thread(std::thread::ThreadId),
}

/// Whether two keys are the same: the owner, then the authority's text as it is (`Authority`'s
/// own comparison ignores case, a byte at a time; a URL's host is in lower case already).
fn same_key(a: &PoolKey, b: &PoolKey) -> bool {
    a.0 == b.0 && a.1.as_str() == b.1.as_str()
}

impl Owner {
    fn current() -> Self {
        match tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => Owner::Thread(std::thread::current().id()),
            _ => Owner::Common,
        }
    }

    /// The idle list this owner's connections are kept on: the first for multi-threaded
    /// runtimes, and for a single-threaded one the list its thread was numbered for, so the
    /// load threads of a burst (started one after another) each have a list, and a lock, of
    /// their own: two cores taking one lock twice a request made its line bounce between them.
    fn shard(self) -> usize {
        static THREADS: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = 1 + THREADS.fetch_add(1, Ordering::Relaxed) % (SHARDS - 1);
        }
        match self {
            Owner::Common => 0,
            Owner::Thread(_) => SHARD.with(|shard| *shard),
        }
    }
}

impl Http1Transport {
    /// A transport with a deadline for connecting and one for a whole exchange (`None`: none).
    pub fn new(connect_timeout: Option<Duration>, request_timeout: Option<Duration>) -> Self {
        Self { pool: Http1Pool::new(connect_timeout), request_timeout }
    }

    /// Whether this transport can carry requests to `url`: plain `http` with a host and no
    /// credentials in it (reqwest sends those as Basic authorization; this wire does not).
    pub fn serves(url: &url::Url) -> bool {
        // Read off the serialization (every request asks): a parsed `http` URL always has a
        // host and a path, and percent-encodes any `@` in its user information, so an `@`
        // before the path is that information's end.
        // Bytes, not chars: every delimiter is ASCII (a `split` on chars decoded UTF-8 and cost
        // hundreds of instructions a request).
        let Some(rest) = url.as_str().strip_prefix("http://") else { return false };
        let rest = rest.as_bytes();
        let end = rest.iter().position(|byte| matches!(byte, b'/' | b'?' | b'#')).unwrap_or(rest.len());
        let authority = rest.get(..end).unwrap_or_default();
        !authority.is_empty() && !authority.contains(&b'@')
    }

    /// One exchange under the request deadline: the same as [`Transport::exchange`], without
    /// boxing the future.
    pub async fn exchange_within_deadline(&self, request: http::Request<Bytes>) -> Exchanged {
        let (mut parts, body) = request.into_parts();
        let authority = origin_form(&mut parts)?;
        self.answer_within_deadline(authority, http::Request::from_parts(parts, Full::new(body))).await
    }

    /// One exchange of `method url` with `headers` and `body` under the request deadline,
    /// built in origin form straight from the URL's parts (no absolute URI parsed and taken
    /// apart again): the client's hot path.
    pub async fn exchange_url(&self, method: &Method, url: &url::Url, headers: &HeaderMap, body: Bytes) -> Exchanged {
        if !Self::serves(url) {
            return Err(TransportError::Failed(format!(
                "'{}' is not a plain http:// URL",
                crate::redact::redact_url(url)
            )));
        }
        let (authority, host) = origin_of(url)?;
        let request = origin_request(method, url, &host, headers, Full::new(body))?;
        self.answer_within_deadline(authority, request).await
    }

    /// [`read_answer`](Self::read_answer) under the request deadline, kept by the connection
    /// the request goes on (`Deadline`: no timer registered and removed per request).
    async fn answer_within_deadline(&self, authority: Authority, request: http::Request<Full<Bytes>>) -> Exchanged {
        // Past what the clock holds (a timeout of years): no deadline.
        let due = self.request_timeout.and_then(|limit| Instant::now().checked_add(limit));
        self.read_answer(authority, request, due).await
    }

    /// Sends an origin-form `request` to `authority` and reads its answer whole, by `due`
    /// when given (else [`TransportError::TimedOut`]); the connection goes back to the pool
    /// once it has.
    async fn read_answer(
        &self,
        authority: Authority,
        request: http::Request<Full<Bytes>>,
        due: Option<Instant>,
    ) -> Exchanged {
        // The pool borrowed, not cloned: a clone's count is one cache line every load thread
        // would write twice a request.
        let (parts, body) = Http1Pool::send_by(&self.pool, &authority, request, due).await?.into_parts();
        let body = read_whole(body).await?;
        Ok(http::Response::from_parts(parts, body))
    }
}

/// `method url` in origin form for an HTTP/1.1 server (its target the URL's path and query),
/// with `headers` and `host` as `Host` unless they have one: what the raw bursts send over an
/// [`Http1Pool`] to the URL's [`origin_of`].
pub fn origin_request<B>(
    method: &Method,
    url: &url::Url,
    host: &HeaderValue,
    headers: &HeaderMap,
    body: B,
) -> Result<http::Request<B>, TransportError> {
    let target = PathAndQuery::from_str(&url[Position::BeforePath..Position::AfterQuery]).map_err(|err| {
        TransportError::Failed(format!("'{}' is not a request target: {err}", crate::redact::redact_url(url)))
    })?;
    Ok(target_request(method, target, host, headers, body))
}

/// `method target` (a path and query, in origin form) with `headers` and `host` as `Host`
/// unless they have one: what the proxy sends over an [`Http1Pool`], its target already checked.
pub fn target_request<B>(
    method: &Method,
    target: PathAndQuery,
    host: &HeaderValue,
    headers: &HeaderMap,
    body: B,
) -> http::Request<B> {
    let mut request = http::Request::new(body);
    *request.method_mut() = method.clone();
    *request.uri_mut() = http::Uri::from(target);
    *request.headers_mut() = headers.clone();
    if !request.headers().contains_key(HOST) {
        request.headers_mut().insert(HOST, host.clone());
    }
    request
}

/// A body read to its end: its one chunk as it came (the usual answer with a length), or its
/// chunks joined. Trailers are not kept. Fails once the deadline of the request it answers
/// has passed.
async fn read_whole<B: RequestBody, P: Borrow<Http1Pool<B>> + Unpin>(
    mut body: PooledBody<B, P>,
) -> Result<Bytes, TransportError> {
    let mut whole = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame_by_deadline().await {
        let Ok(chunk) = frame?.into_data() else { continue };
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&chunk),
            None if whole.is_empty() => whole = chunk,
            None => {
                let mut both = BytesMut::with_capacity(whole.len() + chunk.len());
                both.extend_from_slice(&whole);
                both.extend_from_slice(&chunk);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(whole, BytesMut::freeze))
}

/// A plain-`http` URL's `host[:port]` (never its user information) as a pool's key and as the
/// `Host` header, sharing one buffer. The last one worked out on a thread is remembered: a
/// burst sends to one host or a few, so the next request's is most often the same.
pub fn origin_of(url: &url::Url) -> Result<(Authority, HeaderValue), TransportError> {
    thread_local! {
        static LAST: RefCell<Option<(Box<str>, Authority, HeaderValue)>> = const { RefCell::new(None) };
    }
    let text = &url[Position::BeforeHost..Position::AfterPort];
    let remembered = LAST.with_borrow(|last| {
        let (_, authority, host) = last.as_ref().filter(|(seen, ..)| **seen == *text)?;
        Some((authority.clone(), host.clone()))
    });
    if let Some(origin) = remembered {
        return Ok(origin);
    }
    let bytes = Bytes::copy_from_slice(text.as_bytes());
    let not_a_host =
        |err: &dyn std::fmt::Display| TransportError::Failed(format!("'{text}' is not a host for HTTP ({err})"));
    let authority = Authority::from_maybe_shared(bytes.clone()).map_err(|err| not_a_host(&err))?;
    let host = HeaderValue::from_maybe_shared(bytes).map_err(|err| not_a_host(&err))?;
    LAST.set(Some((text.into(), authority.clone(), host.clone())));
    Ok((authority, host))
}

/// Turns an absolute plain-`http` request head into the origin form an HTTP/1.1 server takes
/// (path and query, its `host[:port]` in `Host` unless the caller set one); returns the authority.
fn origin_form(parts: &mut http::request::Parts) -> Result<Authority, TransportError> {
    if parts.uri.scheme() != Some(&Scheme::HTTP) {
        return Err(TransportError::Failed(format!("'{}' is not a plain http:// URL", parts.uri)));
    }
    let Some(given) = parts.uri.authority() else {
        return Err(TransportError::Failed(format!("'{}' has no host", parts.uri)));
    };
    // Without user information: it is no part of a connection's key or of `Host`.
    let authority = match given.as_str().rsplit_once('@') {
        Some((_, host)) => Authority::from_str(host)
            .map_err(|err| TransportError::Failed(format!("'{host}' is not a host for HTTP ({err})")))?,
        None => given.clone(),
    };
    if !parts.headers.contains_key(HOST) {
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|_| TransportError::Failed(format!("'{authority}' is not a valid Host header")))?;
        parts.headers.insert(HOST, host);
    }
    let target = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    parts.uri = http::Uri::from(target);
    Ok(authority)
}

impl<B> Http1Pool<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// A pool whose new connections must be made within `connect_timeout` (`None`: no limit).
    pub fn new(connect_timeout: Option<Duration>) -> Self {
        Self { idle: idle_shards(), connect_timeout, keep_idle: None, drive_in_request: false }
    }

    /// Has each request drive its connection itself instead of giving the connection a task
    /// (see the module's documentation): what a proxy wants, whose answers should reach their
    /// callers with the least delay.
    pub fn driving_connections(mut self) -> Self {
        self.drive_in_request = true;
        self
    }

    /// Keeps an idle connection `for_at_most` and at most `at_most` of them per host and
    /// runtime, closing the oldest beyond (a long-running proxy does not hoard sockets).
    pub fn keeping_idle(mut self, for_at_most: Duration, at_most: usize) -> Self {
        self.keep_idle = Some(KeepIdle { for_at_most, at_most: at_most.max(1) });
        self
    }

    /// Sends `request` (in origin form: its target the path and query only) to `authority` on an idle
    /// connection, or a new one, and returns the answer once its head has come. Its body
    /// drives the connection on: read to its end, it gives the connection back to the pool;
    /// dropped before, it closes it. A pooled connection the server closed meanwhile hands
    /// the request back unsent: it goes once more on a fresh connection.
    pub async fn send(
        &self,
        authority: &Authority,
        request: http::Request<B>,
    ) -> Result<http::Response<PooledBody<B>>, TransportError> {
        Self::send_via(self.clone(), authority, request).await
    }

    /// [`send`](Self::send) over `pool`, owned or borrowed: the answer's body holds it until
    /// the connection goes back.
    pub async fn send_via<P: Borrow<Self>>(
        pool: P,
        authority: &Authority,
        request: http::Request<B>,
    ) -> Result<http::Response<PooledBody<B, P>>, TransportError> {
        Self::send_by(pool, authority, request, None).await
    }

    /// [`send_via`](Self::send_via), its answer's head due by `due` (a new connection made in
    /// time for it, the answer's body then read by it through [`PooledBody::deadline_passed`]).
    async fn send_by<P: Borrow<Self>>(
        pool: P,
        authority: &Authority,
        request: http::Request<B>,
        due: Option<Instant>,
    ) -> Result<http::Response<PooledBody<B, P>>, TransportError> {
        let key = (Owner::current(), authority.clone());
        let mut request = Some(request);
        for fresh in [false, true] {
            let mut pooled = pool.borrow().checkout(&key, fresh, due).await?;
            let Wire { sender, driver, wakes, deadline } = &mut pooled.wire;
            if let Some(due) = due {
                deadline.set(due);
            }
            let mut answer = std::pin::pin!(None);
            let answered = std::future::poll_fn(|cx| {
                let polled = wakes.pass(cx, |cx| {
                    // Queued within the pass: the connection, driven next, takes it at once.
                    if let Some(request) = request.take() {
                        answer.set(Some(sender.try_send_request(request)));
                        wakes.forget();
                    }
                    driver.drive(cx);
                    answer.as_mut().as_pin_mut().map_or(Poll::Pending, |answer| answer.poll(cx))
                });
                match polled {
                    Poll::Pending if deadline.passed(cx) => Poll::Ready(None),
                    polled => polled.map(Some),
                }
            })
            .await;
            match answered {
                Some(Ok(response)) => {
                    return Ok(response.map(|body| PooledBody { body, back: Some((pool, pooled)) }));
                }
                // The connection goes with the late request: its answer may still come.
                None => return Err(TransportError::TimedOut),
                Some(Err(mut err)) => match err.take_message() {
                    Some(unsent) if pooled.reused => request = Some(unsent),
                    _ => return Err(TransportError::Failed(error_chain(err.error()))),
                },
            }
        }
        Err(TransportError::Failed(format!("{authority} closed every connection before the request was sent")))
    }

    /// An idle connection to `key`'s authority that is ready for a request, or a new one made
    /// by `due`.
    async fn checkout(&self, key: &PoolKey, fresh: bool, due: Option<Instant>) -> Result<Pooled<B>, TransportError> {
        let shard = key.0.shard();
        if !fresh && let Some(idle) = self.idle.get(shard) {
            loop {
                let popped =
                    idle.lock().iter_mut().find(|(held, _)| same_key(held, key)).and_then(|(_, idle)| idle.pop());
                let Some((mut wire, since)) = popped else { break };
                if self.expired(since, since.map(|_| Instant::now())) {
                    continue;
                }
                if wire.held_and_asking() || std::future::poll_fn(|cx| wire.poll_ready(cx)).await.is_ok() {
                    return Ok(Pooled { key: key.clone(), wire, reused: true, shard });
                }
            }
        }
        // Boxed: connecting is rare and its future large, and every exchange would carry it.
        let connect = Box::pin(self.connect(&key.1));
        let wire = match due {
            Some(due) => tokio::time::timeout_at(due, connect).await.map_err(|_| TransportError::TimedOut)?,
            None => connect.await,
        }?;
        Ok(Pooled { key: key.clone(), wire, reused: false, shard })
    }

    /// A new connection to `authority` (its task spawned on the current runtime unless requests
    /// drive it).
    async fn connect(&self, authority: &Authority) -> Result<Wire<B>, TransportError> {
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
        let (driver, wakes) = if self.drive_in_request {
            (Driver::Held(Box::new(connection)), OwnWakes::held())
        } else {
            tokio::spawn(async move { connection_ended(connection.await) });
            (Driver::Task, OwnWakes::none())
        };
        Ok(Wire { sender, driver, wakes, deadline: Deadline::default() })
    }

    /// Whether a connection idle since `since` has been kept long enough by `now` (both
    /// `None` when the pool keeps idle connections without a time limit).
    fn expired(&self, since: Option<Instant>, now: Option<Instant>) -> bool {
        matches!((self.keep_idle, since, now), (Some(keep), Some(since), Some(now)) if now.saturating_duration_since(since) > keep.for_at_most)
    }

    /// Gives a connection back once its answer has been read, if it can take another request
    /// (one that has ended, or is still sending a request body the server answered early, is
    /// dropped, and so are the oldest idle ones past the pool's bounds).
    fn checkin(&self, pooled: Pooled<B>) {
        let Pooled { key, mut wire, shard, .. } = pooled;
        let Some(idle) = self.idle.get(shard) else { return };
        if !wire.is_idle_and_open() {
            return;
        }
        if key.0 == Owner::Common {
            // A timer belongs to the runtime it was made on, and a connection multi-threaded
            // runtimes share may next serve another (whose request makes its own).
            wire.deadline = Deadline::default();
        }
        // One reading of the clock: the connection's idle start, and what has been idle too long.
        let now = self.keep_idle.map(|_| Instant::now());
        let mut idle = idle.lock();
        if let Some((_, wires)) = idle.iter_mut().find(|(held, _)| same_key(held, &key)) {
            wires.push((wire, now));
            if let Some(keep) = self.keep_idle {
                let stale = wires.iter().take_while(|(_, since)| self.expired(*since, now)).count();
                let excess = wires.len().saturating_sub(keep.at_most);
                wires.drain(..stale.max(excess));
            }
            return;
        }
        // A new owner or host on this list: forget the connections that have ended (those
        // of runtimes that have ended among them: their sockets no longer work).
        idle.retain_mut(|(_, wires)| {
            wires.retain_mut(|(wire, since)| !self.expired(*since, now) && wire.is_idle_and_open());
            !wires.is_empty()
        });
        idle.push((key, vec![(wire, now)]));
    }
}

/// An answer's body from an [`Http1Pool`] connection, driving the connection as it is read.
/// Read to its end, it gives the connection back to the pool (ready for the next request);
/// dropped before that (a reader that hung up mid-body, an endless stream), the connection is
/// closed instead, never handed to another request.
#[derive(Debug)]
pub struct PooledBody<B: RequestBody, P: Borrow<Http1Pool<B>> = Http1Pool<B>> {
    body: Incoming,
    /// The pool and the connection, until it goes back.
    back: Option<(P, Pooled<B>)>,
}

impl<B: RequestBody, P: Borrow<Http1Pool<B>>> PooledBody<B, P> {
    /// Whether the deadline of the request this answers has passed; if not, `cx` is woken
    /// when it does. Never, for a request sent without one.
    fn deadline_passed(&mut self, cx: &mut Context<'_>) -> bool {
        self.back.as_mut().is_some_and(|(_, pooled)| pooled.wire.deadline.passed(cx))
    }

    /// The next frame, unless the deadline of the request this answers passes first.
    fn frame_by_deadline(&mut self) -> impl Future<Output = Option<Result<Frame<Bytes>, TransportError>>> + '_
    where
        P: Unpin,
    {
        std::future::poll_fn(move |cx| match Pin::new(&mut *self).poll_frame(cx) {
            Poll::Pending if self.deadline_passed(cx) => Poll::Ready(Some(Err(TransportError::TimedOut))),
            Poll::Pending => Poll::Pending,
            Poll::Ready(frame) => Poll::Ready(frame.map(|frame| {
                frame.map_err(|err| TransportError::Failed(format!("reading the response body failed: {err}")))
            })),
        })
    }

    /// The connection back to its pool, once the body has ended.
    fn give_back(&mut self) {
        if let Some((pool, pooled)) = self.back.take() {
            pool.borrow().checkin(pooled);
        }
    }
}

impl<B: RequestBody, P: Borrow<Http1Pool<B>> + Unpin> Body for PooledBody<B, P> {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = match &mut this.back {
            Some((_, pooled)) => {
                let (body, Wire { driver, wakes, .. }) = (&mut this.body, &mut pooled.wire);
                wakes.pass(cx, |cx| {
                    let polled = Pin::new(&mut *body).poll_frame(cx);
                    if polled.is_ready() {
                        return polled;
                    }
                    // The body has asked for more: the connection reads it (most often
                    // already in its buffer), and the body has it at once.
                    driver.drive(cx);
                    Pin::new(&mut *body).poll_frame(cx)
                })
            }
            None => Pin::new(&mut this.body).poll_frame(cx),
        };
        match &polled {
            Poll::Ready(None) => this.give_back(),
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.give_back(),
            Poll::Ready(Some(Err(_))) => this.back = None,
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
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

impl<B: RequestBody, P: Borrow<Http1Pool<B>>> Drop for PooledBody<B, P> {
    fn drop(&mut self) {
        // A body with nothing to read (an answer to HEAD, a 204, a length of 0) is often
        // never polled: it has ended all the same.
        if self.body.is_end_stream() {
            self.give_back();
        }
    }
}

impl Transport for Http1Transport {
    fn exchange(&self, request: http::Request<Bytes>) -> BoxFuture<'static, Exchanged> {
        let this = self.clone();
        Box::pin(async move { this.exchange_within_deadline(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's waker that counts its wakes.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl std::task::Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn task() -> (Arc<Counted>, Waker) {
        let counted = Arc::new(Counted::default());
        (Arc::clone(&counted), Waker::from(counted))
    }

    #[test]
    fn wakes_during_a_pass_run_it_again_and_only_wakes_from_outside_reach_the_task() {
        let (woken, waker) = task();
        let wakes = OwnWakes::held();
        let (mut passes, mut kept) = (0, None);
        let polled = wakes.pass(&mut Context::from_waker(&waker), |cx| {
            passes += 1;
            // The first pass wakes its own connection (a queued request, an answer handed over).
            if passes == 1 {
                cx.waker().wake_by_ref();
            }
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(passes, 2, "the pass runs again for the wake noted during it");
        assert_eq!(woken.0.load(Ordering::Relaxed), 0, "and the task is not polled again for it");
        // The socket's readiness, from the poller: outside any pass.
        kept.expect("a waker was handed out").wake();
        assert_eq!(woken.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_finished_pass_returns_at_once_and_steps_that_always_yield_wake_the_task() {
        let (woken, waker) = task();
        let wakes = OwnWakes::held();
        let mut passes = 0;
        let polled = wakes.pass(&mut Context::from_waker(&waker), |cx| {
            passes += 1;
            cx.waker().wake_by_ref();
            Poll::Ready(passes)
        });
        assert_eq!((polled, woken.0.load(Ordering::Relaxed)), (Poll::Ready(1), 0));

        // A step that yields (its budget spent) wakes its task each time: a few passes, then the task.
        let mut passes = 0;
        let polled = wakes.pass(&mut Context::from_waker(&waker), |cx| {
            passes += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        assert!(polled.is_pending());
        assert_eq!((passes, woken.0.load(Ordering::Relaxed)), (PASSES_AT_MOST, 1));
    }

    #[test]
    fn a_connection_with_a_task_of_its_own_is_polled_with_the_callers_waker() {
        let (woken, waker) = task();
        let polled = OwnWakes::none().pass(&mut Context::from_waker(&waker), |cx| {
            cx.waker().wake_by_ref();
            Poll::Ready(cx.waker().will_wake(&waker))
        });
        assert_eq!(polled, Poll::Ready(true));
        assert_eq!(woken.0.load(Ordering::Relaxed), 1, "its wakes go straight to the task");
    }

    #[test]
    fn the_wire_serves_plain_http_urls_without_credentials_only() {
        let serves = |text: &str| Http1Transport::serves(&url::Url::parse(text).expect("a URL"));
        for plain in
            ["http://a.test/", "HTTP://A.test:8080/x@y?q=@#@", "http://[::1]:9/", "http://10.0.0.1", "http://h/p%40q"]
        {
            assert!(serves(plain), "{plain}");
        }
        for other in [
            "https://a.test/",
            "http://user@a.test/",
            "http://user:pass@a.test/",
            "http://:pass@a.test/",
            "http://us%40er:p%40ss@a.test/",
            "ftp://a.test/",
            "httpx://a.test/",
        ] {
            assert!(!serves(other), "{other}");
        }
    }

    /// A keep-alive HTTP/1.1 server on loopback answering every request `ok`.
    async fn answering_server() -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut read = Vec::new();
                    let mut buffer = [0u8; 1024];
                    while let Ok(count @ 1..) = socket.read(&mut buffer).await {
                        read.extend_from_slice(&buffer[..count]);
                        while let Some(end) = read.windows(4).position(|window| window == b"\r\n\r\n") {
                            read.drain(..end + 4);
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if socket.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        address
    }

    /// A timer belongs to the runtime it was made on: a connection on the list multi-threaded
    /// runtimes share goes back to the pool without its request's deadline timer, one of a
    /// single-threaded runtime keeps it for its next request.
    #[test]
    fn only_a_single_threaded_runtimes_connections_keep_their_deadline_timer() {
        for multi_threaded in [false, true] {
            let mut builder = match multi_threaded {
                true => tokio::runtime::Builder::new_multi_thread(),
                false => tokio::runtime::Builder::new_current_thread(),
            };
            let runtime = builder.enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let address = answering_server().await;
                let transport = Http1Transport::new(None, Some(Duration::from_secs(30)));
                for _ in 0..2 {
                    let request =
                        http::Request::get(format!("http://{address}/")).body(Bytes::new()).expect("a request");
                    let answer = transport.exchange(request).await.expect("an answer");
                    assert_eq!(answer.body(), "ok");
                }
                let idle = transport.pool.idle[Owner::current().shard()].lock();
                let wires: Vec<_> = idle.iter().flat_map(|(_, wires)| wires).collect();
                assert_eq!(wires.len(), 1, "one kept-alive connection");
                assert_eq!(wires[0].0.deadline.0.is_some(), !multi_threaded);
            });
        }
    }
}
