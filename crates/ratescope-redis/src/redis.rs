//! `RedisStore`: shared budgets in Redis (one node or a Cluster), one atomic Lua script per decision, on a reconnecting connection.
//!
//! Keys are `{prefix:key}:tat` for a token bucket (GCRA's theoretical arrival time) and
//! `{prefix:key}:window` plus `{prefix:key}:seq` for a sliding window (a sorted set with
//! one member per admitted unit, named after its admission's number, and the counter that
//! numbers admissions); a budget of another unit than requests adds it after its name
//! (`{prefix:key}:NAME:tokens:window`). The
//! braces are a Redis Cluster hash tag, so all keys of one decision live in one slot.
//! Every write sets a TTL: a key disappears once it no longer changes any answer.
//!
//! Scripts run with EVALSHA; a node that answers NOSCRIPT (after a restart, a failover or
//! `SCRIPT FLUSH`, or a cluster node asked for the first time) gets EVAL, which runs the
//! script and caches it there. In a cluster every decision goes to the one node that owns
//! its key's slot; the cluster client follows MOVED and ASK and refreshes its slot map.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, ErrorKind, RedisError, Script, ServerErrorKind, TlsCertificates};

use super::{SharedBudget, SharedSpec, StoreAddress, StoreDecision, StoreError, micros_ceil};
use ratescope_engine::{Cost, Unit};

/// The decision script as sent to Redis: the clock prelude, the bucket and window steps, then
/// the decision over every budget of a request.
pub const DECIDE_SCRIPT: &str = concat!(
    include_str!("clock.lua"),
    include_str!("gcra.lua"),
    include_str!("window.lua"),
    include_str!("decide.lua")
);

/// The settlement script: the clock prelude, the bucket and window steps, then the correction
/// of one admission in every budget it spent in.
pub const SETTLE_SCRIPT: &str = concat!(
    include_str!("clock.lua"),
    include_str!("gcra.lua"),
    include_str!("window.lua"),
    include_str!("settle.lua")
);

static DECIDE: LazyLock<Script> = LazyLock::new(|| Script::new(DECIDE_SCRIPT));
static SETTLE: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE_SCRIPT));

/// Tries of one command on a cluster (redirections and reconnects included).
const CLUSTER_RETRIES: u32 = 8;

/// The longest any timeout may be; anything above it is a mistake, not a setting.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// Timeouts and reconnection for a [`RedisStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisStoreOptions {
    /// Bound on establishing the connection (each attempt, and `connect` as a whole).
    pub connect_timeout: Duration,
    /// Bound on one decision, including a reload after NOSCRIPT and waiting for a reconnect.
    pub command_timeout: Duration,
    /// Connection attempts after the first before a reconnect gives up until the next call.
    pub reconnect_retries: usize,
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_millis(500),
            reconnect_retries: 2,
        }
    }
}

impl RedisStoreOptions {
    fn validate(&self) -> Result<(), StoreError> {
        for (name, value) in [("connect timeout", self.connect_timeout), ("command timeout", self.command_timeout)] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(StoreError::InvalidSettings(format!(
                    "a {name} must be above zero and at most {MAX_TIMEOUT:?}, not {value:?}"
                )));
            }
        }
        if self.reconnect_retries > 10 {
            return Err(StoreError::InvalidSettings(format!(
                "{} reconnect retries is too many (at most 10)",
                self.reconnect_retries
            )));
        }
        Ok(())
    }

    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.command_timeout))
            .set_number_of_retries(self.reconnect_retries)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
    }
}

/// Budgets kept in Redis and shared by every process that uses the same URL and prefix.
///
/// Cloning is cheap and clones share one multiplexed connection (one per node for a
/// cluster), which reconnects in the background after it drops.
#[derive(Clone)]
pub struct RedisStore {
    link: Link,
    prefix: String,
    options: RedisStoreOptions,
    /// The nodes as messages name them (`host:port`, never the URL's password).
    servers: std::sync::Arc<str>,
}

