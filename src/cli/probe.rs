//! `ratescope probe`: find an API's limits and suggest limiter settings.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use http::{HeaderMap, Method};
use url::Url;

use crate::engine::{LimitKey, LimiterConfig, Registry};
use crate::http::{LimitedClient, redact_url};
use crate::probe::{ProbeOptions, ProfileCheck, probe};
use crate::profile::{HostProfile, Profile, ProfileStore, SecretStore};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The URL to probe (a cheap, idempotent GET is best).
    pub url: Url,
    /// The most requests the probe may send.
    #[arg(long, default_value_t = ProbeOptions::default().max_requests)]
    pub max_requests: usize,
    /// Share kept below what was found, e.g. 0.05 for 5%.
    #[arg(long, default_value_t = ProbeOptions::default().margin)]
    pub margin: f64,
    /// The longest single wait (for a reset or Retry-After), e.g. 2m.
    #[arg(long, value_parser = super::burst::duration_arg, default_value = "15m")]
    pub max_wait: Duration,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: Method,
    /// Extra request header, `Name: value`; repeat for several.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Compare what is found with this saved profile's limits for the URL (confirmed, too high,
    /// below), and send its host's headers and secrets with every request.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Save the suggestion as a profile of this name (in the config directory).
    #[arg(long, value_name = "NAME")]
    pub save: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The report's JSON, with `profile_check` after its fields when a profile was given.
#[derive(serde::Serialize)]
struct WithCheck<'a> {
    #[serde(flatten)]
    report: &'a crate::probe::ProbeReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile_check: Option<&'a ProfileCheck>,
}

/// The profile, its host for `url`, and the limits its key gives `url`.
struct Against {
    profile: Profile,
    host: HostProfile,
    key: LimitKey,
    config: LimiterConfig,
}

/// The host of `profile` that `url` goes to, and the limits that apply to it there.
fn against(name: &str, url: &Url) -> anyhow::Result<Against> {
    let profile = ProfileStore::default_location()?.load(name)?;
    let (host, key, config) = limits_for(&profile, url)?;
    Ok(Against { profile, host, key, config })
}

/// The host of `profile` that `url` goes to, its limiter key there and the limits that apply
/// (a path override's under its prefix); a usage error listing the hosts when none does.
pub(super) fn limits_for(profile: &Profile, url: &Url) -> anyhow::Result<(HostProfile, LimitKey, LimiterConfig)> {
    let host_name = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let with_port = url.port_or_known_default().map(|port| format!("{host_name}:{port}"));
    let key_of = |host: &HostProfile| host.key().map(|key| key.host).unwrap_or_default();
    let found = (profile.hosts.iter().find(|host| Some(key_of(host)) == with_port))
        .or_else(|| profile.hosts.iter().find(|host| key_of(host) == host_name));
    let Some(host) = found.cloned() else {
        usage!("profile '{}' has no host for {}; its hosts: {}", profile.name, redact_url(url), host_list(profile))
    };
    let registry = Registry::from_table(profile.entries()?)?;
    let (key, config) = match registry.limiter_for(&host_name, url.port_or_known_default(), url.path()) {
        Some(limiter) => (limiter.key().parse()?, limiter.config()),
        None => (LimitKey::host(&key_of(&host))?, LimiterConfig::new()),
    };
    Ok((host, key, config))
}

pub(super) fn host_list(profile: &Profile) -> String {
    let hosts: Vec<String> = profile.hosts.iter().map(|host| format!("{} ({})", host.name, host.base_url)).collect();
    if hosts.is_empty() { "none".to_owned() } else { hosts.join(", ") }
}

pub fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.save {
        // Refused before any request: a probe's requests may spend a quota.
        let checked = ProfileStore::default_location().and_then(|store| store.check_save(name));
        checked.map_err(|err| super::as_usage(anyhow::Error::new(err).context("--save")))?;
    }
    let against = args.profile.as_deref().map(|name| against(name, &args.url)).transpose()?;
    let mut headers = HeaderMap::new();
    if let Some(against) = &against {
        headers.extend(against.host.default_headers()?);
        headers.extend(SecretStore::open_default()?.headers_for(&against.profile.name, &against.host)?);
    }
    headers.extend(super::header_map(&args.headers)?);
    let options = ProbeOptions {
        max_requests: args.max_requests,
        margin: args.margin,
        method: args.method.clone(),
        headers,
        max_wait: args.max_wait,
    };
    options.validate().map_err(|err| super::as_usage(err.into()))?;
    if !args.json {
        errln!("probing {} (at most {} requests)…", redact_url(&args.url), options.max_requests);
    }
    let report = super::runtime()?.block_on(probe(LimitedClient::builder(), &args.url, &options))?;
    // A save that fails after all loses the profile, never the report.
    let saved = args.save.as_deref().map(|name| save(&report, name, &args.url)).transpose();
    if let (Ok(Some(path)), Some(name), false) = (&saved, &args.save, args.json) {
        outln!("saved as profile '{name}' in {}", path.display())?;
    }
    let check = against.map(|against| {
        ProfileCheck::new(&against.profile.name, &against.host.name, &against.key, &against.config, &report)
    });
    if args.json {
        let json = WithCheck { report: &report, profile_check: check.as_ref() };
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    } else {
        out!("{report}")?;
        if let Some(check) = &check {
            out!("\n{check}")?;
        }
    }
    if let Err(err) = saved {
        errln!("error: --save: {}", super::error_text(&err));
        return Ok(ExitCode::from(super::OUTPUT_NOT_WRITTEN));
    }
    Ok(ExitCode::SUCCESS)
}

/// Saves the report's suggestion as profile `name` for `url`'s origin; returns the file.
fn save(report: &crate::probe::ProbeReport, name: &str, url: &Url) -> anyhow::Result<std::path::PathBuf> {
    let profile = report.to_profile(name, &url.origin().ascii_serialization())?;
    Ok(ProfileStore::default_location()?.save(&profile)?)
}
