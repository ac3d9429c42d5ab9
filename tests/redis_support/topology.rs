//! Private Redis topologies for tests: a Cluster of masters and replicas, and a TLS server with an ACL user, on free loopback ports.
//!
//! Everything is started from Debian's `redis-server` / `redis-cli` / `openssl` binaries in a
//! temporary directory and killed when dropped. Without the binaries the caller skips with a
//! NOTICE, or fails under `RATESCOPE_REQUIRE_REDIS=1`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::skip_or_fail;

/// A free loopback port whose cluster bus port (+10000) is free too.
fn free_port_pair() -> Option<u16> {
    for _ in 0..200 {
        let listener = TcpListener::bind("127.0.0.1:0").ok()?;
        let port = listener.local_addr().ok()?.port();
        if port > 55_000 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Some(port);
        }
    }
    None
}

/// Starts `redis-server` in `dir`, its log (stdout and stderr) going to `dir/log`.
fn spawn_server(dir: &Path, log: &str, args: &[String]) -> Result<Child, String> {
    let log = std::fs::File::create(dir.join(log)).map_err(|err| format!("{log}: {err}"))?;
    let log_too = log.try_clone().map_err(|err| err.to_string())?;
    Command::new("redis-server")
        .args(args)
        .current_dir(dir)
        .stdout(log)
        .stderr(log_too)
        .spawn()
        .map_err(|err| format!("redis-server: {err}"))
}