/// The connection: one node through a reconnecting manager, or a cluster client that follows
/// MOVED/ASK redirections and refreshes its slot map after a failover or a resharding.
#[derive(Clone)]
enum Link {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Link {
    async fn query<T: redis::FromRedisValue>(&mut self, command: &Cmd) -> redis::RedisResult<T> {
        match self {
            Self::Node(connection) => command.query_async(connection).await,
            Self::Cluster(connection) => command.query_async(connection).await,
        }
    }
}

/// What one admission spent in a key's budgets, kept by the caller to settle it later with
/// [`RedisStore::settle`]: the admission's time and, per budget, the units it counts and the
/// admission's number in that budget's window (which names its members there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    tag: String,
    at_micros: u64,
    budgets: Vec<Reserved>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Reserved {
    spec: SharedSpec,
    units: u64,
    number: u64,
}

impl Reservation {
    /// When the store admitted it: microseconds on the Redis clock.
    pub fn at_micros(&self) -> u64 {
        self.at_micros
    }

    /// The admission's number in the key's first sliding window (0 without one): admissions of
    /// a key are numbered in the order the store decided them.
    pub fn number(&self) -> u64 {
        self.budgets.iter().map(|reserved| reserved.number).find(|number| *number > 0).unwrap_or(0)
    }

    /// The units the admission counts in the budget named `name` of unit `unit` now: its
    /// estimate, or what the last settlement said.
    pub fn units(&self, name: &str, unit: &Unit) -> Option<u64> {
        self.budgets.iter().find(|r| r.spec.name == name && r.spec.unit == *unit).map(|r| r.units)
    }

    /// What `actual` counts in each budget, capped as [`SharedSpec::settle_cap`] says.
    fn settled_units(&self, actual: &Cost) -> Vec<u64> {
        self.budgets
            .iter()
            .map(|r| actual.of(&r.spec.unit).saturating_mul(r.spec.cost).min(r.spec.settle_cap()))
            .collect()
    }
}

/// What a settlement did in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The actual cost counts what the reservation already counted everywhere: nothing was sent.
    Unchanged,
    /// Corrected in one script: at `at_micros` (Redis clock), after the key's admissions
    /// numbered up to `after` and before any later one (0 without a sliding window).
    Applied {
        /// The store's clock when applied, in microseconds.
        at_micros: u64,
        /// The number of the key's last admission before it (0 without a sliding window).
        after: u64,
    },
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL (which may hold a password) is deliberately not kept or shown.
        f.debug_struct("RedisStore")
            .field("cluster", &matches!(self.link, Link::Cluster(_)))
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .finish()
    }
}

