//! A pasted `curl` command read as a host and one endpoint, its credentials set apart for the
//! secret store (`ratescope profile import-curl`, the app's "Import curl").

use std::collections::BTreeMap;

use base64::Engine;
use thiserror::Error;
use url::Url;

use super::convert::{looks_secret, looks_secret_parameter};
use super::model::{EndpointEntry, HostProfile, Profile};

/// What a curl command describes.
#[derive(Debug, Clone, PartialEq)]
pub struct CurlImport {
    /// Named after its `host[:port]`; `secret_headers` lists the credentials' header names.
    pub host: HostProfile,
    /// The request, as an endpoint of that host (no credentials in it).
    pub endpoint: EndpointEntry,
    /// Credential headers (name, value) for the secret store, never for the profile.
    pub secrets: Vec<(String, String)>,
    /// Options read but of no use to a profile (`-s`, `-L`, `-o FILE`, ...).
    pub ignored: Vec<String>,
}

/// Why a command could not be read.
#[derive(Debug, Error, PartialEq)]
pub enum CurlError {
    /// A quote is opened and never closed.
    #[error("the command's quotes do not close")]
    Quotes,
    /// The text does not start with `curl`.
    #[error("not a curl command: it starts with '{0}'")]
    NotCurl(String),
    /// The command names no URL.
    #[error("no URL in the command")]
    NoUrl,
    /// The command names two URLs.
    #[error("more than one URL ({0} and {1}); import one request at a time")]
    TwoUrls(String, String),
    /// An option that takes a value comes last without one.
    #[error("'{0}' needs a value")]
    MissingValue(String),
    /// The URL does not parse as http or https.
    #[error("'{url}' is not an http(s) URL ({why})")]
    BadUrl {
        /// The URL as written.
        url: String,
        /// Why it does not parse.
        why: String,
    },
    /// A `-H` value without `Name: value`.
    #[error("header '{0}' is not `Name: value`")]
    BadHeader(String),
    /// An option whose meaning a profile cannot keep.
    #[error("curl option '{0}' is not one ratescope can import; remove it and paste again")]
    Unsupported(String),
    /// A query parameter that looks like a credential.
    #[error(
        "query parameter '{0}' looks like a secret: ratescope keeps keys out of URLs (they leak into logs and exports); send it in a header instead"
    )]
    SecretInQuery(String),
}

/// Options that take a value and mean nothing to a profile.
const IGNORED_WITH_VALUE: [&str; 14] = [
    "-o",
    "--output",
    "-m",
    "--max-time",
    "--connect-timeout",
    "-w",
    "--write-out",
    "--retry",
    "--retry-delay",
    "--retry-max-time",
    "-x",
    "--proxy",
    "--cacert",
    "--limit-rate",
];
/// Flags that mean nothing to a profile (short ones may be bundled: `-sSL`).
const IGNORED_FLAGS: [&str; 16] = [
    "--silent",
    "--show-error",
    "--location",
    "--include",
    "--verbose",
    "--insecure",
    "--compressed",
    "--fail",
    "--fail-with-body",
    "--http1.1",
    "--http2",
    "--no-progress-meter",
    "--globoff",
    "--location-trusted",
    "--no-buffer",
    "--raw",
];
const IGNORED_SHORT: &str = "sSLivkfgN";

/// Reads `command` (as pasted: quotes, backslash line continuations) as one request.
pub fn parse_curl(command: &str) -> Result<CurlImport, CurlError> {
    let joined = command.replace("\\\r\n", " ").replace("\\\n", " ");
    let words = shlex::split(&joined).ok_or(CurlError::Quotes)?;
    let mut words = words.into_iter();
    match words.next() {
        Some(first) if first == "curl" || first.ends_with("/curl") => {}
        Some(first) => return Err(CurlError::NotCurl(first)),
        None => return Err(CurlError::NotCurl(String::new())),
    }
    let mut request = Request::default();
    while let Some(word) = words.next() {
        let mut value = |option: &str| words.next().ok_or_else(|| CurlError::MissingValue(option.to_owned()));
        request.take(&word, &mut value)?;
    }
    request.finish()
}

#[derive(Default)]
struct Request {
    url: Option<String>,
    method: Option<String>,
    headers: Vec<(String, String)>,
    data: Vec<String>,
    data_file: Option<String>,
    json: bool,
    get: bool,
    head: bool,
    user: Option<String>,
    ignored: Vec<String>,
}

