//! A pasted `curl` command read as a host and one endpoint, its credentials set apart for the
//! secret store (`ratescope profile import-curl`, the app's "Import curl").
//!
//! The command is split into words as its shell would split them ([`shell`]: bash with its
//! `$'…'` strings, or Windows cmd with its `^` escapes — both flavours of the browsers' "Copy as
//! cURL"), then read option by option as curl reads them; the body is built as curl builds it
//! ([`data`]: `-d @FILE` is read now, `--data-urlencode` encoded, `-F` made multipart). What
//! looks secret by the one rule of [`crate::redact`] never reaches the profile: such a
//! header goes to the secret store (cookies from `-b` and `-H Cookie` joined into one), a query
//! parameter or body field holding a value is refused with its name. An empty value is not a
//! secret (`-H 'Authorization:'` is curl's way to drop the header). A shell variable bash would
//! expand (`-H "Authorization: Bearer $API_KEY"`, as API docs write it) is kept as the reference
//! `${API_KEY}`, which the secret store resolves from the environment. Every error shows URLs
//! and headers redacted.

mod data;
mod shell;

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine;
use thiserror::Error;
use url::Url;

pub use data::ReadFile;
use data::{DataKind, FormPart, Piece};

use super::model::{EndpointEntry, HostProfile, Profile};
use crate::http::header_cap::{TooManyHeaders, check_header_count};
use crate::redact::{holds_secret, looks_secret, redact_header_line, redact_url, secret_fields};

/// The largest body an import keeps in the profile itself (a larger `--data-binary @FILE` is
/// kept as the file's absolute path; profiles are read up to 1 MiB).
pub const MAX_INLINE_BODY: usize = 256 * 1024;

/// What a curl command describes (`Debug` shows the credentials' names, never their values).
#[derive(Clone, PartialEq)]
pub struct CurlImport {
    /// Named after its `host[:port]`; `secret_headers` lists the credentials' header names.
    pub host: HostProfile,
    /// The request, as an endpoint of that host (no credentials in it).
    pub endpoint: EndpointEntry,
    /// Credential headers (lower-case name, value) for the secret store, never for the profile;
    /// none has an empty value.
    pub secrets: Vec<(String, String)>,
    /// Options read but of no use to a profile (`-s`, `-L`, `-o FILE`, ...), values redacted.
    pub ignored: Vec<String>,
}

impl std::fmt::Debug for CurlImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secrets: Vec<(&str, &str)> = self.secrets.iter().map(|(name, _)| (name.as_str(), "***")).collect();
        f.debug_struct("CurlImport")
            .field("host", &self.host)
            .field("endpoint", &self.endpoint)
            .field("secrets", &secrets)
            .field("ignored", &self.ignored)
            .finish()
    }
}

/// Why a command could not be read. No message holds a secret: URLs and headers are redacted.
#[derive(Debug, Error, PartialEq)]
pub enum CurlError {
    /// Nothing but blanks (or comments).
    #[error("the command is empty: paste a curl command, such as curl https://api.example.com/items")]
    Empty,
    /// A quote is opened and never closed.
    #[error("the command's quotes do not close")]
    Quotes,
    /// The text does not start with `curl` (its first word, redacted and shortened).
    #[error("not a curl command: it starts with '{0}'")]
    NotCurl(String),
    /// The command names no URL.
    #[error("no URL in the command")]
    NoUrl,
    /// The command names two URLs (both redacted).
    #[error("more than one URL ({0} and {1}); import one request at a time")]
    TwoUrls(String, String),
    /// An option that takes a value comes last without one.
    #[error("'{0}' needs a value")]
    MissingValue(String),
    /// The URL does not parse as http or https.
    #[error("'{url}' is not an http(s) URL ({why})")]
    BadUrl {
        /// The URL as written, redacted.
        url: String,
        /// Why it does not parse.
        why: String,
    },
    /// A `-H` value without `Name: value` (redacted).
    #[error("header '{0}' is not `Name: value`")]
    BadHeader(String),
    /// An option whose meaning a profile cannot keep.
    #[error("curl option '{0}' is not one ratescope can import; remove it and paste again")]
    Unsupported(String),
    /// A query parameter that looks like a credential and holds a value.
    #[error(
        "query parameter '{0}' looks like a secret: ratescope keeps keys out of URLs (they leak into logs and exports); send it in a header instead"
    )]
    SecretInQuery(String),
    /// A body field that looks like a credential and holds a value.
    #[error(
        "the body's field '{0}' looks like a secret, and a profile (shown and exported as text) cannot keep one; send the credential in a header, which goes to the secret store, or leave the field empty in the command"
    )]
    SecretInBody(String),
    /// More `-H` options than a request may carry.
    #[error("{0}; remove some -H options")]
    TooManyHeaders(#[from] TooManyHeaders),
    /// A file named by `-d @FILE` (or `--data-urlencode`, `-F`) could not be read.
    #[error("cannot read the body's file: {0}")]
    DataFile(String),
    /// `-d @-`: the body would come from standard input.
    #[error("'@-' reads the body from standard input, which an import cannot keep; paste the body itself")]
    DataFromStdin,
    /// A file that is not text where text is needed.
    #[error(
        "{0} is not UTF-8 text: a profile keeps text bodies only; send a binary file alone with --data-binary @FILE (the profile keeps its path)"
    )]
    BinaryData(String),
    /// A `-F` value without `name=`.
    #[error("-F takes name=content (or name=@FILE to upload a file)")]
    BadForm,
    /// `-F` and `-d` together.
    #[error("-F and -d cannot be used together (curl refuses them too)")]
    FormAndData,
    /// A body too long to keep inside a profile.
    #[error(
        "the body is {size} bytes, more than the {cap} a profile keeps inline; save it in a file and use --data-binary @FILE",
        size = .0,
        cap = crate::files::human_bytes(MAX_INLINE_BODY as u64)
    )]
    BodyTooLarge(usize),
    /// Typographic quotes (from a web page or a chat), which no shell reads as quotes.
    #[error(
        "the command has typographic quotes (‘ ’ “ ”), which a shell does not read as quotes; type them as ' or \""
    )]
    SmartQuotes,
}

