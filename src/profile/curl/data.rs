//! The body a curl command sends, built from its data options as curl builds it (`-d`,
//! `--data-raw`, `--data-binary`, `--data-urlencode`, `--json`, `-F`).

use std::path::{Path, PathBuf};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::CurlError;

/// What `--data-urlencode` leaves as is (curl's `curl_easy_escape`: RFC 3986's unreserved).
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
/// The boundary of a multipart body made from `-F` options (fixed, so an import is repeatable).
pub(crate) const FORM_BOUNDARY: &str = "------------------------ratescopeform7d1e";

/// Reads a file the command names (`-d @FILE`): its bytes, or why not (naming the file).
pub type ReadFile<'a> = &'a dyn Fn(&Path) -> Result<Vec<u8>, String>;

/// How a data option treats its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataKind {
    /// `-d`, `--data`, `--data-ascii`: `@FILE` is read with its line breaks removed.
    Ascii,
    /// `--data-raw`: the value as written, `@` included.
    Raw,
    /// `--data-binary` and `--json`: `@FILE` is read as it is.
    Binary,
    /// `--data-urlencode`: `content`, `=content`, `name=content`, `@FILE` or `name@FILE`, encoded.
    UrlEncode,
}

/// One data option's share of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text, as curl sends it.
    Text(String),
    /// A file sent as it is (`--data-binary @FILE`), by its absolute path, and its bytes.
    File { path: PathBuf, bytes: Vec<u8> },
}

/// The part of the body one data option of `kind` with `value` sends.
pub(crate) fn piece(kind: DataKind, value: &str, read: ReadFile<'_>) -> Result<Piece, CurlError> {
    match kind {
        DataKind::Raw => Ok(Piece::Text(value.to_owned())),
        DataKind::Ascii | DataKind::Binary => match value.strip_prefix('@') {
            None => Ok(Piece::Text(value.to_owned())),
            Some(file) => {
                let (path, bytes) = read_file(file, read)?;
                if kind == DataKind::Binary {
                    return Ok(Piece::File { path, bytes });
                }
                let kept: Vec<u8> = bytes.into_iter().filter(|byte| !matches!(byte, b'\r' | b'\n')).collect();
                Ok(Piece::Text(text(kept, &path)?))
            }
        },
        DataKind::UrlEncode => url_encoded(value, read).map(Piece::Text),
    }
}

/// `--data-urlencode` and `--url-query`: `name=content` with the content encoded, and so on.
pub(crate) fn url_encoded(value: &str, read: ReadFile<'_>) -> Result<String, CurlError> {
    let encode = |bytes: &[u8]| percent_encoding::percent_encode(bytes, UNRESERVED).to_string();
    let (name, content) = match value.find(['=', '@']) {
        Some(at) if value[at..].starts_with('@') => {
            let (_, bytes) = read_file(&value[at + 1..], read)?;
            (&value[..at], encode(&bytes))
        }
        Some(at) => (&value[..at], utf8_percent_encode(&value[at + 1..], UNRESERVED).to_string()),
        None => ("", utf8_percent_encode(value, UNRESERVED).to_string()),
    };
    Ok(if name.is_empty() { content } else { format!("{name}={content}") })
}

/// A file named in the command, by its absolute path (a relative one is read from the current
/// directory, as curl reads it), and its bytes.
fn read_file(file: &str, read: ReadFile<'_>) -> Result<(PathBuf, Vec<u8>), CurlError> {
    if file == "-" {
        return Err(CurlError::DataFromStdin);
    }
    let path = std::path::absolute(file).unwrap_or_else(|_| PathBuf::from(file));
    let bytes = read(&path).map_err(CurlError::DataFile)?;
    Ok((path, bytes))
}

fn text(bytes: Vec<u8>, path: &Path) -> Result<String, CurlError> {
    String::from_utf8(bytes).map_err(|_| CurlError::BinaryData(path.display().to_string()))
}

/// One `-F`/`--form` option: a field, or a file to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormPart {
    name: String,
    value: String,
    filename: Option<String>,
    content_type: Option<String>,
}

/// `-F name=value`, `-F name=@FILE[;type=T][;filename=F]` (an upload) or `-F name=<FILE` (the
/// field's value read from a file); `--form-string` (`literal`) takes the value as written.
pub(crate) fn form_part(value: &str, literal: bool, read: ReadFile<'_>) -> Result<FormPart, CurlError> {
    let Some((name, content)) = value.split_once('=') else {
        return Err(CurlError::BadForm);
    };
    let name = name.to_owned();
    let upload = content.strip_prefix('@');
    let from_file = content.strip_prefix('<');
    let (Some(spec), false) = (upload.or(from_file), literal) else {
        return Ok(FormPart { name, value: content.to_owned(), filename: None, content_type: None });
    };
    let mut fields = spec.split(';');
    let file = fields.next().unwrap_or_default();
    let (mut content_type, mut filename) = (None, None);
    for field in fields {
        match field.trim().split_once('=') {
            Some(("type", kind)) => content_type = Some(kind.to_owned()),
            Some(("filename", name)) => filename = Some(name.trim_matches('"').to_owned()),
            _ => {}
        }
    }
    let (path, bytes) = read_file(file, read)?;
    let value = text(bytes, &path)?;
    if upload.is_some() {
        let base = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        filename = Some(filename.unwrap_or(base));
        content_type = Some(content_type.unwrap_or_else(|| guessed_type(&path).to_owned()));
    }
    Ok(FormPart { name, value, filename, content_type })
}

