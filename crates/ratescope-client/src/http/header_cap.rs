//! The most headers one request is built with. What a user gives — `-H` options, a profile's
//! headers, a pasted curl command — is refused past this cap with the cap named, long before
//! `http::HeaderMap` would panic ("size overflows MAX_SIZE" past about 24,576 entries).

use thiserror::Error;

/// The most headers a request may carry (far beyond any real API's needs).
pub const MAX_REQUEST_HEADERS: usize = 256;

/// More headers than [`MAX_REQUEST_HEADERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{count} headers are more than the {MAX_REQUEST_HEADERS} a request may carry")]
pub struct TooManyHeaders {
    /// How many there were (at least).
    pub count: usize,
}

/// Refuses `count` headers past [`MAX_REQUEST_HEADERS`].
pub fn check_header_count(count: usize) -> Result<(), TooManyHeaders> {
    if count > MAX_REQUEST_HEADERS { Err(TooManyHeaders { count }) } else { Ok(()) }
}