/// Options that take a value and mean nothing to a profile.
const IGNORED_WITH_VALUE: [&str; 24] = [
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
    "--capath",
    "--limit-rate",
    "-c",
    "--cookie-jar",
    "--max-redirs",
    "--resolve",
    "--connect-to",
    "--noproxy",
    "--interface",
    "--trace",
    "--trace-ascii",
];
/// Options whose value is a credential of no use to a profile: shown as `***`.
const IGNORED_SECRET_VALUE: [&str; 2] = ["-U", "--proxy-user"];
/// Flags that mean nothing to a profile (short ones may be bundled: `-sSL`).
const IGNORED_FLAGS: [&str; 27] = [
    "--silent",
    "--show-error",
    "--location",
    "--include",
    "--verbose",
    "--insecure",
    "--compressed",
    "--fail",
    "--fail-with-body",
    "--http1.0",
    "--http1.1",
    "--http2",
    "--http2-prior-knowledge",
    "--http3",
    "--no-progress-meter",
    "--progress-bar",
    "--globoff",
    "--location-trusted",
    "--no-buffer",
    "--raw",
    "--basic",
    "--path-as-is",
    "--ssl-no-revoke",
    "--tlsv1.2",
    "--tlsv1.3",
    "--no-keepalive",
    "--tcp-nodelay",
];
const IGNORED_SHORT: &str = "sSLivkfgN#";
/// Short options that take a value, which may be attached (`-XPOST`, `-H'Accept: x'`).
const SHORT_WITH_VALUE: [&str; 14] =
    ["-X", "-H", "-d", "-u", "-A", "-e", "-b", "-o", "-m", "-w", "-x", "-F", "-U", "-c"];

/// Reads `command` (as pasted: bash or cmd quoting, line continuations) as one request; files
/// it names (`-d @FILE`) are read from the current directory, as curl would read them.
pub fn parse_curl(command: &str) -> Result<CurlImport, CurlError> {
    let read =
        |path: &std::path::Path| crate::files::read_capped(path, super::MAX_BODY_BYTES).map_err(|err| err.to_string());
    parse_curl_with(command, &read)
}

/// [`parse_curl`], with `read` answering for the files the command names.
pub fn parse_curl_with(command: &str, read: ReadFile<'_>) -> Result<CurlImport, CurlError> {
    let words = shell::split(command).map_err(|shell::Unclosed| CurlError::Quotes)?;
    if words.iter().any(|word| word.starts_with(['‘', '’', '“', '”'])) {
        return Err(CurlError::SmartQuotes);
    }
    let mut words = words.into_iter().peekable();
    // A shell prompt copied along (`$ curl ...`).
    words.next_if(|word| matches!(word.as_str(), "$" | "%" | ">"));
    match words.next() {
        Some(first) if is_curl(&first) => {}
        Some(first) => return Err(CurlError::NotCurl(shortened(&redact_url(&first)))),
        None => return Err(CurlError::Empty),
    }
    let mut request = Request::default();
    while let Some(word) = words.next() {
        // What follows a pipe, a redirection or another command is not part of the request.
        if matches!(word.as_str(), "|" | "||" | "&&" | ";" | ">" | ">>" | "2>" | "&") {
            request.ignored.push(format!("everything from '{word}' on"));
            break;
        }
        let mut value = |option: &str| words.next().ok_or_else(|| CurlError::MissingValue(option.to_owned()));
        request.take(&word, &mut value, read)?;
    }
    request.finish()
}

