//! A caller's path made safe to route: read the way the WHATWG URL parser reads an `http` path
//! (`\` is `/`, `%2e` is `.`), `.` segments dropped, and any path that could climb out of a
//! route's base path refused before a route is chosen or a key attached.
//!
//! The proxy attaches a route's API key to what it forwards, so the path it forwards must stay
//! under the route's upstream base path whatever the caller wrote. Three things could move it:
//!
//! - a `..` segment, spelled `..`, `.%2e`, `%2e.` or `%2e%2e` (the URL parser resolves them all
//!   when the upstream URL is built, and an upstream may resolve them again);
//! - a backslash, which the URL parser treats as `/` in `http` URLs, so `..\..\admin` climbs too;
//! - an encoded separator (`%2f`, `%5c`) beside dots, as in `..%2f..%2fadmin`: the proxy would
//!   keep it as one segment, but an upstream that decodes before routing sees `../../admin`.
//!
//! No ordinary client sends any of these: curl, browsers and HTTP libraries resolve dot segments
//! before a request leaves them (curl keeps them only under `--path-as-is`). So a `..` anywhere is
//! refused rather than resolved; a resolved path could still cross from one route into another,
//! and a refusal is the one answer that is right for every route table. `.` segments are
//! harmless and dropped, so `/a/./b/x` is routed as `/a/b/x`. Encoded separators without dots
//! (`projects/group%2Fname`, as GitLab's API uses) pass through untouched.
//!
//! A percent-encoded unreserved character (`%73` for `s`, `%7E` for `~`) names the same resource
//! as the character itself (RFC 3986 §6.2.2.2), and an upstream decodes it; so it is decoded here,
//! and routes and path-prefix limits see one spelling: `/v1/%73earch` cannot slip past a limit
//! on `/v1/search`. The hex digits of every other escape are made upper case (§6.2.2.1), so
//! `group%2fname` is `group%2Fname` to routes, limits and the upstream alike.
//!
//! Other spellings mean different things to different upstreams, so they are forwarded as they
//! came: `group%2Fname` may be one segment (GitLab) or two (an upstream that decodes before
//! routing); `//` is one slash to nginx (`merge_slashes`) and two to others; `;x=1` is a path
//! parameter Tomcat drops. Path-prefix limits are matched against the path as sent and against
//! these lenient readings ([`lenient_readings`]), the most specific limit winning, so
//! `/v1/search%2Fx`, `/v1//search` and `/v1/search;x` are all under a limit on `/v1/search`: no
//! spelling slips past it. A caller who meant another resource is at worst limited by a prefix
//! their upstream would not have matched, which only slows them.

use std::borrow::Cow;

use thiserror::Error;

/// Why a caller's path is refused (answered 400; nothing is sent upstream).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathRefusal {
    /// The path does not start with `/` (an authority-form or asterisk-form target).
    #[error("the path must start with '/'")]
    NotAbsolute,
    /// A `..` segment, in any spelling the URL parser resolves.
    #[error("the path has a '..' segment (perhaps percent-encoded or behind a backslash); send the path resolved")]
    DotDot,
    /// An encoded `/` or `\` next to dots, which an upstream that decodes it reads as `..`.
    #[error("the path hides a dot segment behind an encoded '/' or '\\' (%2F or %5C)")]
    EncodedDotSegment,
    /// A `%` that does not start an escape of two hex digits: decoding the escape after it
    /// could make a new one (`%%32%66` would become `%2f`), so it is refused, not guessed at.
    #[error("the path has a '%' that does not start an escape of two hex digits; send a literal '%' as %25")]
    MalformedEscape,
}

/// The caller's path with `\` read as `/` and `.` segments dropped, or why it is refused.
///
/// The result starts with `/`, holds no `.` or `..` segment in any spelling, no backslash, no
/// percent-encoded unreserved character (decoded) and no lower-case hex in an escape; empty
/// segments (`//`) and every other byte are kept as they came. Normalising it again changes
/// nothing: every `%` of an accepted path starts a whole escape, so decoding never makes one.
pub fn normalise(raw: &str) -> Result<String, PathRefusal> {
    let Some(after_root) = raw.strip_prefix(['/', '\\']) else {
        return Err(PathRefusal::NotAbsolute);
    };
    // No dot, backslash or percent sign: no segment to resolve or refuse, the path as it came.
    if !raw.bytes().any(|byte| matches!(byte, b'.' | b'\\' | b'%')) {
        return Ok(raw.to_owned());
    }
    let bytes = raw.as_bytes();
    let whole_escapes = bytes
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'%')
        .all(|(at, _)| bytes.get(at + 1..at + 3).is_some_and(|digits| digits.iter().all(u8::is_ascii_hexdigit)));
    if !whole_escapes {
        return Err(PathRefusal::MalformedEscape);
    }
    let segments: Vec<&str> = after_root.split(['/', '\\']).collect();
    let mut kept: Vec<Cow<'_, str>> = Vec::with_capacity(segments.len());
    let last = segments.len() - 1;
    for (index, segment) in segments.iter().enumerate() {
        if is_double_dot(segment) {
            return Err(PathRefusal::DotDot);
        }
        if is_single_dot(segment) {
            // `/a/.` means the directory `/a/`: keep the trailing slash as the URL parser does.
            if index == last {
                kept.push(Cow::Borrowed(""));
            }
            continue;
        }
        if hides_dot_segment(segment) {
            return Err(PathRefusal::EncodedDotSegment);
        }
        kept.push(normalise_escapes(segment));
    }
    let mut path = String::with_capacity(raw.len());
    for segment in kept {
        path.push('/');
        path.push_str(&segment);
    }
    if path.is_empty() {
        path.push('/');
    }
    Ok(path)
}