impl Request {
    fn take(&mut self, word: &str, value: &mut impl FnMut(&str) -> Result<String, CurlError>) -> Result<(), CurlError> {
        // `-XPOST`, `-H'Accept: x'` and `--request=POST` carry their value in the same word.
        let (option, attached) = split_attached(word);
        let mut value = |name: &str| attached.clone().map_or_else(|| value(name), Ok);
        match option {
            "-X" | "--request" => self.method = Some(value(option)?.to_ascii_uppercase()),
            "-H" | "--header" => {
                let header = value(option)?;
                let (name, text) = header.split_once(':').ok_or_else(|| CurlError::BadHeader(header.clone()))?;
                if name.trim().is_empty() {
                    return Err(CurlError::BadHeader(header));
                }
                self.headers.push((name.trim().to_owned(), text.trim().to_owned()));
            }
            "-d" | "--data" | "--data-raw" | "--data-binary" | "--data-ascii" | "--data-urlencode" => {
                let data = value(option)?;
                match data.strip_prefix('@').filter(|_| option != "--data-raw") {
                    Some(file) => self.data_file = Some(file.to_owned()),
                    None => self.data.push(data),
                }
            }
            "--json" => {
                self.json = true;
                let data = value(option)?;
                match data.strip_prefix('@') {
                    Some(file) => self.data_file = Some(file.to_owned()),
                    None => self.data.push(data),
                }
            }
            "-u" | "--user" => self.user = Some(value(option)?),
            "-A" | "--user-agent" => self.headers.push(("User-Agent".into(), value(option)?)),
            "-e" | "--referer" => self.headers.push(("Referer".into(), value(option)?)),
            "-b" | "--cookie" => self.headers.push(("Cookie".into(), value(option)?)),
            "-G" | "--get" => self.get = true,
            "-I" | "--head" => self.head = true,
            "--url" => self.set_url(value(option)?)?,
            _ if IGNORED_WITH_VALUE.contains(&option) => {
                let skipped = value(option)?;
                self.ignored.push(format!("{option} {skipped}"));
            }
            _ if IGNORED_FLAGS.contains(&option) => self.ignored.push(option.to_owned()),
            _ if is_bundle(option) => {
                if option.ends_with('G') {
                    self.get = true;
                }
                self.ignored.push(option.to_owned());
            }
            _ if option.starts_with('-') && option.len() > 1 => return Err(CurlError::Unsupported(option.to_owned())),
            _ => self.set_url(word.to_owned())?,
        }
        Ok(())
    }

    fn set_url(&mut self, url: String) -> Result<(), CurlError> {
        match self.url.take() {
            Some(first) => Err(CurlError::TwoUrls(first, url)),
            None => {
                self.url = Some(url);
                Ok(())
            }
        }
    }

    fn finish(self) -> Result<CurlImport, CurlError> {
        let text = self.url.ok_or(CurlError::NoUrl)?;
        // curl assumes http:// for a bare host.
        let with_scheme = if text.contains("://") { text.clone() } else { format!("http://{text}") };
        let bad = |why: &str| CurlError::BadUrl { url: text.clone(), why: why.to_owned() };
        let mut url = Url::parse(&with_scheme).map_err(|err| bad(&err.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("only http and https"));
        }
        let Some(host_name) = url.host_str().map(str::to_owned) else { return Err(bad("no host")) };
        let mut headers = self.headers;
        if !url.username().is_empty() {
            let password = url.password().unwrap_or_default().to_owned();
            let user = format!("{}:{password}", url.username());
            headers.push(("Authorization".into(), basic(&user)));
            url.set_username("").map_err(|()| bad("credentials"))?;
            url.set_password(None).map_err(|()| bad("credentials"))?;
        }
        if let Some(user) = &self.user {
            headers.push(("Authorization".into(), basic(user)));
        }
        let mut body = (!self.data.is_empty()).then(|| self.data.join("&"));
        if self.get
            && let Some(data) = body.take()
        {
            let query = match url.query() {
                Some(query) if !query.is_empty() => format!("{query}&{data}"),
                _ => data,
            };
            url.set_query(Some(&query));
        }
        if let Some(secret) =
            url.query_pairs().map(|(name, _)| name.into_owned()).find(|name| looks_secret_parameter(name))
        {
            return Err(CurlError::SecretInQuery(secret));
        }
        if self.json {
            if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
                headers.push(("Content-Type".into(), "application/json".into()));
            }
            if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("accept")) {
                headers.push(("Accept".into(), "application/json".into()));
            }
        }
        let has_body = body.is_some() || self.data_file.is_some();
        let method = match (self.method, self.head, has_body) {
            (Some(method), _, _) => method,
            (None, true, _) => "HEAD".into(),
            (None, false, true) => "POST".into(),
            (None, false, false) => "GET".into(),
        };
        let base_url = match url.port() {
            Some(port) => format!("{}://{host_name}:{port}", url.scheme()),
            None => format!("{}://{host_name}", url.scheme()),
        };
        let authority = base_url.split_once("://").map_or(host_name.as_str(), |(_, rest)| rest).to_owned();
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let mut host = HostProfile::new(authority, base_url);
        let (endpoint_headers, secrets) = split_secrets(headers, &mut host);
        let endpoint = EndpointEntry {
            name: format!("{method} {}", url.path()),
            method: (method != "GET").then_some(method),
            path,
            query: BTreeMap::new(),
            headers: endpoint_headers,
            body,
            body_file: self.data_file,
            weight: None,
            costs: Vec::new(),
            batch: None,
        };
        Ok(CurlImport { host, endpoint, secrets, ignored: self.ignored })
    }
}

