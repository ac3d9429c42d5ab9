//! URLs as messages show them: the user-info's password (or a user name standing alone, often a
//! token) as `***`, and the values of query (and fragment) parameters whose names look like
//! credentials as `***`.
//!
//! Every message, progress line or error that echoes a URL a user gave goes through
//! [`redact_url`]: a URL on the command line may carry a key, and a message may end up in a log,
//! a terminal recording or an issue.

use std::borrow::Cow;

use url::Url;

/// What a redacted part shows instead of its value.
const MASK: &str = "***";

/// Parts of query parameter names (compared without case, `-`, `_` or `.`) that mark a credential:
/// `api_key`, `access-token`, `X-Amz-Signature`, `client_secret`, `appid`, `sig`, ...
const SECRET_NAME_PARTS: [&str; 12] =
    ["key", "token", "secret", "pass", "pwd", "sig", "auth", "credential", "session", "cookie", "appid", "jwt"];

/// Query parameter names that are credentials whole (too short to match as parts).
const SECRET_NAMES: [&str; 2] = ["code", "hash"];

/// `url` as a message may show it: `http://alice:***@host/x?api_key=***&page=2`.
pub fn redact_url(url: &Url) -> String {
    redacted(url).map_or_else(|| url.as_str().to_owned(), |url| url.as_str().to_owned())
}

/// The redacted copy of `url`, or `None` when it has nothing to hide.
fn redacted(url: &Url) -> Option<Url> {
    let hides_user = url.password().is_some() || !url.username().is_empty();
    let query = url.query().map(redact_query).filter(|query| matches!(query, Cow::Owned(_)));
    // OAuth's implicit flow hands tokens over in the fragment: `#access_token=…`.
    let fragment = url.fragment().map(redact_query).filter(|fragment| matches!(fragment, Cow::Owned(_)));
    if !hides_user && query.is_none() && fragment.is_none() {
        return None;
    }
    let mut copy = url.clone();
    if url.password().is_some() {
        // Fails only for URLs that cannot have user-info (`data:`, `mailto:`), which have none.
        let _ = copy.set_password(Some(MASK));
    } else if !url.username().is_empty() {
        let _ = copy.set_username(MASK);
    }
    if let Some(query) = query {
        copy.set_query(Some(&query));
    }
    if let Some(fragment) = fragment {
        copy.set_fragment(Some(&fragment));
    }
    Some(copy)
}

/// `a=1&api_key=***`: each `name=value` whose name looks secret with its value masked, the rest
/// as written (borrowed when nothing changed).
fn redact_query(query: &str) -> Cow<'_, str> {
    let mut changed = false;
    let pairs: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !value.is_empty() && value != MASK && looks_secret(name) => {
                changed = true;
                Cow::Owned(format!("{name}={MASK}"))
            }
            _ => Cow::Borrowed(pair),
        })
        .collect();
    if changed { Cow::Owned(pairs.join("&")) } else { Cow::Borrowed(query) }
}

/// Whether a query parameter's name (percent-encoded or not) looks like it names a credential.
fn looks_secret(name: &str) -> bool {
    let decoded = url::form_urlencoded::parse(name.as_bytes()).next().map(|(name, _)| name).unwrap_or_default();
    let folded: String =
        decoded.chars().filter(|c| !matches!(c, '-' | '_' | '.' | '+' | ' ')).flat_map(char::to_lowercase).collect();
    SECRET_NAMES.contains(&folded.as_str()) || SECRET_NAME_PARTS.iter().any(|part| folded.contains(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        redact_url(&Url::parse(text).unwrap())
    }

    #[test]
    fn passwords_and_lone_user_names_are_masked() {
        assert_eq!(shown("http://alice:PW@host/x"), "http://alice:***@host/x");
        assert_eq!(shown("https://sk_live_123@api.example.com/v1"), "https://***@api.example.com/v1");
        assert_eq!(shown("http://alice:p%40ss@h:8080/a?b=1#f"), "http://alice:***@h:8080/a?b=1#f");
    }

    #[test]
    fn secret_looking_query_values_are_masked_and_the_rest_kept_as_written() {
        let cases = [
            ("http://h/x?api_key=K&page=2", "http://h/x?api_key=***&page=2"),
            ("http://h/x?access_token=T", "http://h/x?access_token=***"),
            ("http://h/x?X-Amz-Signature=abc&X-Amz-Date=1", "http://h/x?X-Amz-Signature=***&X-Amz-Date=1"),
            ("http://h/x?appid=1&q=a%20b", "http://h/x?appid=***&q=a%20b"),
            (
                "http://h/x?sig=s&private_key=p&client_secret=c&password=w",
                "http://h/x?sig=***&private_key=***&client_secret=***&password=***",
            ),
            ("http://h/x?api%5Fkey=K", "http://h/x?api%5Fkey=***"),
            ("http://h/x?code=abc&state=s", "http://h/x?code=***&state=s"),
            ("http://h/cb#access_token=T&expires_in=3600", "http://h/cb#access_token=***&expires_in=3600"),
        ];
        for (given, expected) in cases {
            assert_eq!(shown(given), expected, "{given}");
        }
    }

    #[test]
    fn a_url_with_nothing_to_hide_is_shown_as_it_is() {
        for text in ["http://h/x", "http://h/x?page=2&sort=asc", "http://h/x?key=", "http://[::1]:8/x?"] {
            assert_eq!(shown(text), Url::parse(text).unwrap().as_str(), "{text}");
        }
    }
}