impl RedisStore {
    /// Connects to `url` (any form [`StoreAddress::parse`] takes) with the default timeouts;
    /// every key this store writes starts with `{prefix:`.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, prefix, RedisStoreOptions::default()).await
    }

    /// [`connect`](Self::connect) with explicit timeouts.
    pub async fn connect_with(url: &str, prefix: &str, options: RedisStoreOptions) -> Result<Self, StoreError> {
        Self::connect_to(&StoreAddress::parse(url)?, prefix, options).await
    }

    /// Connects to `address` (a node or a cluster, with or without TLS) now: the store is
    /// returned once the server (a cluster: a node and its slot map) answered PING.
    pub async fn connect_to(
        address: &StoreAddress,
        prefix: &str,
        options: RedisStoreOptions,
    ) -> Result<Self, StoreError> {
        let store = Self::connect_lazy_to(address, prefix, options)?;
        let mut link = store.link.clone();
        let after = options.connect_timeout;
        match tokio::time::timeout(after, link.query::<()>(&redis::cmd("PING"))).await {
            Ok(Ok(())) => Ok(store),
            Ok(Err(err)) => Err(classify(&err, "connect", after, &store.servers)),
            Err(_) => Err(StoreError::Timeout { operation: "connect", after }),
        }
    }

    /// A store that connects on its first decision instead of now, so a service can start
    /// while Redis is still down (its first calls then fail with an unavailable error).
    /// Must be called inside a tokio runtime.
    pub fn connect_lazy(url: &str, prefix: &str, options: RedisStoreOptions) -> Result<Self, StoreError> {
        Self::connect_lazy_to(&StoreAddress::parse(url)?, prefix, options)
    }

    /// [`connect_lazy`](Self::connect_lazy) to a parsed address (a node or a cluster, with or without TLS).
    pub fn connect_lazy_to(
        address: &StoreAddress,
        prefix: &str,
        options: RedisStoreOptions,
    ) -> Result<Self, StoreError> {
        options.validate()?;
        validate_prefix(prefix)?;
        let servers = servers(address);
        let link = if address.is_cluster() {
            Link::Cluster(
                cluster_client(address, options)?.get_pending_async_connection_with_config(cluster_config(options)),
            )
        } else {
            let connection = ConnectionManager::new_lazy_with_config(node_client(address)?, options.manager_config())
                .map_err(|err| classify(&err, "connect", options.connect_timeout, &servers))?;
            Link::Node(connection)
        };
        Ok(Self { link, prefix: prefix.to_owned(), options, servers: servers.into() })
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// The prefix every key of this store starts with (inside the hash tag).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The timeouts this store runs with.
    pub fn options(&self) -> RedisStoreOptions {
        self.options
    }

    /// The Redis keys that hold `key`'s state for a single `budget` (as [`acquire`](Self::acquire) uses it).
    pub fn redis_keys(&self, key: &str, budget: &SharedBudget) -> Vec<String> {
        budget_keys(&self.tag(key), None, budget)
    }

    /// The Redis keys that hold `key`'s state for the named budget `spec` (as [`acquire_all`](Self::acquire_all) uses it).
    pub fn spec_keys(&self, key: &str, spec: &SharedSpec) -> Vec<String> {
        budget_keys(&self.tag(key), Some((&spec.name, &spec.unit)), &spec.budget)
    }

    fn tag(&self, key: &str) -> String {
        format!("{{{}:{key}}}", self.prefix)
    }

    /// Decides whether `cost` fits in `key`'s share of `budget` now, and spends it if so.
    ///
    /// A denied request changes nothing in Redis and says how long until the same cost fits.
    /// Settings and costs the budget can never hold are refused before any I/O.
    pub async fn acquire(&self, key: &str, budget: &SharedBudget, cost: u64) -> Result<StoreDecision, StoreError> {
        budget.check_cost(cost)?;
        let keys = budget_keys(&self.tag(check_key(key)?), None, budget);
        Ok(self.decide(keys, &[(budget, cost)]).await?.0)
    }

    /// One atomic decision over several named budgets of `key`: `cost` requests (times each
    /// budget's own cost) are spent in all of them, or, when any one says no, in none. The
    /// denial names the budget that needs the longest wait (`blocked_by`, an index into `specs`).
    pub async fn acquire_all(&self, key: &str, specs: &[SharedSpec], cost: u64) -> Result<StoreDecision, StoreError> {
        Ok(self.reserve_all(key, specs, &Cost::requests(cost)).await?.0)
    }

    /// [`acquire_all`](Self::acquire_all) for a cost in any units (each budget spends its
    /// own unit's amount); when admitted, also the [`Reservation`] that
    /// [`settle`](Self::settle) corrects once the actual cost is known.
    pub async fn reserve_all(
        &self,
        key: &str,
        specs: &[SharedSpec],
        cost: &Cost,
    ) -> Result<(StoreDecision, Option<Reservation>), StoreError> {
        if specs.is_empty() {
            return Err(StoreError::InvalidSettings("a shared decision needs at least one budget".into()));
        }
        let tag = self.tag(check_key(key)?);
        let mut keys = Vec::with_capacity(specs.len() * 2);
        let mut budgets = Vec::with_capacity(specs.len());
        for spec in specs {
            let units = spec.spend(cost)?;
            keys.extend(budget_keys(&tag, Some((&spec.name, &spec.unit)), &spec.budget));
            budgets.push((&spec.budget, units));
        }
        let (decision, admitted) = self.decide(keys, &budgets).await?;
        let reservation = admitted.map(|(at_micros, numbers)| Reservation {
            tag,
            at_micros,
            budgets: specs
                .iter()
                .zip(&budgets)
                .zip(numbers)
                .map(|((spec, (_, units)), number)| Reserved { spec: spec.clone(), units: *units, number })
                .collect(),
        });
        Ok((decision, reservation))
    }

    /// Corrects what `reservation` counts in its budgets to `actual`, in one script (one round
    /// trip) that changes all of them at once: a bucket's TAT moves back by the difference (never
    /// below now: a full bucket holds no more) or forward (a debt that delays later
    /// admissions); a window forgets exactly this admission's members above `actual`, or adds
    /// members at the admission's time (nothing once the admission has left the window).
    /// Settling again corrects the previous settlement. Nothing is sent when nothing changes.
    ///
    /// On an error the reservation keeps what it counted before; after a timeout the script
    /// may still have run.
    pub async fn settle(&self, reservation: &mut Reservation, actual: &Cost) -> Result<Settled, StoreError> {
        let settled = reservation.settled_units(actual);
        if reservation.budgets.iter().zip(&settled).all(|(reserved, is)| reserved.units == *is) {
            return Ok(Settled::Unchanged);
        }
        let mut keys = Vec::with_capacity(reservation.budgets.len() * 2);
        let mut args: Vec<u64> = Vec::with_capacity(2 + reservation.budgets.len() * 6);
        args.extend([reservation.budgets.len() as u64, reservation.at_micros]);
        for (reserved, is) in reservation.budgets.iter().zip(&settled) {
            let spec = &reserved.spec;
            keys.extend(budget_keys(&reservation.tag, Some((&spec.name, &spec.unit)), &spec.budget));
            let (kind, period, capacity) = script_budget(&spec.budget);
            args.extend([kind, period, capacity, reserved.units, *is, reserved.number]);
        }
        let reply = self.run(&SETTLE, SETTLE_SCRIPT, &keys, &args, "settle").await?;
        let &[at, after] = reply.as_slice() else {
            return Err(StoreError::Script(format!("unexpected reply from the settlement script: {reply:?}")));
        };
        for (reserved, is) in reservation.budgets.iter_mut().zip(settled) {
            reserved.units = is;
        }
        let whole = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(Settled::Applied { at_micros: whole(at), after: whole(after) })
    }

    /// Decides over `budgets`; when admitted, also the admission's time and numbers.
    async fn decide(
        &self,
        keys: Vec<String>,
        budgets: &[(&SharedBudget, u64)],
    ) -> Result<(StoreDecision, Option<Admitted>), StoreError> {
        let mut args: Vec<u64> = Vec::with_capacity(1 + budgets.len() * 4);
        args.push(budgets.len() as u64);
        for (budget, cost) in budgets {
            let (kind, period, capacity) = script_budget(budget);
            args.extend([kind, period, capacity, *cost]);
        }
        let reply = self.run(&DECIDE, DECIDE_SCRIPT, &keys, &args, "acquire").await?;
        decision(&reply, budgets.len())
    }

    /// Runs `script` (whose source is `source`) once, within the command timeout.
    async fn run(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[u64],
        operation: &'static str,
    ) -> Result<Vec<i64>, StoreError> {
        let mut link = self.link.clone();
        let after = self.options.command_timeout;
        let attempt = async {
            // EVALSHA: one round trip. A node that has not seen the script (a restart, a
            // failover to a replica, `SCRIPT FLUSH`, a cluster node asked for the first time)
            // answers NOSCRIPT, and then EVAL runs it and caches it on that node: the script is
            // loaded per node, where the key lives, on first use.
            match link.query::<Vec<i64>>(&script_command("EVALSHA", script.get_hash(), keys, args)).await {
                Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    link.query(&script_command("EVAL", source, keys, args)).await
                }
                other => other,
            }
        };
        match tokio::time::timeout(after, attempt).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(err)) => Err(classify(&err, operation, after, &self.servers)),
            Err(_) => Err(StoreError::Timeout { operation, after }),
        }
    }
}