/// Where an import landed in a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The host's name in the profile.
    pub host: String,
    /// The endpoint's name under that host.
    pub endpoint: String,
    /// The host was added (no host of the profile had that base URL).
    pub new_host: bool,
}

impl Profile {
    /// Adds `import`'s endpoint to the host with the same base URL, or adds its host. An endpoint
    /// of the same name is replaced; the secret header names join the host's. The secret values
    /// are the caller's to file under the returned host (see [`SecretStore::set`](super::SecretStore::set)).
    pub fn add_curl_import(&mut self, import: &CurlImport) -> Imported {
        let origin = import.host.base_url.as_str();
        let found = self.hosts.iter().position(|host| host.base_url.trim_end_matches('/').eq_ignore_ascii_case(origin));
        let new_host = found.is_none();
        let index = found.unwrap_or_else(|| {
            let mut name = import.host.name.clone();
            let mut n = 2;
            while self.hosts.iter().any(|other| other.name == name) {
                name = format!("{} ({n})", import.host.name);
                n += 1;
            }
            self.hosts.push(HostProfile::new(name, origin));
            self.hosts.len() - 1
        });
        let host = &mut self.hosts[index];
        for name in &import.host.secret_headers {
            if !host.secret_headers.iter().any(|known| known.eq_ignore_ascii_case(name)) {
                host.secret_headers.push(name.clone());
            }
        }
        host.put_endpoint(import.endpoint.clone());
        Imported { host: host.name.clone(), endpoint: import.endpoint.name.clone(), new_host }
    }
}

/// The headers that carry credentials (named in `host.secret_headers`, their values returned
/// for the secret store; a later one of the same name wins) and the rest, for the endpoint.
fn split_secrets(
    headers: Vec<(String, String)>,
    host: &mut HostProfile,
) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut plain = BTreeMap::new();
    let mut secrets: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if looks_secret(&lower) {
            if !host.secret_headers.contains(&lower) {
                host.secret_headers.push(lower.clone());
            }
            secrets.retain(|(known, _)| *known != lower);
            secrets.push((lower, value));
        } else {
            plain.insert(name, value);
        }
    }
    (plain, secrets)
}

/// `-XPOST` → (`-X`, `POST`); `--request=POST` → (`--request`, `POST`); anything else whole.
fn split_attached(word: &str) -> (&str, Option<String>) {
    if let Some(long) = word.strip_prefix("--") {
        return match long.split_once('=') {
            Some((name, value)) => (&word[..name.len() + 2], Some(value.to_owned())),
            None => (word, None),
        };
    }
    let takes_value = ["-X", "-H", "-d", "-u", "-A", "-e", "-b", "-o", "-m", "-w", "-x"];
    match takes_value.iter().find(|short| word.len() > 2 && word.starts_with(*short)) {
        Some(short) => (short, Some(word[2..].to_owned())),
        None => (word, None),
    }
}

/// `-sSL`: short flags bundled, each one that means nothing to a profile (or `-G`).
fn is_bundle(word: &str) -> bool {
    word.strip_prefix('-')
        .filter(|flags| !flags.is_empty() && !flags.starts_with('-'))
        .is_some_and(|flags| flags.chars().all(|flag| IGNORED_SHORT.contains(flag) || flag == 'G'))
}

