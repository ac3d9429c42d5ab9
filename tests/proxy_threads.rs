//! The proxy started on a multi-threaded runtime, as the command line starts it: connections
//! are served on its own single-threaded runtimes (one per core), plain-HTTP upstreams over its
//! lean pooled wire. Checked over real loopback sockets: answers intact, upstream connections
//! reused (never one per request, and no byte of a half-read answer reaching the next), a
//! connection the upstream closed replaced, and the serving threads gone after a drain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::header::CONNECTION;
use axum::routing::get;
use axum::serve::ListenerExt;
use ratescope::proxy::{ProxyConfig, ProxyServer, Route};

const BIG: usize = 1 << 20;

/// One test at a time: they count the process's serving threads.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An upstream counting the connections it accepted: `/small` answers its path, `/big` 1 MiB,
/// `/close` answers and closes its connection, `/slow` answers after 300 ms, `/endless` streams
/// a line every 5 ms without end.
async fn counting_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let app = Router::new()
        .route("/small", get(|| async { "small" }))
        .route("/big", get(|| async { Body::from(vec![7u8; BIG]) }))
        .route("/close", get(|| async { ([(CONNECTION, "close")], "closing") }))
        .route(
            "/endless",
            get(|| async {
                let ticks = futures_util::stream::unfold(0u64, |tick| async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Some((Ok::<_, std::io::Error>(bytes::Bytes::from(format!("tick {tick}\n"))), tick + 1))
                });
                Body::from_stream(ticks)
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = listener.tap_io(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, accepted)
}

async fn proxy_to(upstream: SocketAddr) -> ProxyServer {
    proxy_with(upstream, None).await
}

async fn proxy_with(upstream: SocketAddr, threads: Option<usize>) -> ProxyServer {
    let route = Route::new("up", &format!("http://{upstream}")).unwrap();
    let config = ProxyConfig { listen: "127.0.0.1:0".parse().unwrap(), threads, ..ProxyConfig::new(vec![route]) };
    ProxyServer::start(config).await.unwrap()
}

/// An upstream answering "ok" after 200 ms, counting the connections open on it right now.
async fn slow_upstream_counting_open() -> (SocketAddr, Arc<AtomicUsize>) {
    let open = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counter = Arc::clone(&open);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let counter = Arc::clone(&counter);
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                        bytes::Bytes::from_static(b"ok"),
                    )))
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                counter.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, open)
}

