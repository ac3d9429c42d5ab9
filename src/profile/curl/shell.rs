//! A pasted command split into words as the shell it was written for would split it: bash
//! (quotes, `$'…'` ANSI-C strings, backslashes, line continuations, comments) or Windows cmd
//! (`^` escapes and line continuations, then the C runtime's double quotes and backslashes) —
//! the two flavours browsers' "Copy as cURL" writes.
//!
//! Written here rather than with `shlex`: it has no `$'…'`, and a pass that turned `$'…'` into
//! something `shlex` reads would have to track every quote itself.

/// The shell a command was written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shell {
    /// bash, zsh, sh: what curl's docs and "Copy as cURL (bash)" write.
    Bash,
    /// Windows cmd.exe: "Copy as cURL (cmd)", with `^` escapes and `^` line continuations.
    Cmd,
}

/// A quote was opened and never closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unclosed;

/// `text` as the words its shell would pass to curl.
pub(crate) fn split(text: &str) -> Result<Vec<String>, Unclosed> {
    match flavour(text) {
        Shell::Bash => split_bash(text),
        Shell::Cmd => Ok(split_cmd(text)),
    }
}

/// cmd when a line ends in a `^` continuation, the URL opens with `^"`, or the program is
/// `curl.exe`; bash otherwise (the two read plain words and double quotes alike).
pub(crate) fn flavour(text: &str) -> Shell {
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_end().ends_with('^') && lines.peek().is_some() {
            return Shell::Cmd;
        }
    }
    let start = text.trim_start();
    let program = start.split_whitespace().next().unwrap_or_default();
    let after = start[program.len()..].trim_start();
    if program.to_ascii_lowercase().ends_with("curl.exe") || after.starts_with("^\"") {
        Shell::Cmd
    } else {
        Shell::Bash
    }
}

/// The bytes of one word being read (bytes: `$'\xe9'` makes one byte, not a character).
#[derive(Default)]
struct Word {
    bytes: Vec<u8>,
    started: bool,
}

impl Word {
    fn push(&mut self, c: char) {
        let mut buffer = [0; 4];
        self.bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
        self.started = true;
    }

    fn push_str(&mut self, text: &str) {
        self.bytes.extend_from_slice(text.as_bytes());
        self.started = true;
    }

    fn finish(&mut self, words: &mut Vec<String>) {
        if self.started {
            words.push(text_of(&std::mem::take(&mut self.bytes)));
        }
        self.started = false;
    }
}

/// The word's bytes as text: UTF-8 where they are, and a byte that is not (Firefox writes `é`
/// as `$'\xe9'`) as the Latin-1 character it stands for.
fn text_of(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        text.extend(chunk.invalid().iter().map(|&byte| char::from(byte)));
    }
    text
}

/// bash's word splitting and quote removal (no expansion: `$HOME` stays as written).
fn split_bash(text: &str) -> Result<Vec<String>, Unclosed> {
    let mut chars = text.chars().peekable();
    let mut words = Vec::new();
    let mut word = Word::default();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => word.finish(&mut words),
            '#' if !word.started => {
                // A comment runs to the end of the line.
                while chars.next_if(|&c| c != '\n').is_some() {}
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some('\r') if chars.peek() == Some(&'\n') => {
                    chars.next();
                }
                Some(next) => word.push(next),
                None => word.push('\\'),
            },
            '\'' => {
                word.started = true;
                loop {
                    match chars.next().ok_or(Unclosed)? {
                        '\'' => break,
                        inner => word.push(inner),
                    }
                }
            }
            '"' => double_quoted(&mut chars, &mut word)?,
            '$' if chars.peek() == Some(&'\'') => {
                chars.next();
                ansi_c(&mut chars, &mut word)?;
            }
            '$' if chars.peek() == Some(&'"') => {
                chars.next();
                double_quoted(&mut chars, &mut word)?;
            }
            '$' => variable(&mut chars, &mut word),
            other => word.push(other),
        }
    }
    word.finish(&mut words);
    Ok(words)
}