fn basic(user: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pasted_post_becomes_a_host_an_endpoint_and_a_secret() {
        let command = r#"curl -sS -X POST 'https://api.example.com:8443/v1/chat?stream=false' \
  -H 'Authorization: Bearer sk-live-123' \
  -H "Content-Type: application/json" -H 'X-Api-Key: k-9' \
  --data-raw '{"model": "m", "max_tokens": 5}'"#;
        let import = parse_curl(command).unwrap();
        assert_eq!(import.host.name, "api.example.com:8443");
        assert_eq!(import.host.base_url, "https://api.example.com:8443");
        assert_eq!(import.host.secret_headers, ["authorization", "x-api-key"]);
        assert_eq!(
            import.secrets,
            [("authorization".to_owned(), "Bearer sk-live-123".to_owned()), ("x-api-key".to_owned(), "k-9".to_owned())]
        );
        let endpoint = &import.endpoint;
        assert_eq!(endpoint.name, "POST /v1/chat");
        assert_eq!(endpoint.method.as_deref(), Some("POST"));
        assert_eq!(endpoint.path, "/v1/chat?stream=false");
        assert_eq!(endpoint.headers, BTreeMap::from([("Content-Type".into(), "application/json".into())]));
        assert_eq!(endpoint.body.as_deref(), Some(r#"{"model": "m", "max_tokens": 5}"#));
        assert_eq!(import.ignored, ["-sS"]);
        let text = format!("{:?}", (&import.host, &import.endpoint));
        assert!(!text.contains("sk-live") && !text.contains("k-9"), "no secret in the profile: {text}");
    }

    #[test]
    fn curl_defaults_are_kept_data_means_post_and_get_moves_it_to_the_query() {
        let post = parse_curl("curl localhost:8787/items -d a=1 -d b=2").unwrap();
        assert_eq!(post.host.base_url, "http://localhost:8787");
        assert_eq!(post.endpoint.method.as_deref(), Some("POST"));
        assert_eq!(post.endpoint.body.as_deref(), Some("a=1&b=2"));
        let get = parse_curl("curl -G http://h/items?x=1 --data page=2").unwrap();
        assert_eq!(get.endpoint.method, None);
        assert_eq!(get.endpoint.path, "/items?x=1&page=2");
        assert_eq!(get.endpoint.body, None);
        let user = parse_curl("curl -u alice:s3cret https://h/me").unwrap();
        assert_eq!(user.secrets, [("authorization".to_owned(), "Basic YWxpY2U6czNjcmV0".to_owned())]);
        let in_url = parse_curl("curl https://bob:pw@h/me").unwrap();
        assert_eq!(in_url.host.base_url, "https://h", "credentials leave the URL");
        assert_eq!(in_url.secrets[0].0, "authorization");
        let json = parse_curl("curl --json @body.json https://h/x -XPUT").unwrap();
        assert_eq!(json.endpoint.method.as_deref(), Some("PUT"));
        assert_eq!(json.endpoint.body_file.as_deref(), Some("body.json"));
        assert_eq!(json.endpoint.headers["Content-Type"], "application/json");
        let head = parse_curl("curl -I --max-time 5 https://h/").unwrap();
        assert_eq!(head.endpoint.method.as_deref(), Some("HEAD"));
        assert_eq!(head.ignored, ["--max-time 5"]);
    }

    #[test]
    fn an_import_joins_the_host_with_its_base_url_or_adds_one() {
        let mut profile = Profile::new("team");
        let first = parse_curl("curl -H 'Authorization: Bearer a' https://api.example.com/items").unwrap();
        let added = profile.add_curl_import(&first);
        assert_eq!(added, Imported { host: "api.example.com".into(), endpoint: "GET /items".into(), new_host: true });
        let second = parse_curl("curl -X DELETE -H 'Cookie: s=1' https://API.example.com/items/7").unwrap();
        assert!(!profile.add_curl_import(&second).new_host, "same origin, same host");
        assert!(!profile.add_curl_import(&first).new_host, "again: replaced, not doubled");
        let host = &profile.hosts[0];
        assert_eq!(profile.hosts.len(), 1);
        assert_eq!(host.endpoint_names(), "DELETE /items/7, GET /items");
        assert_eq!(host.secret_headers, ["authorization", "cookie"]);
        profile.hosts[0].base_url = "https://elsewhere.example.com".into();
        let third = profile.add_curl_import(&first);
        assert_eq!(third.host, "api.example.com (2)", "a name already taken by another origin");
        profile.validate().unwrap();
    }

    #[test]
    fn what_cannot_be_imported_says_why() {
        let cases = [
            ("curl 'https://h/x", CurlError::Quotes),
            ("wget https://h/", CurlError::NotCurl("wget".into())),
            ("curl -s", CurlError::NoUrl),
            ("curl https://a/ https://b/", CurlError::TwoUrls("https://a/".into(), "https://b/".into())),
            ("curl https://h/ -H", CurlError::MissingValue("-H".into())),
            ("curl https://h/ -H nocolon", CurlError::BadHeader("nocolon".into())),
            ("curl --form a=b https://h/", CurlError::Unsupported("--form".into())),
            ("curl 'https://h/x?api_key=abc'", CurlError::SecretInQuery("api_key".into())),
        ];
        for (command, expected) in cases {
            assert_eq!(parse_curl(command).unwrap_err(), expected, "{command}");
        }
        let ftp = parse_curl("curl ftp://h/file").unwrap_err().to_string();
        assert!(ftp.contains("only http and https"), "{ftp}");
        let secret = parse_curl("curl 'https://h/x?api_key=abc'").unwrap_err().to_string();
        assert!(!secret.contains("abc"), "{secret}");
    }
}