/// The proxy's serving threads alive in this process.
fn serving_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|name| name.starts_with("ratescope-proxy"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits (boundedly, 5 s) until `holds` does: threads start and end on their own time (a new
/// thread names itself once it runs).
async fn eventually(holds: impl Fn() -> bool) {
    for _ in 0..500 {
        if holds() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_on_many_connections_share_a_few_upstream_connections() {
    let _serial = SERIAL.lock().await;
    let (upstream, accepted) = counting_upstream().await;
    let proxy = proxy_to(upstream).await;
    eventually(|| serving_threads() >= 1).await;
    assert!(serving_threads() >= 1, "the proxy serves on threads of its own");
    let callers: Vec<_> = (0..8)
        .map(|caller| {
            let url = format!("{}up/small", proxy.url());
            tokio::spawn(async move {
                // One keep-alive connection per caller.
                let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
                for _ in 0..50 {
                    let response = client.get(&url).send().await.unwrap();
                    assert_eq!(response.status(), 200, "caller {caller}");
                    assert_eq!(response.headers()["via"], "1.1 ratescope");
                    assert_eq!(response.text().await.unwrap(), "small");
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    let connections = accepted.load(Ordering::SeqCst);
    assert!((1..=8).contains(&connections), "400 requests over {connections} upstream connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_frees_its_connection_and_a_half_read_one_never_leaks_into_the_next() {
    let _serial = SERIAL.lock().await;
    let (upstream, accepted) = counting_upstream().await;
    // One serving thread, one pool: whichever connection the caller's client picks.
    let proxy = proxy_with(upstream, Some(1)).await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
    let big = client.get(format!("{}up/big", proxy.url())).send().await.unwrap();
    assert_eq!(big.bytes().await.unwrap().len(), BIG);
    let small = client.get(format!("{}up/small", proxy.url())).send().await.unwrap();
    assert_eq!(small.text().await.unwrap(), "small");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the connection read to the end served the next request");

    // A caller that hangs up mid-body leaves its upstream answer half read: the next requests
    // never get that connection mid-answer.
    let mut half = client.get(format!("{}up/big", proxy.url())).send().await.unwrap();
    let first = half.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty() && first.len() < BIG);
    drop(half);
    drop(client);
    let fresh = reqwest::Client::new();
    for _ in 0..3 {
        let small = fresh.get(format!("{}up/small", proxy.url())).send().await.unwrap();
        assert_eq!(small.text().await.unwrap(), "small", "no byte of the abandoned answer leaks into this one");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_upstream_closed_is_replaced_without_failing_anyone() {
    let _serial = SERIAL.lock().await;
    let (upstream, accepted) = counting_upstream().await;
    let proxy = proxy_to(upstream).await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
    for round in 0..3 {
        let closing = client.get(format!("{}up/close", proxy.url())).send().await.unwrap();
        assert_eq!(closing.status(), 200, "round {round}");
        assert_eq!(closing.text().await.unwrap(), "closing");
        let next = client.get(format!("{}up/small", proxy.url())).send().await.unwrap();
        assert_eq!(next.status(), 200, "round {round}: the closed connection was not used again");
        assert_eq!(next.text().await.unwrap(), "small");
    }
    assert!(accepted.load(Ordering::SeqCst) >= 3, "each close cost a new connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_the_request_in_flight_finish_then_the_serving_threads_end() {
    let _serial = SERIAL.lock().await;
    let (upstream, _) = counting_upstream().await;
    // The serving threads of the tests before this one end on their own: wait for them.
    eventually(|| serving_threads() == 0).await;
    let proxy = proxy_to(upstream).await;
    eventually(|| serving_threads() >= 1).await;
    assert!(serving_threads() >= 1);
    let url = format!("{}up/slow", proxy.url());
    let in_flight = tokio::spawn(async move { reqwest::get(url).await });
    while proxy.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    // The caller's connection (which drives the upstream connection its request is on): on
    // the serving threads, and the only task there.
    eventually(|| proxy.serving_tasks() >= 1).await;
    assert_eq!(proxy.serving_tasks(), 1, "no task of the upstream connection's own");
    let drained = proxy.shutdown().await.unwrap();
    assert_eq!((drained.in_flight_at_start, drained.cut_off), (1, 0));
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "slow");
    // The threads end on their own once their last connection has.
    eventually(|| serving_threads() == 0).await;
    assert_eq!(serving_threads(), 0, "the serving threads ended with the drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_beyond_the_pools_bound_are_closed() {
    let _serial = SERIAL.lock().await;
    let (upstream, open) = slow_upstream_counting_open().await;
    // One serving thread: one pool, whose bound is 64 idle connections per upstream.
    let proxy = proxy_with(upstream, Some(1)).await;
    let callers: Vec<_> = (0..80)
        .map(|_| {
            let url = format!("{}up/any", proxy.url());
            tokio::spawn(async move { reqwest::Client::new().get(url).send().await.unwrap().text().await.unwrap() })
        })
        .collect();
    for caller in callers {
        assert_eq!(caller.await.unwrap(), "ok");
    }
    // 80 at once needed 80 upstream connections; once idle, 16 of them are closed.
    for _ in 0..500 {
        if open.load(Ordering::SeqCst) <= 64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(open.load(Ordering::SeqCst), 64, "the pool keeps 64 idle connections, no more, no fewer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_stream_its_caller_left_never_holds_up_the_next_request() {
    let _serial = SERIAL.lock().await;
    let (upstream, accepted) = counting_upstream().await;
    // One serving thread: one pool for both requests.
    let proxy = proxy_with(upstream, Some(1)).await;
    let mut stream = reqwest::get(format!("{}up/endless", proxy.url())).await.unwrap();
    let first = stream.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"tick "));
    drop(stream);
    // Bounded only so a hang fails the test instead of stalling the suite.
    let next = tokio::time::timeout(Duration::from_secs(30), async {
        reqwest::get(format!("{}up/small", proxy.url())).await.unwrap().text().await.unwrap()
    })
    .await
    .expect("the next request was held up by the abandoned stream's connection");
    assert_eq!(next, "small");
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "the stream's connection was closed, not reused");
}
