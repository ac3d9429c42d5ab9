//! HAR 1.2 (what Chrome's and Firefox's developer tools save): each of `log.entries` gives its
//! `startedDateTime`, `request.method` and `request.url`; everything else is ignored unread.
//!
//! The document streams through serde: fields other than those three (`pages`, `response` with
//! its bodies, `timings`, `cache`, `_initiator`, `_webSocketMessages`, …) are skipped without
//! being kept. An entry that is not an object, or lacks or garbles one of the three, is a
//! problem of its own (counted, the first few named); only a document that is not JSON, or
//! has no `log.entries` array, is refused whole.

use std::fmt;

use http::Method;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{Gathered, Place, RecordingError, clip};

#[derive(Deserialize)]
struct Document {
    log: Log,
}

#[derive(Deserialize)]
struct Log {
    entries: Vec<Slot>,
}

/// One of `log.entries`: the three fields read, or not an object at all.
enum Slot {
    Entry(Box<Entry>),
    NotAnObject(&'static str),
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "startedDateTime")]
    started: Option<Value>,
    request: Option<Value>,
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SlotVisitor)
    }
}

struct SlotVisitor;

impl<'de> Visitor<'de> for SlotVisitor {
    type Value = Slot;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a HAR entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Slot, A::Error> {
        Entry::deserialize(de::value::MapAccessDeserializer::new(map)).map(|entry| Slot::Entry(Box::new(entry)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Slot, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Slot::NotAnObject("an array"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Slot, E> {
        Ok(Slot::NotAnObject("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Slot, E> {
        Ok(Slot::NotAnObject("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Slot, E> {
        Ok(Slot::NotAnObject("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Slot, E> {
        Ok(Slot::NotAnObject("a number"))
    }

    fn visit_str<E>(self, _: &str) -> Result<Slot, E> {
        Ok(Slot::NotAnObject("a string"))
    }

    fn visit_unit<E>(self) -> Result<Slot, E> {
        Ok(Slot::NotAnObject("null"))
    }
}

/// Reads every entry of a HAR document.
pub(super) fn parse(bytes: &[u8]) -> Result<Gathered, RecordingError> {
    let document: Document = serde_json::from_slice(bytes).map_err(|err| {
        let hint = if super::Format::detect(bytes) == Some(super::Format::Jsonl) {
            " (its first line is a whole JSON object: if this is JSON lines, give --format jsonl)"
        } else {
            ""
        };
        RecordingError::Har(format!("{err}{hint}"))
    })?;
    let mut gathered = Gathered::default();
    for (index, slot) in document.log.entries.into_iter().enumerate() {
        let place = Place::Entry(index + 1);
        let entry = match slot {
            Slot::Entry(entry) => entry,
            Slot::NotAnObject(what) => {
                gathered.problems.add(place, format_args!("is {what}, not an object"));
                continue;
            }
        };
        match read_entry(&entry) {
            Ok((at, method, url)) => match url::Url::parse(&url) {
                Ok(url) => gathered.keep(at, method, url)?,
                Err(err) => gathered.problems.add(place, format_args!("request.url '{}': {err}", clip(&url, 120))),
            },
            Err(problem) => gathered.problems.add(place, problem),
        }
    }
    Ok(gathered)
}

/// The start (nanoseconds since the epoch), method and URL text of one entry.
fn read_entry(entry: &Entry) -> Result<(i128, Method, String), String> {
    let started = match &entry.started {
        Some(Value::String(text)) => text,
        Some(other) => return Err(format!("startedDateTime is {}, not a date", kind(other))),
        None => return Err("has no startedDateTime".to_owned()),
    };
    let at = started
        .trim()
        .parse::<jiff::Timestamp>()
        .map_err(|_| {
            format!(
                "startedDateTime '{}' is not a date (RFC 3339 with an offset, such as 2024-05-01T12:00:00.123Z)",
                clip(started, 64)
            )
        })?
        .as_nanosecond();
    let Some(Value::Object(request)) = &entry.request else {
        return Err("has no request object".to_owned());
    };
    let method = match request.get("method") {
        Some(Value::String(text)) => Method::from_bytes(text.trim().as_bytes())
            .map_err(|_| format!("request.method '{}' is not an HTTP method", clip(text, 32)))?,
        Some(other) => return Err(format!("request.method is {}, not a method", kind(other))),
        None => return Err("has no request.method".to_owned()),
    };
    let url = match request.get("url") {
        Some(Value::String(text)) => text.trim().to_owned(),
        Some(other) => return Err(format!("request.url is {}, not a URL", kind(other))),
        None => return Err("has no request.url".to_owned()),
    };
    Ok((at, method, url))
}

/// A JSON value's kind, for an error.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Format, RecordingError};
    use super::*;

    fn entry(started: &str, method: &str, url: &str) -> String {
        format!(
            r#"{{"startedDateTime": "{started}", "_resourceType": "fetch", "request": {{"method": "{method}", "url": "{url}", "headers": []}}, "response": {{"status": 200, "content": {{"text": "…"}}}}, "timings": {{"wait": 1.5}}}}"#
        )
    }

    fn har(entries: &[String]) -> String {
        format!(r#"{{"log": {{"version": "1.2", "pages": [{{"id": "page_1"}}], "entries": [{}]}}}}"#, entries.join(","))
    }

    #[test]
    fn entries_out_of_order_and_in_any_offset_come_out_in_start_order() {
        let text = har(&[
            entry("2024-05-01T12:00:01.500+02:00", "POST", "https://api.example.com/b"),
            entry("2024-05-01T10:00:00.250Z", "GET", "https://api.example.com/a"),
            entry("2024-05-01T12:00:00.250+02:00", "GET", "https://api.example.com/c?x=1"),
        ]);
        let parsed = parse(text.as_bytes()).unwrap().finish(Format::Har).unwrap();
        let seen: Vec<(Duration, &str, &str)> =
            parsed.requests.iter().map(|r| (r.offset, r.method.as_str(), r.url.as_str())).collect();
        assert_eq!(
            seen,
            [
                (Duration::ZERO, "GET", "https://api.example.com/a"),
                (Duration::ZERO, "GET", "https://api.example.com/c?x=1"),
                (Duration::from_millis(1250), "POST", "https://api.example.com/b"),
            ]
        );
    }

    #[test]
    fn urls_that_cannot_be_replayed_are_skipped_and_counted_by_scheme() {
        let text = har(&[
            entry("2024-05-01T10:00:00Z", "GET", "https://h/x"),
            entry("2024-05-01T10:00:00Z", "GET", "data:image/png;base64,iVBORw0KGgo="),
            entry("2024-05-01T10:00:00Z", "GET", "data:text/plain,hi"),
            entry("2024-05-01T10:00:00Z", "GET", "blob:https://h/0b1c"),
            entry("2024-05-01T10:00:00Z", "GET", "wss://h/socket"),
            entry("2024-05-01T10:00:00Z", "GET", "chrome-extension://abcdef/page.js"),
        ]);
        let parsed = parse(text.as_bytes()).unwrap().finish(Format::Har).unwrap();
        assert_eq!(parsed.requests.len(), 1);
        let skipped: Vec<(&str, usize)> = parsed.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(skipped, [("blob", 1), ("chrome-extension", 1), ("data", 2), ("wss", 1)]);
        assert_eq!(parsed.problems.count, 0);
    }

    #[test]
    fn a_bad_entry_is_named_and_counted_not_fatal() {
        let text = har(&[
            entry("2024-05-01T10:00:00Z", "GET", "https://h/ok"),
            entry("yesterday", "GET", "https://h/x"),
            r#"{"startedDateTime": 5, "request": {}}"#.to_owned(),
            "17".to_owned(),
            r#"{"startedDateTime": "2024-05-01T10:00:00Z", "request": {"method": "G ET", "url": "https://h/"}}"#
                .to_owned(),
            r#"{"startedDateTime": "2024-05-01T10:00:00Z", "request": {"method": "GET"}}"#.to_owned(),
            entry("2024-05-01T10:00:00Z", "GET", "https://exa mple.com/"),
            r#"{"startedDateTime": "2024-05-01T10:00:00Z"}"#.to_owned(),
        ]);
        let parsed = parse(text.as_bytes()).unwrap().finish(Format::Har).unwrap();
        assert_eq!(parsed.requests.len(), 1);
        assert_eq!(parsed.problems.count, 7);
        let first = &parsed.problems.first;
        assert!(first[0].starts_with("entry 2: startedDateTime 'yesterday' is not a date"), "{first:?}");
        assert_eq!(first[1], "entry 3: startedDateTime is a number, not a date");
        assert_eq!(first[2], "entry 4: is a number, not an object");
        assert_eq!(first[3], "entry 5: request.method 'G ET' is not an HTTP method");
        assert_eq!(first[4], "entry 6: has no request.url");
        assert!(parsed.problems.to_string().ends_with("and 2 more"));
    }

    #[test]
    fn a_document_that_is_no_har_is_refused_whole_and_says_why() {
        for (text, expected) in [
            ("{\"log\": {}}", "missing field `entries`"),
            ("{\"entries\": []}", "missing field `log`"),
            ("{\"log\": {\"entries\": [", "EOF while parsing"),
            ("{\"t\": 1, \"url\": \"http://h/\"}\n{\"t\": 2}", "if this is JSON lines, give --format jsonl"),
        ] {
            let err = parse(text.as_bytes()).unwrap_err();
            assert!(matches!(&err, RecordingError::Har(message) if message.contains(expected)), "{text}: {err}");
        }
        let err = parse(har(&[]).as_bytes()).unwrap().finish(Format::Har).unwrap_err();
        assert_eq!(err.to_string(), "nothing to replay in this HAR file");
    }
}
