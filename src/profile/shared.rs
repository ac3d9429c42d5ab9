//! A profile's `[shared]` table as store settings: the Redis URL (with `${ENV}` references resolved) and the shared key.

use super::error::{FieldPath, InvalidSetting, ProfileError};
use super::model::{Profile, SharedEntry};
use super::secrets::{Unresolved, resolve};
use crate::store::{FailPolicy, SharedSettings, is_secret_parameter};

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
        if has_literal_password(&self.redis) {
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

/// Whether a Redis URL as written carries a secret in clear: a password in its user info, or a
/// `password`/`pass`/`auth`/`token`/`secret` query parameter, that is not exactly one `${NAME}`.
fn has_literal_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else { return false };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let in_userinfo = authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .is_some_and(|(_, password)| !password.is_empty() && !is_one_reference(password));
    let query = tail.split_once('?').map_or("", |(_, query)| query.split('#').next().unwrap_or_default());
    let in_query = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .any(|(name, value)| is_secret_parameter(name) && !value.is_empty() && !is_one_reference(value));
    in_userinfo || in_query
}

/// `${NAME}` and nothing else.
fn is_one_reference(text: &str) -> bool {
    text.strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|name| !name.is_empty() && !name.contains(['$', '{', '}']))
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
        for written in [
            "redis://:hunter2${X}@db",
            "redis://user:${X}hunter2@db",
            "redis://db:6379/0?password=hunter2",
            "redis://db?Pass=hunter2&x=1",
            "rediss://db/1?auth_token=hunter2#frag",
        ] {
            let err = entry(written).settings(&env).unwrap_err();
            assert!(err.message.contains("must not be written"), "{written}: {err}");
        }
        for referenced in
            ["redis://user:${PW}@db", "redis://user@db", "redis://db?password=${PW}", "redis://db/0?protocol=resp3"]
        {
            assert!(!has_literal_password(referenced), "{referenced}");
        }
        let mut bad_policy = entry("redis://db");
        bad_policy.on_failure = Some("sometimes".into());
        assert!(bad_policy.settings(&env).unwrap_err().message.contains("on_failure"));
    }
}