/// After a `$` that bash would expand (outside single quotes): `$NAME` and `${NAME}` become
/// the reference `${NAME}`, which the secret store resolves from the environment when a client
/// is built — so `-H "Authorization: Bearer $API_KEY"` from an API's docs works as it did in the
/// shell. Anything else after the `$` is kept as written.
fn variable(chars: &mut Chars<'_>, word: &mut Word) {
    let braced = chars.next_if_eq(&'{').is_some();
    let mut name = String::new();
    while let Some(c) = chars.next_if(|&c| c.is_ascii_alphanumeric() || c == '_') {
        name.push(c);
    }
    let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    let closed = !braced || chars.next_if_eq(&'}').is_some();
    if valid && closed {
        word.push_str(&format!("${{{name}}}"));
    } else {
        word.push('$');
        if braced {
            word.push('{');
        }
        word.push_str(&name);
    }
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// The rest of a `"…"`: a backslash escapes only `$`, `` ` ``, `"`, `\` and a newline.
fn double_quoted(chars: &mut Chars<'_>, word: &mut Word) -> Result<(), Unclosed> {
    word.started = true;
    loop {
        match chars.next().ok_or(Unclosed)? {
            '"' => return Ok(()),
            '\\' => match chars.peek() {
                Some('$' | '`' | '"' | '\\') => word.push(chars.next().ok_or(Unclosed)?),
                Some('\n') => {
                    chars.next();
                }
                _ => word.push('\\'),
            },
            '$' => variable(chars, word),
            inner => word.push(inner),
        }
    }
}

/// The rest of a `$'…'`, its backslash escapes decoded as bash does (`\n`, `\'`, `\\`, `\xHH`,
/// `\uHHHH`, `\NNN` octal, ...). A NUL ends the string's text, as it ends a C string.
fn ansi_c(chars: &mut Chars<'_>, word: &mut Word) -> Result<(), Unclosed> {
    word.started = true;
    let mut ended = false;
    let mut bytes = Vec::new();
    loop {
        let c = chars.next().ok_or(Unclosed)?;
        let before = bytes.len();
        match c {
            '\'' => break,
            '\\' => escape(chars, &mut bytes)?,
            other => bytes.extend_from_slice(other.encode_utf8(&mut [0; 4]).as_bytes()),
        }
        if bytes[before..].contains(&0) {
            ended = true;
        }
        if ended {
            bytes.truncate(before);
        }
    }
    word.bytes.extend_from_slice(&bytes);
    Ok(())
}

/// One escape of a `$'…'` string (after its backslash), appended to `out`.
fn escape(chars: &mut Chars<'_>, out: &mut Vec<u8>) -> Result<(), Unclosed> {
    let c = chars.next().ok_or(Unclosed)?;
    let simple = match c {
        'a' => Some(0x07),
        'b' => Some(0x08),
        'e' | 'E' => Some(0x1b),
        'f' => Some(0x0c),
        'n' => Some(b'\n'),
        'r' => Some(b'\r'),
        't' => Some(b'\t'),
        'v' => Some(0x0b),
        '\\' => Some(b'\\'),
        '\'' => Some(b'\''),
        '"' => Some(b'"'),
        '?' => Some(b'?'),
        _ => None,
    };
    if let Some(byte) = simple {
        out.push(byte);
        return Ok(());
    }
    match c {
        '0'..='7' => {
            let mut value = c.to_digit(8).unwrap_or(0);
            for _ in 0..2 {
                match chars.peek().and_then(|next| next.to_digit(8)) {
                    Some(digit) => {
                        value = value * 8 + digit;
                        chars.next();
                    }
                    None => break,
                }
            }
            // `\777` is 511: bash keeps the low byte.
            out.push((value & 0xff) as u8);
        }
        'x' => match hex_digits(chars, 2) {
            Some(value) => out.push((value & 0xff) as u8),
            None => out.extend_from_slice(b"\\x"),
        },
        'u' | 'U' => {
            let most = if c == 'u' { 4 } else { 8 };
            match hex_digits(chars, most) {
                Some(value) => {
                    if let Some(decoded) = char::from_u32(value) {
                        out.extend_from_slice(decoded.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                }
                None => out.extend_from_slice(if c == 'u' { b"\\u" } else { b"\\U" }),
            }
        }
        'c' => match chars.next() {
            Some(control) if control.is_ascii() => out.push((control as u8) & 0x1f),
            Some(other) => {
                out.extend_from_slice(b"\\c");
                out.extend_from_slice(other.encode_utf8(&mut [0; 4]).as_bytes());
            }
            None => return Err(Unclosed),
        },
        other => {
            out.push(b'\\');
            out.extend_from_slice(other.encode_utf8(&mut [0; 4]).as_bytes());
        }
    }
    Ok(())
}

/// Up to `most` hex digits as a number; `None` when there is not even one.
fn hex_digits(chars: &mut Chars<'_>, most: usize) -> Option<u32> {
    let mut value: Option<u32> = None;
    for _ in 0..most {
        let Some(digit) = chars.peek().and_then(|next| next.to_digit(16)) else { break };
        chars.next();
        value = Some(value.unwrap_or(0) * 16 + digit);
    }
    value
}

/// cmd.exe's pass (carets, continuations) and then the C runtime's argument splitting.
fn split_cmd(text: &str) -> Vec<String> {
    crt_arguments(&cmd_pass(text))
}

/// What cmd.exe hands the program: outside double quotes, `^x` is `x` and `^` at the end of a
/// line joins the next line (whose first character it escapes: Chrome writes a newline inside
/// an argument as `^`, newline, newline). Inside double quotes a caret is itself.
fn cmd_pass(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                out.push('"');
            }
            '^' if !quoted => match chars.next() {
                Some(end @ ('\r' | '\n')) => {
                    if end == '\r' {
                        chars.next_if_eq(&'\n');
                    }
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                Some(next) => out.push(next),
                None => {}
            },
            '\r' => {}
            '\n' if !quoted => out.push(' '),
            other => out.push(other),
        }
    }
    out
}

/// The Microsoft C runtime's rules for a command line: words split at spaces and tabs outside
/// double quotes; `2n` backslashes before a quote are `n` and the quote opens or closes, `2n+1`
/// are `n` and a literal quote; `""` inside quotes is a literal quote; other backslashes are
/// themselves.
fn crt_arguments(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut words = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\n') {
            i += 1;
        }
        if i == chars.len() {
            return words;
        }
        let mut word = String::new();
        let mut quoted = false;
        while i < chars.len() {
            match chars[i] {
                '\\' => {
                    let run = chars[i..].iter().take_while(|&&c| c == '\\').count();
                    let before_quote = chars.get(i + run) == Some(&'"');
                    if before_quote {
                        word.extend(std::iter::repeat_n('\\', run / 2));
                        if run % 2 == 1 {
                            word.push('"');
                            i += run + 1;
                        } else {
                            i += run;
                        }
                    } else {
                        word.extend(std::iter::repeat_n('\\', run));
                        i += run;
                    }
                }
                '"' if quoted && chars.get(i + 1) == Some(&'"') => {
                    word.push('"');
                    i += 2;
                }
                '"' => {
                    quoted = !quoted;
                    i += 1;
                }
                ' ' | '\t' | '\n' if !quoted => break,
                other => {
                    word.push(other);
                    i += 1;
                }
            }
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash(text: &str) -> Vec<String> {
        assert_eq!(flavour(text), Shell::Bash, "{text}");
        split(text).unwrap()
    }

    fn cmd(text: &str) -> Vec<String> {
        assert_eq!(flavour(text), Shell::Cmd, "{text}");
        split(text).unwrap()
    }

    #[test]
    fn bash_quotes_backslashes_and_continuations() {
        assert_eq!(bash("curl 'a b' \"c \\\"d\\\" \\n\" e\\ f"), ["curl", "a b", "c \"d\" \\n", "e f"]);
        assert_eq!(bash("curl 'it'\\''s' ''"), ["curl", "it's", ""]);
        assert_eq!(bash("curl \\\n  -s \\\r\n  x"), ["curl", "-s", "x"]);
        assert_eq!(bash("curl x # a comment 'unclosed\n -s a#b"), ["curl", "x", "-s", "a#b"]);
        assert_eq!(
            bash("curl \"Bearer $TOKEN\" ${HOME}/x '$KEEP' \\$KEEP $5 ${bad-name} $"),
            ["curl", "Bearer ${TOKEN}", "${HOME}/x", "$KEEP", "$KEEP", "$5", "${bad-name}", "$"],
            "what bash expands becomes a reference; the rest stays"
        );
        assert_eq!(split("curl 'x"), Err(Unclosed));
        assert_eq!(split("curl \"x"), Err(Unclosed));
        assert_eq!(split("curl $'x\\'"), Err(Unclosed));
    }

    #[test]
    fn ansi_c_strings_decode_as_bash_does() {
        let cases = [
            (r#"$'{"a":"b\\nc"}'"#, r#"{"a":"b\nc"}"#),
            (r"$'it\'s'", "it's"),
            (r"$'line\nnext\ttab\r'", "line\nnext\ttab\r"),
            (r"$'\u0021 \x41\101 \x7e'", "! AA ~"),
            (r"$'caf\u00e9 \U0001F600'", "café 😀"),
            (r"$'\xe9t\xe9'", "été"),
            (r"$'\q \x \cA'", "\\q \\x \u{1}"),
            (r"$'a\0b'c", "ac"),
            (r#"pre$'\''post"#, "pre'post"),
            (r#"$"x""#, "x"),
        ];
        for (quoted, expected) in cases {
            let words = bash(&format!("curl {quoted}"));
            assert_eq!(words[1], expected, "{quoted}");
        }
    }

    #[test]
    fn cmd_carets_continuations_and_c_runtime_quotes() {
        let chrome = "curl ^\"https://h.example/x?a=1^&b=2^\" ^\n  -H ^\"accept: */*^\" ^\n  --data-raw ^\"^{^\\^\"a^\\^\":^\\^\"line^\n\nnext^\\^\"^}^\"";
        assert_eq!(
            cmd(chrome),
            ["curl", "https://h.example/x?a=1&b=2", "-H", "accept: */*", "--data-raw", "{\"a\":\"line\nnext\"}"]
        );
        assert_eq!(cmd("curl.exe \"a \"\"b\"\"\" c\\\\d \\\"e"), ["curl.exe", "a \"b\"", "c\\\\d", "\"e"]);
        assert_eq!(cmd("curl ^\"x^\" ^\r\n  -s"), ["curl", "x", "-s"]);
        assert_eq!(cmd("curl ^\"100%^ done^\""), ["curl", "100% done"]);
    }
}
