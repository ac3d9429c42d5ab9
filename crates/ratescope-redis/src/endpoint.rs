//! `StoreAddress`: where the budgets live — one Redis node or a Redis Cluster's seed nodes — and the CA that proves a TLS server.
//!
//! Accepted forms (the password only ever comes from `${ENV}` or the secret store upstream):
//!
//! - `redis://[user[:password]@]host[:port][/db]`, `rediss://…` (TLS), `redis+unix://`, `unix://`: one node;
//! - `redis+cluster://[user[:password]@]host:port[,host:port…]`, `rediss+cluster://…`: a Redis
//!   Cluster given by one or more seed nodes (the client learns the rest of the topology);
//! - `redis://a:7000,redis://b:7001` (a comma-separated list of node URLs): a cluster too.

use std::fmt;
use std::path::Path;

use super::StoreError;

/// The largest CA file read (a bundle of a few hundred certificates fits easily).
const MAX_CA_BYTES: u64 = 1024 * 1024;

/// Where a [`RedisStore`](super::RedisStore) connects. Never prints the URLs (they may hold a password).
#[derive(Clone, PartialEq, Eq)]
pub struct StoreAddress {
    nodes: Vec<String>,
    cluster: bool,
    ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for StoreAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreAddress")
            .field("nodes", &self.nodes.len())
            .field("cluster", &self.cluster)
            .field("tls", &self.is_tls())
            .field("ca", &self.ca_pem.is_some())
            .finish()
    }
}

