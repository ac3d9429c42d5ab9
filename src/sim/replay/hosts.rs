//! One host of a recording: the limiter is per host and the server model is one API, so a
//! replay takes one host's requests. Asked for by name (`api.example.com`, every port) or with
//! its port (`api.example.com:8443`); else the host with the most requests (the earliest to
//! appear of those tied).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::{Format, MAX_SIM_REQUESTS, Parsed, Problems, Recorded, RecordingError};

/// A host of a recording and how many of its requests go there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostCount {
    /// The host name (no port).
    pub host: String,
    /// Its requests.
    pub requests: usize,
}

/// The requests of one host, ready to replay.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The host replayed.
    pub host: String,
    /// Whether it was asked for (`--host`), rather than chosen as the busiest.
    pub chosen_by_caller: bool,
    /// Its requests, ordered by start, offsets from its first.
    pub requests: Vec<Recorded>,
    /// The other hosts of the recording, the busiest first.
    pub other_hosts: Vec<HostCount>,
    /// The format read.
    pub format: Format,
    /// Entries or lines that could not be read.
    pub problems: Problems,
    /// Requests skipped by scheme (`data`, `blob`, `ws`, …).
    pub skipped: BTreeMap<String, usize>,
    /// Relative URLs joined to the base URL.
    pub joined_to_base: usize,
}

impl Recording {
    /// From the first request's start to the last's.
    pub fn span(&self) -> Duration {
        self.requests.last().map_or(Duration::ZERO, |request| request.offset)
    }
}

impl Parsed {
    /// The recording's hosts and their requests, the busiest first (ties: the earliest first).
    pub fn hosts(&self) -> Vec<HostCount> {
        let mut counts: Vec<HostCount> = Vec::new();
        let mut places: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for request in &self.requests {
            let host = request.url.host_str().unwrap_or_default();
            match places.get(host) {
                Some(&place) => counts[place].requests += 1,
                None => {
                    places.insert(host, counts.len());
                    counts.push(HostCount { host: host.to_owned(), requests: 1 });
                }
            }
        }
        // Stable: among hosts with as many requests, the one seen first stays first.
        counts.sort_by_key(|count| std::cmp::Reverse(count.requests));
        counts
    }

    /// The requests of `host` (a name, or `name:port`; see the module's documentation), or of
    /// the busiest host when `None`, their offsets from the first of them.
    pub fn select(self, host: Option<&str>) -> Result<Recording, RecordingError> {
        let hosts = self.hosts();
        let wanted = match host {
            Some(text) => Wanted::parse(text),
            None => match hosts.first() {
                Some(busiest) => Wanted { host: busiest.host.clone(), port: None },
                None => {
                    return Err(RecordingError::NothingLeft {
                        format: self.format,
                        problems: self.problems,
                        skipped: self.skipped,
                    });
                }
            },
        };
        let Parsed { format, requests, problems, skipped, joined_to_base } = self;
        let mut kept: Vec<Recorded> = requests.into_iter().filter(|request| wanted.matches(&request.url)).collect();
        if kept.is_empty() {
            return Err(RecordingError::NoSuchHost { host: wanted.to_string(), hosts });
        }
        if kept.len() > MAX_SIM_REQUESTS {
            return Err(RecordingError::HostTooLarge { host: wanted.to_string(), count: kept.len() });
        }
        let origin = kept[0].offset;
        for request in &mut kept {
            request.offset -= origin;
        }
        let other_hosts =
            hosts.into_iter().filter(|count| count.host != wanted.host || wanted.port.is_some()).collect();
        Ok(Recording {
            host: wanted.to_string(),
            chosen_by_caller: host.is_some(),
            requests: kept,
            other_hosts,
            format,
            problems,
            skipped,
            joined_to_base,
        })
    }
}

/// A host asked for, with or without a port.
struct Wanted {
    host: String,
    port: Option<u16>,
}

impl Wanted {
    fn parse(text: &str) -> Self {
        let text = text.trim().trim_end_matches('.').to_ascii_lowercase();
        // `[::1]:8443`, `host:8443`; a bare IPv6 address has more than one colon.
        if let Some((host, port)) = text.rsplit_once(':')
            && let Ok(port) = port.parse::<u16>()
            && (host.starts_with('[') || !host.contains(':'))
        {
            return Self { host: host.to_owned(), port: Some(port) };
        }
        let host = if text.contains(':') && !text.starts_with('[') { format!("[{text}]") } else { text };
        Self { host, port: None }
    }

