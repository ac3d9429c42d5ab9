//! The direct HTTP/1.1 wire (`Http1Transport`) against a real axum server on 127.0.0.1:
//! keep-alive reuse, servers that close connections, errors, timeouts, and raw bursts over it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Uri};
use axum::routing::get;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use ratescope::http::{Http1Pool, Http1Transport, Transport, TransportError};
use ratescope::run::{Burst, BurstSpec};
use tokio::net::TcpListener;

/// A server that records the peer port of every request (one port per connection) and how
/// many requests carried `accept: */*`, which reqwest adds and the HTTP/1.1 wire does not.
struct Echo {
    address: SocketAddr,
    peers: Arc<Mutex<Vec<u16>>>,
    reqwest_marked: Arc<std::sync::atomic::AtomicUsize>,
}

impl Echo {
    async fn start() -> Self {
        let peers = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&peers);
        let reqwest_marked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let marked = Arc::clone(&reqwest_marked);
        let app = Router::new()
            .route(
                "/echo",
                get(move |ConnectInfo(peer): ConnectInfo<SocketAddr>, uri: Uri, headers: HeaderMap| {
                    let record = Arc::clone(&record);
                    let marked = Arc::clone(&marked);
                    async move {
                        record.lock().push(peer.port());
                        if headers.get("accept").is_some_and(|value| value == "*/*") {
                            marked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        let host = headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                        ([("x-seen-host", host)], format!("{uri}"))
                    }
                }),
            )
            .route("/close", get(|| async { ([("connection", "close")], "bye") }))
            .route(
                "/empty",
                get({
                    let record = Arc::clone(&peers);
                    move |ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                        record.lock().push(peer.port());
                        axum::http::StatusCode::NO_CONTENT
                    }
                }),
            )
            .route(
                "/chunks",
                get(|| async {
                    let chunks = ["one ", "two ", "three"].map(|chunk| Ok::<_, std::io::Error>(Bytes::from(chunk)));
                    axum::body::Body::from_stream(futures_util::stream::iter(chunks))
                }),
            )
            .route("/never", get(std::future::pending::<&'static str>))
            .route(
                "/stall",
                get(|| async {
                    // The head and a first chunk, then nothing: the body never ends.
                    let first = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("part"))]);
                    axum::body::Body::from_stream(first.chain(futures_util::stream::pending()))
                }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
        });
        Self { address, peers, reqwest_marked }
    }

    fn request(&self, path: &str) -> http::Request<Bytes> {
        http::Request::get(format!("http://{}{path}", self.address)).body(Bytes::new()).unwrap()
    }

    /// A raw burst of `requests` to `path` with at most `cap` in flight.
    fn raw_burst(&self, path: &str, requests: usize, cap: usize) -> BurstSpec {
        let mut spec = BurstSpec::get(format!("http://{}{path}", self.address).parse().unwrap(), requests);
        spec.raw_concurrency = Some(cap);
        spec
    }

    fn connections(&self) -> usize {
        self.peers.lock().iter().collect::<HashSet<_>>().len()
    }
}

#[tokio::test]
async fn sends_origin_form_with_host_and_reuses_one_connection() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, None);
    for _ in 0..50 {
        let response = wire.exchange(server.request("/echo?page=2")).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.body(), &Bytes::from_static(b"/echo?page=2"));
        assert_eq!(response.headers()["x-seen-host"], server.address.to_string());
    }
    assert_eq!(server.peers.lock().len(), 50);
    assert_eq!(server.connections(), 1, "sequential requests share one keep-alive connection");
}

#[tokio::test]
async fn concurrent_requests_open_a_connection_each_and_then_reuse_them() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, None);
    for _ in 0..5 {
        let round: Vec<_> = (0..8).map(|_| tokio::spawn(wire.exchange(server.request("/echo")))).collect();
        for request in round {
            assert_eq!(request.await.unwrap().unwrap().status(), 200);
        }
    }
    assert_eq!(server.peers.lock().len(), 40);
    assert!(server.connections() <= 8, "at most one connection per request in flight: {}", server.connections());
}

#[tokio::test]
async fn a_server_that_closes_gets_a_fresh_connection_per_request() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, None);
    for _ in 0..3 {
        let response = wire.exchange(server.request("/close")).await.unwrap();
        assert_eq!(response.body(), &Bytes::from_static(b"bye"));
    }
    // And a normal request after that still works.
    assert_eq!(wire.exchange(server.request("/echo")).await.unwrap().status(), 200);
}

#[tokio::test]
async fn bodiless_answers_give_their_connection_back() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, None);
    let head = http::Request::head(format!("http://{}/echo", server.address)).body(Bytes::new()).unwrap();
    let response = wire.exchange(head).await.unwrap();
    assert_eq!((response.status(), response.body().len()), (http::StatusCode::OK, 0));
    let response = wire.exchange(server.request("/empty")).await.unwrap();
    assert_eq!(response.status(), http::StatusCode::NO_CONTENT);
    assert_eq!(wire.exchange(server.request("/echo")).await.unwrap().status(), 200);
    assert_eq!(server.peers.lock().len(), 3);
    assert_eq!(server.connections(), 1, "an answer to HEAD and a 204 leave the connection ready for the next");
}

