//! A private HTTP response cache: freshness and revalidation by the HTTP caching rules
//! (`http-cache-semantics`), bounded in entries and bytes, least recently used evicted first.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, request, response};
use http_cache_semantics::{AfterResponse, BeforeRequest, CacheOptions, CachePolicy};
use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::events::EventKind;
use super::report::Reporter;

/// Limits of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// The most responses kept; the least recently used goes first.
    pub max_entries: usize,
    /// The most body bytes kept in all: a larger response is not stored, and the least recently used
    /// go first to make room.
    pub max_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self { max_entries: 1024, max_bytes: 64 << 20 }
    }
}

/// A stored response.
#[derive(Debug, Clone)]
pub struct CachedResponse {
    /// The stored status.
    pub status: StatusCode,
    /// The stored headers.
    pub headers: HeaderMap,
    /// The stored body.
    pub body: Bytes,
}

#[derive(Debug)]
struct Entry {
    policy: CachePolicy,
    response: CachedResponse,
}

/// What the cache says before a request is sent.
#[derive(Debug)]
pub enum Lookup {
    /// Fresh: serve this, send nothing.
    Fresh(CachedResponse),
    /// Stale but revalidatable: send with these headers (validators added).
    Revalidate(HeaderMap),
    /// Nothing usable.
    Miss,
}

/// Hit and revalidation counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Requests answered from the cache.
    pub hits: u64,
    /// Hits that needed a 304 from the server first.
    pub revalidated: u64,
    /// Responses put in the cache.
    pub stored: u64,
}

/// The cache itself; shared by every request of one client.
#[derive(Debug)]
pub struct ResponseCache {
    config: CacheConfig,
    entries: Mutex<(LruCache<String, Entry>, usize)>,
    hits: AtomicU64,
    revalidated: AtomicU64,
    stored: AtomicU64,
}

fn cache_key(method: &Method, uri: &http::Uri) -> String {
    format!("{method} {uri}")
}

fn request_parts(method: &Method, uri: &http::Uri, headers: &HeaderMap) -> request::Parts {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method.clone();
    parts.uri = uri.clone();
    parts.headers = headers.clone();
    parts
}

fn response_parts(status: StatusCode, headers: &HeaderMap) -> response::Parts {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = status;
    parts.headers = headers.clone();
    parts
}

impl ResponseCache {
    /// An empty cache within `config`'s limits.
    pub fn new(config: CacheConfig) -> Self {
        let capacity = NonZeroUsize::new(config.max_entries).unwrap_or(NonZeroUsize::MIN);
        Self {
            config,
            entries: Mutex::new((LruCache::new(capacity), 0)),
            hits: AtomicU64::new(0),
            revalidated: AtomicU64::new(0),
            stored: AtomicU64::new(0),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            revalidated: self.revalidated.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
        }
    }