impl StoreAddress {
    /// Parses one of the forms in the module documentation; the error never repeats the URL.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        let url = url.trim();
        let cluster_scheme = ["redis+cluster://", "rediss+cluster://"].iter().find(|scheme| url.starts_with(**scheme));
        let nodes = if let Some(scheme) = cluster_scheme {
            let plain = scheme.replace("+cluster", "");
            split_cluster_url(&plain, &url[scheme.len()..])?
        } else if url.contains(',') {
            url.split(',').map(|node| node.trim().to_owned()).collect()
        } else {
            let scheme_ok = ["redis://", "rediss://", "redis+unix://", "unix://"].iter().any(|s| url.starts_with(s));
            if !scheme_ok {
                return Err(not_redis());
            }
            return Ok(Self { nodes: vec![url.to_owned()], cluster: false, ca_pem: None });
        };
        let tls = nodes.first().is_some_and(|node| node.starts_with("rediss://"));
        for node in &nodes {
            let scheme = if tls { "rediss://" } else { "redis://" };
            if !node.starts_with(scheme) || node.len() == scheme.len() {
                return Err(StoreError::InvalidSettings(format!(
                    "every seed node of a Redis Cluster must be a {scheme}host:port URL (all with TLS or all without)"
                )));
            }
            let db = url::Url::parse(node).ok().map(|parsed| parsed.path().trim_matches('/').to_owned());
            if db.as_deref().is_some_and(|db| !db.is_empty() && db != "0") {
                return Err(StoreError::InvalidSettings(
                    "a Redis Cluster has only database 0: drop the /db from the URL".into(),
                ));
            }
        }
        Ok(Self { nodes, cluster: true, ca_pem: None })
    }

    /// Trusts the certificate authorities in the PEM file at `path` (instead of the system's)
    /// for a `rediss://` server; refused for a plaintext address.
    pub fn with_ca_file(mut self, path: &Path) -> Result<Self, StoreError> {
        if !self.is_tls() {
            return Err(StoreError::InvalidSettings(
                "a CA file is only used with TLS: write rediss:// (or rediss+cluster://)".into(),
            ));
        }
        let unreadable = |err: std::io::Error| {
            StoreError::InvalidSettings(format!("the CA file {} cannot be read: {err}", path.display()))
        };
        let size = std::fs::metadata(path).map_err(unreadable)?.len();
        if size > MAX_CA_BYTES {
            return Err(StoreError::InvalidSettings(format!(
                "the CA file {} is {size} bytes, more than the {MAX_CA_BYTES} a certificate bundle needs",
                path.display()
            )));
        }
        let pem = std::fs::read(path).map_err(unreadable)?;
        if !pem.windows(27).any(|window| window == b"-----BEGIN CERTIFICATE-----") {
            return Err(StoreError::InvalidSettings(format!(
                "the CA file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            )));
        }
        self.ca_pem = Some(pem);
        Ok(self)
    }

    /// Whether this is a Redis Cluster (keys spread over nodes by hash slot).
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Whether the connection is encrypted (`rediss://`).
    pub fn is_tls(&self) -> bool {
        self.nodes.iter().all(|node| node.starts_with("rediss://"))
    }

    /// The node URLs: the one node, or the cluster's seeds.
    pub(crate) fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The CA certificates (PEM) to trust instead of the system's, if a file was given.
    pub(crate) fn ca_pem(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }
}

fn not_redis() -> StoreError {
    StoreError::InvalidSettings(
        "not a Redis URL: use redis://host:port, rediss://host:port (TLS), redis+cluster://host:port[,host:port] or a comma-separated list of node URLs".into(),
    )
}

/// `user:pw@h1:p1,h2:p2/0?x#f` under `redis://` → `redis://user:pw@h1:p1/0?x#f`, `redis://user:pw@h2:p2/0?x#f`.
fn split_cluster_url(scheme: &str, rest: &str) -> Result<Vec<String>, StoreError> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(|host| format!("{scheme}{userinfo}{host}{tail}"))
        .collect();
    if nodes.is_empty() {
        return Err(StoreError::InvalidSettings("a Redis Cluster URL needs at least one host:port".into()));
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_nodes_and_clusters_are_told_apart() {
        let single = StoreAddress::parse("rediss://app:pw@db:6380/2").unwrap();
        assert!(!single.is_cluster() && single.is_tls());
        assert_eq!(single.nodes(), ["rediss://app:pw@db:6380/2"]);

        let cluster = StoreAddress::parse("redis+cluster://app:pw@a:7000,b:7001?protocol=resp3").unwrap();
        assert!(cluster.is_cluster() && !cluster.is_tls());
        assert_eq!(cluster.nodes(), ["redis://app:pw@a:7000?protocol=resp3", "redis://app:pw@b:7001?protocol=resp3"]);

        let tls = StoreAddress::parse("rediss+cluster://c:7000").unwrap();
        assert!(tls.is_cluster() && tls.is_tls());
        assert_eq!(tls.nodes(), ["rediss://c:7000"]);

        let seeds = StoreAddress::parse("redis://a:7000, redis://b:7001").unwrap();
        assert!(seeds.is_cluster());
        assert_eq!(seeds.nodes(), ["redis://a:7000", "redis://b:7001"]);
    }

    #[test]
    fn nonsense_is_refused_without_echoing_secrets() {
        for bad in [
            "http://db",
            "redis+cluster://",
            "redis+cluster://a:1/3",
            "redis://a:1,rediss://b:2",
            "redis://a:1,http://b",
            "db:6379",
        ] {
            let err = StoreAddress::parse(bad).unwrap_err();
            assert!(matches!(err, StoreError::InvalidSettings(_)), "{bad}: {err}");
        }
        let err = StoreAddress::parse("http://:hunter2@db").unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(!format!("{:?}", StoreAddress::parse("redis://:hunter2@db").unwrap()).contains("hunter2"));
    }

    #[test]
    fn a_ca_file_needs_tls_and_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").unwrap();
        let tls = StoreAddress::parse("rediss://db").unwrap();
        assert!(tls.clone().with_ca_file(&good).unwrap().ca_pem().is_some());
        assert!(tls.clone().with_ca_file(&junk).unwrap_err().to_string().contains("no PEM certificate"));
        assert!(tls.with_ca_file(&dir.path().join("missing")).unwrap_err().to_string().contains("cannot be read"));
        let plain = StoreAddress::parse("redis://db").unwrap();
        assert!(plain.with_ca_file(&good).unwrap_err().to_string().contains("only used with TLS"));
    }
}