/// `segment` with each percent-encoded unreserved character (RFC 3986 §2.3: letters, digits,
/// `-`, `.`, `_`, `~`) decoded, and the hex digits of every other escape in upper case
/// (§6.2.2.1: `%2f` is `%2F`). Every `%` of the segment starts a whole escape
/// ([`normalise`] refuses any other), so decoding makes no new one.
fn normalise_escapes(segment: &str) -> Cow<'_, str> {
    decode_escapes(segment, |escape| {
        let [b'%', high, low] = escape else { return None };
        let hex = |digit: u8| char::from(digit).to_digit(16);
        let byte = u8::try_from(hex(*high)? * 16 + hex(*low)?).ok()?;
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            Some(Escaped::Char(byte.into()))
        } else {
            (high.is_ascii_lowercase() || low.is_ascii_lowercase()).then_some(Escaped::UpperCase(byte))
        }
    })
}

/// The other readings of `path` (normalised) a path-prefix limit is matched against, so no
/// spelling of a limited path slips past its limit whatever the upstream makes of it: with runs
/// of `/` merged into one (nginx's `merge_slashes`) and each segment's `;` parameters dropped
/// (Tomcat's path parameters: `search;x=1` is `search`); then also with each encoded separator
/// (`%2F`, `%5C`) read as `/` (an upstream that decodes before routing). Each reading is given
/// once, and only when it differs from `path` and the one before it: none for most paths, with
/// no allocation.
pub fn lenient_readings(path: &str) -> Vec<String> {
    // Most paths have no `%`, `;` or `//`: one pass over the bytes, and no other reading.
    let mut previous = 0;
    let plain = path.bytes().all(|byte| {
        let read_as_is = !matches!((previous, byte), (_, b'%' | b';') | (b'/', b'/'));
        previous = byte;
        read_as_is
    });
    if plain {
        return Vec::new();
    }
    let mut readings = Vec::with_capacity(2);
    let merged = merge_segments(path);
    let separated = match decode_escapes(&merged, encoded_separator) {
        Cow::Owned(separated) => Some(merge_segments(&separated).into_owned()),
        Cow::Borrowed(_) => None,
    };
    if let Cow::Owned(merged) = merged {
        readings.push(merged);
    }
    readings.extend(separated);
    readings
}

/// `path` with runs of `/` merged into one and each segment's `;` parameters dropped; borrowed
/// when it has neither.
fn merge_segments(path: &str) -> Cow<'_, str> {
    if !path.contains("//") && !path.contains(';') {
        return Cow::Borrowed(path);
    }
    let mut merged = String::with_capacity(path.len());
    let segments = path.split('/').map(|segment| segment.split_once(';').map_or(segment, |(name, _)| name));
    for segment in segments.filter(|segment| !segment.is_empty()) {
        merged.push('/');
        merged.push_str(segment);
    }
    if merged.is_empty() || path.ends_with('/') {
        merged.push('/');
    }
    Cow::Owned(merged)
}

/// What an escape is rewritten as.
enum Escaped {
    /// The character it encodes.
    Char(char),
    /// The same escape of this byte, its hex digits in upper case.
    UpperCase(u8),
}

