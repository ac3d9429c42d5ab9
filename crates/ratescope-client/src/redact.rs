//! What looks secret, and how messages hide it: one rule for header names, query parameters and
//! form or JSON body fields ([`looks_secret`]), shared by `profile import-curl`, profiles, the app
//! and every message that shows a URL ([`redact_url`]) or a header ([`redact_header`]).
//!
//! # The rule
//!
//! A name is read as lower-case words, split at `-`, `_`, `.`, spaces and camelCase humps
//! (`X-CMC_PRO_API_KEY` is *x cmc pro api key*, `clientSecret` is *client secret*; a trailing
//! number such as the `256` of `X-Hub-Signature-256` is skipped). It looks secret when
//!
//! - its last word names a credential: `authorization`, `cookie`, `token`, `key`, `secret`,
//!   `password`, `signature`, `sig`, `credential`, `session`, `auth`, `jwt`, ... — unless the word
//!   before says it is not one (`Idempotency-Key`, `Sec-WebSocket-Key`, `public_key`,
//!   `page_token`, `nextPageToken`);
//! - any word is `secret`, `password`, `passwd` or `passphrase` (`client_secret_expires`, too);
//! - its last word, or its last two joined, is a credential written as one word (`apikey`,
//!   `accesstoken`, `sessionid`, `PHPSESSID`, ...);
//! - the whole name is one that APIs use for keys alone: `key` (Google), `appid` (OpenWeather).
//!
//! So `X-Api-Key`, `Ocp-Apim-Subscription-Key`, `DD-APPLICATION-KEY`, `X-Amz-Signature`,
//! `access_key`, `refresh_token` and `password` look secret; `Content-Type`, `X-Request-Id`,
//! `max_tokens`, `page` and `client_id` do not. A false alarm costs little (a header goes to the
//! secret store; a query parameter or body field is refused with its name), a miss leaks a key.
//! An empty value is never a secret ([`holds_secret`] checks both). [`secret_fields`] applies
//! the rule to a form, JSON or multipart body.

use std::borrow::Cow;

use serde_json::Value;

/// Last words that name a credential.
const CREDENTIAL_WORDS: [&str; 24] = [
    "authorization",
    "authentication",
    "auth",
    "cookie",
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "signature",
    "sig",
    "credential",
    "credentials",
    "session",
    "jwt",
    "otp",
    "totp",
    "hmac",
    "verifier",
    "bearer",
    "apikey",
];
/// Words that make a name secret wherever they stand.
const ANYWHERE_WORDS: [&str; 4] = ["secret", "password", "passwd", "passphrase"];
/// Credentials written as one word (matched against the last word and the last two joined).
const JOINED: [&str; 27] = [
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "authkey",
    "appkey",
    "subscriptionkey",
    "masterkey",
    "clientkey",
    "licensekey",
    "signingkey",
    "accesstoken",
    "authtoken",
    "apitoken",
    "refreshtoken",
    "idtoken",
    "sessiontoken",
    "bearertoken",
    "csrftoken",
    "xsrftoken",
    "sessionid",
    "sessid",
    "phpsessid",
    "jsessionid",
    "clientsecret",
    "appsecret",
    "apisecret",
];
/// Whole names (as written, any case) that carry a key by themselves.
const WHOLE_NAMES: [&str; 2] = ["key", "appid"];
/// Words before `key` that say the key is not a credential.
const NOT_SECRET_KEYS: [&str; 21] = [
    "socket",
    "idempotency",
    "idempotent",
    "cache",
    "sort",
    "partition",
    "primary",
    "foreign",
    "websocket",
    "public",
    "publishable",
    "object",
    "dedup",
    "dedupe",
    "deduplication",
    "routing",
    "lookup",
    "row",
    "range",
    "hash",
    "shard",
];
/// Words before `token` that say the token is a cursor, not a credential.
const NOT_SECRET_TOKENS: [&str; 7] = ["page", "next", "continuation", "sync", "cursor", "pagination", "resume"];

