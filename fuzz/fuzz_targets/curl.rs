//! Fuzzes `profile import-curl`'s reader: text to `parse_curl_with` (no file is ever read).
//!
//! Two kinds of input. Raw text (anything not starting with 0xFF, such as the browser pastes in
//! the seeds): the reader never panics, and whatever it accepts keeps no secret in the profile by
//! the one rule (`ratescope::redact`): no endpoint header whose name looks secret, no query parameter
//! or body field that holds a secret, every credential for the secret store named as one and
//! not empty. Input starting with 0xFF builds a command around a known secret placed only where
//! credentials go (a header value, user-info, a secret query parameter or body field, `-u`, `-x`,
//! `-b`, a second URL, a header without its colon): then no error message and nothing kept in
//! the profile or the `ignored` list contains it.
#![no_main]

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use ratescope::redact::{holds_secret, looks_secret, redact_header_line, redact_url, secret_fields};
use ratescope::profile::{CurlImport, parse_curl_with};

const SECRET: &str = "zqS3cr3tV4lue";

fn no_files(_: &std::path::Path) -> Result<Vec<u8>, String> {
    Err("no files in the fuzz target".to_owned())
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((0xFF, rest)) => built(rest),
        _ => raw(data),
    }
});

fn raw(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = redact_url(text);
    let _ = redact_header_line(text);
    match parse_curl_with(text, &no_files) {
        Ok(import) => check_profile(&import),
        Err(err) => {
            let _ = err.to_string();
        }
    }
}

/// Nothing secret-looking with a value stays in the host or endpoint.
fn check_profile(import: &CurlImport) {
    let endpoint = &import.endpoint;
    assert!(import.host.headers.is_empty(), "{:?}", import.host);
    for name in endpoint.headers.keys() {
        assert!(!looks_secret(name), "secret-looking header '{name}' kept in the endpoint");
    }
    let url = url::Url::parse(&format!("{}{}", import.host.base_url, endpoint.path));
    if let Ok(url) = url {
        for (name, value) in url.query_pairs() {
            assert!(!holds_secret(&name, &value), "query parameter '{name}' kept");
        }
    }
    if let Some(body) = &endpoint.body {
        let content_type = endpoint
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.as_str());
        let fields = secret_fields(body, content_type);
        assert!(fields.is_empty(), "secret fields kept in the body: {fields:?}");
    }
    for (name, value) in &import.secrets {
        assert!(looks_secret(name) && !value.trim().is_empty(), "{name}");
        assert!(import.host.secret_headers.contains(name), "{name} not listed in secret_headers");
    }
}

/// Single quotes for bash, or `$'…'` with its escapes.
fn quoted(u: &mut Unstructured<'_>, word: &str) -> String {
    if u.arbitrary::<bool>().unwrap_or(false) {
        let escaped: String = word
            .chars()
            .map(|c| match c {
                '\\' => "\\\\".to_owned(),
                '\'' => "\\'".to_owned(),
                '\n' => "\\n".to_owned(),
                other => other.to_string(),
            })
            .collect();
        format!("$'{escaped}'")
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn pick<'a>(u: &mut Unstructured<'_>, items: &[&'a str]) -> &'a str {
    u.choose(items).copied().unwrap_or(items[0])
}

fn built(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let secret_names = ["Authorization", "X-Api-Key", "X-Auth-Key", "Ocp-Apim-Subscription-Key", "Cookie", "PRIVATE-TOKEN"];
    let secret_fields = ["password", "client_secret", "api_key", "access_token", "sig", "appid"];
    let plain = ["page", "limit", "q", "Accept", "X-Request-Id"];
    let scheme = pick(&mut u, &["https://", "http://", "", "ftp://", "http:/"]);
    let user = pick(&mut u, &["", "user:SECRET@", "SECRET@", ":SECRET@"]);
    let host = pick(&mut u, &["h.example", "127.0.0.1:8080", "[::1", "h:99999", "", "h.example:0"]);
    let path = pick(&mut u, &["/x", "", "/a b", "/%zz", "/v1/chat"]);
    let mut url = format!("{scheme}{user}{host}{path}");
    let params = u.int_in_range(0..=3).unwrap_or(0);
    for index in 0..params {
        url.push(if index == 0 { '?' } else { '&' });
        if u.arbitrary::<bool>().unwrap_or(false) {
            url.push_str(&format!("{}=SECRET", pick(&mut u, &secret_fields)));
        } else {
            url.push_str(&format!("{}={}", pick(&mut u, &plain), pick(&mut u, &["1", "", "a b"])));
        }
    }
    let mut words = vec!["curl".to_owned(), quoted(&mut u, &url)];
    let options = u.int_in_range(0..=8).unwrap_or(0);
    for _ in 0..options {
        let choice = u.int_in_range(0..=16).unwrap_or(0);
        let name = pick(&mut u, &secret_names);
        let field = pick(&mut u, &secret_fields);
        let plain_name = pick(&mut u, &plain);
        let word = match choice {
            0 => format!("-H {}", quoted(&mut u, &format!("{name}: Bearer SECRET"))),
            1 => format!("-H {}", quoted(&mut u, &format!("{name} Bearer SECRET"))),
            2 => format!("-H {}", quoted(&mut u, &format!("{name}:"))),
            3 => format!("-H{}", quoted(&mut u, &format!("{name}:SECRET"))),
            4 => format!("-d {}", quoted(&mut u, &format!("a=1&{field}=SECRET"))),
            5 => format!("--json {}", quoted(&mut u, &format!("{{\"user\":{{\"{field}\":\"SECRET\"}}}}"))),
            6 => format!("-u {}", quoted(&mut u, "alice:SECRET")),
            7 => format!("-x {}", quoted(&mut u, "http://proxyuser:SECRET@proxy:3128")),
            8 => format!("-U {}", quoted(&mut u, "proxyuser:SECRET")),
            9 => format!("-b {}", quoted(&mut u, "session=SECRET")),
            10 => "--oauth2-bearer SECRET".to_owned(),
            11 => quoted(&mut u, "https://second:SECRET@other.example/"),
            12 => format!("-F {}", quoted(&mut u, &format!("{field}=SECRET"))),
            13 => format!("--data-urlencode {}", quoted(&mut u, &format!("{field}=SECRET"))),
            14 => "-G".to_owned(),
            15 => format!("-H {}", quoted(&mut u, &format!("{plain_name}: v"))),
            _ => pick(&mut u, &["-T up.bin", "-s", "--compressed", "-X PUT", "-I", "-d x=1"]).to_owned(),
        };
        words.push(word);
    }
    // An option without its value only last: before a word it would take that word.
    if u.arbitrary::<bool>().unwrap_or(false) {
        words.push("-H".to_owned());
    }
    let separator = if u.arbitrary::<bool>().unwrap_or(false) { " \\\n  " } else { " " };
    let command = words.join(separator).replace("SECRET", SECRET);
    match parse_curl_with(&command, &no_files) {
        Ok(import) => {
            check_profile(&import);
            let kept = format!("{:?} {:?} {:?}", import.host, import.endpoint, import.ignored);
            assert!(!kept.contains(SECRET), "the secret is kept in the profile: {kept}\n{command}");
        }
        Err(err) => {
            let message = err.to_string();
            assert!(!message.contains(SECRET), "the message shows the secret: {message}\n{command}");
        }
    }
}
