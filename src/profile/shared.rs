//! A profile's `[shared]` table as store settings: the Redis URL (with `${ENV}` references resolved) and the shared key.

use super::error::{FieldPath, InvalidSetting, ProfileError};
use super::model::{Profile, SharedEntry};
use super::secrets::{SecretStore, Unresolved, resolve};
use crate::redact::looks_secret;
use crate::store::{FailPolicy, SharedSettings};

impl Profile {
    /// The store settings of `[shared]`, or `None` when the profile keeps budgets in-process.
    /// `${NAME}` in the URL is read from the environment.
    pub fn shared_settings(&self) -> Result<Option<SharedSettings>, ProfileError> {
        let Some(entry) = &self.shared else { return Ok(None) };
        entry.settings(&|name| std::env::var(name).ok()).map(Some).map_err(ProfileError::invalid)
    }

    /// [`shared_settings`](Self::shared_settings), with the Redis password taken from the secret
    /// store (`[PROFILE.shared] redis-password`) when it holds one and the URL names none.
    pub fn shared_settings_with(&self, secrets: &SecretStore) -> Result<Option<SharedSettings>, ProfileError> {
        let Some(mut settings) = self.shared_settings()? else { return Ok(None) };
        if let Some(password) = secrets.redis_password(&self.name)? {
            settings.url = with_password(&settings.url, &password).ok_or_else(|| {
                ProfileError::invalid(InvalidSetting::new(
                    FieldPath::root().key("shared").key("redis"),
                    "shared.redis: the secret store holds a Redis password, but the URL already names one",
                ))
            })?;
        }
        Ok(Some(settings))
    }
}

/// `scheme://[user]@hosts…` with `password` (percent-encoded) after the user; `None` when the
/// URL already has a password.
fn with_password(url: &str, password: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (user, hosts) = rest[..authority_end].rsplit_once('@').unwrap_or(("", &rest[..authority_end]));
    if user.contains(':') {
        return None;
    }
    let encoded: String = password
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(byte).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect();
    Some(format!("{scheme}://{user}:{encoded}@{hosts}{}", &rest[authority_end..]))
}

impl SharedEntry {
    /// Checks the entry without resolving `${ENV}` references: no literal password, a known policy.
    pub(crate) fn check(&self) -> Result<(), InvalidSetting> {
        // A URL that is one `${VAR}` as a whole is known only where it is used: a stand-in URL.
        let stand_in = if is_one_reference(self.redis.trim()) { "redis://stand-in" } else { "x" };
        self.settings(&|_| Some(stand_in.to_owned())).map(drop)
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
        let mut settings = SharedSettings::new(url, self.key.clone())
            .and_then(|settings| settings.with_policy(policy))
            .map_err(|err| InvalidSetting::new(at.key("key"), format!("shared: {err}")))?;
        if let Some(ca_file) = &self.ca_file {
            // The file is read when the store is opened, so a profile stays valid on a machine
            // that keeps its CA elsewhere until it is used there.
            let path = resolve(ca_file, env).map_err(|_| {
                InvalidSetting::new(at.key("ca_file"), "shared.ca_file: an environment variable it names is not set")
            })?;
            // A URL that is all `${VAR}` is checked when the store is opened instead.
            if self.redis.contains("://") && !settings.url.starts_with("rediss") {
                return Err(InvalidSetting::new(
                    at.key("ca_file"),
                    "shared.ca_file: a CA file is only used with TLS: write rediss:// (or rediss+cluster://)",
                ));
            }
            settings.ca_file = Some(path.into());
        }
        Ok(settings)
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
        .any(|(name, value)| looks_secret(name) && !value.is_empty() && !is_one_reference(value));
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
        SharedEntry {
            redis: redis.to_owned(),
            key: "team".to_owned(),
            on_failure: Some("local/3".to_owned()),
            ca_file: None,
        }
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
        let mut with_ca = entry("rediss+cluster://app:${PW}@a:7000,b:7001");
        with_ca.ca_file = Some("${CA_DIR}/ca.pem".into());
        let env_ca = |name: &str| match name {
            "PW" => Some("pw".to_owned()),
            "CA_DIR" => Some("/etc/team".to_owned()),
            _ => None,
        };
        let settings = with_ca.settings(&env_ca).unwrap();
        assert_eq!(settings.ca_file.as_deref(), Some(std::path::Path::new("/etc/team/ca.pem")));
        with_ca.redis = "redis://db".into();
        assert!(with_ca.settings(&env_ca).unwrap_err().message.contains("only used with TLS"));
        with_ca.redis = "${REDIS_URL}".into();
        assert!(with_ca.check().is_ok(), "a URL from the environment is checked when it is opened");
        assert_eq!(with_password("rediss://app@db:6380/0", "p@ss w").unwrap(), "rediss://app:p%40ss%20w@db:6380/0");
        assert_eq!(with_password("redis+cluster://a:1,b:2", "pw").unwrap(), "redis+cluster://:pw@a:1,b:2");
        assert_eq!(with_password("redis://app:${PW}@db", "pw"), None);
        let mut bad_policy = entry("redis://db");
        bad_policy.on_failure = Some("sometimes".into());
        assert!(bad_policy.settings(&env).unwrap_err().message.contains("on_failure"));
    }

    #[test]
    fn the_redis_password_may_come_from_the_secret_store() {
        let mut profile = Profile::demo().unwrap();
        profile.shared = Some(SharedEntry { on_failure: None, ..entry("rediss://app@db:6380") });
        let mut secrets = SecretStore::in_memory();
        let settings = profile.shared_settings_with(&secrets).unwrap().unwrap();
        assert_eq!(settings.url, "rediss://app@db:6380", "no secret: the URL as written");
        secrets.set(&profile.name, "shared", "redis-password", "s3cr/t");
        let settings = profile.shared_settings_with(&secrets).unwrap().unwrap();
        assert_eq!(settings.url, "rediss://app:s3cr%2Ft@db:6380");
        assert!(!format!("{settings:?}").contains("s3cr"));
    }
}
