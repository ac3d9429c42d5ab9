//! [`LimitedBody`]: a response body that holds its request's limiter permit.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

use crate::engine::Permit;

pin_project_lite::pin_project! {
    /// The inner service's response body, holding the request's permit (its concurrency slot)
    /// until the body has been read to its end, has failed, or is dropped. Frames pass through
    /// unchanged.
    #[derive(Debug)]
    pub struct LimitedBody<B> {
        #[pin]
        body: B,
        permit: Option<Permit>,
    }
}

impl<B: Body> LimitedBody<B> {
    /// `body` holding `permit`; a body already at its end releases it at once.
    pub(crate) fn new(body: B, permit: Option<Permit>) -> Self {
        let permit = permit.filter(|_| !body.is_end_stream());
        Self { body, permit }
    }
}

impl<B> LimitedBody<B> {
    /// Whether the body still holds a permit (it was not read to its end yet).
    pub fn holds_permit(&self) -> bool {
        self.permit.is_some()
    }

    /// The inner body; its permit is released.
    pub fn into_inner(self) -> B {
        self.body
    }
}

impl<B: Body> Body for LimitedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let polled = this.body.as_mut().poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            this.permit.take();
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
