//! JSON lines: `{"t": SECONDS, "method": "GET", "url": "https://…"}`, one request a line.
//!
//! `t` is a number of seconds from any origin (the epoch, or the recording's start: only the
//! differences count; read to the microsecond); `method` is optional (GET) and read in any case (`post` is POST); `url`
//! is absolute, or a path joined to the base URL. Other fields are ignored, blank lines and lines starting with `#` skipped.

use http::Method;
use serde::Deserialize;

use super::{Gathered, Place, RecordingError, clip, url_of};

/// The largest `t` taken, in seconds either side of zero: past the year 5000 as epoch seconds.
const MAX_T: f64 = 1e11;

#[derive(Deserialize)]
#[serde(expecting = "an object {\"t\": SECONDS, \"method\": \"GET\", \"url\": \"https://…\"}")]
struct Line {
    t: f64,
    method: Option<String>,
    url: String,
}

/// Reads every line.
pub(super) fn parse(bytes: &[u8], base: &url::Url) -> Result<Gathered, RecordingError> {
    let mut gathered = Gathered::default();
    for (index, line) in bytes.split(|&byte| byte == b'\n').enumerate() {
        let place = Place::Line(index + 1);
        let line = String::from_utf8_lossy(line);
        let line = line.trim().trim_start_matches('\u{feff}');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match read_line(line, base, &mut gathered) {
            Ok((at, method, url)) => gathered.keep(at, method, url)?,
            Err(problem) => gathered.problems.add(place, problem),
        }
    }
    Ok(gathered)
}

fn read_line(text: &str, base: &url::Url, gathered: &mut Gathered) -> Result<(i128, Method, url::Url), String> {
    let line: Line = serde_json::from_str(text).map_err(|err| match err.classify() {
        serde_json::error::Category::Data => without_position(&err),
        _ => format!("not a JSON object ({})", without_position(&err)),
    })?;
    if !line.t.is_finite() || line.t.abs() > MAX_T {
        return Err(format!("t {:e} is not a number of seconds (at most {MAX_T:e} either side of zero)", line.t));
    }
    let method = match &line.method {
        Some(text) => Method::from_bytes(text.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("method '{}' is not an HTTP method", clip(text, 32)))?,
        None => Method::GET,
    };
    let url = url_of(line.url.trim(), base, gathered).map_err(|problem| format!("url {problem}"))?;
    // To the microsecond: exact for epoch seconds of this century (an f64 holds 15 digits).
    Ok(((line.t * 1e6).round() as i128 * 1000, method, url))
}

/// serde_json's message without its "at line 1 column 9" (the line is named by the caller).
fn without_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) => text[..cut].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Format;
    use super::*;

    fn base() -> url::Url {
        "http://127.0.0.1:8787".parse().unwrap()
    }

    #[test]
    fn lines_give_offsets_from_the_smallest_t_and_default_to_get() {
        let text = "# recorded by hand\n\
                    {\"t\": 1700000001.25, \"method\": \"post\", \"url\": \"https://api.example.com/b\", \"status\": 429}\n\
                    \n\
                    {\"t\": 1700000000.5, \"url\": \"/items?page=2\"}\n";
        let parsed = parse(text.as_bytes(), &base()).unwrap().finish(Format::Jsonl).unwrap();
        let seen: Vec<(Duration, &str, &str)> =
            parsed.requests.iter().map(|r| (r.offset, r.method.as_str(), r.url.as_str())).collect();
        assert_eq!(
            seen,
            [
                (Duration::ZERO, "GET", "http://127.0.0.1:8787/items?page=2"),
                (Duration::from_millis(750), "POST", "https://api.example.com/b"),
            ]
        );
        assert_eq!(parsed.joined_to_base, 1);
    }

    #[test]
    fn bad_lines_are_named_without_the_parsers_column() {
        let text = "{\"t\": 0, \"url\": \"http://h/\"}\n\
                    {\"t\": \"soon\", \"url\": \"http://h/\"}\n\
                    {\"url\": \"http://h/\"}\n\
                    {\"t\": 1e300, \"url\": \"http://h/\"}\n\
                    {\"t\": 1, \"url\": \"items\"}\n\
                    not json\n";
        let parsed = parse(text.as_bytes(), &base()).unwrap().finish(Format::Jsonl).unwrap();
        assert_eq!(parsed.requests.len(), 1);
        assert_eq!(parsed.problems.count, 5);
        let first = &parsed.problems.first;
        assert_eq!(first[0], "line 2: invalid type: string \"soon\", expected f64");
        assert_eq!(first[1], "line 3: missing field `t`");
        assert!(first[2].starts_with("line 4: t 1e300 is not a number of seconds"), "{first:?}");
        assert_eq!(first[3], "line 5: url 'items' is neither a URL nor a path starting with /");
        assert_eq!(first[4], "line 6: not a JSON object (expected ident)");
    }
}