/// What messages show in place of a secret.
pub const MASK: &str = "***";

/// Whether a header name, query parameter or body field (any case) looks like it carries a
/// secret (see the module documentation for the rule). A name looks secret when its spelling
/// or its lower-case spelling does (`VCookie` is *v cookie*; `http::HeaderName` would give
/// `vcookie`), so whatever a caller lower-cases stays on the same side.
pub fn looks_secret(name: &str) -> bool {
    spelling_looks_secret(name) || spelling_looks_secret(&name.to_lowercase())
}

fn spelling_looks_secret(name: &str) -> bool {
    let mut words = words(name);
    while words.len() > 1 && words.last().is_some_and(|word| word.bytes().all(|b| b.is_ascii_digit())) {
        words.pop();
    }
    let Some(last) = words.last() else { return false };
    if WHOLE_NAMES.iter().any(|whole| name.trim().eq_ignore_ascii_case(whole)) {
        return true;
    }
    if words.iter().any(|word| ANYWHERE_WORDS.contains(&word.as_str())) {
        return true;
    }
    let before = words.len().checked_sub(2).map(|index| words[index].as_str());
    let last_two = before.map(|before| format!("{before}{last}"));
    if JOINED.contains(&last.as_str()) || last_two.as_deref().is_some_and(|joined| JOINED.contains(&joined)) {
        return true;
    }
    // A name written in lower case lost its humps (`awssecretaccesskey`, `x-mytoken`): its last
    // word still ends like a credential.
    if JOINED.iter().chain(&ANYWHERE_WORDS).any(|end| last.ends_with(end))
        || last.strip_suffix("token").is_some_and(|start| !start.is_empty() && !NOT_SECRET_TOKENS.contains(&start))
    {
        return true;
    }
    if !CREDENTIAL_WORDS.contains(&last.as_str()) {
        return false;
    }
    let excluded: &[&str] = match last.as_str() {
        "key" => &NOT_SECRET_KEYS,
        "token" => &NOT_SECRET_TOKENS,
        _ => &[],
    };
    !before.is_some_and(|before| excluded.contains(&before))
}

/// Whether a header, query parameter or body field named `name` holds a secret: its name looks
/// secret and its value is not blank (an empty value is no secret).
pub fn holds_secret(name: &str, value: &str) -> bool {
    !value.trim().is_empty() && looks_secret(name)
}

/// The fields of `body` that look secret and hold something: in a multipart body (by the
/// boundary of `content_type`), a JSON body (dotted paths: `auth.password`) or a form body.
pub fn secret_fields(body: &str, content_type: Option<&str>) -> Vec<String> {
    if let Some(boundary) = content_type.and_then(multipart_boundary) {
        return multipart_secrets(body, boundary);
    }
    let mut found = Vec::new();
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        json_secrets(&value, "", &mut found);
        return found;
    }
    // Not one JSON document (two joined, a JavaScript object, a form around JSON): any quoted
    // key before a colon counts, and so does any form field.
    quoted_key_secrets(body, &mut found);
    for (name, value) in url::form_urlencoded::parse(body.as_bytes()) {
        if holds_secret(&name, &value) && !found.contains(&name.to_string()) {
            found.push(name.into_owned());
        }
    }
    found
}

/// `"key": value` anywhere in `text` whose key looks secret and whose value is not `""`,
/// `null` or missing.
fn quoted_key_secrets(text: &str, found: &mut Vec<String>) {
    let mut rest = text;
    while let Some(open) = rest.find('"') {
        let after = &rest[open + 1..];
        // The closing quote: the first one no backslash escapes.
        let mut end = None;
        let mut escaped = false;
        for (at, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(at);
                    break;
                }
                _ => escaped = false,
            }
        }
        let Some(end) = end else { return };
        let key = &after[..end];
        rest = &after[end + 1..];
        let Some(value) = rest.trim_start().strip_prefix(':') else { continue };
        let value = value.trim_start();
        let empty = value.is_empty() || value.starts_with("\"\"") || value.starts_with("null");
        if !empty && looks_secret(key) && !found.iter().any(|known| known == key) {
            found.push(key.to_owned());
        }
    }
}

