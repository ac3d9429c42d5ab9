//! Third-party server-side rate limiters (Flask-Limiter, express-rate-limit, nginx limit_req) on 127.0.0.1 for conformance tests.
//!
//! Include with `#[path = "thirdparty/mod.rs"] mod thirdparty;`. Each constructor returns `None`
//! (after a notice on stderr naming the install command) when its tool is missing, or panics
//! instead when `RATESCOPE_REQUIRE_THIRDPARTY=1`. See tests/thirdparty/README.md.

#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a Flask or Express server may take to print its `listening on` line.
const LINE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long nginx may take to accept connections.
const NGINX_TIMEOUT: Duration = Duration::from_secs(5);

/// A third-party rate-limited server on 127.0.0.1, killed (and waited on) when dropped.
/// `GET /items` is limited, `GET /health` is not.
pub struct ThirdParty {
    /// `http://127.0.0.1:PORT/`
    pub base: url::Url,
    child: Child,
    _dir: Option<tempfile::TempDir>,
}

impl ThirdParty {
    /// Flask + Flask-Limiter (`limit` like `"10 per 2 second"`, `strategy` one of
    /// `moving-window`, `fixed-window`, `sliding-window-counter`), Retry-After in delta-seconds.
    pub fn flask_limiter(limit: &str, strategy: &str) -> Option<Self> {
        Self::flask_limiter_with(limit, strategy, "delta-seconds")
    }

    /// As [`Self::flask_limiter`], with Flask-Limiter's Retry-After style: `delta-seconds` or `http-date`.
    pub fn flask_limiter_with(limit: &str, strategy: &str, retry_after: &str) -> Option<Self> {
        const INSTALL: &str = "python3 -m pip install -r tests/thirdparty/requirements.txt";
        match Command::new("python3").args(["-c", "import flask, flask_limiter"]).output() {
            Err(err) => return missing(&format!("python3 cannot run ({err}); install Python 3, then `{INSTALL}`")),
            Ok(output) if !output.status.success() => {
                let why = String::from_utf8_lossy(&output.stderr);
                let why = why.trim().lines().last().unwrap_or("import failed");
                return missing(&format!("python3 cannot import flask_limiter ({why}); run `{INSTALL}`"));
            }
            Ok(_) => {}
        }
        let script = fixture_dir().join("flask_limiter_server.py");
        let mut command = Command::new("python3");
        command.arg(script).args(["--port", "0", "--limit", limit, "--strategy", strategy]);
        command.args(["--retry-after", retry_after, "--exit-on-eof"]);
        Some(spawn_announced("Flask-Limiter server", command))
    }

    /// Express + express-rate-limit: `headers` is `draft-6`, `draft-7`, `draft-8` (standard
    /// headers of that draft, no legacy ones) or `legacy` (X-RateLimit-* only).
    pub fn express(window_ms: u64, limit: u64, headers: &str) -> Option<Self> {
        const INSTALL: &str = "npm ci --prefix tests/thirdparty";
        if let Err(err) = Command::new("node").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
            return missing(&format!("node cannot run ({err}); install Node.js 20, then `{INSTALL}`"));
        }
        let modules = fixture_dir().join("node_modules");
        for package in ["express", "express-rate-limit"] {
            if !modules.join(package).join("package.json").is_file() {
                return missing(&format!("{} lacks {package}; run `{INSTALL}`", modules.display()));
            }
        }
        let mut command = Command::new("node");
        command.arg(fixture_dir().join("express_server.js"));
        command.args(["--port", "0", "--window-ms", &window_ms.to_string(), "--limit", &limit.to_string()]);
        command.args(["--headers", headers, "--exit-on-eof"]);
        Some(spawn_announced("Express server", command))
    }

    /// nginx with `limit_req_zone ... rate=RATE` (`rate` like `"10r/s"` or `"30r/m"`) and
    /// `limit_req burst=BURST [nodelay]` on `/items`, 429 on rejection. `burst` 0 leaves the
    /// burst parameter out (nginx refuses `burst=0`).
    pub fn nginx(rate: &str, burst: u32, nodelay: bool) -> Option<Self> {
        let Some(binary) = nginx_binary() else {
            return missing(
                "no nginx binary (neither `nginx` on PATH nor /usr/sbin/nginx); run `apt-get install -y nginx`",
            );
        };
        let template = std::fs::read_to_string(fixture_dir().join("nginx.conf.template"))
            .expect("tests/thirdparty/nginx.conf.template is readable");
        let template = if burst == 0 {
            template.replace("burst={{BURST}}", "")
        } else {
            template.replace("{{BURST}}", &burst.to_string())
        };
        let template = template.replace("{{RATE}}", rate).replace("{{NODELAY}}", if nodelay { "nodelay" } else { "" });
        let mut last_failure = String::new();
        // The port is chosen here and released before nginx binds it: another process may take
        // it in between, so a bind failure is retried on a fresh port.
        for _ in 0..3 {
            match start_nginx(&binary, &template) {
                Ok(server) => return Some(server),
                Err((failure, retry)) if retry => last_failure = failure,
                Err((failure, _)) => panic!("nginx fixture did not start: {failure}"),
            }
        }
        panic!("nginx fixture did not start: {last_failure}");
    }

    /// `base` joined with `path` (e.g. `"/items"`).
    pub fn url(&self, path: &str) -> url::Url {
        self.base.join(path).expect("a path relative to http://127.0.0.1:PORT/")
    }

    pub fn port(&self) -> u16 {
        self.base.port().expect("the base URL names its port")
    }
}

