//! The floor `benches/proxy.sh` measures ratescope's proxy against: a reverse proxy of hyper on
//! one single-threaded tokio runtime with nothing else (no limiter, routes, metrics, hop-by-hop
//! rules or timeouts), keeping its upstream connections in a pool. Not a tool: a yardstick.
//! Usage: `bare_proxy LISTEN UPSTREAM PREFIX` (e.g. `127.0.0.1:18796 127.0.0.1:18797 /demo`).
//! Built with `--cfg filler` (only by `benches/footprint.sh`), each request first runs the first
//! `FILLER` functions of the generated file `RATESCOPE_FILLER` names: code to add to its path.

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderValue;
use http::header::HOST;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};

#[cfg(filler)]
mod filler {
    include!(env!("RATESCOPE_FILLER"));
}

type Pool = Arc<Mutex<Vec<SendRequest<Incoming>>>>;

struct Upstream {
    addr: SocketAddr,
    host: HeaderValue,
    prefix: String,
    idle: Pool,
}

async fn forward(
    upstream: Arc<Upstream>,
    mut request: hyper::Request<Incoming>,
) -> anyhow::Result<hyper::Response<Incoming>> {
    #[cfg(filler)]
    std::hint::black_box(filler::run(std::hint::black_box(1)));
    let path = request.uri().path_and_query().map_or("/", |target| target.as_str());
    let rest = path.strip_prefix(upstream.prefix.as_str()).unwrap_or(path);
    *request.uri_mut() = if rest.starts_with('/') { rest.parse()? } else { "/".parse()? };
    request.headers_mut().insert(HOST, upstream.host.clone());
    let popped = upstream.idle.lock().pop();
    let mut sender = match popped {
        Some(sender) => sender,
        None => {
            let stream = TcpStream::connect(upstream.addr).await?;
            stream.set_nodelay(true)?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            sender
        }
    };
    // The answers here are small: the connection is ready again as soon as they are read.
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    upstream.idle.lock().push(sender);
    Ok(response)
}

fn main() -> anyhow::Result<()> {
    // The filler's cost run hot: 100,000 runs in a loop, in microseconds a run.
    #[cfg(filler)]
    if std::env::args().any(|arg| arg == "--hot") {
        let start = std::time::Instant::now();
        for _ in 0..100_000 {
            std::hint::black_box(filler::run(std::hint::black_box(1)));
        }
        println!("{:.2}", start.elapsed().as_secs_f64() * 1e6 / 100_000.0);
        return Ok(());
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).collect();
    let [listen, upstream, prefix] = args.as_slice() else {
        // `cargo bench` runs every bench with no arguments: nothing to measure here alone.
        println!("bare_proxy: the yardstick of benches/proxy.sh; run it as bare_proxy LISTEN UPSTREAM PREFIX");
        return Ok(());
    };
    let listen: SocketAddr = listen.parse()?;
    let upstream = Arc::new(Upstream {
        addr: upstream.parse()?,
        host: HeaderValue::from_str(upstream)?,
        prefix: prefix.clone(),
        idle: Pool::default(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(listen).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let upstream = Arc::clone(&upstream);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| forward(Arc::clone(&upstream), request));
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    })
}
