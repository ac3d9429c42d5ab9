//! Where a [`LimitedClient`](super::LimitedClient) sends its requests when not through reqwest:
//! a handler in the same process (the simulator plugs the demo API in here, so a simulated
//! burst goes through the very same limiter, retry, pause and header code as a real one), or
//! the lean HTTP/1.1 wire of [`Http1Transport`](super::Http1Transport) for raw bursts.

use std::fmt;

use bytes::Bytes;
use futures_util::future::BoxFuture;

/// A response, or the reason there is none.
pub type Exchanged = Result<http::Response<Bytes>, TransportError>;

/// Why a transport has no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The transport's own deadline passed (the client reports it as a timeout).
    #[error("timed out")]
    TimedOut,
    /// Anything else; the client reports it as a connection error with this text.
    #[error("{0}")]
    Failed(String),
}

impl From<String> for TransportError {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

/// Answers requests instead of reqwest.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Answers one request. Time spent here (on the tokio clock) is the attempt's service time.
    fn exchange(&self, request: http::Request<Bytes>) -> BoxFuture<'static, Exchanged>;
}