/// The boundary of a `multipart/form-data` content type.
fn multipart_boundary(content_type: &str) -> Option<&str> {
    let (kind, parameters) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    parameters.split(';').find_map(|parameter| {
        let (name, value) = parameter.trim().split_once('=')?;
        name.eq_ignore_ascii_case("boundary").then(|| value.trim_matches('"')).filter(|value| !value.is_empty())
    })
}

fn multipart_secrets(body: &str, boundary: &str) -> Vec<String> {
    let delimiter = format!("--{boundary}");
    let mut found = Vec::new();
    for part in body.split(delimiter.as_str()) {
        let Some((head, content)) = part.split_once("\r\n\r\n").or_else(|| part.split_once("\n\n")) else {
            continue;
        };
        let name = head.split(';').find_map(|field| {
            let value = field.trim().strip_prefix("name=")?;
            Some(value.trim_matches('"').to_owned())
        });
        if let Some(name) = name
            && looks_secret(&name)
            && !content.trim().is_empty()
            && !found.contains(&name)
        {
            found.push(name);
        }
    }
    found
}

/// Secret-looking keys with a value, anywhere in a JSON document.
fn json_secrets(value: &Value, path: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                if looks_secret(key) && !is_empty(inner) {
                    found.push(at);
                } else {
                    json_secrets(inner, &at, found);
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                json_secrets(item, &format!("{path}[{index}]"), found);
            }
        }
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.trim().is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `name` as lower-case words: split at anything not a letter or digit, and where a capital
/// starts a new word (`apiKey`, `APIKey` → api key).
fn words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    for (index, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            continue;
        }
        if c.is_uppercase() && !word.is_empty() {
            let previous = chars[index - 1];
            let next_lower = chars.get(index + 1).is_some_and(|next| next.is_lowercase());
            if previous.is_lowercase() || previous.is_ascii_digit() || (previous.is_uppercase() && next_lower) {
                words.push(std::mem::take(&mut word));
            }
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// `Name: value`, the value masked when the name looks secret and the value is not empty.
pub fn redact_header(name: &str, value: &str) -> String {
    if looks_secret(name) && !value.trim().is_empty() { format!("{name}: {MASK}") } else { format!("{name}: {value}") }
}

/// A header as someone wrote it (`Name: value`, or anything else): with a `:`, as
/// [`redact_header`]; without one, only a first word that looks like a secret header's name is
/// kept (`Authorization Bearer sk-1` → `Authorization ***`), since the rest may be the value.
pub fn redact_header_line(line: &str) -> String {
    if let Some((name, value)) = line.split_once(':') {
        return redact_header(name, value.trim_start());
    }
    let trimmed = line.trim();
    match trimmed.split_once(char::is_whitespace) {
        Some((first, _)) if looks_secret(first) => format!("{first} {MASK}"),
        None if trimmed.len() <= 40 && looks_secret(trimmed) => trimmed.to_owned(),
        _ if trimmed.is_empty() => String::new(),
        _ => MASK.to_owned(),
    }
}

/// A URL (or text meant to be one) fit for a message: a password becomes `***` (and a user name
/// without a password, often a key), and so do the values of query and fragment parameters
/// whose names look secret (`https://u:pw@h/x?key=abc&page=2` → `https://u:***@h/x?key=***&page=2`). Text that does not
/// parse keeps nothing before its last `@`.
pub fn redact_url(text: impl AsRef<str>) -> String {
    let text = text.as_ref();
    let parsed = scheme_end(text).and_then(|_| url::Url::parse(text).ok()).filter(url::Url::has_host);
    let Some(mut url) = parsed else { return redact_unparsed(text) };
    let user = url.username().to_owned();
    let has_password = url.password().is_some();
    // Neither can fail on a URL that had credentials (it has a host).
    let _ = url.set_password(None);
    let _ = url.set_username("");
    let mut shown = url.to_string();
    if (has_password || !user.is_empty())
        && let Some(at) = shown.find("://")
    {
        // A user name beside a password names who logs in (`alice:***@`); alone it is often
        // the key itself (`sk_live_…@`), so it goes too.
        let credentials = if has_password { format!("{user}:{MASK}@") } else { format!("{MASK}@") };
        shown.insert_str(at + 3, &credentials);
    }
    redact_parameters(&shown).into_owned()
}

/// [`redact_url`] for text the URL parser refuses: nothing before the last `@` is kept.
fn redact_unparsed(text: &str) -> String {
    let start = scheme_end(text).unwrap_or(0);
    let masked = match text.rfind('@') {
        Some(at) if at >= start => format!("{}{MASK}{}", &text[..start], &text[at..]),
        _ => text.to_owned(),
    };
    redact_parameters(&masked).into_owned()
}

/// Where what follows `scheme://` starts, when `text` starts with a scheme.
fn scheme_end(text: &str) -> Option<usize> {
    let at = text.find("://")?;
    let scheme = &text[..at];
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(at + 3)
}

/// The query and fragment of `url` with the values of secret-looking names masked.
fn redact_parameters(url: &str) -> Cow<'_, str> {
    let Some(start) = url.find(['?', '#']) else { return Cow::Borrowed(url) };
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..start]);
    let mut rest = &url[start..];
    while !rest.is_empty() {
        // A separator, then one `name=value` up to the next separator.
        let separator = rest.chars().next().map_or(0, char::len_utf8);
        out.push_str(&rest[..separator]);
        rest = &rest[separator..];
        let end = rest.find(['&', ';', '#', '?']).unwrap_or(rest.len());
        let pair = &rest[..end];
        match pair.split_once('=') {
            Some((name, value)) if !value.is_empty() && looks_secret(&percent_decoded(name)) => {
                out.push_str(name);
                out.push('=');
                out.push_str(MASK);
            }
            _ => out.push_str(pair),
        }
        rest = &rest[end..];
    }
    Cow::Owned(out)
}