/// An admission as the decision script reports it: its time (microseconds, Redis clock) and
/// per budget its number in that budget's window (0 for a bucket).
type Admitted = (u64, Vec<u64>);

/// A budget as the scripts take it: kind (1 bucket, 2 window), period in microseconds (per
/// token, or the window), and capacity (or limit).
fn script_budget(budget: &SharedBudget) -> (u64, u64, u64) {
    match *budget {
        SharedBudget::TokenBucket { capacity, per_token } => (1, micros_ceil(per_token), capacity),
        SharedBudget::SlidingWindow { limit, window } => (2, micros_ceil(window), limit),
    }
}

/// `EVALSHA sha numkeys keys... args...` (or `EVAL script ...`).
fn script_command(verb: &str, script: &str, keys: &[String], args: &[u64]) -> Cmd {
    let mut command = redis::cmd(verb);
    command.arg(script).arg(keys.len()).arg(keys).arg(args);
    command
}

/// A client for one node, trusting the address's CA file if it has one.
fn node_client(address: &StoreAddress) -> Result<Client, StoreError> {
    // The URL is not echoed back: it may hold a password.
    let invalid = |err: RedisError| StoreError::InvalidSettings(format!("not a usable Redis URL ({})", err.category()));
    let url = address.nodes().first().map(String::as_str).unwrap_or_default();
    match address.ca_pem() {
        Some(ca) => {
            install_crypto_provider();
            Client::build_with_tls(url, TlsCertificates { client_tls: None, root_cert: Some(ca.to_vec()) })
                .map_err(invalid)
        }
        None => {
            if address.is_tls() {
                install_crypto_provider();
            }
            Client::open(url).map_err(invalid)
        }
    }
}

