//! [`RateLimitService`]: the `Service` a [`RateLimitLayer`](super::RateLimitLayer) makes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::body::LimitedBody;
use super::builder::LayerState;
use super::call::Call;
use super::error::RateLimitError;

/// The future of one call: admission, the inner call, the answer read.
pub type ResponseFuture<RB, E> =
    Pin<Box<dyn Future<Output = Result<http::Response<LimitedBody<RB>>, RateLimitError<E>>> + Send>>;

/// An inner `Service<http::Request<B>>` whose calls wait for their key's limiter. Readiness is
/// the inner service's alone: `poll_ready` reserves nothing, the wait happens in the call
/// future (so a dropped future leaves its queue and a waiting request holds no slot), and the
/// permit rides on the response body ([`LimitedBody`]).
#[derive(Debug, Clone)]
pub struct RateLimitService<S> {
    inner: S,
    state: Arc<LayerState>,
}

impl<S> RateLimitService<S> {
    pub(super) fn new(inner: S, state: Arc<LayerState>) -> Self {
        Self { inner, state }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, B, RB> Service<http::Request<B>> for RateLimitService<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send + 'static,
    B: Send + 'static,
    RB: http_body::Body + Send + 'static,
{
    type Response = http::Response<LimitedBody<RB>>;
    type Error = RateLimitError<S::Error>;
    type Future = ResponseFuture<RB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(RateLimitError::Inner)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The service driven to readiness goes with this call; a clone stays for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = Arc::clone(&self.state);
        Box::pin(async move {
            let mut call = Call::prepare(&state, &request);
            let permit = call.admit().await.map_err(RateLimitError::refused)?;
            call.sent();
            match inner.call(request).await {
                Ok(response) => {
                    call.answered(response.status(), response.headers(), permit.as_ref());
                    Ok(response.map(|body| LimitedBody::new(body, permit)))
                }
                Err(err) => {
                    call.failed(&err);
                    Err(RateLimitError::Inner(err))
                }
            }
        })
    }
}
