//! Access logs in the common or combined format (nginx's and Apache's default):
//!
//! ```text
//! 127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://example.com/start.html" "Mozilla/4.08"
//! ```
//!
//! Read from each line: the time between `[` and `]` (`%d/%b/%Y:%H:%M:%S %z`, whole seconds)
//! and the method and target of the quoted request line. The target is a path, joined to the
//! base URL (the log does not say which host was asked), or an absolute URL (a proxy's log).
//! Everything after the request line (status, size, referer, agent, extra fields) is ignored.
//! A line whose request is `"-"` or garbage (a TLS handshake sent to a plain port) is a problem.

use http::Method;

use super::{Gathered, Place, RecordingError, clip, url_of};

/// Whether `line` has the shape of a common-format line: `… [date] "request" …`.
pub(super) fn looks_like(line: &str) -> bool {
    line.find(" [").is_some_and(|open| line[open..].contains("] \""))
}

/// Reads every line.
pub(super) fn parse(bytes: &[u8], base: &url::Url) -> Result<Gathered, RecordingError> {
    let mut gathered = Gathered::default();
    for (index, line) in bytes.split(|&byte| byte == b'\n').enumerate() {
        let line = String::from_utf8_lossy(line);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match read_line(line, base, &mut gathered) {
            Ok((at, method, url)) => gathered.keep(at, method, url)?,
            Err(problem) => gathered.problems.add(Place::Line(index + 1), problem),
        }
    }
    Ok(gathered)
}

fn read_line(line: &str, base: &url::Url, gathered: &mut Gathered) -> Result<(i128, Method, url::Url), String> {
    let (Some(open), Some(close)) = (line.find('['), line.find(']')) else {
        return Err("no [date] (not the common or combined log format)".to_owned());
    };
    if close < open {
        return Err("no [date] (not the common or combined log format)".to_owned());
    }
    let date = &line[open + 1..close];
    let at = jiff::fmt::strtime::parse("%d/%b/%Y:%H:%M:%S %z", date)
        .and_then(|time| time.to_timestamp())
        .map_err(|_| format!("'{}' is not a date such as 10/Oct/2000:13:55:36 -0700", clip(date, 64)))?
        .as_nanosecond();
    let request = quoted(&line[close + 1..]).ok_or("no quoted request line after the date")?;
    let mut parts = request.split(' ').filter(|part| !part.is_empty());
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(format!("request \"{}\" is not METHOD TARGET PROTOCOL", clip(request, 64)));
    };
    let method = Method::from_bytes(method.as_bytes())
        .ok()
        .filter(|_| method.bytes().all(|byte| byte.is_ascii_uppercase()))
        .ok_or_else(|| format!("request \"{}\" does not start with an HTTP method", clip(request, 64)))?;
    let url = url_of(target, base, gathered).map_err(|problem| format!("target {problem}"))?;
    Ok((at, method, url))
}

/// The text of the first quoted field of `rest`, its escapes (`\"`, `\\`, `\x22`) left as
/// written; `None` when there is no closed quote.
fn quoted(rest: &str) -> Option<&str> {
    let start = rest.find('"')? + 1;
    let bytes = rest.as_bytes();
    let mut at = start;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return Some(&rest[start..at]),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Format;
    use super::*;

    fn base() -> url::Url {
        "https://api.example.com".parse().unwrap()
    }

    #[test]
    fn common_and_combined_lines_in_any_offset_give_offsets_and_paths_on_the_base() {
        let text = concat!(
            "10.0.0.1 - frank [10/Oct/2000:13:55:37 -0700] \"GET /apache_pb.gif?x=1 HTTP/1.0\" 200 2326\n",
            "10.0.0.2 - - [10/Oct/2000:20:55:36 +0000] \"POST /items HTTP/1.1\" 429 0 \"-\" \"curl/8.0\" extra\n",
            "10.0.0.3 - - [10/oct/2000:22:55:38 +0200] \"GET http://other.example/x HTTP/1.1\" 200 1 \"-\" \"-\"\n",
        );
        let parsed = parse(text.as_bytes(), &base()).unwrap().finish(Format::AccessLog).unwrap();
        let seen: Vec<(Duration, &str, &str)> =
            parsed.requests.iter().map(|r| (r.offset, r.method.as_str(), r.url.as_str())).collect();
        assert_eq!(
            seen,
            [
                (Duration::ZERO, "POST", "https://api.example.com/items"),
                (Duration::from_secs(1), "GET", "https://api.example.com/apache_pb.gif?x=1"),
                (Duration::from_secs(2), "GET", "http://other.example/x"),
            ]
        );
        assert_eq!((parsed.problems.count, parsed.joined_to_base), (0, 2));
    }

    #[test]
    fn lines_nginx_writes_for_garbage_are_problems_not_requests() {
        let text = concat!(
            "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1\n",
            "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"-\" 400 0 \"-\" \"-\"\n",
            "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"\\x16\\x03\\x01\\x02\\x00\\x01\" 400 157 \"-\" \"-\"\n",
            "1.2.3.4 - - [yesterday] \"GET / HTTP/1.1\" 200 1\n",
            "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\n",
            "just some words\n",
            "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"get / HTTP/1.1\" 200 1\n",
        );
        let parsed = parse(text.as_bytes(), &base()).unwrap().finish(Format::AccessLog).unwrap();
        assert_eq!(parsed.requests.len(), 1);
        assert_eq!(parsed.problems.count, 6, "{:?}", parsed.problems);
        let first = &parsed.problems.first;
        assert_eq!(first[0], "line 2: request \"-\" is not METHOD TARGET PROTOCOL");
        assert!(first[1].starts_with("line 3: request \"\\\\x16"), "{first:?}");
        assert_eq!(first[2], "line 4: 'yesterday' is not a date such as 10/Oct/2000:13:55:36 -0700");
        assert_eq!(first[3], "line 5: no quoted request line after the date");
        assert_eq!(first[4], "line 6: no [date] (not the common or combined log format)");
        assert!(parsed.problems.to_string().ends_with("and 1 more"));
    }

    #[test]
    fn a_quoted_field_ends_at_the_first_unescaped_quote() {
        assert_eq!(quoted(r#" "GET /a\"b HTTP/1.1" 200"#), Some(r#"GET /a\"b HTTP/1.1"#));
        assert_eq!(quoted(r#" "GET /a\\" 200"#), Some(r#"GET /a\\"#));
        assert_eq!(quoted(r#" "GET /a\"#), None);
        assert_eq!(quoted(" no quote"), None);
    }
}
