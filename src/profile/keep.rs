//! Saving over an existing profile file: the new profile merged into the file's own text, so its
//! comments, blank lines, key order and quoting stay wherever the settings did not change.
//!
//! The merge is structural ([`toml_edit`]): tables by key, `[[hosts]]`, `[[hosts.paths]]`,
//! `[[hosts.endpoints]]` and budget arrays by `name` or `prefix` (else by position). A changed
//! value keeps the comment above its key and the one after it. Keys the new profile leaves out
//! go, unless what they say still reads the same (an explicit `adaptive = false`). Every
//! candidate text is read back and kept only when it means exactly the profile saved; when no
//! merge does, the fresh [`Profile::to_toml`] text is written instead.

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Key, Table, Value};

use super::error::ProfileError;
use super::model::Profile;

/// The text to write for `profile` over a file holding `old`: `old` itself when it already
/// reads as `profile`, else `profile` merged into `old`, else the fresh [`Profile::to_toml`].
/// Whatever it returns reads back as exactly `profile`.
pub(crate) fn merged(old: &str, profile: &Profile) -> Result<String, ProfileError> {
    if reads_as(old, profile) {
        return Ok(old.to_owned());
    }
    let fresh = profile.to_toml()?;
    let (Ok(old_doc), Ok(new_doc)) = (old.parse::<DocumentMut>(), fresh.parse::<DocumentMut>()) else {
        return Ok(fresh);
    };
    // First with the file's own table order; renumbering the tables in the merged order is
    // for a save that reordered hosts, paths or endpoints (it may move a table the file had
    // placed apart from its parent).
    for renumber in [false, true] {
        if let Some(text) = best_merge(&old_doc, &new_doc, profile, renumber) {
            return Ok(text);
        }
    }
    Ok(fresh)
}

/// Whether `text` is a valid profile equal to `profile`.
fn reads_as(text: &str, profile: &Profile) -> bool {
    Profile::from_toml(text).is_ok_and(|read| read == *profile)
}

/// The merge keeping as many of the old file's left-out keys as read the same, or `None` when
/// even the merge that drops them all does not read as `profile`.
fn best_merge(old: &DocumentMut, new: &DocumentMut, profile: &Profile, renumber: bool) -> Option<String> {
    let (strict, left_out) = attempt(old, new, &[], renumber);
    if !reads_as(&strict, profile) {
        return None;
    }
    if left_out.is_empty() {
        return Some(strict);
    }
    // Most often every left-out key is an explicit default: one try keeps them all.
    let (all, _) = attempt(old, new, &left_out, renumber);
    if reads_as(&all, profile) {
        return Some(all);
    }
    // Else one at a time, so a key that changes the meaning (`concurrency = 4` where the
    // profile now has none) costs only itself.
    let kept: Vec<KeyPath> = left_out
        .into_iter()
        .filter(|path| reads_as(&attempt(old, new, std::slice::from_ref(path), renumber).0, profile))
        .collect();
    if kept.is_empty() {
        return Some(strict);
    }
    let (all, _) = attempt(old, new, &kept, renumber);
    Some(if reads_as(&all, profile) { all } else { strict })
}

/// `new` merged into a copy of `old`, keeping the left-out keys in `keep`; with every key path
/// `old` has and `new` leaves out.
fn attempt(old: &DocumentMut, new: &DocumentMut, keep: &[KeyPath], renumber: bool) -> (String, Vec<KeyPath>) {
    let mut doc = old.clone();
    let mut merge = Merge { keep, left_out: Vec::new(), path: Vec::new() };
    merge.table(doc.as_table_mut(), new.as_table().clone());
    if renumber {
        renumber_tables(doc.as_table_mut(), &mut 0);
    }
    (doc.to_string(), merge.left_out)
}

/// One step of the way to a key: a key, or an element of an array by its index in the new profile.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Where a key is, from the document's root.
type KeyPath = Vec<Step>;