/// `curl`, `/usr/bin/curl`, `curl.exe`, `C:\tools\curl.exe`.
fn is_curl(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    let program = lower.rsplit(['/', '\\']).next().unwrap_or_default();
    program == "curl" || program == "curl.exe"
}

/// At most 40 characters of `text`, for a message.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A field or parameter name as a message shows it: as written when it reads like a name
/// (letters, digits, `-_.[]`, at most 64), else described (a name made of anything may hold
/// what it should not).
fn shown_name(name: &str) -> String {
    let plain = name.len() <= 64
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '[' | ']'));
    if plain { name.to_owned() } else { "(a field whose name looks secret)".to_owned() }
}

/// A word taken for a URL, as a message shows it: redacted, or `***` when it does not look
/// like a URL at all (a stray word after an unquoted header may be its value).
fn shown_url(word: &str) -> String {
    if word.contains(['.', '/', ':']) { shortened(&redact_url(word)) } else { "***".to_owned() }
}

#[derive(Default)]
struct Request {
    url: Option<String>,
    method: Option<String>,
    /// In the order given; names as written.
    headers: Vec<(String, String)>,
    /// Lower-case names dropped with `-H 'Name:'`.
    removed: Vec<String>,
    data: Vec<Piece>,
    form: Vec<FormPart>,
    url_query: Vec<String>,
    json: bool,
    get: bool,
    head: bool,
    user: Option<String>,
    ignored: Vec<String>,
}

impl Request {
    fn take(
        &mut self,
        word: &str,
        value: &mut impl FnMut(&str) -> Result<String, CurlError>,
        read: ReadFile<'_>,
    ) -> Result<(), CurlError> {
        if let Some((flags, option)) = split_bundle(word) {
            if flags.contains('G') {
                self.get = true;
            }
            self.ignored.push(format!("-{flags}"));
            return self.take(&option, value, read);
        }
        let (option, attached) = split_attached(word);
        let mut value = |name: &str| attached.clone().map_or_else(|| value(name), Ok);
        let add_data = |kind, request: &mut Self, value: String| -> Result<(), CurlError> {
            request.data.push(data::piece(kind, &value, read)?);
            Ok(())
        };
        match option {
            "-X" | "--request" => self.method = Some(value(option)?.to_ascii_uppercase()),
            "-H" | "--header" => self.header(value(option)?)?,
            "-d" | "--data" | "--data-ascii" => add_data(DataKind::Ascii, self, value(option)?)?,
            "--data-raw" => add_data(DataKind::Raw, self, value(option)?)?,
            "--data-binary" => add_data(DataKind::Binary, self, value(option)?)?,
            "--data-urlencode" => add_data(DataKind::UrlEncode, self, value(option)?)?,
            "--json" => {
                self.json = true;
                add_data(DataKind::Binary, self, value(option)?)?;
            }
            "-F" | "--form" => self.form.push(data::form_part(&value(option)?, false, read)?),
            "--form-string" => self.form.push(data::form_part(&value(option)?, true, read)?),
            "--url-query" => self.url_query.push(data::url_encoded(&value(option)?, read)?),
            "-u" | "--user" => self.user = Some(value(option)?),
            "--oauth2-bearer" => {
                let token = value(option)?;
                self.push_header("Authorization", format!("Bearer {token}"))?;
            }
            "-A" | "--user-agent" => self.push_header("User-Agent", value(option)?)?,
            "-e" | "--referer" => self.push_header("Referer", value(option)?)?,
            "-b" | "--cookie" => {
                let cookie = value(option)?;
                if cookie.contains('=') {
                    self.push_header("Cookie", cookie)?;
                } else {
                    self.ignored.push(format!("{option} {cookie} (a cookie file is not read)"));
                }
            }
            "-G" | "--get" => self.get = true,
            "-I" | "--head" => self.head = true,
            "--url" => self.set_url(value(option)?)?,
            _ if IGNORED_SECRET_VALUE.contains(&option) => {
                value(option)?;
                self.ignored.push(format!("{option} ***"));
            }
            _ if IGNORED_WITH_VALUE.contains(&option) => {
                let skipped = value(option)?;
                self.ignored.push(format!("{option} {}", redact_url(&skipped)));
            }
            _ if IGNORED_FLAGS.contains(&option) => self.ignored.push(option.to_owned()),
            _ if is_bundle(option) => {
                if option.contains('G') {
                    self.get = true;
                }
                self.ignored.push(option.to_owned());
            }
            _ if option.starts_with("--") => {
                let name: String = option
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
                    .take(40)
                    .collect();
                return Err(CurlError::Unsupported(name));
            }
            // A short option may carry its value (a password) in the same word: name it alone.
            _ if option.starts_with('-') && option.len() > 1 => {
                let name: String = option.chars().take(2).collect();
                return Err(CurlError::Unsupported(name));
            }
            _ => self.set_url(word.to_owned())?,
        }
        Ok(())
    }