/// A query name as the server reads it (`+` a space, `%XX` a byte).
fn percent_decoded(name: &str) -> String {
    url::form_urlencoded::parse(format!("{name}=").as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names real APIs send credentials in: the catalogue's providers and common SaaS APIs.
    const SECRET: &[&str] = &[
        // headers
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "x-api-key",     // Anthropic, the demo API
        "api-key",       // Azure OpenAI
        "PRIVATE-TOKEN", // GitLab
        "X-Shopify-Access-Token",
        "X-Auth-Token",              // OpenStack, Rackspace
        "X-Auth-Key",                // Cloudflare (legacy)
        "Ocp-Apim-Subscription-Key", // Azure API Management
        "DD-API-KEY",                // Datadog
        "DD-APPLICATION-KEY",
        "X-CMC_PRO_API_KEY", // CoinMarketCap
        "X-RapidAPI-Key",
        "X-Algolia-API-Key",
        "x-goog-api-key",
        "x-functions-key", // Azure Functions
        "X-Figma-Token",
        "X-Vault-Token",
        "X-Consul-Token",
        "X-CSRF-Token",
        "X-XSRF-TOKEN",
        "X-Amz-Security-Token",
        "X-Postmark-Server-Token",
        "apikey", // Supabase
        "X-Hasura-Admin-Secret",
        "X-Hub-Signature-256", // GitHub webhooks
        "Stripe-Signature",
        "X-Slack-Signature",
        "X-Twilio-Signature",
        "X-Session-Id",
        // query parameters
        "api_key",
        "key",        // Google APIs
        "access_key", // ipstack, Unsplash
        "access_token",
        "appid", // OpenWeather
        "private_key",
        "sig",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Goog-Signature",
        "token",
        "auth",
        "oauth_token",
        "oauth_signature",
        "code_verifier",
        "PHPSESSID",
        "JSESSIONID",
        "session_id",
        // form and JSON body fields
        "client_secret",
        "password",
        "refresh_token",
        "id_token",
        "apiKey",
        "accessToken",
        "clientSecret",
        "secretKey",
        "AWSSecretAccessKey",
        "new_password",
        "x-mytoken",
        "passphrase",
    ];

    /// Names that must stay in profiles and messages as they are.
    const PLAIN: &[&str] = &[
        "Content-Type",
        "Accept",
        "Accept-Encoding",
        "User-Agent",
        "X-Request-Id",
        "Idempotency-Key", // Stripe
        "Stripe-Version",
        "Stripe-Account",
        "OpenAI-Organization",
        "anthropic-version",
        "X-GitHub-Api-Version",
        "X-RateLimit-Limit",
        "Sec-WebSocket-Key",
        "Referer",
        "Origin",
        "Cache-Control",
        "X-Amz-Date",
        "X-Amz-SignedHeaders",
        "X-Algolia-Application-Id",
        "sec-ch-ua",
        "page",
        "limit",
        "offset",
        "per_page",
        "cursor",
        "pageToken",
        "next_page_token",
        "max_tokens",
        "total_tokens",
        "model",
        "messages",
        "client_id",
        "app_id",
        "grant_type",
        "token_type",
        "oauth_signature_method",
        "public_key",
        "author",
        "keyword",
        "keys",
        "monkey",
        "secretary",
        "tokens",
        "q",
        "",
        "-_-",
    ];

    #[test]
    fn one_rule_names_the_credentials_of_real_apis_and_leaves_the_rest() {
        assert!(SECRET.len() >= 40, "the table covers at least 40 real names");
        // Header names reach the rule lower-cased too (`http::HeaderName`): the same answer.
        let lower = |name: &&str| name.to_ascii_lowercase();
        let secret: Vec<String> = SECRET.iter().map(|name| name.to_string()).chain(SECRET.iter().map(lower)).collect();
        let plain: Vec<String> = PLAIN.iter().map(|name| name.to_string()).chain(PLAIN.iter().map(lower)).collect();
        let missed: Vec<&String> = secret.iter().filter(|name| !looks_secret(name)).collect();
        assert!(missed.is_empty(), "secret names not recognised: {missed:?}");
        let flagged: Vec<&String> = plain.iter().filter(|name| looks_secret(name)).collect();
        assert!(flagged.is_empty(), "plain names taken for secrets: {flagged:?}");
    }

    #[test]
    fn secret_fields_are_found_in_forms_json_and_multipart_bodies() {
        let form = "grant_type=refresh_token&client_id=app&client_secret=s3&refresh_token=r1&password=";
        assert_eq!(secret_fields(form, None), ["client_secret", "refresh_token"], "an empty value is no secret");
        let json =
            r#"{"model":"m","max_tokens":5,"auth":{"user":"a","password":"p"},"items":[{"apiKey":"k"}],"token":null}"#;
        assert_eq!(secret_fields(json, Some("application/json")), ["auth", "items[0].apiKey"]);
        let graphql = r#"{"query":"mutation { login }","variables":{"input":{"refreshToken":"r"}}}"#;
        assert_eq!(secret_fields(graphql, None), ["variables.input.refreshToken"]);
        let multipart = "--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n--XyZ\r\nContent-Disposition: form-data; name=\"api_key\"\r\n\r\nk-1\r\n--XyZ--\r\n";
        assert_eq!(secret_fields(multipart, Some("multipart/form-data; boundary=XyZ")), ["api_key"]);
        assert!(secret_fields("just some text", Some("text/plain")).is_empty());
        let joined = r#"{"user":{"appid":"k"}}&{"user":{"appid":"k"}}"#;
        assert_eq!(secret_fields(joined, Some("application/json")), ["appid"], "two documents joined");
        assert_eq!(secret_fields(r#"{token: 1, "apiKey" : "k", "password": ""}"#, None), ["apiKey"]);
        assert!(
            secret_fields(r#"{"model":"m","messages":[{"role":"user","content":"my password is"}]}"#, None).is_empty()
        );
    }

    #[test]
    fn names_split_at_separators_and_camel_case() {
        assert_eq!(words("X-CMC_PRO_API_KEY"), ["x", "cmc", "pro", "api", "key"]);
        assert_eq!(words("AWSAccessKeyId"), ["aws", "access", "key", "id"]);
        assert_eq!(words("clientSecret"), ["client", "secret"]);
        assert_eq!(words("x.hub..sig"), ["x", "hub", "sig"]);
        assert!(looks_secret("VCookie") && looks_secret("APIKEY"), "either spelling decides");
    }

    #[test]
    fn headers_show_their_names_and_mask_secret_values() {
        assert_eq!(redact_header("Authorization", "Bearer sk-1"), "Authorization: ***");
        assert_eq!(redact_header("Accept", "*/*"), "Accept: */*");
        assert_eq!(redact_header("Authorization", ""), "Authorization: ", "an empty value is no secret");
        assert_eq!(redact_header_line("Authorization Bearer sk-1"), "Authorization ***");
        assert_eq!(redact_header_line("X-Api-Key:k-9"), "X-Api-Key: ***");
        assert_eq!(redact_header_line("sk-live-123"), "***", "a lone word may be the value");
        assert_eq!(redact_header_line("Authorization"), "Authorization");
    }

    #[test]
    fn urls_lose_their_credentials_and_secret_parameters() {
        let cases = [
            ("https://alice:PW@h.example/x?page=2", "https://alice:***@h.example/x?page=2"),
            ("https://tok@h.example/", "https://***@h.example/"),
            ("http://u:p@proxy:3128", "http://u:***@proxy:3128/"),
            ("https://h.example/x?key=abc&page=2&api_key=", "https://h.example/x?key=***&page=2&api_key="),
            ("https://h.example/cb#access_token=abc&state=1", "https://h.example/cb#access_token=***&state=1"),
            (
                "https://s3.example/o?X-Amz-Signature=ff&X-Amz-Date=1",
                "https://s3.example/o?X-Amz-Signature=***&X-Amz-Date=1",
            ),
            ("http://user:PASS@[::1", "http://***@[::1"),
            ("http://u:p@h:99999/x?sig=1", "http://***@h:99999/x?sig=***"),
            ("user:pw@host/x", "***@host/x"),
            ("plain text", "plain text"),
            ("user:pw@host/x?u=http://y", "***@host/x?u=http://y"),
            ("https://h.example/a%20b?x_api%5Fkey=1", "https://h.example/a%20b?x_api%5Fkey=***"),
        ];
        for (text, shown) in cases {
            assert_eq!(redact_url(text), shown, "{text}");
        }
    }

    /// The cases of the probe's and the client's messages (a URL already parsed).
    #[test]
    fn parsed_urls_in_messages_hide_user_info_and_secret_parameters() {
        let shown = |text: &str| redact_url(url::Url::parse(text).unwrap());
        assert_eq!(shown("http://alice:PW@host/x"), "http://alice:***@host/x");
        assert_eq!(shown("https://sk_live_123@api.example.com/v1"), "https://***@api.example.com/v1");
        assert_eq!(shown("http://alice:p%40ss@h:8080/a?b=1#f"), "http://alice:***@h:8080/a?b=1#f");
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
            ("http://h/cb#access_token=T&expires_in=3600", "http://h/cb#access_token=***&expires_in=3600"),
        ];
        for (given, expected) in cases {
            assert_eq!(shown(given), expected, "{given}");
        }
        for text in ["http://h/x", "http://h/x?page=2&sort=asc", "http://h/x?key=", "http://[::1]:8/x?"] {
            assert_eq!(shown(text), url::Url::parse(text).unwrap().as_str(), "{text}");
        }
    }
}