/// A server that answers each connection's first request as keep-alive, then closes it
/// without a word, and says when it has.
async fn answer_once_then_close() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buffer = [0; 1024];
            while !head.windows(4).any(|window| window == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(read) => head.extend_from_slice(&buffer[..read]),
                }
            }
            stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
            drop(stream);
            closed.send(()).unwrap();
        }
    });
    (address, closes)
}

#[tokio::test]
async fn a_pooled_connection_the_server_closed_while_idle_is_never_sent_on() {
    let (address, mut closes) = answer_once_then_close().await;
    let wire = Http1Transport::new(None, None);
    for round in 0..3 {
        let request = http::Request::get(format!("http://{address}/x")).body(Bytes::new()).unwrap();
        let response = wire.exchange(request).await.unwrap_or_else(|err| panic!("request {round}: {err}"));
        assert_eq!(response.body(), &Bytes::from_static(b"ok"));
        closes.recv().await.unwrap();
    }
}

/// One exchange of `GET path` (or `HEAD`) over `pool` to `address`, its body read whole.
async fn over_pool(pool: &Http1Pool<Full<Bytes>>, address: SocketAddr, method: http::Method, path: &str) -> Bytes {
    let authority: http::uri::Authority = address.to_string().parse().unwrap();
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, address.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = pool.send(&authority, request).await.unwrap();
    response.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn a_pool_whose_requests_drive_its_connections_reuses_and_replaces_them_alike() {
    let pool = Http1Pool::new(None).driving_connections();
    let server = Echo::start().await;
    assert_eq!(over_pool(&pool, server.address, http::Method::HEAD, "/echo").await, Bytes::new());
    assert_eq!(over_pool(&pool, server.address, http::Method::GET, "/empty").await, Bytes::new());
    assert_eq!(over_pool(&pool, server.address, http::Method::GET, "/echo").await, Bytes::from_static(b"/echo"));
    assert_eq!(server.connections(), 1, "one connection, driven by each request in turn");

    let (address, mut closes) = answer_once_then_close().await;
    for _ in 0..3 {
        assert_eq!(over_pool(&pool, address, http::Method::GET, "/x").await, Bytes::from_static(b"ok"));
        closes.recv().await.unwrap();
    }
}

#[tokio::test]
async fn refused_connections_and_bad_urls_are_clear_errors() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let wire = Http1Transport::new(None, None);
    let request = http::Request::get(format!("http://{closed}/x")).body(Bytes::new()).unwrap();
    let Err(TransportError::Failed(message)) = wire.exchange(request).await else { panic!("expected a failure") };
    assert!(message.starts_with(&format!("connecting to {closed} failed")), "{message}");
    let https = http::Request::get("https://example.com/").body(Bytes::new()).unwrap();
    let Err(TransportError::Failed(message)) = wire.exchange(https).await else { panic!("expected a failure") };
    assert!(message.contains("not a plain http:// URL"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn a_response_that_never_comes_times_out_at_the_deadline() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, Some(Duration::from_secs(5)));
    let start = tokio::time::Instant::now();
    assert_eq!(wire.exchange(server.request("/never")).await.unwrap_err(), TransportError::TimedOut);
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_coming_times_out_at_the_deadline_and_its_connection_is_not_reused() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, Some(Duration::from_secs(5)));
    wire.exchange(server.request("/echo")).await.unwrap();
    let start = tokio::time::Instant::now();
    assert_eq!(wire.exchange(server.request("/stall")).await.unwrap_err(), TransportError::TimedOut);
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    wire.exchange(server.request("/echo")).await.unwrap();
    let peers = server.peers.lock().clone();
    assert_eq!(peers.len(), 2);
    assert_ne!(peers[0], peers[1], "the connection the late body was on was closed, not reused");
}