/// A cluster client over the address's seed nodes, with this store's timeouts.
fn cluster_client(address: &StoreAddress, options: RedisStoreOptions) -> Result<ClusterClient, StoreError> {
    let mut builder = ClusterClientBuilder::new(address.nodes().iter().map(String::as_str))
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.command_timeout)
        // Redirections count as retries: a cluster settling after a failover may bounce a
        // request a few times. All of it stays within the one command timeout.
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(10)
        .max_retry_wait(200);
    if address.is_tls() {
        install_crypto_provider();
    }
    if let Some(ca) = address.ca_pem() {
        builder = builder.certs(TlsCertificates { client_tls: None, root_cert: Some(ca.to_vec()) });
    }
    builder.build().map_err(|err| StoreError::InvalidSettings(format!("not a usable Redis Cluster URL ({err})")))
}

fn cluster_config(options: RedisStoreOptions) -> ClusterConfig {
    ClusterConfig::new().set_connection_timeout(options.connect_timeout).set_response_timeout(options.command_timeout)
}

/// rustls needs one process-wide crypto provider; ring is the one this crate builds with.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn check_key(key: &str) -> Result<&str, StoreError> {
    if key.is_empty() {
        return Err(StoreError::InvalidSettings("a budget key must not be empty".into()));
    }
    Ok(key)
}