/// The last lines of a server's log, for an error that says why it did not come up.
fn log_tail(dir: &Path, log: &str) -> String {
    let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// How a freshly spawned server's wait for PING ended.
enum Startup {
    Answered,
    Exited(std::process::ExitStatus),
    TimedOut,
}

/// Waits until the server answers PING on `url` (over TLS trusting `ca`, when given), exits,
/// or `patience` passes.
async fn wait_for_startup(child: &mut Child, url: &str, ca: Option<&Path>, patience: Duration) -> Startup {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Startup::Exited(status);
        }
        if ping(url, ca).await {
            return Startup::Answered;
        }
        if tokio::time::Instant::now() >= deadline {
            return Startup::TimedOut;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Starts a server with `spawn(port)` (its process and its log's file name in `dir`) on a free
/// port and waits until it answers PING at `url(port)` (over TLS trusting `ca`, when given). A
/// free port can be taken between our probe and the server's bind (tests run side by side),
/// so a server that exits or stays silent is started again on another port, up to five
/// times, never on a port in `avoid` or on one's cluster bus port; the error then carries the
/// logs' last lines.
async fn start_on_a_free_port(
    dir: &Path,
    avoid: &[u16],
    url: impl Fn(u16) -> String,
    ca: Option<&Path>,
    mut spawn: impl FnMut(u16) -> Result<(Child, String), String>,
) -> Result<(u16, Child), String> {
    let mut failures = Vec::new();
    for _ in 0..5 {
        let port = free_port_pair().ok_or("no free loopback port pair")?;
        if avoid.iter().any(|taken| *taken == port || taken.abs_diff(port) == 10_000) {
            continue;
        }
        let (mut child, log) = spawn(port)?;
        let failure = match wait_for_startup(&mut child, &url(port), ca, Duration::from_secs(15)).await {
            Startup::Answered => return Ok((port, child)),
            Startup::Exited(status) => status.to_string(),
            Startup::TimedOut => {
                let _ = child.kill();
                let _ = child.wait();
                "no PONG in 15 s".to_owned()
            }
        };
        failures.push(format!("port {port}: {failure}: {}", log_tail(dir, &log)));
    }
    Err(format!("nothing came up in five tries: {}", failures.join("; ")))
}

async fn ping(url: &str, ca: Option<&Path>) -> bool {
    let client = match ca {
        Some(ca) => {
            let Ok(pem) = std::fs::read(ca) else { return false };
            redis::Client::build_with_tls(url, redis::TlsCertificates { client_tls: None, root_cert: Some(pem) })
        }
        None => redis::Client::open(url),
    };
    let Ok(client) = client else { return false };
    let Ok(Ok(mut connection)) =
        tokio::time::timeout(Duration::from_secs(1), client.get_multiplexed_async_connection()).await
    else {
        return false;
    };
    redis::cmd("PING").query_async::<String>(&mut connection).await.is_ok()
}

async fn wait_for(what: &str, mut ready: impl AsyncFnMut() -> bool) -> Result<(), String> {
    for _ in 0..400 {
        if ready().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("waited 10 s for this in vain: {what}"))
}

/// One node of a private cluster.
pub struct ClusterNode {
    pub port: u16,
    child: Option<Child>,
}

/// A Redis Cluster of the test's own: `masters` masters with `replicas` replicas each, a node
/// timeout of 1 s (so a replica takes over about 2 s after its master dies), no persistence.
pub struct PrivateCluster {
    pub nodes: Vec<ClusterNode>,
    _dir: tempfile::TempDir,
}

impl PrivateCluster {
    /// Starts and joins the cluster, or `None` after the skip notice.
    pub async fn start(masters: usize, replicas: usize) -> Option<Self> {
        match Self::try_start(masters, replicas).await {
            Ok(cluster) => Some(cluster),
            Err(err) => {
                skip_or_fail(&format!("a private Redis Cluster could not start: {err}"));
                None
            }
        }
    }

    async fn try_start(masters: usize, replicas: usize) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
        let mut nodes: Vec<ClusterNode> = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            nodes.push(Self::start_node(dir.path(), &nodes).await?);
        }
        let cluster = Self { nodes, _dir: dir };
        let addresses: Vec<String> = cluster.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)).collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|err| format!("redis-cli: {err}"))?;
        if !created.status.success() {
            return Err(format!("redis-cli --cluster create: {}", String::from_utf8_lossy(&created.stderr)));
        }
        cluster.wait_until_healthy(masters).await?;
        Ok(cluster)
    }

    /// Starts one cluster node that answers PING, on a port no other node has.
    async fn start_node(dir: &Path, others: &[ClusterNode]) -> Result<ClusterNode, String> {
        let taken: Vec<u16> = others.iter().map(|node| node.port).collect();
        let url = |port| format!("redis://127.0.0.1:{port}");
        let spawn = |port: u16| {
            let args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &format!("nodes-{port}.conf"),
                "--cluster-node-timeout",
                "1000",
                // A replica syncs at once (not after the default 5 s) and may always take over.
                "--repl-diskless-sync-delay",
                "0",
                "--cluster-replica-validity-factor",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .map(str::to_owned)
            .to_vec();
            let log = format!("node-{port}.log");
            Ok((spawn_server(dir, &log, &args)?, log))
        };
        let (port, child) = start_on_a_free_port(dir, &taken, url, None, spawn)
            .await
            .map_err(|err| format!("a cluster node: {err}"))?;
        Ok(ClusterNode { port, child: Some(child) })
    }

    /// Waits until every live node says the cluster is ok and `masters` masters serve all slots.
    pub async fn wait_until_healthy(&self, masters: usize) -> Result<(), String> {
        let live: Vec<u16> = self.nodes.iter().filter(|node| node.child.is_some()).map(|node| node.port).collect();
        wait_for("the cluster reported cluster_state:ok with every slot served", async || {
            for port in &live {
                let Ok(info) = node_command(*port, &["CLUSTER", "INFO"]).await else { return false };
                let ok = info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384");
                if !ok || !info.contains(&format!("cluster_size:{masters}")) {
                    return false;
                }
                // A replica counts once its first sync is done (else it could not take over).
                let Ok(replication) = node_command(*port, &["INFO", "replication"]).await else { return false };
                if replication.contains("role:slave") && !replication.contains("master_link_status:up") {
                    return false;
                }
            }
            true
        })
        .await
    }

    /// `redis+cluster://` over every node as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The port of the master that owns `key`'s slot now.
    pub async fn master_of(&self, key: &str) -> u16 {
        let any = self.nodes.iter().find(|node| node.child.is_some()).expect("a live node").port;
        let client = redis::Client::open(format!("redis://127.0.0.1:{any}")).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query_async(&mut connection).await.unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut connection).await.unwrap();
        for range in slots {
            let redis::Value::Array(range) = range else { continue };
            let (Some(redis::Value::Int(start)), Some(redis::Value::Int(end)), Some(redis::Value::Array(master))) =
                (range.first(), range.get(1), range.get(2))
            else {
                continue;
            };
            if (*start..=*end).contains(&i64::from(slot))
                && let Some(redis::Value::Int(port)) = master.get(1)
            {
                return u16::try_from(*port).unwrap();
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// Whether `master`'s replica has applied every write the master had made just before it was
    /// asked: its link is up and its applied offset has reached the master's. (Asked of the
    /// replica itself: the master learns a replica's offset only from its once-a-second ack.)
    pub async fn replica_caught_up(&self, master: u16) -> bool {
        let Ok(info) = node_command(master, &["INFO", "replication"]).await else { return false };
        let field = |text: &str, name: &str| -> Option<u64> {
            text.lines().find_map(|line| line.trim().strip_prefix(name)?.parse().ok())
        };
        let Some(written) = field(&info, "master_repl_offset:") else { return false };
        // `slave0:ip=127.0.0.1,port=7001,state=online,offset=…,lag=…`
        let replica = info.lines().find_map(|line| {
            let fields = line.trim().strip_prefix("slave0:")?;
            fields.contains("state=online").then_some(())?;
            fields.split(',').find_map(|pair| pair.strip_prefix("port=")?.parse::<u16>().ok())
        });
        let Some(replica) = replica else { return false };
        let Ok(info) = node_command(replica, &["INFO", "replication"]).await else { return false };
        info.contains("master_link_status:up") && field(&info, "slave_repl_offset:").is_some_and(|done| done >= written)
    }

    /// Kills the node on `port` with SIGKILL (as a crash would).
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|node| node.port == port)
            && let Some(mut child) = node.child.take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A plain connection to one node (for reading state straight from it).
    pub async fn node_connection(&self, port: u16) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// Script calls every node has served, added up: (EVALSHA, EVAL).
    pub async fn script_calls(&self) -> (u64, u64) {
        let mut total = (0, 0);
        for node in &self.nodes {
            let (evalsha, eval) = script_calls(node.port).await;
            total = (total.0 + evalsha, total.1 + eval);
        }
        total
    }
}

