//! The catalogue of known APIs: ready profiles embedded from `assets/catalog/`, listed, loaded
//! and added to a profile (a host it lacks, or what its host of the same key lacks).
//!
//! An entry is a profile file (one host) with a `[catalog]` table beside it:
//!
//! ```toml
//! name = "github-rest"                      # the entry's id, also the file's name
//!
//! [catalog]
//! title = "GitHub REST API"
//! docs = "https://docs.github.com/..."      # the provider page the numbers come from
//! tier = "a personal access token: ..."     # which plan or tier the numbers assume
//! dialect = "github"                        # the rate-limit headers it sends (or "retry-after")
//! retry = "A 403 or 429 is a limit: ..."    # what the provider asks of a client that was refused
//! notes = ["...", "..."]                    # limits the budgets do not model, caveats
//!
//! [catalog.secrets]                         # filed in the secret store as written: references
//! authorization = "Bearer ${GITHUB_TOKEN}"  # to environment variables, never a secret itself
//!
//! [[hosts]]                                 # the profile, as any profile file
//! ...
//! ```
//!
//! The table is split off when an entry loads; a profile made from an entry is a plain profile.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::error::ProfileError;
use super::model::{HostProfile, Profile};
use super::secrets::{SecretStatus, SecretStore};

/// Every entry's id and text, in the order `ratescope profile catalog` lists them.
const ENTRIES: &[(&str, &str)] = &[
    ("github-rest", include_str!("../../assets/catalog/github-rest.toml")),
    ("github-graphql", include_str!("../../assets/catalog/github-graphql.toml")),
    ("openai", include_str!("../../assets/catalog/openai.toml")),
    ("anthropic", include_str!("../../assets/catalog/anthropic.toml")),
    ("stripe", include_str!("../../assets/catalog/stripe.toml")),
    ("shopify-admin-rest", include_str!("../../assets/catalog/shopify-admin-rest.toml")),
    ("shopify-admin-graphql", include_str!("../../assets/catalog/shopify-admin-graphql.toml")),
    ("discord", include_str!("../../assets/catalog/discord.toml")),
    ("slack", include_str!("../../assets/catalog/slack.toml")),
    ("x", include_str!("../../assets/catalog/x.toml")),
    ("reddit", include_str!("../../assets/catalog/reddit.toml")),
    ("gitlab", include_str!("../../assets/catalog/gitlab.toml")),
    ("atlassian", include_str!("../../assets/catalog/atlassian.toml")),
    ("zendesk", include_str!("../../assets/catalog/zendesk.toml")),
    ("hubspot", include_str!("../../assets/catalog/hubspot.toml")),
];

/// The header dialects an entry may name: the `source` of the budgets `http::headers` reads,
/// or `retry-after` for an API that sends nothing but a Retry-After on refusal.
pub const DIALECTS: &[&str] = &[
    "anthropic",
    "discord",
    "github",
    "gitlab",
    "hubspot",
    "ietf-draft",
    "openai",
    "reddit",
    "retry-after",
    "salesforce",
    "shopify",
    "x",
    "x-rate-limit",
    "x-ratelimit",
];

/// What an entry says about its API beside the profile: the `[catalog]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogInfo {
    /// The API's name for people (`GitHub REST API`, ...).
    pub title: String,
    /// The provider's documentation page the numbers were taken from.
    pub docs: String,
    /// The plan, tier or model the numbers assume.
    pub tier: String,
    /// The rate-limit headers the API sends ([`DIALECTS`]).
    pub dialect: String,
    /// What to do after a refusal, as the provider advises.
    pub retry: String,
    /// Anything else worth knowing before sending, one sentence each.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Secret header values to file for the host: `${ENV}` references, never secrets.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
}

/// One entry: its id, what it says, and its profile of one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The entry's id (`github-rest`, ...), as `profile new --from` takes it.
    pub id: &'static str,
    /// What the entry says beside its profile.
    pub info: CatalogInfo,
    /// A profile of the API's one host.
    pub profile: Profile,
}