    /// One `-H`: `Name: value`; `Name:` drops the header (curl's way); `Name;` sends it empty.
    fn header(&mut self, line: String) -> Result<(), CurlError> {
        let bad = || CurlError::BadHeader(shortened(&redact_header_line(&line)));
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name.trim(), value.trim()),
            None => match line.trim().strip_suffix(';') {
                Some(name) if !name.contains(char::is_whitespace) => (name, ""),
                _ => return Err(bad()),
            },
        };
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad());
        }
        if value.is_empty() && line.contains(':') {
            let lower = name.to_ascii_lowercase();
            self.headers.retain(|(known, _)| !known.eq_ignore_ascii_case(&lower));
            self.removed.push(lower);
            return Ok(());
        }
        let (name, value) = (name.to_owned(), value.to_owned());
        self.push_header(&name, value)
    }

    fn push_header(&mut self, name: &str, value: String) -> Result<(), CurlError> {
        check_header_count(self.headers.len() + 1)?;
        self.headers.push((name.to_owned(), value));
        Ok(())
    }

    fn set_url(&mut self, url: String) -> Result<(), CurlError> {
        match self.url.take() {
            Some(first) => Err(CurlError::TwoUrls(shown_url(&first), shown_url(&url))),
            None => {
                self.url = Some(url);
                Ok(())
            }
        }
    }

    fn finish(mut self) -> Result<CurlImport, CurlError> {
        let text = self.url.take().ok_or(CurlError::NoUrl)?;
        // curl assumes http:// for a bare host.
        let with_scheme = if has_scheme(&text) { text.clone() } else { format!("http://{text}") };
        let bad = |why: &str| CurlError::BadUrl { url: shortened(&redact_url(&text)), why: why.to_owned() };
        let mut url = Url::parse(&with_scheme).map_err(|err| bad(&err.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("only http and https"));
        }
        let Some(host_name) = url.host_str().map(str::to_owned) else { return Err(bad("no host")) };
        let mut generated = Vec::new();
        if !url.username().is_empty() || url.password().is_some() {
            let decode = |text: &str| percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned();
            let user = format!("{}:{}", decode(url.username()), decode(url.password().unwrap_or_default()));
            generated.push(("Authorization".to_owned(), basic(&user)));
            url.set_username("").map_err(|()| bad("credentials"))?;
            url.set_password(None).map_err(|()| bad("credentials"))?;
        }
        if let Some(user) = self.user.as_deref().filter(|user| !user.is_empty() && *user != ":") {
            generated.push(("Authorization".to_owned(), basic(user)));
        }
        // Headers curl makes itself come first, so a -H of the same name wins.
        let mut headers = generated;
        headers.append(&mut self.headers);
        headers.retain(|(name, _)| !self.removed.contains(&name.to_ascii_lowercase()));
        let mut headers = joined_cookies(headers);
        check_header_count(headers.len())?;

        let (mut body, body_file) = self.body(&mut headers)?;
        // Checked before -G moves it into the query: a JSON body there would hide its fields.
        if let Some(text) = &body
            && let Some(field) = secret_fields(text, content_type(&headers)).into_iter().next()
        {
            let shown = shown_name(&field);
            return Err(if self.get { CurlError::SecretInQuery(shown) } else { CurlError::SecretInBody(shown) });
        }
        let mut query: Vec<String> =
            url.query().filter(|query| !query.is_empty()).map(str::to_owned).into_iter().collect();
        if self.get
            && let Some(data) = body.take()
        {
            query.push(data);
        }
        if body_file.is_some() && self.get {
            return Err(CurlError::Unsupported("-G with a body file".into()));
        }
        query.append(&mut self.url_query);
        if !query.is_empty() {
            url.set_query(Some(&query.join("&")));
        }
        if let Some(secret) =
            url.query_pairs().find(|(name, value)| holds_secret(name, value)).map(|(name, _)| name.into_owned())
        {
            return Err(CurlError::SecretInQuery(shown_name(&secret)));
        }
        if self.json {
            for (name, default) in [("Content-Type", "application/json"), ("Accept", "application/json")] {
                let lower = name.to_ascii_lowercase();
                if !self.removed.contains(&lower) && !headers.iter().any(|(known, _)| known.eq_ignore_ascii_case(name))
                {
                    headers.push((name.into(), default.into()));
                }
            }
        }
        if let Some(text) = &body
            && text.len() > MAX_INLINE_BODY
        {
            return Err(CurlError::BodyTooLarge(text.len()));
        }
        let has_body = body.is_some() || body_file.is_some();
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
            body_file: body_file.map(|path| path.display().to_string()),
            weight: None,
            costs: Vec::new(),
            batch: None,
        };
        Ok(CurlImport { host, endpoint, secrets, ignored: self.ignored })
    }

    /// The body as text, or the absolute path of the one binary (or large) file it is; a
    /// body file that is text is checked for secret fields here.
    fn body(&mut self, headers: &mut Vec<(String, String)>) -> Result<(Option<String>, Option<PathBuf>), CurlError> {
        if !self.form.is_empty() {
            if !self.data.is_empty() {
                return Err(CurlError::FormAndData);
            }
            if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
                headers.push(("Content-Type".into(), format!("multipart/form-data; boundary={}", data::FORM_BOUNDARY)));
            }
            return Ok((Some(data::multipart(&self.form)), None));
        }
        let pieces = std::mem::take(&mut self.data);
        if let [Piece::File { path, bytes }] = pieces.as_slice() {
            match std::str::from_utf8(bytes) {
                Ok(text) if text.len() <= MAX_INLINE_BODY => return Ok((Some(text.to_owned()), None)),
                Ok(text) => {
                    if let Some(field) = secret_fields(text, content_type(headers)).into_iter().next() {
                        return Err(CurlError::SecretInBody(shown_name(&field)));
                    }
                    return Ok((None, Some(path.clone())));
                }
                Err(_) => return Ok((None, Some(path.clone()))),
            }
        }
        let mut texts = Vec::with_capacity(pieces.len());
        for piece in pieces {
            match piece {
                Piece::Text(text) => texts.push(text),
                Piece::File { path, bytes } => {
                    texts
                        .push(String::from_utf8(bytes).map_err(|_| CurlError::BinaryData(path.display().to_string()))?);
                }
            }
        }
        Ok(((!texts.is_empty()).then(|| texts.join("&")), None))
    }
}

