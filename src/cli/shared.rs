//! Flags that share budgets through Redis (`--redis`, `--shared-key`, `--on-redis-failure`), for `burst` and `proxy`.

use anyhow::Context;
use clap::Args;

use crate::store::{FailPolicy, SharedSettings};

#[derive(Debug, Clone, Args)]
pub struct SharedArgs {
    /// Share the budgets with every other process using the same --shared-key, through this
    /// Redis (redis://host:port[/db], rediss:// for TLS, user:password@ for an ACL user,
    /// redis+cluster://host:port[,host:port] for a Cluster); the budgets are then decided in
    /// Redis, lanes and -c stay local.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// The name all processes sharing one budget use (one per account or API key); the Redis
    /// key is NAME/HOST[:PORT]. With --profile, overrides the profile's [shared] key.
    #[arg(long, value_name = "NAME")]
    pub shared_key: Option<String>,
    /// While Redis cannot be reached: fail-closed (wait for it, the default), fail-open (send,
    /// counted) or local/N (pace by 1/N of each budget in-process).
    #[arg(long, value_name = "POLICY")]
    pub on_redis_failure: Option<FailPolicy>,
    /// PEM file of the certificate authorities that sign the rediss:// server's certificate
    /// (instead of the system's).
    #[arg(long, value_name = "FILE")]
    pub redis_ca: Option<std::path::PathBuf>,
    /// Take N requests' worth of the shared budget per round trip (for one very hot key): N
    /// times fewer round trips, at most N-1 requests per process over the budget in any window.
    #[arg(long, value_name = "N")]
    pub redis_lease: Option<u64>,
}

impl SharedArgs {
    /// The shared-budget settings from these flags over a profile's `[shared]` table, if any;
    /// impossible flags are usage errors.
    pub fn settings(&self, from_profile: Option<SharedSettings>) -> anyhow::Result<Option<SharedSettings>> {
        self.build(from_profile).map_err(super::as_usage)
    }

    fn build(&self, from_profile: Option<SharedSettings>) -> anyhow::Result<Option<SharedSettings>> {
        let mut settings = match (&self.redis, from_profile) {
            (Some(url), profile) => {
                let name = self
                    .shared_key
                    .clone()
                    .or(profile.map(|settings| settings.name))
                    .context("--redis needs --shared-key NAME: the name every process sharing the budget uses")?;
                SharedSettings::new(url.clone(), name)?
            }
            (None, Some(mut settings)) => {
                if let Some(name) = &self.shared_key {
                    name.clone_into(&mut settings.name);
                    settings.validate()?;
                }
                settings
            }
            (None, None) => {
                if self.shared_key.is_some()
                    || self.on_redis_failure.is_some()
                    || self.redis_ca.is_some()
                    || self.redis_lease.is_some()
                {
                    usage!(
                        "--shared-key, --on-redis-failure, --redis-ca and --redis-lease need --redis URL (or a profile with a [shared] table)"
                    );
                }
                return Ok(None);
            }
        };
        if let Some(policy) = self.on_redis_failure {
            settings = settings.with_policy(policy)?;
        }
        if let Some(ca) = &self.redis_ca {
            settings = settings.with_ca_file(ca)?;
        }
        if let Some(lease) = self.redis_lease {
            settings = settings.with_lease(lease)?;
        }
        Ok(Some(settings))
    }
}
