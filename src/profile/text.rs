//! Profiles to and from TOML text, with every error placed at its line and column.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{FieldPath, Position, ProfileError, Segment};
use serde::Serialize;

use super::model::{BudgetEntry, EndpointEntry, Profile};

impl Profile {
    /// Parses and validates a profile. Errors give the line and column, and the host when
    /// the problem is inside one.
    pub fn from_toml(text: &str) -> Result<Self, ProfileError> {
        let profile: Profile = toml::from_str(text).map_err(|err| {
            let offset = err.span().map(|span| span.start);
            ProfileError::Syntax {
                position: offset.map(|offset| Position::of_offset(text, offset)),
                host: offset.and_then(|offset| host_at(text, offset)),
                message: err.message().trim().to_owned(),
            }
        })?;
        profile.compile().map_err(|setting| {
            let position = locate(text, &setting.path);
            ProfileError::Invalid { setting, position }
        })?;
        Ok(profile)
    }

    /// Reads and validates the profile file at `path`; errors name the file, line and column.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ProfileError> {
        let bytes = crate::files::read_capped(path, super::store::MAX_PROFILE_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ProfileError::Syntax { position: None, host: None, message: "the file is not UTF-8 text".into() }
                .in_file(path)
        })?;
        Self::from_toml(&text).map_err(|err| err.in_file(path))
    }

    /// The profile as TOML in the documented layout: one `[[hosts]]` table per host with its
    /// budgets as inline tables. Secret values are not part of a profile, so never in here.
    pub fn to_toml(&self) -> Result<String, ProfileError> {
        let mut out = String::new();
        line(&mut out, "name", &self.name)?;
        if let Some(shared) = &self.shared {
            out.push_str("\n[shared]\n");
            line(&mut out, "redis", &shared.redis)?;
            line(&mut out, "key", &shared.key)?;
            if let Some(policy) = &shared.on_failure {
                line(&mut out, "on_failure", policy)?;
            }
            if let Some(ca_file) = &shared.ca_file {
                line(&mut out, "ca_file", ca_file)?;
            }
        }
        for host in &self.hosts {
            out.push_str("\n[[hosts]]\n");
            line(&mut out, "name", &host.name)?;
            line(&mut out, "base_url", &host.base_url)?;
            if let Some(limit) = host.concurrency {
                line(&mut out, "concurrency", limit)?;
            }
            if host.adaptive {
                line(&mut out, "adaptive", true)?;
            }
            if host.redirects != Default::default() {
                line(&mut out, "redirects", host.redirects)?;
            }
            budgets(&mut out, &host.budgets)?;
            if !host.headers.is_empty() {
                let pairs: Vec<(&str, String)> = host
                    .headers
                    .iter()
                    .map(|(name, value)| Ok((name.as_str(), encode(value)?)))
                    .collect::<Result<_, ProfileError>>()?;
                out.push_str(&format!("headers = {}\n", inline_table(&pairs)));
            }
            if !host.secret_headers.is_empty() {
                line(&mut out, "secret_headers", &host.secret_headers)?;
            }
            if let Some(retry) = &host.retry {
                out.push_str("\n[hosts.retry]\n");
                out.push_str(&toml::to_string(retry)?);
            }
            for path in &host.paths {
                out.push_str("\n[[hosts.paths]]\n");
                line(&mut out, "prefix", &path.prefix)?;
                if let Some(limit) = path.concurrency {
                    line(&mut out, "concurrency", limit)?;
                }
                budgets(&mut out, &path.budgets)?;
            }
            for endpoint in &host.endpoints {
                write_endpoint(&mut out, endpoint)?;
            }
        }
        Ok(out)
    }
}

/// `[[hosts.endpoints]]` with its fields in their documented order.
fn write_endpoint(out: &mut String, endpoint: &EndpointEntry) -> Result<(), ProfileError> {
    out.push_str("\n[[hosts.endpoints]]\n");
    line(out, "name", &endpoint.name)?;
    if let Some(method) = &endpoint.method {
        line(out, "method", method)?;
    }
    line(out, "path", &endpoint.path)?;
    for (name, table) in [("query", &endpoint.query), ("headers", &endpoint.headers)] {
        if !table.is_empty() {
            let pairs: Vec<(&str, String)> = table
                .iter()
                .map(|(key, value)| Ok((key.as_str(), encode(value)?)))
                .collect::<Result<_, ProfileError>>()?;
            out.push_str(&format!("{name} = {}\n", inline_table(&pairs)));
        }
    }
    if let Some(body) = &endpoint.body {
        line(out, "body", body)?;
    }
    if let Some(file) = &endpoint.body_file {
        line(out, "body_file", file)?;
    }
    if let Some(weight) = endpoint.weight {
        line(out, "weight", weight)?;
    }
    if !endpoint.costs.is_empty() {
        line(out, "costs", &endpoint.costs)?;
    }
    if let Some(batch) = &endpoint.batch {
        let mut pairs = vec![
            ("param", encode(&batch.param)?),
            ("max_size", encode(batch.max_size)?),
            ("max_wait", encode(&batch.max_wait)?),
        ];
        if let Some(separator) = &batch.separator {
            pairs.push(("separator", encode(separator)?));
        }
        out.push_str(&format!("batch = {}\n", inline_table(&pairs)));
    }
    Ok(())
}