/// `{tag}:tat`, or `{tag}:window` and `{tag}:seq`; with a budget name, `{tag}:NAME:...`, and
/// with a unit other than requests `{tag}:NAME:UNIT:...` (neither may hold ':', so a requests
/// budget and a tokens budget never share a key). Requests budgets keep the keys they had
/// before units existed, so processes of either version still share them.
fn budget_keys(tag: &str, name: Option<(&str, &Unit)>, budget: &SharedBudget) -> Vec<String> {
    let base = match name {
        Some((name, Unit::Requests)) => format!("{tag}:{name}"),
        Some((name, unit)) => format!("{tag}:{name}:{unit}"),
        None => tag.to_owned(),
    };
    match budget {
        SharedBudget::TokenBucket { .. } => vec![format!("{base}:tat")],
        SharedBudget::SlidingWindow { .. } => vec![format!("{base}:window"), format!("{base}:seq")],
    }
}

/// Turns the script's `{allowed, remaining, retry_after_us, blocking[, now, numbers...]}` into a
/// decision and, when admitted, the admission's time and per-budget numbers.
fn decision(reply: &[i64], budgets: usize) -> Result<(StoreDecision, Option<Admitted>), StoreError> {
    let unexpected = || StoreError::Script(format!("unexpected reply from the budget script: {reply:?}"));
    let whole = |n: i64| u64::try_from(n).map_err(|_| unexpected());
    let (&[allowed, remaining, retry_us, blocking], admission) = reply.split_at_checked(4).ok_or_else(unexpected)?
    else {
        return Err(unexpected());
    };
    let remaining = whole(remaining)?;
    let retry_us = whole(retry_us)?;
    let blocking = usize::try_from(blocking).map_err(|_| unexpected())?;
    match (allowed, admission) {
        (1, [at, numbers @ ..]) if blocking == 0 && numbers.len() == budgets => {
            let numbers = numbers.iter().map(|n| whole(*n)).collect::<Result<Vec<_>, _>>()?;
            let decision = StoreDecision { allowed: true, remaining, retry_after: None, blocked_by: None };
            Ok((decision, Some((whole(*at)?, numbers))))
        }
        (0, []) if retry_us > 0 && (1..=budgets).contains(&blocking) => Ok((
            StoreDecision {
                allowed: false,
                remaining,
                retry_after: Some(Duration::from_micros(retry_us)),
                blocked_by: Some(blocking - 1),
            },
            None,
        )),
        _ => Err(unexpected()),
    }
}

/// `host:port` of each of `address`'s nodes (a socket's path), for messages.
fn servers(address: &StoreAddress) -> String {
    let server = |node: &String| match url::Url::parse(node) {
        Ok(url) => match url.host_str() {
            Some(host) => format!("{host}:{}", url.port().unwrap_or(6379)),
            None => url.path().to_owned(),
        },
        Err(_) => "?".to_owned(),
    };
    address.nodes().iter().map(server).collect::<Vec<_>>().join(", ")
}

/// Sorts a Redis error into "could not ask" (unreachable or timeout), "will never be let in"
/// (a wrong password, an ACL without the scripts, a server that does not speak Redis) and
/// "asked, and it failed". `servers` names the nodes asked.
fn classify(err: &RedisError, operation: &'static str, after: Duration, servers: &str) -> StoreError {
    if err.is_timeout() {
        return StoreError::Timeout { operation, after };
    }
    if err.kind() == ErrorKind::Parse {
        // What came back was not the Redis protocol (an HTTP server, say): the redis crate's
        // message quotes the bytes it choked on over several lines, which say nothing more.
        return StoreError::Refused(format!(
            "the server at {servers} did not answer as Redis: check that the URL's port is Redis's (6379 unless set otherwise)"
        ));
    }
    let refused = matches!(err.kind(), ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm))
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || is_tls_failure(err);
    if refused {
        return StoreError::Refused(format!(
            "the budget store refused us: {err} (check the URL's user and password, the user's ACL, the CA file for rediss://, and that the port is Redis)"
        ));
    }
    // A cluster mid-failover or mid-resharding (no node for a slot yet, redirections that
    // outlasted the client's retries) is away for now, like a restarting server.
    let unavailable = err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || matches!(
            err.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                )
        );
    if unavailable {
        StoreError::Unreachable(err.to_string())
    } else if err.kind() == ErrorKind::InvalidClientConfig {
        StoreError::InvalidSettings(err.to_string())
    } else {
        StoreError::Script(err.to_string())
    }
}