/// One merge of a new document into an old one.
struct Merge<'a> {
    /// Left-out keys that stay.
    keep: &'a [KeyPath],
    /// Every key the old document has where the new one has none.
    left_out: Vec<KeyPath>,
    /// Where the merge is.
    path: KeyPath,
}

impl Merge<'_> {
    /// Notes `key` of the old side, which the new side leaves out; whether it stays.
    fn left_out(&mut self, key: &str) -> bool {
        self.path.push(Step::Key(key.to_owned()));
        let keep = self.keep.contains(&self.path);
        self.left_out.push(self.path.clone());
        self.path.pop();
        keep
    }

    fn table(&mut self, old: &mut Table, new: Table) {
        let gone: Vec<String> =
            old.iter().map(|(key, _)| key.to_owned()).filter(|key| !new.contains_key(key)).collect();
        for key in gone {
            if !self.left_out(&key) {
                old.remove(&key);
            }
        }
        for (key, item) in new {
            self.path.push(Step::Key(key.clone()));
            match old.get_mut(&key) {
                Some(slot) => self.item(slot, item),
                None => {
                    old.insert(&key, fresh_item(item));
                }
            }
            self.path.pop();
        }
    }

    fn item(&mut self, old: &mut Item, new: Item) {
        let new = match (&mut *old, new) {
            (Item::Value(old), Item::Value(new)) => return self.value(old, new),
            (Item::Table(old), Item::Table(new)) => return self.table(old, new),
            (Item::ArrayOfTables(old), Item::ArrayOfTables(new)) => return self.tables(old, new),
            // The file spelled this part in the other style: the new content in the file's.
            (Item::Value(old), new @ (Item::Table(_) | Item::ArrayOfTables(_))) => match new.into_value() {
                Ok(new) => return self.value(old, new),
                Err(new) => new,
            },
            (Item::Table(old), Item::Value(Value::InlineTable(new))) => return self.table(old, new.into_table()),
            (Item::ArrayOfTables(old), new @ Item::Value(Value::Array(_))) => match new.into_array_of_tables() {
                Ok(new) => return self.tables(old, new),
                Err(new) => new,
            },
            (_, new) => new,
        };
        // Nothing in common: the new part replaces the old one whole.
        *old = fresh_item(new);
    }

    fn value(&mut self, old: &mut Value, new: Value) {
        if same(old, &new) {
            return;
        }
        match (old, new) {
            (Value::Array(old), Value::Array(new)) => self.array(old, new),
            (Value::InlineTable(old), Value::InlineTable(new)) => self.inline_table(old, new),
            (old, mut new) => {
                // The comment after the value (and the spaces around it) stay with its key.
                *new.decor_mut() = old.decor().clone();
                *old = new;
            }
        }
    }

    fn array(&mut self, old: &mut Array, new: Array) {
        let tail = old.iter().last().and_then(suffix);
        let indent = old.iter().last().and_then(indent);
        let mut olds: Vec<Option<Value>> = old.iter().cloned().map(Some).collect();
        let news: Vec<Value> = new.into_iter().collect();
        let grew = news.len() > olds.len();
        let pairs = pair(&olds, &news, |old, new| match (identity_of_value(old), identity_of_value(new)) {
            (Some(old), Some(new)) => old == new,
            (None, None) => same(old, new),
            _ => false,
        });
        old.clear();
        for (index, (new, paired)) in news.into_iter().zip(pairs).enumerate() {
            self.path.push(Step::Index(index));
            let value = match paired.and_then(|at| olds.get_mut(at).and_then(Option::take)) {
                Some(mut value) => {
                    self.value(&mut value, new);
                    value
                }
                None => {
                    let mut value = new;
                    value.decor_mut().clear();
                    if let Some(indent) = &indent {
                        value.decor_mut().set_prefix(indent.as_str());
                    }
                    value
                }
            };
            old.push_formatted(value);
            self.path.pop();
        }
        if indent.is_none() && grew && old.len() > 1 && old.iter().all(Value::is_inline_table) {
            // A one-line `budgets = [{ ... }]` that gains a budget takes the documented layout,
            // one budget a line, rather than growing into one long line.
            for value in old.iter_mut() {
                value.decor_mut().set_prefix(MULTI_LINE_INDENT);
                value.decor_mut().set_suffix("");
            }
            old.set_trailing_comma(true);
            old.set_trailing("\n");
        } else {
            move_tail(old.iter_mut(), tail);
        }
    }

    fn inline_table(&mut self, old: &mut InlineTable, new: InlineTable) {
        let tail = old.iter().last().and_then(|(_, value)| suffix(value));
        let gone: Vec<String> =
            old.iter().map(|(key, _)| key.to_owned()).filter(|key| !new.contains_key(key)).collect();
        for key in gone {
            if !self.left_out(&key) {
                old.remove(&key);
            }
        }
        for (key, new) in new {
            self.path.push(Step::Key(key.clone()));
            match old.get_mut(&key) {
                Some(slot) => self.value(slot, new),
                None => {
                    let mut value = new;
                    value.decor_mut().clear();
                    let key = key_like(old, &key);
                    old.insert_formatted(&key, value);
                }
            }
            self.path.pop();
        }
        move_tail(old.iter_mut().map(|(_, value)| value), tail);
    }

    fn tables(&mut self, old: &mut ArrayOfTables, new: ArrayOfTables) {
        let mut olds: Vec<Option<Table>> = old.iter().cloned().map(Some).collect();
        let news: Vec<Table> = new.into_iter().collect();
        let pairs = pair(&olds, &news, |old, new| identity_of_table(old) == identity_of_table(new));
        old.clear();
        for (index, (new, paired)) in news.into_iter().zip(pairs).enumerate() {
            self.path.push(Step::Index(index));
            match paired.and_then(|at| olds.get_mut(at).and_then(Option::take)) {
                Some(mut table) => {
                    self.table(&mut table, new);
                    old.push(table);
                }
                None => old.push(fresh_table(new)),
            }
            self.path.pop();
        }
    }
}