/// One value in TOML syntax (strings quoted and escaped).
fn encode(value: impl Serialize) -> Result<String, ProfileError> {
    Ok(toml::Value::try_from(value)?.to_string())
}

/// A key as TOML accepts it: bare when it can be, else a basic string with escapes.
fn key(name: &str) -> String {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return name.to_owned();
    }
    let mut quoted = String::from("\"");
    for c in name.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn line(out: &mut String, name: &str, value: impl Serialize) -> Result<(), ProfileError> {
    out.push_str(&format!("{} = {}\n", key(name), encode(value)?));
    Ok(())
}

fn inline_table(pairs: &[(&str, String)]) -> String {
    let fields: Vec<String> = pairs.iter().map(|(name, value)| format!("{} = {value}", key(name))).collect();
    format!("{{ {} }}", fields.join(", "))
}

/// `budgets = [ ... ]`, one inline table per line, fields in their documented order.
fn budgets(out: &mut String, budgets: &[BudgetEntry]) -> Result<(), ProfileError> {
    if budgets.is_empty() {
        return Ok(());
    }
    out.push_str("budgets = [\n");
    for budget in budgets {
        let mut pairs = vec![("name", encode(&budget.name)?), ("kind", encode(budget.kind)?)];
        let numbers = [("capacity", budget.capacity), ("limit", budget.limit)];
        let texts = [("rate", &budget.rate), ("window", &budget.window)];
        for (name, value) in numbers {
            if let Some(value) = value {
                pairs.push((name, encode(value)?));
            }
        }
        for (name, value) in texts {
            if let Some(value) = value {
                pairs.push((name, encode(value)?));
            }
        }
        if let Some(cost) = budget.cost {
            pairs.push(("cost", encode(cost)?));
        }
        if let Some(unit) = &budget.unit {
            pairs.push(("unit", encode(unit)?));
        }
        out.push_str(&format!("    {},\n", inline_table(&pairs)));
    }
    out.push_str("]\n");
    Ok(())
}

/// Where the setting at `path` is written, or the nearest enclosing table that is.
pub(crate) fn locate(text: &str, path: &FieldPath) -> Option<Position> {
    let (document, _) = DeTable::parse_recoverable(text);
    let span = document.span();
    let root = DeValue::Table(document.into_inner());
    let mut found: Range<usize> = span;
    let mut value = &root;
    for segment in path.segments() {
        let next: Option<&Spanned<DeValue<'_>>> = match segment {
            Segment::Key(key) => value.get(key.as_str()),
            Segment::Index(index) => value.get(*index),
        };
        let Some(next) = next else { break };
        found = next.span();
        value = next.get_ref();
    }
    Some(Position::of_offset(text, found.start))
}

