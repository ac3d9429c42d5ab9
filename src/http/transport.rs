//! Where a [`LimitedClient`](super::LimitedClient) sends its requests when not to the network:
//! a handler in the same process. The simulator plugs the demo API in here, so a simulated
//! burst goes through the very same limiter, retry, pause and header code as a real one.

use std::fmt;

use bytes::Bytes;
use futures_util::future::BoxFuture;

/// A response, or the reason there is none (which the client treats as a connection error).
pub type Exchanged = Result<http::Response<Bytes>, String>;

/// Answers requests in this process instead of sending them over the network.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Answers one request. Time spent here (on the tokio clock) is the attempt's service time.
    fn exchange(&self, request: http::Request<Bytes>) -> BoxFuture<'static, Exchanged>;
}