/// For each new element, the old one it continues: the first unused one `matches` accepts, else
/// the unused one at its own index (a renamed host keeps its comments).
fn pair<T>(olds: &[Option<T>], news: &[T], matches: impl Fn(&T, &T) -> bool) -> Vec<Option<usize>> {
    let mut used = vec![false; olds.len()];
    let mut pairs: Vec<Option<usize>> = news
        .iter()
        .map(|new| {
            let found = olds
                .iter()
                .enumerate()
                .position(|(at, old)| !used[at] && old.as_ref().is_some_and(|old| matches(old, new)));
            if let Some(at) = found {
                used[at] = true;
            }
            found
        })
        .collect();
    for (index, paired) in pairs.iter_mut().enumerate() {
        if paired.is_none() && used.get(index) == Some(&false) {
            used[index] = true;
            *paired = Some(index);
        }
    }
    pairs
}

/// Before each element of an array written one element a line, as [`Profile::to_toml`] does.
const MULTI_LINE_INDENT: &str = "\n    ";

/// The key of a new entry of `table`, quoted when the keys already there are
/// (`headers = { "accept" = "application/json", "x-team" = "core" }`).
fn key_like(table: &InlineTable, name: &str) -> Key {
    let quoted = table
        .iter()
        .next()
        .and_then(|(first, _)| table.key(first))
        .and_then(Key::as_repr)
        .and_then(|repr| repr.as_raw().as_str())
        .is_some_and(|raw| raw.starts_with('"'));
    if quoted {
        // A string value's text is a valid quoted key with the same name.
        if let Ok(mut keys) = Key::parse(&Value::from(name).to_string())
            && keys.len() == 1
            && let Some(mut key) = keys.pop()
        {
            key.leaf_decor_mut().clear();
            return key;
        }
    }
    Key::new(name)
}