/// An entry that could not be found or read.
#[derive(Debug, Error)]
pub enum CatalogError {
    /// No entry has this id.
    #[error("no catalogue entry '{id}'{}; `ratescope profile catalog` lists them all", near(.close))]
    Unknown {
        /// The id asked for.
        id: String,
        /// Ids spelled alike, closest first.
        close: Vec<&'static str>,
    },
    /// The entry's `[catalog]` table is refused.
    #[error("catalogue entry '{id}': {message}")]
    Invalid {
        /// The entry's id.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// The entry's profile is refused.
    #[error("catalogue entry '{id}': {source}")]
    Profile {
        /// The entry's id.
        id: String,
        /// Why the profile is refused.
        #[source]
        source: Box<ProfileError>,
    },
}

fn near(close: &[&str]) -> String {
    match close {
        [] => String::new(),
        [one] => format!(" (did you mean '{one}'?)"),
        many => format!(
            " (did you mean one of {}?)",
            many.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The entries' ids, in catalogue order.
pub fn ids() -> impl Iterator<Item = &'static str> {
    ENTRIES.iter().map(|(id, _)| *id)
}

/// Every entry, in catalogue order.
pub fn entries() -> Result<Vec<CatalogEntry>, CatalogError> {
    ENTRIES.iter().map(|(id, text)| parse(id, text)).collect()
}

/// The entry `id`; an unknown id is refused with the ids closest to it.
pub fn entry(id: &str) -> Result<CatalogEntry, CatalogError> {
    let wanted = id.trim().to_ascii_lowercase();
    match ENTRIES.iter().find(|(known, _)| *known == wanted) {
        Some((known, text)) => parse(known, text),
        None => Err(CatalogError::Unknown { id: id.to_owned(), close: close_ids(&wanted) }),
    }
}

/// Ids that contain `wanted` (or it them), in catalogue order; else those within a few edits
/// of it, closest first.
fn close_ids(wanted: &str) -> Vec<&'static str> {
    let related: Vec<&'static str> =
        ids().filter(|id| !wanted.is_empty() && (id.contains(wanted) || wanted.contains(id))).collect();
    if !related.is_empty() {
        return related;
    }
    let mut scored: Vec<(usize, usize, &'static str)> = ids()
        .enumerate()
        .map(|(order, id)| (strsim::levenshtein(wanted, id), order, id))
        .filter(|(distance, _, _)| *distance <= 3)
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, _, id)| id).take(4).collect()
}

/// Splits the `[catalog]` table off `text`, reads the rest as a profile and checks both.
fn parse(id: &'static str, text: &str) -> Result<CatalogEntry, CatalogError> {
    let invalid = |message: String| CatalogError::Invalid { id: id.to_owned(), message };
    let mut document: toml::Table = toml::from_str(text).map_err(|err| invalid(err.to_string()))?;
    let table = document.remove("catalog").ok_or_else(|| invalid("it has no [catalog] table".into()))?;
    let info: CatalogInfo = table.try_into().map_err(|err: toml::de::Error| invalid(format!("[catalog]: {err}")))?;
    let rest = toml::to_string(&document).map_err(|err| invalid(err.to_string()))?;
    let profile = Profile::from_toml(&rest)
        .map_err(|source| CatalogError::Profile { id: id.to_owned(), source: Box::new(source) })?;
    let entry = CatalogEntry { id, info, profile };
    entry.check().map_err(invalid)?;
    Ok(entry)
}

impl CatalogEntry {
    /// The entry's host (an entry has exactly one).
    pub fn host(&self) -> &HostProfile {
        &self.profile.hosts[0]
    }

    /// A new profile named `name` holding the entry's host.
    pub fn to_profile(&self, name: &str) -> Profile {
        Profile { name: name.to_owned(), ..self.profile.clone() }
    }