    fn matches(&self, url: &url::Url) -> bool {
        url.host_str().is_some_and(|host| host.eq_ignore_ascii_case(&self.host))
            && self.port.is_none_or(|port| url.port_or_known_default() == Some(port))
    }
}

impl std::fmt::Display for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// `a.example (40), b.example (3)`, for messages.
pub(super) fn describe(hosts: &[HostCount]) -> String {
    if hosts.is_empty() {
        return "none".to_owned();
    }
    let shown: Vec<String> =
        hosts.iter().take(10).map(|count| format!("{} ({})", count.host, count.requests)).collect();
    match hosts.len() {
        n if n > 10 => format!("{}, and {} more", shown.join(", "), n - 10),
        _ => shown.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::Method;

    use super::*;

    fn parsed(urls: &[(u64, &str)]) -> Parsed {
        let requests = urls
            .iter()
            .map(|(ms, url)| Recorded {
                offset: Duration::from_millis(*ms),
                method: Method::GET,
                url: url.parse().unwrap(),
            })
            .collect();
        Parsed {
            format: Format::Har,
            requests,
            problems: Problems::default(),
            skipped: BTreeMap::new(),
            joined_to_base: 0,
        }
    }

    fn page() -> Parsed {
        parsed(&[
            (0, "https://www.example.com/"),
            (40, "https://cdn.example.net/app.js"),
            (90, "https://api.example.com/items?page=1"),
            (95, "https://api.example.com:8443/admin"),
            (120, "https://api.example.com/items?page=2"),
            (300, "https://cdn.example.net/logo.png"),
        ])
    }

    #[test]
    fn without_a_host_the_busiest_is_replayed_from_its_own_first_request() {
        let recording = page().select(None).unwrap();
        assert_eq!(recording.host, "api.example.com");
        assert!(!recording.chosen_by_caller);
        let offsets: Vec<u64> = recording.requests.iter().map(|r| r.offset.as_millis() as u64).collect();
        assert_eq!(offsets, [0, 5, 30], "both ports of the host, from its first request");
        let others: Vec<(&str, usize)> = recording.other_hosts.iter().map(|h| (h.host.as_str(), h.requests)).collect();
        assert_eq!(others, [("cdn.example.net", 2), ("www.example.com", 1)]);
        assert_eq!(recording.span(), Duration::from_millis(30));
    }

    #[test]
    fn a_tie_goes_to_the_host_seen_first() {
        let recording = parsed(&[
            (0, "http://b.example/"),
            (1, "http://a.example/"),
            (2, "http://a.example/"),
            (3, "http://b.example/"),
        ])
        .select(None)
        .unwrap();
        assert_eq!(recording.host, "b.example");
    }

    #[test]
    fn a_host_is_asked_for_by_name_or_with_its_port() {
        let recording = page().select(Some("CDN.example.net.")).unwrap();
        assert_eq!((recording.host.as_str(), recording.requests.len()), ("cdn.example.net", 2));
        assert_eq!(recording.requests[1].offset, Duration::from_millis(260));
        assert!(recording.chosen_by_caller);
        let recording = page().select(Some("api.example.com:443")).unwrap();
        assert_eq!(recording.requests.len(), 2);
        assert!(
            recording.other_hosts.iter().any(|h| h.host == "api.example.com"),
            "the same name on other ports is another"
        );
        let ipv6 = parsed(&[(0, "http://[::1]:8080/a"), (5, "http://[::1]/b")]);
        assert_eq!(ipv6.clone().select(Some("[::1]:8080")).unwrap().requests.len(), 1);
        assert_eq!(ipv6.select(Some("::1")).unwrap().requests.len(), 2);
    }

    #[test]
    fn an_unknown_host_lists_the_ones_there_are() {
        let err = page().select(Some("api.example.org")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no request in the recording goes to api.example.org; its hosts: api.example.com (3), cdn.example.net (2), www.example.com (1)"
        );
    }
}