impl Drop for ThirdParty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `RATESCOPE_REQUIRE_THIRDPARTY=1`: a missing tool fails the test instead of skipping it.
pub fn thirdparty_required() -> bool {
    std::env::var("RATESCOPE_REQUIRE_THIRDPARTY").is_ok_and(|value| value == "1")
}

/// Skips (with a visible notice) or, when third-party fixtures are required, fails.
fn missing(what: &str) -> Option<ThirdParty> {
    if thirdparty_required() {
        panic!("third-party fixture required (RATESCOPE_REQUIRE_THIRDPARTY=1) but {what}");
    }
    eprintln!("NOTICE: skipping third-party test: {what} (set RATESCOPE_REQUIRE_THIRDPARTY=1 to fail instead)");
    None
}

/// tests/thirdparty/ in the source tree.
fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("thirdparty")
}

/// Starts a server that prints `listening on 127.0.0.1:PORT` once bound, and waits for that line.
/// Its stdin stays open (the scripts exit when it closes, so a crashed test leaves no server);
/// its stderr goes to a file quoted when it fails to start.
fn spawn_announced(what: &str, mut command: Command) -> ThirdParty {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let stderr_path = dir.path().join("stderr.log");
    let stderr = File::create(&stderr_path).expect("a stderr file in the temporary directory");
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
    let mut child = command.spawn().unwrap_or_else(|err| panic!("{what}: cannot spawn {command:?}: {err}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let first = reader.read_line(&mut line).map(|_| line);
        let _ = sender.send(first);
        // Keep draining, so the server can never block on a full pipe.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = match receiver.recv_timeout(LINE_TIMEOUT) {
        Ok(Ok(line)) if line.is_empty() => {
            startup_failure(what, &command, &mut child, &stderr_path, "it exited before printing its address")
        }
        Ok(Ok(line)) => line,
        Ok(Err(err)) => {
            startup_failure(what, &command, &mut child, &stderr_path, &format!("reading its stdout: {err}"))
        }
        Err(_) => {
            let why = format!("no `listening on` line within {LINE_TIMEOUT:?}");
            startup_failure(what, &command, &mut child, &stderr_path, &why)
        }
    };
    let port = line
        .trim()
        .strip_prefix("listening on 127.0.0.1:")
        .and_then(|port| port.parse::<u16>().ok())
        .filter(|port| *port != 0);
    let Some(port) = port else {
        startup_failure(what, &command, &mut child, &stderr_path, &format!("unexpected first line {line:?}"))
    };
    ThirdParty { base: base_url(port), child, _dir: Some(dir) }
}

/// Kills a server that did not come up and fails with its stderr.
fn startup_failure(what: &str, command: &Command, child: &mut Child, stderr_path: &Path, why: &str) -> ! {
    let _ = child.kill();
    let _ = child.wait();
    let stderr = std::fs::read_to_string(stderr_path).unwrap_or_default();
    panic!("{what} did not start: {why}; command {command:?}; stderr:\n{stderr}");
}

fn base_url(port: u16) -> url::Url {
    url::Url::parse(&format!("http://127.0.0.1:{port}/")).expect("a loopback URL")
}

/// `nginx` on PATH, else Debian's /usr/sbin/nginx (root's PATH has it, a user's may not).
fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join("nginx")).find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|path| path.is_file()))
}

/// One try at nginx on a fresh port; on failure, the reason and whether another port may help.
fn start_nginx(binary: &Path, template: &str) -> Result<ThirdParty, (String, bool)> {
    let fatal = |what: &str, err: std::io::Error| (format!("{what}: {err}"), false);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|err| fatal("binding 127.0.0.1:0", err))?
        .port();
    let dir = tempfile::tempdir().map_err(|err| fatal("creating a temporary directory", err))?;
    let prefix = dir.path().to_path_buf();
    let logs = prefix.join("logs");
    std::fs::create_dir(&logs).map_err(|err| fatal("creating logs/", err))?;
    let config = prefix.join("nginx.conf");
    std::fs::write(&config, template.replace("{{PORT}}", &port.to_string()))
        .map_err(|err| fatal("writing nginx.conf", err))?;
    let output = File::create(logs.join("output.log")).map_err(|err| fatal("creating logs/output.log", err))?;
    let output_err = output.try_clone().map_err(|err| fatal("cloning a file handle", err))?;
    let child = Command::new(binary)
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&config)
        .arg("-e")
        .arg(logs.join("error.log"))
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(output_err)
        .spawn()
        .map_err(|err| fatal(&format!("spawning {}", binary.display()), err))?;
    // From here on, dropping `server` kills nginx and removes the prefix directory.
    let mut server = ThirdParty { base: base_url(port), child, _dir: Some(dir) };
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + NGINX_TIMEOUT;
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            let text = read_logs(&logs);
            let retry = text.contains("Address already in use");
            return Err((format!("nginx exited ({status}) before answering on {address}:\n{text}"), retry));
        }
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(server);
        }
        if Instant::now() >= deadline {
            return Err((
                format!("nothing answered on {address} within {NGINX_TIMEOUT:?}:\n{}", read_logs(&logs)),
                false,
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// nginx's own output and error log, for a failure message.
fn read_logs(logs: &Path) -> String {
    let mut text = String::new();
    for name in ["output.log", "error.log"] {
        if let Ok(mut file) = File::open(logs.join(name)) {
            let _ = file.read_to_string(&mut text);
        }
    }
    text
}
