//! Following 3xx answers the same way on every wire: within the origin by default, to another
//! origin only where the host's policy allows it, and never with the first host's headers.

use std::fmt;
use std::str::FromStr;

use http::header::{AUTHORIZATION, COOKIE, LOCATION, PROXY_AUTHORIZATION};
use http::{HeaderMap, Method, StatusCode};
use serde::{Deserialize, Serialize};
use url::Url;

/// The most redirects one attempt follows before it returns the last 3xx as its answer.
pub const MAX_REDIRECTS: usize = 10;

/// Which redirects a host's requests follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RedirectPolicy {
    /// None: a 3xx is the answer.
    None,
    /// Within the same scheme, host and port (the default): the host's headers stay with it.
    #[default]
    SameOrigin,
    /// Any http(s) origin too. On the way to another origin the request carries only the
    /// caller's own headers, without `Authorization`, `Cookie` and `Proxy-Authorization`,
    /// plus what the client holds for that other host; the first host's headers and secrets stay.
    AnyOrigin,
}

impl fmt::Display for RedirectPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::SameOrigin => "same-origin",
            Self::AnyOrigin => "any-origin",
        })
    }
}

impl FromStr for RedirectPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "none" => Ok(Self::None),
            "same-origin" => Ok(Self::SameOrigin),
            "any-origin" => Ok(Self::AnyOrigin),
            other => Err(format!("'{other}' is not a redirect policy: use none, same-origin or any-origin")),
        }
    }
}

/// Where a followed redirect goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hop {
    pub url: Url,
    pub method: Method,
    /// Whether the body goes along (307 and 308 keep it; the others turn into a GET without one).
    pub keeps_body: bool,
    /// Whether `url` is of another origin than the request that was answered.
    pub cross_origin: bool,
}

/// The next request for a `status` answer with `headers` to `method url`, when `policy`
/// follows it; `None` when the answer is final (not a redirect, no usable `Location`, or not
/// allowed).
pub(crate) fn next_hop(
    policy: RedirectPolicy,
    url: &Url,
    method: &Method,
    status: StatusCode,
    headers: &HeaderMap,
) -> Option<Hop> {
    if policy == RedirectPolicy::None {
        return None;
    }
    let (method, keeps_body) = match status {
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => (method.clone(), true),
        StatusCode::SEE_OTHER if method != Method::HEAD => (Method::GET, false),
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND if method == Method::POST => (Method::GET, false),
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND | StatusCode::SEE_OTHER => (method.clone(), true),
        _ => return None,
    };
    let location = headers.get(LOCATION)?.to_str().ok()?;
    let next = url.join(location).ok()?;
    if !matches!(next.scheme(), "http" | "https") || next.host_str().is_none() {
        return None;
    }
    let cross_origin = next.origin() != url.origin();
    if cross_origin && policy != RedirectPolicy::AnyOrigin {
        return None;
    }
    Some(Hop { url: next, method, keeps_body, cross_origin })
}

/// The caller's own headers as they may travel to another origin: without credentials.
pub(crate) fn strip_credentials(headers: &HeaderMap) -> HeaderMap {
    let mut kept = headers.clone();
    for name in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION] {
        kept.remove(name);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(location: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(LOCATION, location.parse().unwrap());
        headers
    }

    fn url(text: &str) -> Url {
        text.parse().unwrap()
    }

    #[test]
    fn same_origin_follows_relative_and_absolute_locations_of_its_origin_only() {
        let from = url("http://api.example:8080/v1/items?page=2");
        let hop =
            next_hop(RedirectPolicy::SameOrigin, &from, &Method::GET, StatusCode::FOUND, &answer("/v2/items")).unwrap();
        assert_eq!(hop.url.as_str(), "http://api.example:8080/v2/items");
        assert!(!hop.cross_origin);
        for elsewhere in ["http://api.example:8081/", "https://api.example:8080/", "http://evil.example:8080/"] {
            let stopped =
                next_hop(RedirectPolicy::SameOrigin, &from, &Method::GET, StatusCode::FOUND, &answer(elsewhere));
            assert_eq!(stopped, None, "{elsewhere}");
            let followed =
                next_hop(RedirectPolicy::AnyOrigin, &from, &Method::GET, StatusCode::FOUND, &answer(elsewhere));
            assert!(followed.unwrap().cross_origin, "{elsewhere}");
        }
        assert_eq!(next_hop(RedirectPolicy::None, &from, &Method::GET, StatusCode::FOUND, &answer("/x")), None);
    }

    #[test]
    fn methods_change_as_browsers_and_reqwest_change_them() {
        let from = url("http://a.example/form");
        let hop = |method: Method, status: StatusCode| {
            let hop = next_hop(RedirectPolicy::SameOrigin, &from, &method, status, &answer("/next")).unwrap();
            (hop.method, hop.keeps_body)
        };
        assert_eq!(hop(Method::POST, StatusCode::SEE_OTHER), (Method::GET, false));
        assert_eq!(hop(Method::POST, StatusCode::FOUND), (Method::GET, false));
        assert_eq!(hop(Method::POST, StatusCode::MOVED_PERMANENTLY), (Method::GET, false));
        assert_eq!(hop(Method::POST, StatusCode::TEMPORARY_REDIRECT), (Method::POST, true));
        assert_eq!(hop(Method::PUT, StatusCode::PERMANENT_REDIRECT), (Method::PUT, true));
        assert_eq!(hop(Method::HEAD, StatusCode::SEE_OTHER), (Method::HEAD, true));
    }

    #[test]
    fn unusable_locations_and_other_statuses_are_final() {
        let from = url("http://a.example/");
        for (status, location) in [
            (StatusCode::NOT_MODIFIED, "/x"),
            (StatusCode::MULTIPLE_CHOICES, "/x"),
            (StatusCode::FOUND, "ftp://a.example/x"),
            (StatusCode::FOUND, "mailto:me@a.example"),
            (StatusCode::FOUND, "http://[::1"),
        ] {
            assert_eq!(next_hop(RedirectPolicy::AnyOrigin, &from, &Method::GET, status, &answer(location)), None);
        }
        assert_eq!(
            next_hop(RedirectPolicy::AnyOrigin, &from, &Method::GET, StatusCode::FOUND, &HeaderMap::new()),
            None
        );
    }

    #[test]
    fn credentials_never_travel_to_another_origin() {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, "Bearer t".parse().unwrap());
        headers.insert(COOKIE, "s=1".parse().unwrap());
        headers.insert("accept", "application/json".parse().unwrap());
        let kept = strip_credentials(&headers);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept["accept"], "application/json");
    }

    #[test]
    fn policies_parse_and_print_alike() {
        for policy in [RedirectPolicy::None, RedirectPolicy::SameOrigin, RedirectPolicy::AnyOrigin] {
            assert_eq!(policy.to_string().parse::<RedirectPolicy>(), Ok(policy));
        }
        assert!("always".parse::<RedirectPolicy>().unwrap_err().contains("same-origin"));
    }
}