/// The deadline is each request's own, though a connection keeps one timer for all of them:
/// requests spread over longer than the timeout on one kept-alive connection all succeed, and
/// one that gets no answer fails its own timeout after it was sent, not the first request's.
#[tokio::test(start_paused = true)]
async fn each_request_on_a_kept_alive_connection_has_its_own_deadline() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, Some(Duration::from_secs(5)));
    for _ in 0..4 {
        wire.exchange(server.request("/echo")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let start = tokio::time::Instant::now();
    assert_eq!(wire.exchange(server.request("/never")).await.unwrap_err(), TransportError::TimedOut);
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    let peers = server.peers.lock().clone();
    assert_eq!(peers.len(), 4);
    assert!(peers.iter().all(|peer| *peer == peers[0]), "one kept-alive connection: {peers:?}");
}

#[tokio::test]
async fn raw_bursts_use_the_wire_and_count_every_response() {
    let server = Echo::start().await;
    let spec = server.raw_burst("/echo", 200, 4);
    let (summary, results) = Burst::start_with_own_client(spec).unwrap().finish().await;
    assert_eq!(summary.succeeded, 200);
    assert_eq!(summary.status_counts.get("200"), Some(&200));
    assert!(results.iter().all(|result| result.attempts.len() == 1));
    assert!(server.connections() <= 4, "four in flight need at most four connections: {}", server.connections());
    let marked = || server.reqwest_marked.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(marked(), 0, "a raw burst went through reqwest, not the HTTP/1.1 wire");

    // The control: a paced burst goes through reqwest, and the server can tell.
    let mut paced = server.raw_burst("/echo", 20, 4);
    paced.raw_concurrency = None;
    paced.limits = Some(ratescope::engine::LimiterConfig::new().with_concurrency(4));
    let (summary, _) = Burst::start_with_own_client(paced).unwrap().finish().await;
    assert_eq!(summary.succeeded, 20);
    assert_eq!(marked(), 20, "the server cannot tell reqwest's requests from the wire's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_bursts_on_a_multi_threaded_runtime_send_from_load_threads_with_their_own_connections() {
    let server = Echo::start().await;
    let spec = server.raw_burst("/echo", 400, 6);
    let (summary, results) = Burst::start_with_own_client(spec).unwrap().finish().await;
    assert_eq!(summary.succeeded, 400);
    assert!(
        results.iter().enumerate().all(|(position, result)| result.index == position),
        "one record per request, in order"
    );
    assert!(server.connections() <= 6, "six in flight need at most six connections: {}", server.connections());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_raw_burst_on_load_threads_ends_what_is_in_flight() {
    let server = Echo::start().await;
    let spec = server.raw_burst("/never", 50, 4);
    let burst = Burst::start_with_own_client(spec).unwrap();
    while burst.progress().launched < 4 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    burst.cancel();
    let (summary, results) = burst.finish().await;
    assert_eq!(results.len(), 4, "only the four in flight were launched");
    assert!(results.iter().all(|result| result.outcome == ratescope::run::RequestOutcome::Cancelled));
    assert_eq!((summary.succeeded, summary.cancelled), (0, 50));
}

#[tokio::test]
async fn a_chunked_answer_is_read_whole_on_both_entries() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, None);
    let response = wire.exchange(server.request("/chunks")).await.unwrap();
    assert_eq!(response.headers()["transfer-encoding"], "chunked");
    assert_eq!(response.body(), &Bytes::from_static(b"one two three"));
    let url: url::Url = format!("http://{}/chunks", server.address).parse().unwrap();
    let response = wire.exchange_url(&http::Method::GET, &url, &http::HeaderMap::new(), Bytes::new()).await.unwrap();
    assert_eq!(response.body(), &Bytes::from_static(b"one two three"));
}

#[tokio::test]
async fn exchange_url_sends_origin_form_with_host_and_keeps_a_callers_host() {
    let server = Echo::start().await;
    let wire = Http1Transport::new(None, None);
    let url: url::Url = format!("http://{}/echo?page=2#fragment", server.address).parse().unwrap();
    let response = wire.exchange_url(&http::Method::GET, &url, &http::HeaderMap::new(), Bytes::new()).await.unwrap();
    assert_eq!(response.body(), &Bytes::from_static(b"/echo?page=2"), "the fragment never goes on the wire");
    assert_eq!(response.headers()["x-seen-host"], server.address.to_string());
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::HOST, http::HeaderValue::from_static("api.example"));
    let response = wire.exchange_url(&http::Method::GET, &url, &headers, Bytes::new()).await.unwrap();
    assert_eq!(response.headers()["x-seen-host"], "api.example");
    assert_eq!(server.connections(), 1, "both on one keep-alive connection");
}

#[tokio::test]
async fn credentials_in_a_url_never_reach_the_host_header() {
    let server = Echo::start().await;
    // Given to the wire itself as an absolute URI: Host is the host and port alone.
    let wire = Http1Transport::new(None, None);
    let request = http::Request::get(format!("http://user:secret@{}/echo", server.address)).body(Bytes::new()).unwrap();
    let response = wire.exchange(request).await.unwrap();
    assert_eq!(response.headers()["x-seen-host"], server.address.to_string());
    // A burst to such a URL goes through reqwest, which sends them as Basic authorization.
    let url: url::Url = format!("http://user:secret@{}/echo", server.address).parse().unwrap();
    assert!(!Http1Transport::serves(&url));
    let mut spec = BurstSpec::get(url, 3);
    spec.raw_concurrency = Some(1);
    let (summary, _) = Burst::start_with_own_client(spec).unwrap().finish().await;
    assert_eq!(summary.succeeded, 3);
    assert_eq!(server.reqwest_marked.load(std::sync::atomic::Ordering::Relaxed), 3);
}
