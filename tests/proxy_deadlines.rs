//! A caller connection's deadlines on the proxy, on paused tokio time over loopback: the head
//! timeout runs only while the connection has no request in progress, from the end of its last
//! answer, so a long streamed (or cached) answer goes through whole and an idle kept-alive
//! caller is cut off one head timeout after it.
//!
//! Apart from `tests/proxy.rs`: run beside that file's log-capturing test (a thread's default
//! subscriber), this one made it miss the proxy's log lines in one run of two.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use ratescope::http::cache::CacheConfig;
use ratescope::proxy::{ProxyConfig, ProxyServer, Route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The head timeout counts from the end of the last answer, not from the connection's start,
/// and never runs while an answer is still streaming: a download longer than the head timeout
/// goes through whole, then an idle kept-alive caller is cut off one head timeout later.
#[tokio::test(start_paused = true)]
async fn the_upstreams_long_answer_outlasts_the_head_timeout_and_an_idle_caller_is_cut_off_after_it() {
    let slow = Router::new().route(
        "/stream",
        axum::routing::get(|| async {
            let parts = futures_util::stream::iter(0..4).then(|part| async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                Ok::<_, std::io::Error>(Bytes::from(format!("part {part};")))
            });
            Body::from_stream(parts)
        }),
    );
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, slow).await });
    let route = Route::new("s", &format!("http://{addr}")).unwrap();
    let timeout = Duration::from_secs(5);
    // Streamed to the caller, and read whole into the cache first.
    for cache in [None, Some(CacheConfig::default())] {
        let config = ProxyConfig {
            listen: loopback(),
            head_timeout: Some(timeout),
            cache,
            ..ProxyConfig::new(vec![route.clone()])
        };
        let proxy = ProxyServer::start(config).await.unwrap();
        answered_whole_then_cut_off_when_idle(proxy.addr(), timeout).await;
    }
}

async fn answered_whole_then_cut_off_when_idle(proxy: SocketAddr, timeout: Duration) {
    let mut caller = TcpStream::connect(proxy).await.unwrap();
    // Most of the head timeout passes before the first request: the answer resets the count.
    tokio::time::sleep(Duration::from_secs(4)).await;
    caller.write_all(b"GET /s/stream HTTP/1.1\r\nHost: proxy\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    // Chunked as it streams, or with a length once read whole into the cache.
    while !String::from_utf8_lossy(&answer).contains("part 3;") {
        let read = tokio::time::timeout(Duration::from_secs(60), caller.read(&mut chunk)).await.unwrap().unwrap();
        assert!(read > 0, "cut off mid-answer: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..read]);
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains("part 0;") && answer.contains("part 3;"), "the whole 16 s answer: {answer}");
    let answered = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(60), caller.read(&mut chunk)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the idle caller is cut off: {closed:?}");
    let idled = answered.elapsed();
    assert!(idled >= timeout && idled < timeout + Duration::from_millis(100), "closed {idled:?} after the answer");
}