/// `text` with each three-byte escape that `decode` rewrites replaced; every other `%` is kept
/// as it came. Borrowed when nothing is rewritten.
fn decode_escapes(text: &str, decode: impl Fn(&[u8]) -> Option<Escaped>) -> Cow<'_, str> {
    if !text.as_bytes().windows(3).any(|escape| decode(escape).is_some()) {
        return Cow::Borrowed(text);
    }
    let mut decoded = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        decoded.push_str(&rest[..at]);
        match rest.as_bytes().get(at..at + 3).and_then(&decode) {
            Some(Escaped::Char(character)) => decoded.push(character),
            Some(Escaped::UpperCase(byte)) => {
                let hex = |digit: u8| char::from(b"0123456789ABCDEF"[usize::from(digit & 0xF)]);
                decoded.extend(['%', hex(byte >> 4), hex(byte)]);
            }
            None => {
                decoded.push('%');
                rest = &rest[at + 1..];
                continue;
            }
        }
        rest = &rest[at + 3..];
    }
    decoded.push_str(rest);
    Cow::Owned(decoded)
}

/// Whether `segment` is `.` as the URL parser reads it: `.` or `%2e`, any case.
fn is_single_dot(segment: &str) -> bool {
    segment == "." || segment.eq_ignore_ascii_case("%2e")
}

/// Whether `segment` is `..` as the URL parser reads it: `..`, `.%2e`, `%2e.` or `%2e%2e`.
fn is_double_dot(segment: &str) -> bool {
    matches!(segment.len(), 2 | 4 | 6) && {
        let lower = segment.to_ascii_lowercase();
        matches!(lower.as_str(), ".." | ".%2e" | "%2e." | "%2e%2e")
    }
}

/// Whether a segment holding `%2f` or `%5c` splits, once those are decoded, into a dot segment.
fn hides_dot_segment(segment: &str) -> bool {
    match decode_escapes(segment, encoded_separator) {
        Cow::Borrowed(_) => false,
        Cow::Owned(split) => split.split('/').any(|piece| is_single_dot(piece) || is_double_dot(piece)),
    }
}

/// An encoded separator, `%2F` or `%5C` in either case, read as the `/` an upstream that
/// decodes before routing sees.
fn encoded_separator(escape: &[u8]) -> Option<Escaped> {
    matches!(escape, [b'%', b'2', b'f' | b'F'] | [b'%', b'5', b'c' | b'C']).then_some(Escaped::Char('/'))
}