/// The name of the host whose table holds byte `offset`, if any.
fn host_at(text: &str, offset: usize) -> Option<String> {
    let (document, _) = DeTable::parse_recoverable(text);
    let Some(DeValue::Array(hosts)) = document.get_ref().get("hosts").map(Spanned::get_ref) else {
        return None;
    };
    // `[[hosts]]` tables follow one another, so the last one starting before the offset holds it.
    let host = hosts.iter().rfind(|host| host.span().start <= offset)?;
    host.get_ref().get("name")?.get_ref().as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_line_column_and_host() {
        let text = "name = \"p\"\n[[hosts]]\nname = \"api\"\nbase_url = \"https://a.example\"\ncapcity = 3\n";
        let err = Profile::from_toml(text).unwrap_err();
        assert_eq!(err.position(), Some(Position { line: 5, column: 1 }), "{err}");
        let message = err.to_string();
        assert!(message.starts_with("line 5, column 1: host 'api': unknown field `capcity`"), "{message}");
    }

    #[test]
    fn invalid_settings_are_placed_at_their_value() {
        let text = "name = \"p\"\n\n[[hosts]]\nname = \"a\"\nbase_url = \"https://a.example\"\n\n[[hosts]]\nname = \"b\"\nbase_url = \"https://b.example\"\nbudgets = [ { name = \"rate\", kind = \"token_bucket\", capacity = 5, rate = \"0/1s\" } ]\n";
        let err = Profile::from_toml(text).unwrap_err();
        let column = text.lines().nth(9).unwrap().find("\"0/1s\"").unwrap() + 1;
        assert_eq!(err.position(), Some(Position { line: 10, column }), "{err}");
        assert!(
            err.to_string().ends_with("host 'b': budget 'rate': rate \"0/1s\": a rate of zero never refills: use a positive amount such as 10/1s"),
            "{err}"
        );
    }

    #[test]
    fn a_redirect_policy_survives_the_round_trip_and_a_bad_one_is_named() {
        let mut profile = Profile::demo().unwrap();
        profile.hosts[0].redirects = crate::http::RedirectPolicy::AnyOrigin;
        let text = profile.to_toml().unwrap();
        assert!(text.contains("redirects = \"any-origin\""), "{text}");
        assert_eq!(Profile::from_toml(&text).unwrap(), profile);
        let bad = text.replace("any-origin", "always");
        let err = Profile::from_toml(&bad).unwrap_err().to_string();
        assert!(err.contains("always") && err.contains("same-origin"), "{err}");
    }

    #[test]
    fn the_shared_table_survives_the_round_trip() {
        let mut profile = Profile::demo().unwrap();
        profile.shared = Some(crate::profile::SharedEntry {
            redis: "rediss://:${REDIS_PASSWORD}@db:6379/2".into(),
            key: "team \"a\"".into(),
            on_failure: Some("local/3".into()),
            ca_file: Some("/etc/ssl/team-ca.pem".into()),
        });
        let text = profile.to_toml().unwrap();
        assert!(text.contains("[shared]"), "{text}");
        assert_eq!(Profile::from_toml(&text).unwrap(), profile);
    }

    #[test]
    fn odd_names_survive_the_round_trip() {
        let mut profile = Profile::demo().unwrap();
        profile.name = "dé\"mo' \\ 2".into();
        let host = &mut profile.hosts[0];
        host.name = "a \"quoted\" 'host'\nwith a newline".into();
        host.budgets[0].name = "r\u{1}ate".into();
        host.headers.insert("x-odd_Name".into(), "a \"b\" 'c' \\ é".into());
        host.secret_headers.push("x-api-key".into());
        host.paths[0].budgets[0].cost = Some(2);
        host.budgets[0].unit = Some("points".into());
        let text = profile.to_toml().unwrap();
        assert_eq!(Profile::from_toml(&text).unwrap(), profile, "{text}");
        assert_eq!(key("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
    }

    #[test]
    fn endpoints_survive_the_round_trip_with_odd_bodies() {
        let mut profile = Profile::demo().unwrap();
        let host = &mut profile.hosts[0];
        host.endpoints.push(EndpointEntry {
            name: "create \"item\"".into(),
            method: Some("POST".into()),
            query: [("page".to_owned(), "2 & 3".to_owned())].into(),
            headers: [("content-type".to_owned(), "application/json".to_owned())].into(),
            body: Some("{\n  \"name\": \"wid'get\",\n  \"note\": \"tab\there \\ é\"\n}".into()),
            weight: Some(3),
            ..EndpointEntry::get("/items?dry_run=1")
        });
        host.endpoints.push(EndpointEntry {
            body_file: Some("payload.json".into()),
            costs: vec!["tokens=field:max_tokens+body/4->field:usage.total_tokens".into()],
            ..EndpointEntry::get("/upload")
        });
        host.endpoints.push(EndpointEntry {
            batch: Some(crate::profile::BatchEntry {
                param: "ids[]".into(),
                max_size: 7,
                max_wait: "1s".into(),
                separator: Some("|".into()),
            }),
            ..EndpointEntry::get("/things")
        });
        let text = profile.to_toml().unwrap();
        assert!(text.contains("[[hosts.endpoints]]"), "{text}");
        assert_eq!(Profile::from_toml(&text).unwrap(), profile, "{text}");
    }

    #[test]
    fn a_written_profile_reads_back_equal() {
        let profile = Profile::demo().unwrap();
        let text = profile.to_toml().unwrap();
        assert_eq!(Profile::from_toml(&text).unwrap(), profile, "{text}");
    }
}
