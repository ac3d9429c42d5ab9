//! A profile's `[shared]` table as store settings: the Redis URL (with `${ENV}` references resolved) and the shared key.

use super::error::{FieldPath, InvalidSetting, ProfileError};
use super::model::{Profile, SharedEntry};
use super::secrets::{Unresolved, resolve};
use crate::store::{FailPolicy, SharedSettings};

impl Profile {
    /// The store settings of `[shared]`, or `None` when the profile keeps budgets in-process.
    /// `${NAME}` in the URL is read from the environment.
    pub fn shared_settings(&self) -> Result<Option<SharedSettings>, ProfileError> {
        let Some(entry) = &self.shared else { return Ok(None) };
        entry.settings(&|name| std::env::var(name).ok()).map(Some).map_err(ProfileError::invalid)
    }
}

impl SharedEntry {
    /// Checks the entry without resolving `${ENV}` references: no literal password, a known policy.
    pub(crate) fn check(&self) -> Result<(), InvalidSetting> {
        self.settings(&|_| Some("x".to_owned())).map(drop)
    }

    fn settings(&self, env: &impl Fn(&str) -> Option<String>) -> Result<SharedSettings, InvalidSetting> {
        let at = FieldPath::root().key("shared");
        let literal_password = self
            .redis
            .split_once("://")
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|authority| authority.rsplit_once('@'))
            .is_some_and(|(userinfo, _)| userinfo.contains(':') && !userinfo.contains("${"));
        if literal_password {
            return Err(InvalidSetting::new(
                at.key("redis"),
                "shared.redis: a password must not be written in a profile; write ${REDIS_URL} or redis://:${REDIS_PASSWORD}@host and set the variable",
            ));
        }
        let url = resolve(&self.redis, env).map_err(|err| {
            let message = match err {
                Unresolved::Unset(name) => format!("shared.redis: the environment variable {name} is not set"),
                Unresolved::Malformed => "shared.redis: a '${' has no matching '}' or no variable name".to_owned(),
            };
            InvalidSetting::new(at.key("redis"), message)
        })?;
        let policy = match &self.on_failure {
            Some(text) => text
                .parse::<FailPolicy>()
                .map_err(|err| InvalidSetting::new(at.key("on_failure"), format!("shared.on_failure: {err}")))?,
            None => FailPolicy::default(),
        };
        SharedSettings::new(url, self.key.clone())
            .and_then(|settings| settings.with_policy(policy))
            .map_err(|err| InvalidSetting::new(at.key("key"), format!("shared: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(redis: &str) -> SharedEntry {
        SharedEntry { redis: redis.to_owned(), key: "team".to_owned(), on_failure: Some("local/3".to_owned()) }
    }

    #[test]
    fn env_references_resolve_and_literal_passwords_are_refused() {
        let env = |name: &str| (name == "REDIS_URL").then(|| "redis://:pw@db:6379".to_owned());
        let settings = entry("${REDIS_URL}").settings(&env).unwrap();
        assert_eq!(settings.url, "redis://:pw@db:6379");
        assert_eq!(settings.policy, FailPolicy::Local { instances: 3 });
        let err = entry("redis://:hunter2@db").settings(&env).unwrap_err();
        assert!(err.message.contains("must not be written"), "{err}");
        assert!(!err.message.contains("hunter2"));
        assert!(entry("${NOPE}").settings(&env).unwrap_err().message.contains("NOPE is not set"));
        let mut bad_policy = entry("redis://db");
        bad_policy.on_failure = Some("sometimes".into());
        assert!(bad_policy.settings(&env).unwrap_err().message.contains("on_failure"));
    }
}