/// Whether a TLS handshake failed (an untrusted or mismatched certificate, a server that does
/// not speak TLS): a setting to fix, not an outage to wait out.
fn is_tls_failure(err: &RedisError) -> bool {
    type ArcError = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    // redis keeps an I/O error behind an `Arc`; tokio-rustls puts the handshake's error
    // inside the `io::Error` (whose own `source()` would skip it).
    let Some(source) = std::error::Error::source(err) else { return false };
    let inner: &(dyn std::error::Error + 'static) = match source.downcast_ref::<ArcError>() {
        Some(arced) => arced.as_ref(),
        None => source,
    };
    inner.downcast_ref::<rustls::Error>().is_some()
        || inner
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|tls| tls.downcast_ref::<rustls::Error>().is_some())
}

fn validate_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.is_empty() {
        return Err(StoreError::InvalidSettings("a store prefix must not be empty".into()));
    }
    if prefix.len() > 256 {
        return Err(StoreError::InvalidSettings("a store prefix must be at most 256 bytes".into()));
    }
    if prefix.contains(['{', '}']) {
        return Err(StoreError::InvalidSettings(format!(
            "the store prefix '{prefix}' must not contain braces: they would break the Redis Cluster hash tag"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_decisions() {
        let (allowed, admission) = decision(&[1, 4, 0, 0, 1_700_000_000_000_000, 7], 1).unwrap();
        assert_eq!(allowed, StoreDecision { allowed: true, remaining: 4, retry_after: None, blocked_by: None });
        assert_eq!(admission, Some((1_700_000_000_000_000, vec![7])));
        let (denied, admission) = decision(&[0, 0, 1500, 2], 2).unwrap();
        assert_eq!(denied.retry_after, Some(Duration::from_micros(1500)));
        assert_eq!(denied.blocked_by, Some(1));
        assert_eq!(admission, None);
        assert!(decision(&[0, 0, 0, 1], 1).is_err());
        assert!(decision(&[0, 0, 10, 3], 2).is_err(), "blocking index out of range");
        assert!(decision(&[1, -1, 0, 0, 5, 0], 1).is_err());
        assert!(decision(&[1, 2, 0, 0, 5], 1).is_err(), "a number per budget");
        assert!(decision(&[1, 2], 1).is_err());
    }

    #[test]
    fn a_budget_of_another_unit_has_keys_of_its_own() {
        let window = SharedBudget::sliding_window(5, Duration::from_secs(1)).unwrap();
        let requests = budget_keys("{p:k}", Some(("minute", &Unit::Requests)), &window);
        let tokens = budget_keys("{p:k}", Some(("minute", &Unit::tokens())), &window);
        assert_eq!(requests, ["{p:k}:minute:window", "{p:k}:minute:seq"]);
        assert_eq!(tokens, ["{p:k}:minute:tokens:window", "{p:k}:minute:tokens:seq"]);
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(validate_prefix("ratescope").is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix(&"x".repeat(257)).is_err());
    }

    #[test]
    fn options_are_checked() {
        assert!(RedisStoreOptions::default().validate().is_ok());
        let zero = RedisStoreOptions { command_timeout: Duration::ZERO, ..RedisStoreOptions::default() };
        assert!(zero.validate().is_err());
        let huge = RedisStoreOptions { connect_timeout: Duration::from_secs(3600), ..RedisStoreOptions::default() };
        assert!(huge.validate().is_err());
    }
}