/// Whether `path` lies under `base` on whole segments (`/v1` holds `/v1` and `/v1/x`, not
/// `/v10`). Both are paths of parsed URLs.
pub fn is_under(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    match path.strip_prefix(base) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_dot_dot_is_refused() {
        for path in [
            "/c/../../admin",
            "/c/%2e%2e/%2e%2e/admin/users",
            "/c/%2E%2e/x",
            "/c/.%2e/x",
            "/c/%2e./x",
            "/c/..",
            "/c/..\\..\\admin",
            "/c\\..\\admin",
            "/c/x/../y",
            "/..",
        ] {
            assert_eq!(normalise(path), Err(PathRefusal::DotDot), "{path}");
        }
    }

    #[test]
    fn dots_behind_encoded_separators_are_refused() {
        for path in ["/c/..%2f..%2fadmin", "/c/..%2F..%2Fadmin", "/c/%2e%2e%5cadmin", "/c/x%2f.%2fy", "/c/a%2F.."] {
            assert_eq!(normalise(path), Err(PathRefusal::EncodedDotSegment), "{path}");
        }
    }

    #[test]
    fn single_dots_and_backslashes_are_resolved_like_the_url_parser() {
        assert_eq!(normalise("/a/./b/x").unwrap(), "/a/b/x");
        assert_eq!(normalise("/a/%2E/b").unwrap(), "/a/b");
        assert_eq!(normalise("/a/.").unwrap(), "/a/");
        assert_eq!(normalise("/a\\b").unwrap(), "/a/b");
        assert_eq!(normalise("/").unwrap(), "/");
        assert_eq!(normalise("/.").unwrap(), "/");
        for (path, url) in [("/a/./b/x", "http://h/a/b/x"), ("/a/.", "http://h/a/"), ("/a\\b", "http://h/a/b")] {
            let parsed = url::Url::parse(&format!("http://h{path}")).unwrap();
            assert_eq!(parsed.as_str(), url, "the URL parser agrees on {path}");
        }
    }

    #[test]
    fn ordinary_paths_pass_untouched() {
        for path in [
            "/api/v4/projects/group%2Fname/issues",
            "/c//x",
            "/c/...",
            "/c/.well-known/x",
            "/c/a..b",
            "/c/caf%C3%A9",
            "/c/x/",
        ] {
            assert_eq!(normalise(path).unwrap(), path, "{path}");
        }
    }

    #[test]
    fn encoded_unreserved_characters_are_decoded_and_other_escapes_upper_cased() {
        assert_eq!(normalise("/v1/%73earch").unwrap(), "/v1/search");
        assert_eq!(normalise("/v1/%53EARCH%7e%7E%2D%5f%30").unwrap(), "/v1/SEARCH~~-_0");
        assert_eq!(normalise("/c/%2e%2e%2e").unwrap(), "/c/...");
        assert_eq!(normalise("/c/a%2eb").unwrap(), "/c/a.b");
        for kept in ["/c/group%2Fname", "/c/a%20b", "/c/caf%C3%A9", "/c/%2541", "/c/100%25"] {
            assert_eq!(normalise(kept).unwrap(), kept, "{kept}");
        }
        assert_eq!(normalise("/c/group%2fname").unwrap(), "/c/group%2Fname");
        assert_eq!(normalise("/c/caf%c3%A9/%2f%73").unwrap(), "/c/caf%C3%A9/%2Fs");
        // Decoded once: a second pass changes nothing (`%2541` is `%41` spelled with `%25`).
        for path in ["/v1/%73earch", "/c/%2541", "/c/group%2fname", "/c/%25%2573"] {
            let once = normalise(path).unwrap();
            assert_eq!(normalise(&once).unwrap(), once, "{path}");
        }
    }

    #[test]
    fn a_percent_that_starts_no_whole_escape_is_refused() {
        // Decoding `%32` and `%66` after a stray `%` would make `%2f`, and `%2e%2e` likewise.
        for path in ["/c/..%%32%66..%%32%66admin", "/c/%%32%65%%32%65/admin", "/c/100%", "/c/%7", "/c/%zz", "/c/%%73"] {
            assert_eq!(normalise(path), Err(PathRefusal::MalformedEscape), "{path}");
        }
    }

    #[test]
    fn a_plain_path_has_no_other_reading() {
        for path in ["/v1/search/x", "/", "/v1/search/", "/a.b/c-d~e"] {
            assert!(lenient_readings(path).is_empty(), "{path}");
        }
        assert!(lenient_readings("/c/caf%C3%A9").is_empty(), "no separator, no merge: nothing else");
    }

    #[test]
    fn limits_read_slashes_merged_parameters_dropped_and_separators_decoded() {
        assert_eq!(lenient_readings("/v1/search%2Fx"), ["/v1/search/x"]);
        assert_eq!(lenient_readings("/v1%2Fsearch%5Cx%5C"), ["/v1/search/x/"]);
        assert_eq!(lenient_readings("/c/100%%2F%25"), ["/c/100%/%25"]);
        assert_eq!(lenient_readings("/v1//search"), ["/v1/search"]);
        assert_eq!(lenient_readings("/v1/search;jsessionid=1/x"), ["/v1/search/x"]);
        assert_eq!(lenient_readings("/v1/;x/search;"), ["/v1/search"]);
        assert_eq!(lenient_readings("//"), ["/"]);
        assert_eq!(lenient_readings("/;x"), ["/"]);
        // A limit spelled with `%2F` (GitLab's `group%2Fname`) meets the merged reading; one on
        // the decoded path meets the last.
        assert_eq!(lenient_readings("/p//group%2Fname/"), ["/p/group%2Fname/", "/p/group/name/"]);
        assert_eq!(lenient_readings("//v1/%2Fsearch//"), ["/v1/%2Fsearch/", "/v1/search/"]);
        for path in ["/v1//search", "/v1/search;a=b", "/v1/%2F/search%5C;x/y", "/v1/search%2Fx"] {
            let readings = lenient_readings(path);
            let last = readings.last().expect("another reading");
            assert!(is_under(last, "/v1/search"), "{path}: {readings:?}");
            assert!(lenient_readings(last).is_empty(), "{path} is read once: {readings:?}");
        }
    }

    proptest::proptest! {
        /// Whatever the path, its last lenient reading has nothing left to read otherwise: no
        /// `//`, no `;`, no encoded separator.
        #[test]
        fn the_last_reading_is_read_once(path in "/[a-z/;%2fF5cC.=é]{0,16}") {
            let readings = lenient_readings(&path);
            if let Some(last) = readings.last() {
                proptest::prop_assert!(lenient_readings(last).is_empty(), "{} -> {:?}", path, readings);
                proptest::prop_assert!(!last.contains("//") && !last.contains(';'), "{} -> {:?}", path, readings);
            }
        }
    }

    #[test]
    fn targets_that_are_not_paths_are_refused() {
        assert_eq!(normalise("*"), Err(PathRefusal::NotAbsolute));
        assert_eq!(normalise(""), Err(PathRefusal::NotAbsolute));
    }

    #[test]
    fn under_means_on_whole_segments() {
        assert!(is_under("/v1", "/v1"));
        assert!(is_under("/v1/x", "/v1/"));
        assert!(is_under("/anything", "/"));
        assert!(!is_under("/v10", "/v1"));
        assert!(!is_under("/admin", "/v1"));
    }
}