    /// What the loader cannot see: the id, one host, a documentation link, a known dialect,
    /// secrets that are environment references for headers the host keeps secret.
    fn check(&self) -> Result<(), String> {
        let info = &self.info;
        if self.profile.name != self.id {
            return Err(format!("its name is '{}', not its id", self.profile.name));
        }
        if self.profile.hosts.len() != 1 {
            return Err(format!("an entry has one host, not {}", self.profile.hosts.len()));
        }
        for (field, value) in [("title", &info.title), ("tier", &info.tier), ("retry", &info.retry)] {
            if value.trim().is_empty() {
                return Err(format!("[catalog] {field} is empty"));
            }
        }
        if !info.docs.starts_with("https://") || url::Url::parse(&info.docs).is_err() {
            return Err(format!("[catalog] docs '{}' is not an https:// address", info.docs));
        }
        if !DIALECTS.contains(&info.dialect.as_str()) {
            return Err(format!("[catalog] dialect '{}' is none of {}", info.dialect, DIALECTS.join(", ")));
        }
        let host = self.host();
        for (header, value) in &info.secrets {
            if !host.secret_headers.contains(header) {
                return Err(format!("[catalog.secrets] {header}: not in the host's secret_headers"));
            }
            if !value.contains("${") {
                return Err(format!("[catalog.secrets] {header}: a value is an ${{ENV}} reference, never a secret"));
            }
        }
        Ok(())
    }

    /// Files the entry's `${ENV}` references for `host` of `profile`, where the store has no
    /// value yet; returns the headers filed.
    pub fn file_secrets(&self, secrets: &mut SecretStore, profile: &str, host: &str) -> Vec<String> {
        let mut filed = Vec::new();
        for (header, value) in &self.info.secrets {
            if secrets.status(profile, host, header) == SecretStatus::Missing {
                secrets.set(profile, host, header, value.clone());
                filed.push(header.clone());
            }
        }
        filed
    }

    /// The environment variables the entry's secrets read (`GITHUB_TOKEN`).
    pub fn env_vars(&self) -> Vec<String> {
        let mut vars: Vec<String> = self
            .info
            .secrets
            .values()
            .flat_map(|value| {
                value.split("${").skip(1).filter_map(|rest| rest.split_once('}')).map(|(var, _)| var.to_owned())
            })
            .collect();
        vars.dedup();
        vars
    }
}

/// Where [`Profile::add_catalog_entry`] put an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedEntry {
    /// The host that holds it now.
    pub host: String,
    /// A host of its own (else merged into the host with the same key).
    pub new_host: bool,
}

impl Profile {
    /// Adds `entry`'s host. When a host of the profile has the same limiter key (GitHub's REST and
    /// GraphQL entries share api.github.com), that host gains what it lacks: budgets and a cap where
    /// it has none, retry when unset, headers, secret headers, path overrides and endpoints it has
    /// not got; nothing it has is replaced. The result is validated; on error the profile is
    /// left as it was.
    pub fn add_catalog_entry(&mut self, entry: &CatalogEntry) -> Result<AddedEntry, ProfileError> {
        let before = self.clone();
        let added = self.merge_host(entry.host());
        if let Err(err) = self.validate() {
            *self = before;
            return Err(err);
        }
        Ok(added)
    }