/// Script calls the plaintext server on `port` has served: (EVALSHA, EVAL), from `INFO commandstats`.
pub async fn script_calls(port: u16) -> (u64, u64) {
    let info = node_command(port, &["INFO", "commandstats"]).await.unwrap();
    let calls = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{name}:")))
            .and_then(|stats| stats.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (calls("evalsha"), calls("eval"))
}

/// One command to one node, its reply as text.
async fn node_command(port: u16, words: &[&str]) -> redis::RedisResult<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    command.query_async(&mut connection).await
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The ACL user the TLS server lets run the decision script, and nothing else.
pub const ACL_USER: &str = "ratescope-app";
/// Its password (the tests pass it through an environment variable, as a profile must).
pub const ACL_PASSWORD: &str = "s3cret-for-tests";

/// A TLS-only redis-server with a CA made at start, the default user off, and one ACL user
/// ([`ACL_USER`]) limited to the decision script's commands and `{ratescope…` keys.
pub struct TlsRedis {
    pub port: u16,
    pub ca_file: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    /// Starts one, or `None` after the skip notice (no redis-server, no openssl).
    pub async fn start() -> Option<Self> {
        match Self::try_start().await {
            Ok(server) => Some(server),
            Err(err) => {
                skip_or_fail(&format!("a private TLS redis-server could not start: {err}"));
                None
            }
        }
    }

    async fn try_start() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
        make_certificates(dir.path())?;
        let ca_file = dir.path().join("ca.crt");
        let spawn = |port| Ok((Self::spawn(dir.path(), port)?, "redis.log".to_owned()));
        let (port, child) = start_on_a_free_port(dir.path(), &[], admin_url, Some(&ca_file), spawn).await?;
        Ok(Self { port, ca_file, child, _dir: dir })
    }

    /// Writes the server's configuration for `port` and starts it.
    fn spawn(dir: &Path, port: u16) -> Result<Child, String> {
        let conf = format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n\
             tls-cert-file server.crt\ntls-key-file server.key\ntls-ca-cert-file ca.crt\ntls-auth-clients no\n\
             user default off\n\
             user {ACL_USER} on >{ACL_PASSWORD} ~{{ratescope* resetchannels -@all \
             +evalsha +eval +ping +hello +time +get +set +zcount +zcard +zrange \
             +zremrangebyscore +zadd +incrby +pexpire\n\
             user admin on >admin-{ACL_PASSWORD} ~* &* +@all\n"
        );
        std::fs::write(dir.join("redis.conf"), conf).map_err(|err| err.to_string())?;
        spawn_server(dir, "redis.log", &["redis.conf".to_owned()])
    }

    /// `rediss://USER:PASSWORD@127.0.0.1:PORT` for the ACL user.
    pub fn url(&self) -> String {
        format!("rediss://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{}", self.port)
    }

    /// The same server as an administrator who may run anything (for reading state).
    pub fn admin_url(&self) -> String {
        admin_url(self.port)
    }

    /// An administrator connection over TLS.
    pub async fn admin(&self) -> redis::aio::MultiplexedConnection {
        let pem = std::fs::read(&self.ca_file).unwrap();
        redis::Client::build_with_tls(
            self.admin_url(),
            redis::TlsCertificates { client_tls: None, root_cert: Some(pem) },
        )
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The administrator's URL of a TLS server on `port`.
fn admin_url(port: u16) -> String {
    format!("rediss://admin:admin-{ACL_PASSWORD}@127.0.0.1:{port}")
}

/// A CA and a server certificate for 127.0.0.1 and localhost signed by it (`ca.crt`,
/// `server.crt`, `server.key` in `dir`), valid for a day.
fn make_certificates(dir: &Path) -> Result<(), String> {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|err| err.to_string())?;
    let new_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let steps = [
        format!("req -x509 {new_key} -keyout ca.key -out ca.crt -days 1 -subj /CN=ratescope-test-CA"),
        format!("req {new_key} -keyout server.key -out server.csr -subj /CN=localhost"),
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile server.ext"
            .to_owned(),
    ];
    for step in steps {
        let output = Command::new("openssl")
            .args(step.split_whitespace())
            .current_dir(dir)
            .output()
            .map_err(|err| format!("openssl: {err}"))?;
        if !output.status.success() {
            return Err(format!("openssl {step}: {}", String::from_utf8_lossy(&output.stderr)));
        }
    }
    Ok(())
}
