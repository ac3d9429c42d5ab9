//! `ratescope profile`: list, show, import (a file, or a pasted curl command) and export saved
//! profiles; list the catalogue of known APIs and make a profile from one of its entries.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::engine::format_period;
use crate::files::{self, Destination, WriteOptions};
use crate::profile::export::{self, ExportError, ExportFormat, Selection};
use crate::profile::{
    BudgetEntry, CatalogError, Filed, HostProfile, Profile, ProfileStore, SecretStatus, SecretStore, catalog,
    parse_curl,
};

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Directory of profile files [default: profiles/ in the config directory, which
    /// $RATESCOPE_CONFIG_DIR overrides]. Secrets stay in the config directory.
    #[arg(long, value_name = "DIR", global = true)]
    pub profiles_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: ProfileCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// List saved profiles; broken files are reported with the line at fault.
    List,
    /// Show a profile: hosts, limits, path overrides, retry, headers (secret values masked).
    Show {
        /// The profile's name.
        name: String,
    },
    /// Check a profile file and add it to the saved profiles.
    Import {
        /// The TOML file to import.
        file: PathBuf,
        /// Replace a saved profile of the same name (its previous version is kept as .bak).
        #[arg(long)]
        overwrite: bool,
    },
    /// Add a request pasted as a curl command to a saved profile (made if missing): its host,
    /// one endpoint, and its credential headers moved into the secret store.
    ImportCurl {
        /// The profile to add to.
        name: String,
        /// The curl command, quoted as one argument, or - to read it from standard input.
        command: String,
        /// Replace a different value the secret store already holds for one of the command's
        /// credential headers (without it, the import is refused and nothing changes).
        #[arg(long)]
        replace_secrets: bool,
    },
    /// List the catalogue of known APIs: ready profiles with the provider page their numbers
    /// come from (`profile new NAME --from ID` makes one).
    Catalog {
        /// Print the entries as one JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Make a profile from a catalogue entry; its credentials are filed in the secret store as
    /// ${ENV} references (GITHUB_TOKEN, ...), never as values.
    New {
        /// The new profile's name.
        name: String,
        /// The catalogue entry (`ratescope profile catalog` lists them).
        #[arg(long, value_name = "ID")]
        from: String,
        /// Use this base URL instead of the entry's (a shop's or site's own address).
        #[arg(long, value_name = "URL")]
        base_url: Option<url::Url>,
        /// Replace a saved profile of the same name (its previous version is kept as .bak).
        #[arg(long)]
        force: bool,
    },
    /// Write a saved profile to FILE ("-" for standard output): as TOML, comments included, or
    /// with --as as code for a rate-limiting library (one host's limits). Secret values and
    /// headers are never written. An existing FILE is replaced whole (the message says so).
    Export {
        /// The profile's name.
        name: String,
        /// Where to write it ("-" for standard output).
        file: PathBuf,
        /// What to write: the profile's TOML, or its limits as a Bottleneck module (Node), an
        /// aiolimiter module (Python asyncio), a governor function (Rust) or a
        /// golang.org/x/time/rate function (Go).
        #[arg(long = "as", value_name = "FORMAT", default_value_t = ExportFormat::Toml)]
        format: ExportFormat,
        /// The host whose limits a code export holds (needed when the profile has several).
        #[arg(long, value_name = "HOST")]
        host: Option<String>,
        /// Export the limits of this path override of the host (such as /search) instead of
        /// the host's own.
        #[arg(long, value_name = "PREFIX")]
        path: Option<String>,
    },
}

/// `profile import-curl`: the profile gains the host and endpoint, the secret store the
/// credentials; a stored secret is replaced only with `--replace-secrets`.
fn import_curl(store: &ProfileStore, name: &str, command: &str, replace_secrets: bool) -> anyhow::Result<ExitCode> {
    let command = if command == "-" {
        let bytes = crate::files::read_capped(Path::new("-"), crate::files::MAX_CONFIG_BYTES)?;
        String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("the command on standard input is not UTF-8 text"))?
    } else {
        command.to_owned()
    };
    let import = parse_curl(&command).map_err(|err| super::as_usage(anyhow::anyhow!("cannot import: {err}")))?;
    let mut profile = store.find(name)?.unwrap_or_else(|| Profile::new(name));
    let added = profile.add_curl_import(&import);
    profile.validate()?;
    // The profile is written before the secrets: a profile that cannot be written (too large,
    // broken) must not cost a secret it would have replaced.
    let mut filed = Filed::default();
    let mut secrets = None;
    if !import.secrets.is_empty() {
        let mut secret_store = SecretStore::open_default()?;
        filed = secret_store.file_import(&profile.name, &added.host, &import.secrets, replace_secrets);
        if !filed.kept.is_empty() {
            return Err(super::as_usage(anyhow::anyhow!(
                "host '{}' of profile '{}' already has a different {} in the secret store; nothing was changed \
                 (pass --replace-secrets to replace the stored value)",
                added.host,
                profile.name,
                filed.kept.join(", ")
            )));
        }
        if !filed.added.is_empty() || !filed.replaced.is_empty() {
            secrets = Some(secret_store);
        }
    }
    let path = store.save(&profile)?;
    if let Some(secrets) = secrets {
        secrets.save()?;
    }
    let host = if added.new_host { "new host" } else { "host" };
    outln!(
        "added endpoint '{}' to {host} '{}' in profile '{}' ({})",
        added.endpoint,
        added.host,
        profile.name,
        path.display()
    )?;
    if !filed.added.is_empty() {
        outln!("moved {} into the secret store (never into the profile)", filed.added.join(", "))?;
    }
    if !filed.replaced.is_empty() {
        outln!("replaced the stored {} in the secret store (--replace-secrets)", filed.replaced.join(", "))?;
    }
    if !filed.unchanged.is_empty() {
        outln!("the secret store already holds this {}", filed.unchanged.join(", "))?;
    }
    if !import.ignored.is_empty() {
        outln!("ignored: {}", import.ignored.join(" "))?;
    }
    let quote = |text: &str| shlex::try_quote(text).map_or_else(|_| format!("'{text}'"), |quoted| quoted.into_owned());
    outln!("fire it: ratescope burst --profile {} --endpoint {} -n 10", quote(&profile.name), quote(&added.endpoint))?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: ProfileArgs) -> anyhow::Result<ExitCode> {
    let store = match args.profiles_dir {
        Some(dir) => ProfileStore::at(dir),
        None => ProfileStore::default_location()?,
    };
    match args.command {
        ProfileCommand::List => list(&store),
        ProfileCommand::Show { name } => {
            let profile = store.load(&name)?;
            let path = store.path_of(&profile.name)?;
            let secrets = match SecretStore::open_default() {
                Ok(secrets) => secrets,
                Err(err) => {
                    errln!("warning: secret store unavailable: {err}");
                    SecretStore::in_memory()
                }
            };
            out!("{}", show(&profile, &path, &secrets, |name| std::env::var_os(name).is_some()))?;
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::Import { file, overwrite } => {
            let profile = store.import(&file, overwrite)?;
            let path = store.path_of(&profile.name)?;
            outln!("imported profile '{}' ({}) as {}", profile.name, hosts(profile.hosts.len()), path.display())?;
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::ImportCurl { name, command, replace_secrets } => {
            import_curl(&store, &name, &command, replace_secrets)
        }
        ProfileCommand::Catalog { json } => list_catalog(json),
        ProfileCommand::New { name, from, base_url, force } => new_from_catalog(&store, &name, &from, base_url, force),
        ProfileCommand::Export { name, file, format, host, path } => {
            let selection = Selection { host: host.as_deref(), path: path.as_deref() };
            export(&store, &name, &file, format, selection)
        }
    }
}

/// `profile export NAME FILE [--as FORMAT] [--host H] [--path P]`: the text is made before
/// anything is written, then written whole (`files::write_bytes`); a file it replaces is
/// replaced as today's TOML export always did, and the message says so.
fn export(
    store: &ProfileStore,
    name: &str,
    file: &Path,
    format: ExportFormat,
    selection: Selection<'_>,
) -> anyhow::Result<ExitCode> {
    let text = match format {
        // The saved file itself: comments and layout kept.
        ExportFormat::Toml if selection == Selection::default() => store.text(name)?,
        _ => {
            let profile = store.load(name)?;
            export::render(&profile, selection, format).map_err(|err| match err {
                ExportError::Invalid(err) => anyhow::Error::new(err),
                usage => super::as_usage(anyhow::Error::new(usage)),
            })?
        }
    };
    let context = || format!("cannot export profile '{name}'");
    let replaces =
        matches!(files::destination(file).with_context(context)?, Destination::Replace(target) if target.is_file());
    files::write_bytes(file, text.as_bytes(), WriteOptions::default()).with_context(context)?;
    if file != Path::new("-") {
        let what =
            if format == ExportFormat::Toml { "profile".to_owned() } else { format!("{} limits of", format.label()) };
        let replaced = if replaces { " (it replaced the file that was there)" } else { "" };
        outln!("exported {what} '{name}' to {}{replaced}", file.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One entry as `profile catalog --json` prints it.
#[derive(serde::Serialize)]
struct CatalogLine<'a> {
    id: &'a str,
    #[serde(flatten)]
    info: &'a crate::profile::CatalogInfo,
    base_url: &'a str,
    env: Vec<String>,
}

/// `profile catalog`: id, title and documentation page of every entry (all it says with `--json`).
fn list_catalog(json: bool) -> anyhow::Result<ExitCode> {
    let entries = catalog::entries()?;
    if json {
        let lines: Vec<CatalogLine> = entries
            .iter()
            .map(|entry| CatalogLine {
                id: entry.id,
                info: &entry.info,
                base_url: &entry.host().base_url,
                env: entry.env_vars(),
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&lines)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let id_width = entries.iter().map(|entry| entry.id.len()).max().unwrap_or(0);
    let title_width = entries.iter().map(|entry| entry.info.title.chars().count()).max().unwrap_or(0);
    for entry in &entries {
        outln!("{:id_width$}  {:title_width$}  {}", entry.id, entry.info.title, entry.info.docs)?;
    }
    outln!("\nmake one: ratescope profile new NAME --from ID")?;
    Ok(ExitCode::SUCCESS)
}

/// `profile new NAME --from ID`: the entry's host as a new profile, written atomically; the
/// entry's ${ENV} references filed in the secret store where it has no value yet.
fn new_from_catalog(
    store: &ProfileStore,
    name: &str,
    id: &str,
    base_url: Option<url::Url>,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let entry = match catalog::entry(id) {
        Ok(entry) => entry,
        Err(err @ CatalogError::Unknown { .. }) => return Err(super::as_usage(err.into())),
        Err(err) => return Err(err.into()),
    };
    if store.find(name)?.is_some() && !force {
        anyhow::bail!(
            "profile '{name}' already exists ({}); pass --force to replace it (the old one is kept as .bak)",
            store.path_of(name)?.display()
        );
    }
    let mut profile = entry.to_profile(name);
    if let Some(url) = base_url {
        profile.hosts[0].base_url = url.as_str().trim_end_matches('/').to_owned();
    }
    // A replacement, not an edit: the old file's comments would describe what is gone.
    let path = store.replace(&profile)?;
    let host = &profile.hosts[0];
    let mut secrets = SecretStore::open_default()?;
    let filed = entry.file_secrets(&mut secrets, &profile.name, &host.name);
    if !filed.is_empty() {
        secrets.save()?;
    }
    outln!("made profile '{}' from {} ({}) in {}", profile.name, entry.id, entry.info.title, path.display())?;
    outln!("  assumes:   {}", entry.info.tier)?;
    outln!("  from:      {}", entry.info.docs)?;
    outln!("  refusals:  {}", entry.info.retry)?;
    for note in &entry.info.notes {
        outln!("  note:      {note}")?;
    }
    let vars: Vec<String> = entry.env_vars().iter().map(|var| format!("${var}")).collect();
    outln!(
        "  secrets:   {} read {} (set it, or store a value in the app's Secrets)",
        host.secret_headers.join(", "),
        vars.join(", ")
    )?;
    let get =
        host.endpoints.iter().filter_map(|endpoint| host.endpoint(&endpoint.name).ok()).find(|e| e.method == "GET");
    if let Some(endpoint) = get {
        outln!("  check it:  ratescope probe '{}' --profile '{}'", endpoint.url, profile.name)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn list(store: &ProfileStore) -> anyhow::Result<ExitCode> {
    let entries = store.list()?;
    if entries.is_empty() {
        outln!("no profiles in {}", store.dir().display())?;
        return Ok(ExitCode::SUCCESS);
    }
    let width = entries.iter().flatten().map(|summary| summary.name.chars().count()).max().unwrap_or(0);
    for entry in entries {
        match entry {
            Ok(summary) => {
                outln!("{:width$}  {:8}  {}", summary.name, hosts(summary.hosts), summary.path.display())?;
            }
            Err(err) => errln!("warning: skipped a broken profile: {err}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn hosts(count: usize) -> String {
    if count == 1 { "1 host".to_owned() } else { format!("{count} hosts") }
}

/// The readable form of a profile. Secret values never appear: only whether one is set.
fn show(profile: &Profile, path: &Path, secrets: &SecretStore, is_set: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "profile '{}'  ({})", profile.name, path.display());
    if let Some(shared) = &profile.shared {
        let policy = shared.on_failure.as_deref().unwrap_or("fail-closed");
        let _ = writeln!(out, "\nshared budgets: key '{}' in {} (when it is away: {policy})", shared.key, shared.redis);
    }
    if profile.hosts.is_empty() {
        let _ = writeln!(out, "\n  no hosts");
    }
    for host in &profile.hosts {
        let key = host.key().map_or_else(|err| format!("invalid: {err}"), |key| key.to_string());
        let _ = writeln!(out, "\nhost '{}'  {}  (key {key})", host.name, host.base_url);
        limits_lines(&mut out, "  ", host.budgets.iter().map(budget_line).collect(), host.concurrency);
        let _ = writeln!(
            out,
            "  adaptive: {}",
            if host.adaptive { "on (follows the server's published budgets)" } else { "off" }
        );
        let _ = writeln!(out, "  retry: {}", retry_line(host));
        for (name, value) in &host.headers {
            let _ = writeln!(out, "  header {name}: {value}");
        }
        for name in &host.secret_headers {
            let state = match secrets.status(&profile.name, &host.name, name) {
                SecretStatus::Missing => "(no value in the secret store)".to_owned(),
                SecretStatus::Stored => "*** (in the secret store)".to_owned(),
                SecretStatus::FromEnv(variables) => {
                    let names: Vec<String> = variables
                        .iter()
                        .map(|var| if is_set(var) { format!("${var}") } else { format!("${var}, which is not set") })
                        .collect();
                    format!("*** (from {})", names.join(", "))
                }
            };
            let _ = writeln!(out, "  secret header {name}: {state}");
        }
        for path in &host.paths {
            let key = host.key().map(|key| format!("{}{}", key.host, path.prefix.trim_end_matches('/')));
            let _ = writeln!(out, "  path {}  (key {})", path.prefix, key.unwrap_or_else(|_| "?".to_owned()));
            limits_lines(&mut out, "    ", path.budgets.iter().map(budget_line).collect(), path.concurrency);
        }
        for endpoint in &host.endpoints {
            let method = endpoint.method.as_deref().unwrap_or("GET");
            let mut line = format!("  endpoint '{}': {method} {}", endpoint.name, endpoint.path);
            if let Some(body) = &endpoint.body {
                line.push_str(&format!(", body of {} bytes", body.len()));
            }
            if let Some(file) = &endpoint.body_file {
                line.push_str(&format!(", body from {file}"));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

fn limits_lines(out: &mut String, indent: &str, budgets: Vec<String>, concurrency: Option<usize>) {
    if budgets.is_empty() {
        let _ = writeln!(out, "{indent}budgets: none");
    }
    for budget in budgets {
        let _ = writeln!(out, "{indent}budget {budget}");
    }
    match concurrency {
        Some(limit) => {
            let _ = writeln!(out, "{indent}concurrency: {limit}");
        }
        None => {
            let _ = writeln!(out, "{indent}concurrency: no cap");
        }
    }
}

/// `'rate': bucket 5 @ 5/1s`, in the engine's own words when the entry is valid.
fn budget_line(entry: &BudgetEntry) -> String {
    match entry.to_budget() {
        Ok(budget) => format!("'{}': {}", entry.name, budget.describe()),
        Err(err) => format!("'{}': invalid ({err})", entry.name),
    }
}

fn retry_line(host: &HostProfile) -> String {
    let policy = match host.retry_policy() {
        Ok(policy) => policy,
        Err(err) => return format!("invalid ({err})"),
    };
    if policy.max_attempts == 1 {
        return "never".to_owned();
    }
    let statuses: Vec<String> = policy.retry_statuses.iter().map(u16::to_string).collect();
    let yes_no = |flag: bool| if flag { "yes" } else { "no" };
    format!(
        "up to {} attempts on {}; backoff {} to {}, {} jitter; Retry-After honoured up to {}; connection errors: {}; non-idempotent methods: {}{}",
        policy.max_attempts,
        statuses.join(", "),
        format_period(policy.base),
        format_period(policy.cap),
        policy.jitter,
        format_period(policy.max_retry_after),
        yes_no(policy.retry_connection_errors),
        yes_no(policy.retry_non_idempotent),
        if host.retry.is_none() { " (defaults)" } else { "" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_masks_secrets_and_describes_limits() {
        let mut profile = Profile::demo().unwrap();
        profile.hosts[0].secret_headers = vec!["x-api-key".into(), "authorization".into(), "x-other".into()];
        let mut secrets = SecretStore::in_memory();
        secrets.set("demo", "demo API", "x-api-key", "s3cr3t-value");
        secrets.set("demo", "demo API", "authorization", "Bearer ${SHOW_TOKEN}");
        let text = show(&profile, Path::new("/p/demo.toml"), &secrets, |_| false);
        assert!(!text.contains("s3cr3t-value") && !text.contains("Bearer"), "{text}");
        assert!(text.contains("secret header x-api-key: *** (in the secret store)"), "{text}");
        assert!(text.contains("secret header authorization: *** (from $SHOW_TOKEN, which is not set)"), "{text}");
        assert!(text.contains("secret header x-other: (no value in the secret store)"), "{text}");
        assert!(text.contains("budget 'rate': bucket 5 @ 5/1s"), "{text}");
        assert!(text.contains("path /search  (key 127.0.0.1:8787/search)"), "{text}");
        assert!(text.contains("up to 5 attempts on 429, 503; backoff 300ms to 20s, full jitter"), "{text}");
        assert!(!text.contains("shared"), "{text}");
    }

    #[test]
    fn show_names_the_shared_table() {
        let mut profile = Profile::demo().unwrap();
        profile.shared = Some(crate::profile::SharedEntry {
            redis: "${REDIS_URL}".into(),
            key: "team".into(),
            on_failure: Some("local/2".into()),
            ca_file: None,
        });
        let text = show(&profile, Path::new("/p/demo.toml"), &SecretStore::in_memory(), |_| false);
        assert!(text.contains("shared budgets: key 'team' in ${REDIS_URL} (when it is away: local/2)"), "{text}");
    }
}