/// What names an element of an array: its `name` (hosts, endpoints, budgets) or `prefix` (paths).
fn identity_of_table(table: &Table) -> Option<&str> {
    ["name", "prefix"].into_iter().find_map(|key| table.get(key).and_then(Item::as_str))
}

fn identity_of_value(value: &Value) -> Option<&str> {
    let table = value.as_inline_table()?;
    ["name", "prefix"].into_iter().find_map(|key| table.get(key).and_then(Value::as_str))
}

/// Whether two values say the same, however they are written.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(a), Value::String(b)) => a.value() == b.value(),
        (Value::Integer(a), Value::Integer(b)) => a.value() == b.value(),
        (Value::Float(a), Value::Float(b)) => a.value().to_bits() == b.value().to_bits(),
        (Value::Boolean(a), Value::Boolean(b)) => a.value() == b.value(),
        (Value::Datetime(a), Value::Datetime(b)) => a.value() == b.value(),
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b.iter()).all(|(a, b)| same(a, b)),
        (Value::InlineTable(a), Value::InlineTable(b)) => {
            a.len() == b.len() && a.iter().all(|(key, a)| b.get(key).is_some_and(|b| same(a, b)))
        }
        _ => false,
    }
}

/// The text after a value up to its separator, when it is only spaces (never a comment).
fn suffix(value: &Value) -> Option<String> {
    let text = value.decor().suffix()?.as_str()?;
    text.chars().all(char::is_whitespace).then(|| text.to_owned())
}

/// The line break and indent before an element of a multi-line array, for elements added to it.
fn indent(value: &Value) -> Option<String> {
    let prefix = value.decor().prefix()?.as_str()?;
    prefix.rfind('\n').map(|at| prefix[at..].to_owned())
}

/// The spaces before the closing bracket stay there when the last element changes: `{ a = 1 }`
/// with `b` added is `{ a = 1, b = 2 }`, not `{ a = 1 , b = 2}`.
fn move_tail<'a>(values: impl Iterator<Item = &'a mut Value>, tail: Option<String>) {
    let Some(tail) = tail else { return };
    let mut values = values.peekable();
    while let Some(value) = values.next() {
        let current = value.decor().suffix().and_then(|raw| raw.as_str()).map(str::to_owned);
        if values.peek().is_none() {
            if current.as_deref().is_none_or(|text| text.chars().all(char::is_whitespace)) {
                value.decor_mut().set_suffix(tail.as_str());
            }
        } else if current.as_deref() == Some(tail.as_str()) {
            value.decor_mut().set_suffix("");
        }
    }
}

/// An item from the fresh text, ready to go into the old document: its tables placed after
/// their neighbours in the old file rather than at the fresh text's positions.
fn fresh_item(item: Item) -> Item {
    match item {
        Item::Table(table) => Item::Table(fresh_table(table)),
        Item::ArrayOfTables(tables) => Item::ArrayOfTables(fresh_aot(tables)),
        // The default spacing (`key = value`), whatever the value's place in the fresh text was.
        Item::Value(mut value) => {
            value.decor_mut().clear();
            Item::Value(value)
        }
        Item::None => Item::None,
    }
}

fn fresh_aot(tables: ArrayOfTables) -> ArrayOfTables {
    let mut fresh = ArrayOfTables::new();
    for table in tables {
        fresh.push(fresh_table(table));
    }
    fresh
}

fn fresh_table(mut table: Table) -> Table {
    unplace(&mut table);
    table
}

/// Forgets the positions of `table` and the tables in it: each then follows the table before it.
fn unplace(table: &mut Table) {
    table.set_position(None);
    for (_, item) in table.iter_mut() {
        match item {
            Item::Table(table) => unplace(table),
            Item::ArrayOfTables(tables) => tables.iter_mut().for_each(unplace),
            _ => {}
        }
    }
}