/// The type curl gives an uploaded file by its extension (the common ones).
fn guessed_type(path: &Path) -> &'static str {
    match path.extension().and_then(|ext| ext.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("txt") => "text/plain",
        Some("json") => "application/json",
        Some("csv") => "text/csv",
        Some("html" | "htm") => "text/html",
        Some("xml") => "application/xml",
        _ => "application/octet-stream",
    }
}

/// The multipart body of `parts`, as curl lays it out, with [`FORM_BOUNDARY`].
pub(crate) fn multipart(parts: &[FormPart]) -> String {
    let mut body = String::new();
    for part in parts {
        body.push_str(&format!("--{FORM_BOUNDARY}\r\nContent-Disposition: form-data; name=\"{}\"", part.name));
        if let Some(filename) = &part.filename {
            body.push_str(&format!("; filename=\"{filename}\""));
        }
        body.push_str("\r\n");
        if let Some(kind) = &part.content_type {
            body.push_str(&format!("Content-Type: {kind}\r\n"));
        }
        body.push_str(&format!("\r\n{}\r\n", part.value));
    }
    body.push_str(&format!("--{FORM_BOUNDARY}--\r\n"));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(path: &Path) -> Result<Vec<u8>, String> {
        match path.file_name().and_then(|name| name.to_str()) {
            Some("body.json") => Ok(b"{\"a\":\n 1}\r\n".to_vec()),
            Some("note.txt") => Ok("hé & you".as_bytes().to_vec()),
            Some("photo.png") => Ok(vec![0x89, b'P', b'N', b'G', 0xff]),
            _ => Err(format!("cannot read {}: not found", path.display())),
        }
    }

    #[test]
    fn data_options_send_what_curl_sends() {
        let text = |kind, value| match piece(kind, value, &files).unwrap() {
            Piece::Text(text) => text,
            Piece::File { .. } => panic!("{value}: a file"),
        };
        assert_eq!(text(DataKind::Ascii, "@body.json"), "{\"a\": 1}", "-d @FILE drops line breaks");
        assert_eq!(text(DataKind::Raw, "@body.json"), "@body.json");
        assert_eq!(text(DataKind::UrlEncode, "q=a b&c/é"), "q=a%20b%26c%2F%C3%A9");
        assert_eq!(text(DataKind::UrlEncode, "=a b"), "a%20b");
        assert_eq!(text(DataKind::UrlEncode, "a b"), "a%20b");
        assert_eq!(text(DataKind::UrlEncode, "note@note.txt"), "note=h%C3%A9%20%26%20you");
        assert_eq!(text(DataKind::UrlEncode, "@note.txt"), "h%C3%A9%20%26%20you");
        let Piece::File { path, bytes } = piece(DataKind::Binary, "@body.json", &files).unwrap() else { panic!() };
        assert!(path.is_absolute() && path.ends_with("body.json"), "{}", path.display());
        assert_eq!(bytes, b"{\"a\":\n 1}\r\n");
        assert!(
            matches!(piece(DataKind::Ascii, "@nope", &files), Err(CurlError::DataFile(why)) if why.contains("nope"))
        );
        assert_eq!(piece(DataKind::Ascii, "@-", &files), Err(CurlError::DataFromStdin));
        assert!(matches!(piece(DataKind::Ascii, "@photo.png", &files), Err(CurlError::BinaryData(_))));
    }

    #[test]
    fn form_options_make_a_multipart_body() {
        let parts = [
            form_part("title=holiday", false, &files).unwrap(),
            form_part("doc=@note.txt;type=text/x-note", false, &files).unwrap(),
            form_part("text=<note.txt", false, &files).unwrap(),
            form_part("raw=@note.txt", true, &files).unwrap(),
        ];
        let body = multipart(&parts);
        let b = FORM_BOUNDARY;
        assert_eq!(
            body,
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nholiday\r\n\
                 --{b}\r\nContent-Disposition: form-data; name=\"doc\"; filename=\"note.txt\"\r\nContent-Type: text/x-note\r\n\r\nhé & you\r\n\
                 --{b}\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nhé & you\r\n\
                 --{b}\r\nContent-Disposition: form-data; name=\"raw\"\r\n\r\n@note.txt\r\n\
                 --{b}--\r\n"
            )
        );
        assert_eq!(form_part("novalue", false, &files), Err(CurlError::BadForm));
        assert!(matches!(form_part("p=@photo.png", false, &files), Err(CurlError::BinaryData(_))));
    }
}