    fn merge_host(&mut self, incoming: &HostProfile) -> AddedEntry {
        let key = incoming.key().ok();
        let same_key = self.hosts.iter().position(|host| key.is_some() && host.key().ok() == key);
        let Some(index) = same_key else {
            let mut host = incoming.clone();
            let mut n = 2;
            while self.hosts.iter().any(|other| other.name == host.name) {
                host.name = format!("{} ({n})", incoming.name);
                n += 1;
            }
            let name = host.name.clone();
            self.hosts.push(host);
            return AddedEntry { host: name, new_host: true };
        };
        let host = &mut self.hosts[index];
        if host.budgets.is_empty() {
            host.budgets.clone_from(&incoming.budgets);
        }
        if host.concurrency.is_none() {
            host.concurrency = incoming.concurrency;
        }
        host.adaptive |= incoming.adaptive;
        if host.retry.is_none() {
            host.retry.clone_from(&incoming.retry);
        }
        for (name, value) in &incoming.headers {
            host.headers.entry(name.clone()).or_insert_with(|| value.clone());
        }
        for name in &incoming.secret_headers {
            if !host.secret_headers.contains(name) {
                host.secret_headers.push(name.clone());
            }
        }
        for path in &incoming.paths {
            let prefix = super::model::normalize_prefix(&path.prefix);
            if !host.paths.iter().any(|own| super::model::normalize_prefix(&own.prefix) == prefix) {
                host.paths.push(path.clone());
            }
        }
        for endpoint in &incoming.endpoints {
            if !host.endpoints.iter().any(|own| own.name == endpoint.name) {
                host.endpoints.push(endpoint.clone());
            }
        }
        AddedEntry { host: host.name.clone(), new_host: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unit;

    #[test]
    fn every_entry_loads_and_every_budget_converts() {
        let entries = entries().unwrap();
        assert_eq!(entries.len(), 15);
        for entry in &entries {
            let host = entry.host();
            let config = host.limiter_config().unwrap_or_else(|err| panic!("{}: {err}", entry.id));
            let paths = host.path_limits().unwrap_or_else(|err| panic!("{}: {err}", entry.id));
            let budgets = config.budgets.len() + paths.iter().map(|(_, config)| config.budgets.len()).sum::<usize>();
            assert!(budgets > 0, "{}: no budget at all", entry.id);
            assert!(host.retry_policy().is_ok(), "{}", entry.id);
            assert!(host.base_url.starts_with("https://"), "{}", entry.id);
            assert!(!host.secret_headers.is_empty() && !entry.info.secrets.is_empty(), "{}: no credentials", entry.id);
            assert!(!entry.env_vars().is_empty(), "{}", entry.id);
            for endpoint in &host.endpoints {
                host.endpoint(&endpoint.name)
                    .unwrap_or_else(|err| panic!("{} endpoint '{}': {err}", entry.id, endpoint.name));
            }
            let published = entry.info.dialect != "retry-after";
            assert_eq!(host.adaptive, published, "{}: adaptive exactly where the API publishes its budget", entry.id);
        }
    }

    #[test]
    fn the_list_holds_every_file_of_the_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/catalog");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
            .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut listed: Vec<String> = ids().map(str::to_owned).collect();
        listed.sort();
        assert_eq!(files, listed, "add each file of assets/catalog/ to ENTRIES in catalog.rs");
    }

    #[test]
    fn token_and_point_budgets_carry_their_unit() {
        let unit_of = |id: &str| -> Vec<Unit> {
            let entry = entry(id).unwrap();
            let host = entry.host();
            let mut units: Vec<Unit> = host.limiter_config().unwrap().budgets.iter().map(|b| b.unit.clone()).collect();
            for (_, config) in host.path_limits().unwrap() {
                units.extend(config.budgets.iter().map(|b| b.unit.clone()));
            }
            units
        };
        assert!(unit_of("openai").contains(&Unit::tokens()));
        assert!(unit_of("github-graphql").iter().all(|unit| *unit == Unit::points()));
        assert!(unit_of("shopify-admin-graphql").contains(&Unit::points()));
        assert!(unit_of("anthropic").contains(&Unit::named("input_tokens")));
    }

    #[test]
    fn an_unknown_id_names_the_close_ones() {
        let err = entry("github").unwrap_err();
        let CatalogError::Unknown { close, .. } = &err else { panic!("{err}") };
        assert_eq!(close, &["github-rest", "github-graphql"]);
        assert!(err.to_string().contains("did you mean one of 'github-rest', 'github-graphql'?"), "{err}");
        let err = entry("stirpe").unwrap_err().to_string();
        assert!(err.contains("did you mean 'stripe'?"), "{err}");
        assert!(!entry("zzzzzzzzzz").unwrap_err().to_string().contains("did you mean"));
        assert_eq!(entry(" OpenAI ").unwrap().id, "openai", "ids are matched without case or spaces");
    }

    #[test]
    fn a_broken_entry_is_refused_with_its_reason() {
        let text = ENTRIES[0].1;
        let err = parse("github-rest", &text.replace("dialect = \"github\"", "dialect = \"gh\"")).unwrap_err();
        assert!(err.to_string().contains("dialect 'gh' is none of"), "{err}");
        let err = parse("github-rest", &text.replace("Bearer ${GITHUB_TOKEN}", "Bearer ghp_123")).unwrap_err();
        assert!(err.to_string().contains("never a secret"), "{err}");
        let err = parse("github-rest", &text.replace("limit = 5000", "limit = 0")).unwrap_err();
        assert!(matches!(err, CatalogError::Profile { .. }), "{err}");
        let err = parse("github-rest", &text.replace("[catalog", "[about")).unwrap_err();
        assert!(err.to_string().contains("no [catalog] table"), "{err}");
    }

    #[test]
    fn rest_and_graphql_share_one_host_and_each_keeps_its_limits() {
        let rest = entry("github-rest").unwrap();
        let graphql = entry("github-graphql").unwrap();
        let mut profile = graphql.to_profile("gh");
        let added = profile.add_catalog_entry(&rest).unwrap();
        assert_eq!(added, AddedEntry { host: "GitHub GraphQL".into(), new_host: false });
        assert_eq!(profile.hosts.len(), 1);
        let host = &profile.hosts[0];
        assert_eq!(host.budgets, rest.host().budgets, "the host had none: it takes the REST budgets");
        assert_eq!(host.paths, graphql.host().paths, "the /graphql override stays");
        let names: Vec<&str> = host.endpoints.iter().map(|endpoint| endpoint.name.as_str()).collect();
        assert_eq!(names, ["viewer", "me"]);
        let mut again = profile.clone();
        again.add_catalog_entry(&rest).unwrap();
        assert_eq!(again, profile, "adding an entry twice changes nothing");
    }

    #[test]
    fn a_new_host_gets_a_free_name_and_a_bad_result_changes_nothing() {
        let stripe = entry("stripe").unwrap();
        let mut profile = Profile::demo().unwrap();
        profile.hosts[0].name = "Stripe".into();
        let added = profile.add_catalog_entry(&stripe).unwrap();
        assert_eq!(added, AddedEntry { host: "Stripe (2)".into(), new_host: true });
        assert_eq!(profile.hosts[1].budgets, stripe.host().budgets);
        let mut broken = Profile::demo().unwrap();
        broken.hosts[0].budgets[0].rate = Some("0/1s".into());
        let before = broken.clone();
        assert!(broken.add_catalog_entry(&stripe).is_err());
        assert_eq!(broken, before);
    }

    #[test]
    fn secrets_are_filed_as_references_and_never_over_a_value() {
        let entry = entry("openai").unwrap();
        let mut secrets = SecretStore::in_memory();
        assert_eq!(entry.file_secrets(&mut secrets, "p", "OpenAI"), ["authorization"]);
        assert_eq!(
            secrets.status("p", "OpenAI", "authorization"),
            SecretStatus::FromEnv(vec!["OPENAI_API_KEY".into()])
        );
        secrets.set("p", "OpenAI", "authorization", "Bearer mine");
        assert!(entry.file_secrets(&mut secrets, "p", "OpenAI").is_empty());
        assert_eq!(secrets.status("p", "OpenAI", "authorization"), SecretStatus::Stored);
        assert_eq!(entry.env_vars(), ["OPENAI_API_KEY"]);
    }
}