/// Numbers the tables in the order of the merged document, so each is written in that order.
fn renumber_tables(table: &mut Table, next: &mut isize) {
    if !table.is_dotted() {
        table.set_position(Some(*next));
        *next += 1;
    }
    for (_, item) in table.iter_mut() {
        match item {
            Item::Table(table) => renumber_tables(table, next),
            Item::ArrayOfTables(tables) => tables.iter_mut().for_each(|table| renumber_tables(table, next)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::profile::{BudgetEntry, DEMO_TOML, EndpointEntry, HostProfile, ProfileStore};

    /// The lines of `text` that are comments, or end in one.
    fn comments(text: &str) -> Vec<&str> {
        text.lines().filter_map(|line| line.find('#').map(|at| line[at..].trim_end())).collect()
    }

    fn assert_reads_as(text: &str, profile: &Profile) {
        assert_eq!(&Profile::from_toml(text).unwrap(), profile, "{text}");
    }

    const THREE_HOSTS: &str = r#"# Three hosts, each with its own note.
name = "three"

# The first host: the public API.
[[hosts]]
name = "one"
base_url = "https://one.example"
# At most four at once, as the provider asks.
concurrency = 4 # per account
adaptive = false          # explicit: the default, spelled out
redirects = 'same-origin'
budgets = [
    # the burst the provider allows
    { name = "rate", kind = "token_bucket", capacity = 3, rate = "3/1s" },
]

# The second host: the internal one.
[[hosts]]
name = "two"
base_url = "https://two.example"

# The third host: the status page.
[[hosts]]
name = "three"
base_url = "https://three.example"
headers = { "accept" = "text/plain" }
"#;

    #[test]
    fn the_demo_profile_round_trips_byte_for_byte() {
        let demo = Profile::demo().unwrap();
        assert_eq!(merged(DEMO_TOML, &demo).unwrap(), DEMO_TOML);

        // Through the store: load, save, and the file is the same bytes, not even rewritten.
        let dir = tempfile::tempdir().unwrap();
        let store = ProfileStore::at(dir.path());
        assert!(store.ensure_demo().unwrap());
        let path = store.save(&store.load("demo").unwrap()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), DEMO_TOML);
        assert!(!path.with_file_name("demo.toml.bak").exists(), "an unchanged profile is not rewritten");
    }

    #[test]
    fn a_changed_limit_keeps_every_comment() {
        let mut demo = Profile::demo().unwrap();
        assert_eq!(demo.hosts[0].budgets[0].capacity, Some(5));
        demo.hosts[0].budgets[0].capacity = Some(6);
        let text = merged(DEMO_TOML, &demo).unwrap();
        assert_reads_as(&text, &demo);
        assert_eq!(comments(&text), comments(DEMO_TOML), "{text}");
        assert!(comments(DEMO_TOML).len() > 30, "the demo explains itself");
        assert!(
            text.contains(r#"    { name = "rate", kind = "token_bucket", capacity = 6, rate = "5/1s" },"#),
            "{text}"
        );
        // Only that number changed.
        assert_eq!(text.replacen("capacity = 6", "capacity = 5", 1), DEMO_TOML);
    }

    #[test]
    fn a_changed_value_keeps_the_comments_around_its_key() {
        let mut profile = Profile::from_toml(THREE_HOSTS).unwrap();
        profile.hosts[0].concurrency = Some(5);
        profile.hosts[0].budgets[0].capacity = Some(4);
        let text = merged(THREE_HOSTS, &profile).unwrap();
        assert_reads_as(&text, &profile);
        assert!(
            text.contains("# At most four at once, as the provider asks.\nconcurrency = 5 # per account\n"),
            "{text}"
        );
        assert!(text.contains(
            "    # the burst the provider allows\n    { name = \"rate\", kind = \"token_bucket\", capacity = 4,"
        ));
        // What did not change keeps its spelling, explicit defaults and quoting included.
        assert!(
            text.contains(
                "adaptive = false          # explicit: the default, spelled out\nredirects = 'same-origin'\n"
            )
        );
        assert_eq!(comments(&text), comments(THREE_HOSTS));
    }

    #[test]
    fn a_key_that_must_go_goes_and_explicit_defaults_stay() {
        let mut profile = Profile::from_toml(THREE_HOSTS).unwrap();
        profile.hosts[0].concurrency = None;
        profile.hosts[0].budgets.clear();
        profile.hosts[2].headers.clear();
        let text = merged(THREE_HOSTS, &profile).unwrap();
        assert_reads_as(&text, &profile);
        for gone in ["concurrency", "budgets", "burst the provider allows", "headers"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
        assert!(text.contains("adaptive = false          # explicit"), "{text}");
        assert!(text.contains("redirects = 'same-origin'"), "{text}");
        assert!(text.contains("# The third host: the status page."), "{text}");
    }

    #[test]
    fn removing_a_host_removes_its_table_and_keeps_the_others_comments() {
        let mut profile = Profile::from_toml(THREE_HOSTS).unwrap();
        profile.hosts.remove(1);
        let text = merged(THREE_HOSTS, &profile).unwrap();
        assert_reads_as(&text, &profile);
        assert!(!text.contains("two") && !text.contains("internal one"), "{text}");
        let expected: Vec<&str> =
            comments(THREE_HOSTS).into_iter().filter(|comment| !comment.contains("internal one")).collect();
        assert_eq!(comments(&text), expected);

        let mut demo = Profile::demo().unwrap();
        demo.hosts[0].paths.retain(|path| path.prefix != "/graphql");
        let text = merged(DEMO_TOML, &demo).unwrap();
        assert_reads_as(&text, &demo);
        assert!(!text.contains("restores 50 points a second"), "its comment goes with it: {text}");
        assert!(text.contains("# No budgets and no cap: requests under /open are not paced at all."), "{text}");
    }

    #[test]
    fn an_added_endpoint_is_appended() {
        let mut demo = Profile::demo().unwrap();
        demo.hosts[0].endpoints.push(EndpointEntry { weight: Some(2), ..EndpointEntry::get("/items/42") });
        let text = merged(DEMO_TOML, &demo).unwrap();
        assert_reads_as(&text, &demo);
        assert_eq!(
            text,
            format!("{DEMO_TOML}\n[[hosts.endpoints]]\nname = \"/items/42\"\npath = \"/items/42\"\nweight = 2\n")
        );
    }

    #[test]
    fn added_hosts_paths_and_headers_land_in_the_files_layout() {
        let mut profile = Profile::from_toml(THREE_HOSTS).unwrap();
        profile.hosts[0].budgets.push(BudgetEntry::sliding_window("hour", 1000, "1h"));
        profile.hosts[2].headers.insert("x-team".into(), "core".into());
        profile.hosts[1].set_path_limits("/search", &crate::engine::LimiterConfig::new().with_concurrency(1));
        let mut four = HostProfile::new("four", "https://four.example");
        four.adaptive = true;
        profile.hosts.push(four);
        let text = merged(THREE_HOSTS, &profile).unwrap();
        assert_reads_as(&text, &profile);
        assert_eq!(comments(&text), comments(THREE_HOSTS));
        assert!(
            text.contains(concat!(
                "    { name = \"rate\", kind = \"token_bucket\", capacity = 3, rate = \"3/1s\" },\n",
                "    { name = \"hour\", kind = \"sliding_window\", limit = 1000, window = \"1h\" },\n]"
            )),
            "a new budget on its own line, as the others: {text}"
        );
        assert!(text.contains(r#"headers = { "accept" = "text/plain", "x-team" = "core" }"#), "{text}");
        let search = text.find("[[hosts.paths]]").unwrap();
        let (two, three) = (text.find("name = \"two\"\n").unwrap(), text.find("name = \"three\"\nbase").unwrap());
        assert!(two < search && search < three, "the new path under its host: {text}");
        assert!(text.ends_with("\n[[hosts]]\nname = \"four\"\nbase_url = \"https://four.example\"\nadaptive = true\n"));
    }

    #[test]
    fn a_one_line_budget_list_that_grows_takes_one_budget_a_line() {
        let mut demo = Profile::demo().unwrap();
        demo.hosts[0].paths[0].budgets.push(BudgetEntry::sliding_window("day", 500, "1d"));
        let text = merged(DEMO_TOML, &demo).unwrap();
        assert_reads_as(&text, &demo);
        assert!(
            text.contains(concat!(
                "prefix = \"/search\"\nconcurrency = 1\nbudgets = [\n",
                "    { name = \"search\", kind = \"sliding_window\", limit = 2, window = \"1s\" },\n",
                "    { name = \"day\", kind = \"sliding_window\", limit = 500, window = \"1d\" },\n]\n"
            )),
            "{text}"
        );
        assert_eq!(comments(&text), comments(DEMO_TOML));
    }

    #[test]
    fn parts_spelled_in_another_style_keep_it_or_are_replaced_whole() {
        let text = r#"name = "styles"
hosts = [
    # inline hosts
    { name = "a", base_url = "https://a.example", retry = { max_attempts = 2 } },
]
"#;
        let mut profile = Profile::from_toml(text).unwrap();
        profile.hosts[0].retry.as_mut().unwrap().base = Some("1s".into());
        let merged_text = merged(text, &profile).unwrap();
        assert_reads_as(&merged_text, &profile);
        assert!(merged_text.contains("# inline hosts"), "{merged_text}");

        let text = r#"name = "tables"

[[hosts]]
name = "a"
base_url = "https://a.example"
retry.max_attempts = 2 # dotted

# budgets as tables
[[hosts.budgets]]
name = "rate" # the burst
kind = "token_bucket"
capacity = 3
rate = "3/1s"
"#;
        let mut profile = Profile::from_toml(text).unwrap();
        profile.hosts[0].budgets[0].capacity = Some(4);
        profile.hosts[0].budgets.push(BudgetEntry::sliding_window("minute", 60, "1m"));
        profile.hosts[0].retry.as_mut().unwrap().cap = Some("9s".into());
        let merged_text = merged(text, &profile).unwrap();
        assert_reads_as(&merged_text, &profile);
        for kept in
            ["# budgets as tables", "name = \"rate\" # the burst", "capacity = 4\n", "retry.max_attempts = 2 # dotted"]
        {
            assert!(merged_text.contains(kept), "{kept:?} in {merged_text}");
        }
    }

    #[test]
    fn reordered_hosts_read_back_in_their_new_order() {
        let mut profile = Profile::from_toml(THREE_HOSTS).unwrap();
        profile.hosts.swap(0, 2);
        let text = merged(THREE_HOSTS, &profile).unwrap();
        assert_reads_as(&text, &profile);
        assert_eq!(comments(&text).len(), comments(THREE_HOSTS).len(), "{text}");
    }

    #[test]
    fn a_renamed_host_keeps_its_comments() {
        let mut profile = Profile::from_toml(THREE_HOSTS).unwrap();
        profile.hosts[1].name = "two, renamed".into();
        let text = merged(THREE_HOSTS, &profile).unwrap();
        assert_reads_as(&text, &profile);
        assert!(text.contains("# The second host: the internal one.\n[[hosts]]\nname = \"two, renamed\"\n"), "{text}");
    }

    /// One edit a person makes in the app or a command makes to a profile.
    #[derive(Debug, Clone)]
    enum Edit {
        Capacity(usize, u64),
        PathLimit(usize, u64),
        ToggleAdaptive,
        Concurrency(Option<usize>),
        AddEndpoint(u32),
        RemoveEndpoint(usize),
        RemovePath(usize),
        RemoveBudget(usize),
        Header(bool),
        Retry(Option<u32>),
        AddHost,
        RemoveHost(usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            (0..3usize, 1..1000u64).prop_map(|(at, n)| Edit::Capacity(at, n)),
            (0..8usize, 60..1000u64).prop_map(|(at, n)| Edit::PathLimit(at, n)),
            Just(Edit::ToggleAdaptive),
            proptest::option::of(1..20usize).prop_map(Edit::Concurrency),
            (1..5u32).prop_map(Edit::AddEndpoint),
            (0..4usize).prop_map(Edit::RemoveEndpoint),
            (0..8usize).prop_map(Edit::RemovePath),
            (0..3usize).prop_map(Edit::RemoveBudget),
            any::<bool>().prop_map(Edit::Header),
            proptest::option::of(1..9u32).prop_map(Edit::Retry),
            Just(Edit::AddHost),
            (0..3usize).prop_map(Edit::RemoveHost),
        ]
    }

    fn apply(profile: &mut Profile, edit: &Edit, added: &mut usize) {
        let Some(host) = profile.hosts.first_mut() else {
            profile.hosts.push(HostProfile::new("again", "https://again.example"));
            return;
        };
        match *edit {
            Edit::Capacity(at, n) => {
                if let Some(budget) = host.budgets.get_mut(at) {
                    if budget.capacity.is_some() {
                        budget.capacity = Some(n);
                    } else {
                        budget.limit = Some(n);
                    }
                }
            }
            Edit::PathLimit(at, n) => {
                if let Some(budget) = host.paths.get_mut(at).and_then(|path| path.budgets.first_mut()) {
                    budget.limit = Some(n);
                }
            }
            Edit::ToggleAdaptive => host.adaptive = !host.adaptive,
            Edit::Concurrency(limit) => host.concurrency = limit,
            Edit::AddEndpoint(weight) => {
                *added += 1;
                let path = format!("/added/{added}");
                host.endpoints.push(EndpointEntry { weight: Some(weight), ..EndpointEntry::get(&path) });
            }
            Edit::RemoveEndpoint(at) => {
                if at < host.endpoints.len() {
                    host.endpoints.remove(at);
                }
            }
            Edit::RemovePath(at) => {
                if at < host.paths.len() {
                    host.paths.remove(at);
                }
            }
            Edit::RemoveBudget(at) => {
                if at < host.budgets.len() {
                    host.budgets.remove(at);
                }
            }
            Edit::Header(add) => {
                if add {
                    host.headers.insert("x-trace".into(), "on".into());
                } else {
                    host.headers.clear();
                }
            }
            Edit::Retry(attempts) => match attempts {
                Some(attempts) => host.retry.get_or_insert_with(Default::default).max_attempts = Some(attempts),
                None => host.retry = None,
            },
            Edit::AddHost => {
                *added += 1;
                let mut new = HostProfile::new(format!("host {added}"), format!("https://h{added}.example"));
                new.budgets.push(BudgetEntry::token_bucket("rate", 2, "2/1s"));
                profile.hosts.push(new);
            }
            Edit::RemoveHost(at) => {
                if at < profile.hosts.len() {
                    profile.hosts.remove(at);
                }
            }
        }
    }

    proptest! {
        /// Whatever is edited, the saved text reads back as exactly the saved profile, save
        /// after save (each merging into the text the one before wrote), and keeps the file's
        /// opening comment.
        #[test]
        fn a_merged_save_always_reads_back_as_the_profile(
            base in prop_oneof![Just(DEMO_TOML), Just(THREE_HOSTS)],
            saves in proptest::collection::vec(proptest::collection::vec(edit(), 1..4), 1..4),
        ) {
            let mut profile = Profile::from_toml(base).unwrap();
            let mut text = base.to_owned();
            let mut added = 0;
            for edits in &saves {
                for edit in edits {
                    // An edit that leaves an invalid profile is one the app and the CLI refuse.
                    let mut edited = profile.clone();
                    apply(&mut edited, edit, &mut added);
                    if edited.validate().is_ok() {
                        profile = edited;
                    }
                }
                text = merged(&text, &profile).unwrap();
                prop_assert_eq!(&Profile::from_toml(&text).unwrap(), &profile, "{}", text);
                // Never the fresh text, which has no comments: the merge itself read back right.
                prop_assert!(text.starts_with(base.lines().next().unwrap_or_default()), "{}", text);
            }
        }
    }
}
