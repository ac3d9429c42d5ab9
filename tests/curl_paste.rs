//! Real "Copy as cURL" pastes (Chrome and Firefox, bash and cmd flavours, in
//! `tests/fixtures/curl/`) read by `profile import-curl`'s parser: the request a browser sent,
//! its credentials set apart, nothing of them in the profile.

use std::path::Path;

use ratescope::profile::{CurlError, CurlImport, parse_curl_with};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/curl");

const JSON_BASH: &str =
    r#"{"title":"Groceries","note":"milk\neggs","quote":"she said \"it's fine\"","tags":["a&b","100%"]}"#;
const JSON_PRETTY: &str =
    "{\n  \"title\": \"Groceries\",\n  \"quote\": \"she said \\\"it's fine\\\"\",\n  \"tags\": [\"a&b\", \"100%\"]\n}";
const FORM: &str = "email=alice%40example.com&topics=news&topics=deals&comment=hi+there%21";
const CHROME_BOUNDARY: &str = "----WebKitFormBoundary7MA4YWxkTrZu0gW";
const FIREFOX_BOUNDARY: &str = "---------------------------41184676334";

fn files(path: &Path) -> Result<Vec<u8>, String> {
    match path.file_name().and_then(|name| name.to_str()) {
        Some("mydata.jsonl") => Ok(b"{\"prompt\": \"a\"}\n".to_vec()),
        _ => Err(format!("cannot read {}: not found", path.display())),
    }
}

fn import(fixture: &str) -> Result<CurlImport, CurlError> {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join(fixture)).unwrap();
    parse_curl_with(&text, &files)
}

fn multipart(boundary: &str, file: &str, line_end: &str) -> String {
    format!(
        "--{boundary}{e}Content-Disposition: form-data; name=\"title\"{e}{e}holiday{e}--{boundary}{e}Content-Disposition: form-data; name=\"photo\"; filename=\"notes.txt\"{e}Content-Type: text/plain{e}{e}{file}{e}--{boundary}--{e}",
        e = line_end
    )
}

/// The request each paste describes: path, method, body, its credentials, a header to check.
struct Expected {
    path: &'static str,
    method: Option<&'static str>,
    body: Option<String>,
    secrets: Vec<(&'static str, &'static str)>,
    header: (&'static str, &'static str),
}

fn expected(fixture: &str) -> Expected {
    let chrome = fixture.starts_with("chrome");
    let cmd = fixture.contains("-cmd-");
    let cookie = ("cookie", "session=abc123; theme=dark");
    let csrf = ("x-csrf-token", "9f8e7d6c");
    let kind = fixture.rsplit('-').next().unwrap().trim_end_matches(".txt");
    match kind {
        "get" => Expected {
            path: "/api/items?page=2&limit=20&sort=-price",
            method: None,
            body: None,
            secrets: if chrome { vec![csrf, cookie] } else { vec![cookie, csrf] },
            header: if chrome {
                ("sec-ch-ua", r#""Google Chrome";v="131", "Chromium";v="131", "Not_A Brand";v="24""#)
            } else {
                ("Accept-Language", "en-GB,en;q=0.5")
            },
        },
        "json" => Expected {
            path: "/api/notes",
            method: Some("POST"),
            body: Some(if cmd { JSON_PRETTY } else { JSON_BASH }.to_owned()),
            secrets: if chrome { vec![cookie] } else { vec![cookie, csrf] },
            header: if chrome { ("content-type", "application/json") } else { ("Content-Type", "application/json") },
        },
        "form" => Expected {
            path: "/newsletter",
            method: Some("POST"),
            body: Some(FORM.to_owned()),
            secrets: if chrome { vec![] } else { vec![cookie, csrf] },
            header: if chrome {
                ("content-type", "application/x-www-form-urlencoded")
            } else {
                ("Content-Type", "application/x-www-form-urlencoded")
            },
        },
        "multipart" => {
            // Chrome leaves a file's bytes out; cmd's `^` escapes carry line feeds, not CR LF.
            let end = if cmd { "\n" } else { "\r\n" };
            let (boundary, file) = if chrome { (CHROME_BOUNDARY, "") } else { (FIREFOX_BOUNDARY, "hello\n") };
            Expected {
                path: "/api/upload",
                method: Some("POST"),
                body: Some(multipart(boundary, file, end)),
                secrets: if chrome { vec![cookie] } else { vec![cookie, csrf] },
                header: if chrome { ("accept", "*/*") } else { ("Accept", "*/*") },
            }
        }
        other => panic!("no expectation for {other}"),
    }
}

#[test]
fn browser_pastes_of_every_flavour_read_as_the_request_the_browser_sent() {
    let mut seen = 0;
    for browser in ["chrome", "firefox"] {
        for shell in ["bash", "cmd"] {
            for kind in ["get", "json", "form", "multipart"] {
                let fixture = format!("{browser}-{shell}-{kind}.txt");
                let import = import(&fixture).unwrap_or_else(|err| panic!("{fixture}: {err}"));
                let want = expected(&fixture);
                let endpoint = &import.endpoint;
                assert_eq!(import.host.base_url, "https://shop.example.com", "{fixture}");
                assert_eq!(endpoint.path, want.path, "{fixture}");
                assert_eq!(endpoint.method.as_deref(), want.method, "{fixture}");
                assert_eq!(endpoint.body, want.body, "{fixture}");
                let secrets: Vec<(&str, &str)> =
                    import.secrets.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
                assert_eq!(secrets, want.secrets, "{fixture}");
                assert_eq!(endpoint.headers.get(want.header.0).map(String::as_str), Some(want.header.1), "{fixture}");
                let ua = endpoint.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("user-agent"));
                assert!(ua.is_some_and(|(_, value)| value.starts_with("Mozilla/5.0 (X11")), "{fixture}: {ua:?}");
                let profile = format!("{:?}", (&import.host, endpoint));
                assert!(!profile.contains("abc123") && !profile.contains("9f8e7d6c"), "{fixture}: {profile}");
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 16);
}

#[test]
fn a_pasted_login_form_is_refused_naming_the_password_field_only() {
    let err = import("chrome-bash-login.txt").unwrap_err();
    assert_eq!(err, CurlError::SecretInBody("password".into()));
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn an_upload_from_the_docs_reads_its_file_and_keeps_the_key_out() {
    let import = import("docs-bash-upload.txt").unwrap();
    let key = ("authorization".to_owned(), "Bearer ${EXAMPLE_API_KEY}".to_owned());
    assert_eq!(import.secrets, [key], "the shell variable becomes a reference the secret store resolves");
    let endpoint = &import.endpoint;
    assert_eq!((endpoint.name.as_str(), endpoint.method.as_deref()), ("POST /v1/files", Some("POST")));
    let body = endpoint.body.as_deref().unwrap();
    assert!(body.contains("name=\"purpose\"\r\n\r\nfine-tune\r\n"), "{body}");
    assert!(
        body.contains("name=\"file\"; filename=\"mydata.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n{\"prompt\": \"a\"}\n\r\n"),
        "{body}"
    );
    assert!(endpoint.headers["Content-Type"].starts_with("multipart/form-data; boundary="));
}