    /// Asks the cache about a request before sending it. Only GET and HEAD are cached.
    pub fn lookup(&self, method: &Method, uri: &http::Uri, headers: &HeaderMap, now: SystemTime) -> Lookup {
        if method != Method::GET && method != Method::HEAD {
            return Lookup::Miss;
        }
        let mut guard = self.entries.lock();
        let Some(entry) = guard.0.get(&cache_key(method, uri)) else { return Lookup::Miss };
        match entry.policy.before_request(&request_parts(method, uri, headers), now) {
            BeforeRequest::Fresh(parts) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Fresh(CachedResponse {
                    status: parts.status,
                    headers: parts.headers,
                    body: entry.response.body.clone(),
                })
            }
            BeforeRequest::Stale { request, matches: true } => Lookup::Revalidate(request.headers),
            BeforeRequest::Stale { matches: false, .. } => Lookup::Miss,
        }
    }

    /// Before a request's first attempt, the step every face takes: a fresh stored answer to
    /// serve without touching the limiter, reported as `CacheHit` and `Finished` (no attempt);
    /// a stale one that can be revalidated adds its validators to `headers` and returns none.
    pub fn serve(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &mut HeaderMap,
        report: &Reporter<'_>,
        started: Instant,
    ) -> Option<CachedResponse> {
        match self.lookup(method, uri, headers, SystemTime::now()) {
            Lookup::Fresh(cached) => {
                report.emit(EventKind::CacheHit { revalidated: false });
                let total = started.elapsed();
                report.emit(EventKind::Finished { status: cached.status.as_u16(), attempts: 0, total });
                Some(cached)
            }
            Lookup::Revalidate(with_validators) => {
                *headers = with_validators;
                None
            }
            Lookup::Miss => None,
        }
    }

    /// After a request's final answer, the step every face takes: `fresh` is kept when it may
    /// be, and what to serve comes back with whether it came from the cache: the stored
    /// answer when a 304 revalidated it (reported as `CacheHit { revalidated: true }`), else
    /// `fresh` itself.
    pub fn keep(
        &self,
        method: &Method,
        uri: &http::Uri,
        request_headers: &HeaderMap,
        fresh: CachedResponse,
        report: &Reporter<'_>,
    ) -> (CachedResponse, bool) {
        match self.store(method, uri, request_headers, &fresh, SystemTime::now()) {
            Some(stored) => {
                report.emit(EventKind::CacheHit { revalidated: true });
                (stored, true)
            }
            None => (fresh, false),
        }
    }

    /// Records a response. After a 304 to a revalidation, returns the cached response to serve.
    pub fn store(
        &self,
        method: &Method,
        uri: &http::Uri,
        request_headers: &HeaderMap,
        response: &CachedResponse,
        now: SystemTime,
    ) -> Option<CachedResponse> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        let key = cache_key(method, uri);
        let request = request_parts(method, uri, request_headers);
        let response_head = response_parts(response.status, &response.headers);
        let mut guard = self.entries.lock();
        if response.status == StatusCode::NOT_MODIFIED {
            let entry = guard.0.get_mut(&key)?;
            return match entry.policy.after_response(&request, &response_head, now) {
                AfterResponse::NotModified(policy, parts) => {
                    entry.policy = policy;
                    entry.response.headers = parts.headers;
                    self.revalidated.fetch_add(1, Ordering::Relaxed);
                    Some(entry.response.clone())
                }
                AfterResponse::Modified(..) => None,
            };
        }
        let options = CacheOptions { shared: false, ..CacheOptions::default() };
        let policy = CachePolicy::new_options(&request, &response_head, now, options);
        let (entries, bytes) = &mut *guard;
        if let Some(old) = entries.pop(&key) {
            *bytes -= old.response.body.len();
        }
        if !policy.is_storable() || response.body.len() > self.config.max_bytes {
            return None;
        }
        *bytes += response.body.len();
        if let Some((_, evicted)) = entries.push(key, Entry { policy, response: response.clone() }) {
            *bytes -= evicted.response.body.len();
        }
        while *bytes > self.config.max_bytes {
            let Some((_, evicted)) = entries.pop_lru() else { break };
            *bytes -= evicted.response.body.len();
        }
        self.stored.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn response(cache_control: &str, etag: Option<&str>, body: &str) -> CachedResponse {
        let mut headers = HeaderMap::new();
        headers.insert("cache-control", cache_control.parse().unwrap());
        headers.insert("date", httpdate::fmt_http_date(SystemTime::now()).parse().unwrap());
        if let Some(etag) = etag {
            headers.insert("etag", etag.parse().unwrap());
        }
        CachedResponse { status: StatusCode::OK, headers, body: Bytes::from(body.to_owned()) }
    }

    #[test]
    fn fresh_responses_are_served_then_revalidated_when_stale() {
        let cache = ResponseCache::new(CacheConfig::default());
        let uri: http::Uri = "http://127.0.0.1/items".parse().unwrap();
        let now = SystemTime::now();
        assert!(matches!(cache.lookup(&Method::GET, &uri, &HeaderMap::new(), now), Lookup::Miss));
        cache.store(&Method::GET, &uri, &HeaderMap::new(), &response("max-age=10", Some("\"v1\""), "a"), now);
        let Lookup::Fresh(hit) = cache.lookup(&Method::GET, &uri, &HeaderMap::new(), now + Duration::from_secs(5))
        else {
            panic!("expected a fresh hit")
        };
        assert_eq!(hit.body, "a");
        let later = now + Duration::from_secs(11);
        let Lookup::Revalidate(headers) = cache.lookup(&Method::GET, &uri, &HeaderMap::new(), later) else {
            panic!("expected a revalidation")
        };
        assert_eq!(headers.get("if-none-match").unwrap(), "\"v1\"");
        let not_modified =
            CachedResponse { status: StatusCode::NOT_MODIFIED, ..response("max-age=10", Some("\"v1\""), "") };
        let served = cache.store(&Method::GET, &uri, &headers, &not_modified, later).unwrap();
        assert_eq!(served.body, "a");
        assert_eq!(cache.stats(), CacheStats { hits: 1, revalidated: 1, stored: 1 });
        assert!(matches!(cache.lookup(&Method::POST, &uri, &HeaderMap::new(), later), Lookup::Miss));
    }

    #[test]
    fn no_store_is_not_kept_and_size_is_bounded() {
        let cache = ResponseCache::new(CacheConfig { max_entries: 10, max_bytes: 10 });
        let now = SystemTime::now();
        let a: http::Uri = "http://h/a".parse().unwrap();
        let b: http::Uri = "http://h/b".parse().unwrap();
        cache.store(&Method::GET, &a, &HeaderMap::new(), &response("no-store", None, "x"), now);
        assert!(matches!(cache.lookup(&Method::GET, &a, &HeaderMap::new(), now), Lookup::Miss));
        cache.store(&Method::GET, &a, &HeaderMap::new(), &response("max-age=60", None, "123456"), now);
        cache.store(&Method::GET, &b, &HeaderMap::new(), &response("max-age=60", None, "789012"), now);
        assert!(matches!(cache.lookup(&Method::GET, &a, &HeaderMap::new(), now), Lookup::Miss), "evicted for size");
        assert!(matches!(cache.lookup(&Method::GET, &b, &HeaderMap::new(), now), Lookup::Fresh(_)));
    }
}