/// The content type the request is sent with: the last `Content-Type` given (the profile keeps
/// the last of a name).
fn content_type(headers: &[(String, String)]) -> Option<&str> {
    headers.iter().rev().find(|(name, _)| name.eq_ignore_ascii_case("content-type")).map(|(_, value)| value.as_str())
}

/// Whether `text` starts with a scheme: `name:` then `/` (`http:/h` is http, as curl and the
/// URL standard read it; `localhost:8787` is a host and port).
fn has_scheme(text: &str) -> bool {
    text.split_once(':').is_some_and(|(scheme, rest)| {
        rest.starts_with('/')
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// Every `Cookie` header joined into one (`-b` and `-H Cookie` both count), where the first was.
fn joined_cookies(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    let cookies: Vec<&str> = headers
        .iter()
        .filter(|(name, value)| name.eq_ignore_ascii_case("cookie") && !value.is_empty())
        .map(|(_, value)| value.trim().trim_end_matches(';'))
        .collect();
    if cookies.len() < 2 {
        return headers;
    }
    let joined = cookies.join("; ");
    let mut out = Vec::with_capacity(headers.len());
    let mut placed = false;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("cookie") {
            if !placed {
                out.push((name, joined.clone()));
                placed = true;
            }
        } else {
            out.push((name, value));
        }
    }
    out
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
        let endpoint = host.merge_request(import.endpoint.clone());
        Imported { host: host.name.clone(), endpoint, new_host }
    }
}

/// The headers that carry credentials (named in `host.secret_headers`, their values returned
/// for the secret store; a later one of the same name wins) and the rest, for the endpoint (a
/// later one of the same name, in any case, wins). A secret-looking header with an empty value
/// is neither: it is no secret, and a profile refuses it among plain headers.
fn split_secrets(
    headers: Vec<(String, String)>,
    host: &mut HostProfile,
) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut plain = BTreeMap::new();
    let mut secrets: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if looks_secret(&name) {
            if !holds_secret(&lower, &value) {
                continue;
            }
            if !host.secret_headers.contains(&lower) {
                host.secret_headers.push(lower.clone());
            }
            secrets.retain(|(known, _)| *known != lower);
            secrets.push((lower, value));
        } else {
            plain.retain(|known: &String, _| !known.eq_ignore_ascii_case(&name));
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
    match SHORT_WITH_VALUE.iter().find(|short| word.len() > 2 && word.starts_with(*short)) {
        Some(short) => (short, Some(word[2..].to_owned())),
        None => (word, None),
    }
}

/// `-sSo FILE`, `-sXPOST`: flags bundled before one option that takes a value → (`sS`, `-o`)
/// and (`s`, `-XPOST`).
fn split_bundle(word: &str) -> Option<(&str, String)> {
    let body = word.strip_prefix('-').filter(|body| !body.starts_with('-'))?;
    let at = body.find(|flag| !(IGNORED_SHORT.contains(flag) || flag == 'G')).filter(|&at| at > 0)?;
    let option = format!("-{}", &body[at..]);
    SHORT_WITH_VALUE.iter().any(|short| option.starts_with(short)).then(|| (&body[..at], option))
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

    fn no_files(path: &std::path::Path) -> Result<Vec<u8>, String> {
        match path.file_name().and_then(|name| name.to_str()) {
            Some("body.json") => Ok(b"{\"a\": 1}\n".to_vec()),
            Some("login.txt") => Ok(b"user=a&password=hunter2".to_vec()),
            _ => Err(format!("cannot read {}: not found", path.display())),
        }
    }

    fn parse(command: &str) -> Result<CurlImport, CurlError> {
        parse_curl_with(command, &no_files)
    }

    /// A paste of a request the host lists already (`GET /items` of the demo profile, there
    /// named `items`) updates that endpoint instead of adding a twin; its batch template stays.
    #[test]
    fn a_paste_of_a_listed_request_updates_that_endpoint() {
        let mut profile = Profile::from_toml(crate::profile::DEMO_TOML).unwrap();
        let host = |profile: &Profile| profile.hosts.iter().find(|host| host.name == "demo API").unwrap().clone();
        let before = host(&profile).endpoints.len();
        let import = parse("curl 'http://127.0.0.1:8787/items/' -H 'accept: application/json'").unwrap();
        let added = profile.add_curl_import(&import);
        assert_eq!(added.endpoint, "items", "the listed endpoint's name is kept");
        let after = host(&profile);
        assert_eq!(after.endpoints.len(), before, "no twin: {}", after.endpoint_names());
        let items = after.endpoints.iter().find(|endpoint| endpoint.name == "items").unwrap();
        assert_eq!(items.headers.get("accept").map(String::as_str), Some("application/json"));
        assert!(items.batch.is_some(), "what the paste does not say is kept");
        let other = parse("curl -X DELETE 'http://127.0.0.1:8787/items'").unwrap();
        let added = profile.add_curl_import(&other);
        assert_eq!(
            host(&profile).endpoints.len(),
            before + 1,
            "another method is another endpoint ({})",
            added.endpoint
        );
    }

    #[test]
    fn a_pasted_post_becomes_a_host_an_endpoint_and_a_secret() {
        let command = r#"curl -sS -X POST 'https://api.example.com:8443/v1/chat?stream=false' \
  -H 'Authorization: Bearer sk-live-123' \
  -H "Content-Type: application/json" -H 'X-Api-Key: k-9' \
  --data-raw '{"model": "m", "max_tokens": 5}'"#;
        let import = parse(command).unwrap();
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
        let debug = format!("{import:?}");
        assert!(debug.contains("authorization") && !debug.contains("sk-live"), "{debug}");
    }

    #[test]
    fn curl_defaults_are_kept_data_means_post_and_get_moves_it_to_the_query() {
        let post = parse("curl localhost:8787/items -d a=1 -d b=2").unwrap();
        assert_eq!(post.host.base_url, "http://localhost:8787");
        assert_eq!(post.endpoint.method.as_deref(), Some("POST"));
        assert_eq!(post.endpoint.body.as_deref(), Some("a=1&b=2"));
        let get = parse("curl -G http://h/items?x=1 --data page=2").unwrap();
        assert_eq!(get.endpoint.method, None);
        assert_eq!(get.endpoint.path, "/items?x=1&page=2");
        assert_eq!(get.endpoint.body, None);
        let user = parse("curl -u alice:s3cret https://h/me").unwrap();
        assert_eq!(user.secrets, [("authorization".to_owned(), "Basic YWxpY2U6czNjcmV0".to_owned())]);
        let in_url = parse("curl https://bob:p%40ss@h/me").unwrap();
        assert_eq!(in_url.host.base_url, "https://h", "credentials leave the URL");
        assert_eq!(in_url.secrets, [("authorization".to_owned(), basic("bob:p@ss"))], "decoded as curl does");
        let json = parse("curl --json @body.json https://h/x -XPUT").unwrap();
        assert_eq!(json.endpoint.method.as_deref(), Some("PUT"));
        assert_eq!(json.endpoint.body.as_deref(), Some("{\"a\": 1}\n"), "the file's text is kept, not its name");
        assert_eq!(json.endpoint.body_file, None);
        assert_eq!(json.endpoint.headers["Content-Type"], "application/json");
        let head = parse("curl -I --max-time 5 https://h/").unwrap();
        assert_eq!(head.endpoint.method.as_deref(), Some("HEAD"));
        assert_eq!(head.ignored, ["--max-time 5"]);
        let bundled = parse("curl -sSo out.json -sXPUT https://h/x -sLH 'Accept: a'").unwrap();
        assert_eq!(bundled.endpoint.method.as_deref(), Some("PUT"));
        assert_eq!(bundled.endpoint.headers["Accept"], "a");
        assert_eq!(bundled.ignored, ["-sS", "-o out.json", "-s", "-sL"]);
        let piped = parse("$ curl https://h/x | jq . && echo done").unwrap();
        assert_eq!(
            (piped.endpoint.path.as_str(), piped.ignored.as_slice()),
            ("/x", ["everything from '|' on".to_owned()].as_slice())
        );
        let bearer = parse("curl --oauth2-bearer t0k https://h/").unwrap();
        assert_eq!(bearer.secrets, [("authorization".to_owned(), "Bearer t0k".to_owned())]);
    }

    #[test]
    fn an_import_joins_the_host_with_its_base_url_or_adds_one() {
        let mut profile = Profile::new("team");
        let first = parse("curl -H 'Authorization: Bearer a' https://api.example.com/items").unwrap();
        let added = profile.add_curl_import(&first);
        assert_eq!(added, Imported { host: "api.example.com".into(), endpoint: "GET /items".into(), new_host: true });
        let second = parse("curl -X DELETE -H 'Cookie: s=1' https://API.example.com/items/7").unwrap();
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
            ("", CurlError::Empty),
            ("  \n # only a comment\n", CurlError::Empty),
            ("wget https://h/", CurlError::NotCurl("wget".into())),
            ("curl -s", CurlError::NoUrl),
            ("curl https://a/ https://b/", CurlError::TwoUrls("https://a/".into(), "https://b/".into())),
            ("curl https://h/ -H", CurlError::MissingValue("-H".into())),
            ("curl https://h/ -H nocolon", CurlError::BadHeader("***".into())),
            ("curl -T up.bin https://h/", CurlError::Unsupported("-T".into())),
            ("curl -Ecert.pem:pw https://h/", CurlError::Unsupported("-E".into())),
            ("curl 'https://h/x?api_key=abc'", CurlError::SecretInQuery("api_key".into())),
            ("curl -F a=b -d c https://h/", CurlError::FormAndData),
            ("curl -d @- https://h/", CurlError::DataFromStdin),
            ("curl ‘https://h/x’", CurlError::SmartQuotes),
            ("curl https://h/ -H “Accept: x”", CurlError::SmartQuotes),
        ];
        for (command, expected) in cases {
            assert_eq!(parse(command).unwrap_err(), expected, "{command}");
        }
        let ftp = parse("curl ftp://h/file").unwrap_err().to_string();
        assert!(ftp.contains("only http and https"), "{ftp}");
        let secret = parse("curl 'https://h/x?api_key=abc'").unwrap_err().to_string();
        assert!(!secret.contains("abc"), "{secret}");
        assert!(parse("curl -d @nope.json https://h/").unwrap_err().to_string().contains("nope.json"));
    }

    /// Finding 2: credentials in names the old rule missed never reach the profile.
    #[test]
    fn credentials_in_any_header_query_or_body_spelling_stay_out_of_the_profile() {
        for header in ["X-Auth-Key", "Ocp-Apim-Subscription-Key", "DD-APPLICATION-KEY", "X-CMC_PRO_API_KEY"] {
            let import = parse(&format!("curl https://h/x -H '{header}: V4LUE'")).unwrap();
            assert_eq!(import.secrets, [(header.to_ascii_lowercase(), "V4LUE".to_owned())], "{header}");
            assert!(import.endpoint.headers.is_empty(), "{header}");
        }
        for field in ["client_secret", "password", "refresh_token"] {
            let err = parse(&format!("curl https://h/token -d 'grant_type=x&{field}=V4LUE'")).unwrap_err();
            assert_eq!(err, CurlError::SecretInBody(field.into()));
            assert!(!err.to_string().contains("V4LUE"));
        }
        let json = parse(r#"curl https://h/login --json '{"user":"a","login":{"password":"V4LUE"}}'"#);
        assert_eq!(json.unwrap_err(), CurlError::SecretInBody("login.password".into()));
        assert_eq!(
            parse("curl https://h/login -d @login.txt").unwrap_err(),
            CurlError::SecretInBody("password".into())
        );
        for query in ["access_key", "appid", "private_key", "sig", "X-Amz-Signature"] {
            let err = parse(&format!("curl 'https://h/x?page=1&{query}=V4LUE'")).unwrap_err();
            assert_eq!(err, CurlError::SecretInQuery(query.into()));
        }
        let empty = parse("curl 'https://h/x?token=&page=1' -d 'password='").unwrap();
        assert_eq!(empty.endpoint.body.as_deref(), Some("password="), "an empty value is no secret");
    }

    /// Finding 3: no message shows a credential.
    #[test]
    fn errors_and_ignored_options_show_urls_and_headers_redacted() {
        let cases = [
            "curl https://h/ -H 'Authorization Bearer sk-X'",
            "curl https://u:sk-X@a.example/ https://v:sk-X@b.example/",
            "curl 'http://user:sk-X@h:99999/'",
            "curl 'http://user:sk-X@[::1/'",
            "curl https://h/ -H X-Api-Key: sk-X",
            "curl https://h/ -H 'X-Api-Key sk-X'",
            "https://u:sk-X@h/ curl",
            "curl -Esk-X https://h/",
            "curl --oauth2-bearer=sk-X",
        ];
        for command in cases {
            let err = parse(command).unwrap_err().to_string();
            assert!(!err.contains("sk-X"), "{command}: {err}");
        }
        let proxy = parse("curl -x http://user:PASS@proxy:3128 -U bob:PASS2 https://h/").unwrap();
        assert_eq!(proxy.ignored, ["-x http://user:***@proxy:3128/", "-U ***"]);
        let two = parse("curl https://u:pw@a.example/ https://b.example/").unwrap_err();
        assert_eq!(two, CurlError::TwoUrls("https://u:***@a.example/".into(), "https://b.example/".into()));
    }

    /// Finding 4: an empty header is curl's way to drop it, and no secret.
    #[test]
    fn an_empty_credential_header_is_dropped_not_stored() {
        let import = parse("curl https://h/ -u a:b -H 'Authorization:' -H 'Cookie;' -H 'X-Trace;'").unwrap();
        assert!(import.secrets.is_empty(), "{:?}", import.secrets);
        assert!(import.host.secret_headers.is_empty());
        assert_eq!(import.endpoint.headers, BTreeMap::from([("X-Trace".into(), String::new())]));
        let json = parse("curl https://h/ --json '{}' -H 'Accept:'").unwrap();
        assert_eq!(
            json.endpoint.headers.keys().collect::<Vec<_>>(),
            ["Content-Type"],
            "a dropped default stays dropped"
        );
    }

    /// Finding 7: too many headers is an error naming the cap, not a panic.
    #[test]
    fn too_many_headers_are_refused_naming_the_cap() {
        let command = format!("curl https://h/ {}", "-H 'X-A: 1' ".repeat(MAX_REQUEST_HEADERS_FOR_TEST + 1));
        let err = parse(&command).unwrap_err();
        assert!(matches!(err, CurlError::TooManyHeaders(_)), "{err:?}");
        assert!(err.to_string().contains(&MAX_REQUEST_HEADERS_FOR_TEST.to_string()), "{err}");
        let fine = format!("curl https://h/ {}", "-H 'X-A: 1' ".repeat(MAX_REQUEST_HEADERS_FOR_TEST));
        assert_eq!(parse(&fine).unwrap().endpoint.headers.len(), 1, "one name, the last value");
    }

    const MAX_REQUEST_HEADERS_FOR_TEST: usize = crate::http::header_cap::MAX_REQUEST_HEADERS;

    /// Finding 11: ordinary pastes read as curl reads them.
    #[test]
    fn pastes_read_as_curl_reads_them() {
        let ansi = parse(r#"curl 'https://h/x' --data-raw $'{"note":"a\\nb","q":"it\'s \\"x\\""}'"#).unwrap();
        assert_eq!(ansi.endpoint.body.as_deref(), Some(r#"{"note":"a\nb","q":"it's \"x\""}"#));
        let encoded = parse("curl https://h/x --data-urlencode 'q=a b&c' --data-urlencode @body.json").unwrap();
        assert_eq!(encoded.endpoint.body.as_deref(), Some("q=a%20b%26c&%7B%22a%22%3A%201%7D%0A"));
        let cookies = parse("curl https://h/ -b 'a=1; b=2' -H 'Cookie: c=3' -b jar.txt").unwrap();
        assert_eq!(cookies.secrets, [("cookie".to_owned(), "a=1; b=2; c=3".to_owned())], "both, as one secret");
        assert_eq!(cookies.ignored, ["-b jar.txt (a cookie file is not read)"]);
        let form = parse("curl https://h/upload -F title=x -F 'note=<body.json'").unwrap();
        assert_eq!(form.endpoint.method.as_deref(), Some("POST"));
        assert!(form.endpoint.headers["Content-Type"].starts_with("multipart/form-data; boundary="));
        assert!(form.endpoint.body.as_deref().unwrap().contains("name=\"note\"\r\n\r\n{\"a\": 1}\n\r\n"));
        let dup = parse("curl https://h/ -H 'accept: a' -H 'Accept: b'").unwrap();
        assert_eq!(dup.endpoint.headers, BTreeMap::from([("Accept".into(), "b".into())]), "the later wins");
    }
}
