//! Flags that share budgets through Redis (`--redis`, `--shared-key`, `--on-redis-failure`), for `burst` and `proxy`.

use anyhow::Context;
use clap::Args;

use crate::store::{FailPolicy, SharedSettings};

#[derive(Debug, Clone, Args)]
pub struct SharedArgs {
    /// Share the budgets with every other process using the same --shared-key, through this
    /// Redis (redis://host:port[/db]); the budgets are then decided in Redis, lanes and -c stay local.
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
                if self.shared_key.is_some() || self.on_redis_failure.is_some() {
                    usage!("--shared-key and --on-redis-failure need --redis URL (or a profile with a [shared] table)");
                }
                return Ok(None);
            }
        };
        if let Some(policy) = self.on_redis_failure {
            settings = settings.with_policy(policy)?;
        }
        Ok(Some(settings))
    }
}
