//! Redis for tests: the shared server's URL, whether it is required, and private servers that a test may stop and restart.

#![allow(dead_code)]

pub mod children;
pub mod topology;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The shared server (`RATESCOPE_REDIS_URL`, default redis://127.0.0.1:6379).
pub fn redis_url() -> String {
    std::env::var("RATESCOPE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// `RATESCOPE_REQUIRE_REDIS=1`: a missing server (or redis-server binary) fails instead of skipping.
pub fn redis_required() -> bool {
    std::env::var("RATESCOPE_REQUIRE_REDIS").is_ok_and(|value| value == "1")
}

/// Skips (with a visible notice) or, when Redis is required, fails.
pub fn skip_or_fail(what: &str) {
    if redis_required() {
        panic!("Redis is required (RATESCOPE_REQUIRE_REDIS=1) but {what}");
    }
    notice(&format!("skipping Redis test: {what} (set RATESCOPE_REQUIRE_REDIS=1 to fail instead)"));
}

/// A line on the real stderr: libtest captures `eprintln!` of a passing test, so a skip said
/// that way would never be seen.
pub fn notice(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "NOTICE: {text}");
}

/// Whether the shared server answers PING.
pub async fn shared_server_up() -> bool {
    let Ok(client) = redis::Client::open(redis_url()) else { return false };
    let Ok(Ok(mut connection)) =
        tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection()).await
    else {
        return false;
    };
    redis::cmd("PING").query_async::<String>(&mut connection).await.is_ok()
}

/// Deletes every key of the shared server matching `pattern` (a test's own keys, at its end).
pub async fn delete_keys(pattern: &str) {
    let client = redis::Client::open(redis_url()).expect("the Redis URL the test already used");
    let mut raw = client.get_multiplexed_async_connection().await.expect("a connection to the shared server");
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut raw).await.expect("KEYS");
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut raw).await.expect("DEL");
    }
}

/// A redis-server of the test's own on a free loopback port, without persistence, that the
/// test can stop and start again on the same port. Stopped when dropped.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts one, or `None` (after the skip notice) when there is no `redis-server` binary.
    pub async fn start() -> Option<Self> {
        let port = match TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()) {
            Ok(address) => address.port(),
            Err(err) => {
                skip_or_fail(&format!("no loopback port for a private redis-server: {err}"));
                return None;
            }
        };
        let mut server = Self { port, child: None };
        if let Err(err) = server.restart().await {
            skip_or_fail(&format!("a private redis-server could not start: {err}"));
            return None;
        }
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (as a crash would).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and waits until it answers.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| format!("redis-server: {err}"))?;
        self.child = Some(child);
        let client = redis::Client::open(self.url()).map_err(|err| err.to_string())?;
        for _ in 0..200 {
            if let Ok(mut connection) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING").query_async::<String>(&mut connection).await.is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err("it did not answer PING within 5 s".to_owned())
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `faketime` (libfaketime) can run programs with a skewed clock.
pub fn faketime_available() -> bool {
    Command::new("faketime").args(["-f", "+1h", "true"]).status().is_ok_and(|status| status.success())
}
