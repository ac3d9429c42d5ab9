//! `BatchTemplate`: the flush for APIs that take many ids in one query parameter
//! (`/items?ids=1,2,3`) and answer them in one JSON document, split back to each id.

use std::collections::HashMap;

use http::HeaderMap;
use serde_json::Value;
use thiserror::Error;
use url::Url;
use url::form_urlencoded::byte_serialize;

use super::{BatchError, BatchSettings, BatchSettingsError, Batcher, FlushResult};
use crate::engine::Priority;
use crate::http::{LimitedClient, RequestSpec};

/// Characters a separator of ids may not use: they mean something else in a query string.
const RESERVED: &[char] = &['&', '#', '=', '%', '+', '?', '/'];
/// The most of a refused batch's body quoted in its error.
const QUOTED_BODY: usize = 200;

/// How ids go into the URL: `param` holding them joined by `separator` (`ids=1,2,3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdsQuery {
    /// The query parameter's name.
    pub param: String,
    /// Between two ids.
    pub separator: String,
}

/// A template that cannot make a URL.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    /// An empty parameter name.
    #[error("the batch's query parameter needs a name (e.g. ids)")]
    NoParam,
    /// A parameter name that is not plain (letters, digits, `_`, `-`, `.`, `[]`).
    #[error("the batch's query parameter {0:?} may hold only letters, digits, '_', '-', '.', '[' and ']'")]
    BadParam(String),
    /// An empty separator, or one using a character reserved in query strings.
    #[error("the separator between ids {0:?} must be non-empty, printable and without & # = % + ? / or spaces")]
    BadSeparator(String),
}

impl IdsQuery {
    /// `param=ID<separator>ID...`, checked: a plain parameter name and a separator that a
    /// query string keeps as it is.
    pub fn new(param: &str, separator: &str) -> Result<Self, TemplateError> {
        if param.is_empty() {
            return Err(TemplateError::NoParam);
        }
        if !param.chars().all(|c| c.is_ascii_alphanumeric() || "_-.[]".contains(c)) {
            return Err(TemplateError::BadParam(param.to_owned()));
        }
        if separator.is_empty() || !separator.chars().all(|c| c.is_ascii_graphic() && !RESERVED.contains(&c)) {
            return Err(TemplateError::BadSeparator(separator.to_owned()));
        }
        Ok(Self { param: param.to_owned(), separator: separator.to_owned() })
    }

    /// `param` with ids separated by commas.
    pub fn comma(param: &str) -> Result<Self, TemplateError> {
        Self::new(param, ",")
    }
}

/// Where each id's part is in the JSON answer. `pointer` is a JSON pointer (RFC 6901) to
/// the collection: `""` for the whole document, `"/items"` for its `items` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchFormat {
    /// An array whose n-th element answers the n-th id sent.
    Positional {
        /// Where the array is.
        pointer: String,
    },
    /// An array of objects, each naming its id in `field` (a string or a number).
    ArrayById {
        /// Where the array is.
        pointer: String,
        /// The field of each element holding its id.
        field: String,
    },
    /// An object whose keys are the ids.
    Keyed {
        /// Where the object is.
        pointer: String,
    },
}

impl BatchFormat {
    /// The demo API's answer: `{"items": [{"id": 1, ...}, ...]}`.
    pub fn items_by_id() -> Self {
        Self::ArrayById { pointer: "/items".to_owned(), field: "id".to_owned() }
    }

    fn pointer(&self) -> &str {
        match self {
            Self::Positional { pointer } | Self::ArrayById { pointer, .. } | Self::Keyed { pointer } => pointer,
        }
    }
}

/// One GET for many ids through a [`LimitedClient`], its answer split back to each id. An id
/// the answer has no part for is that caller's [`BatchError::Item`]; a refused or unreadable
/// answer is every caller's [`BatchError::Batch`].
#[derive(Debug, Clone)]
pub struct BatchTemplate {
    /// The URL the ids are added to (its own query is kept).
    pub url: Url,
    /// How the ids go into the query.
    pub query: IdsQuery,
    /// How the answer is split.
    pub format: BatchFormat,
    /// Sent with every batch.
    pub headers: HeaderMap,
    /// The limiter lane of every batch.
    pub priority: Priority,
}

impl BatchTemplate {
    /// Batches of GETs to `url` with ids in `query`, answered as `format`, in the normal lane.
    pub fn new(url: Url, query: IdsQuery, format: BatchFormat) -> Self {
        Self { url, query, format, headers: HeaderMap::new(), priority: Priority::Normal }
    }

    /// The URL asking for `ids` (each percent-encoded, joined by the separator).
    pub fn url_for(&self, ids: &[String]) -> Url {
        let joined: Vec<String> = ids.iter().map(|id| byte_serialize(id.as_bytes()).collect()).collect();
        let pair = format!("{}={}", self.query.param, joined.join(&self.query.separator));
        let mut url = self.url.clone();
        let query = match url.query() {
            Some(existing) if !existing.is_empty() => format!("{existing}&{pair}"),
            _ => pair,
        };
        url.set_query(Some(&query));
        url
    }

    /// The request for `ids` (one limiter admission, whatever their number).
    pub fn request(&self, ids: &[String]) -> RequestSpec {
        let mut request = RequestSpec::get(self.url_for(ids)).with_priority(self.priority);
        request.headers.clone_from(&self.headers);
        request
    }

    /// The ids to send for a batch: each once, in first-seen order; an id that holds the
    /// separator (or is empty) cannot be sent and is its caller's error.
    pub fn unique_ids(&self, items: &[String]) -> (Vec<String>, Vec<Option<BatchError>>) {
        let mut seen = std::collections::HashSet::new();
        let mut send = Vec::new();
        let refused = items
            .iter()
            .map(|id| {
                if id.is_empty() || id.contains(self.query.separator.as_str()) {
                    let why = format!("id {id:?} cannot be sent in a batch separated by {:?}", self.query.separator);
                    return Some(BatchError::Item(why));
                }
                if seen.insert(id.as_str()) {
                    send.push(id.clone());
                }
                None
            })
            .collect();
        (send, refused)
    }

    /// Splits an answer to a request for `sent` (the unique ids) into one part per item of
    /// `items` (duplicates get the same part).
    pub fn split(&self, sent: &[String], items: &[String], status: u16, body: &[u8]) -> FlushResult<Value> {
        if !(200..300).contains(&status) {
            return Err(BatchError::Batch(format!("the server answered {status}: {}", quote(body))));
        }
        let document: Value = serde_json::from_slice(body)
            .map_err(|err| BatchError::Batch(format!("the answer is not JSON ({err}): {}", quote(body))))?;
        let pointer = self.format.pointer();
        let collection = document
            .pointer(pointer)
            .ok_or_else(|| BatchError::Batch(format!("the answer has nothing at {pointer:?}")))?;
        let mut parts: HashMap<&str, &Value> = HashMap::new();
        match (&self.format, collection) {
            (BatchFormat::Positional { .. }, Value::Array(elements)) => {
                parts.extend(sent.iter().map(String::as_str).zip(elements));
            }
            (BatchFormat::ArrayById { field, .. }, Value::Array(elements)) => {
                for element in elements {
                    if let Some(id) = element.get(field.as_str()).and_then(id_text)
                        && let Some(wanted) = sent.iter().find(|wanted| **wanted == id)
                    {
                        parts.insert(wanted.as_str(), element);
                    }
                }
            }
            (BatchFormat::Keyed { .. }, Value::Object(map)) => {
                parts.extend(sent.iter().filter_map(|id| Some((id.as_str(), map.get(id)?))));
            }
            (format, _) => {
                let shape = if matches!(format, BatchFormat::Keyed { .. }) { "an object" } else { "an array" };
                return Err(BatchError::Batch(format!("the answer at {pointer:?} is not {shape}")));
            }
        }
        Ok(items
            .iter()
            .map(|id| {
                parts
                    .get(id.as_str())
                    .map(|part| (*part).clone())
                    .ok_or_else(|| BatchError::Item(format!("the batch's answer has no entry for id {id}")))
            })
            .collect())
    }

    /// Sends `items` as one request through `client` and splits the answer.
    pub async fn send(&self, client: &LimitedClient, items: Vec<String>) -> FlushResult<Value> {
        let (sent, refused) = self.unique_ids(&items);
        let mut answers = if sent.is_empty() {
            Ok(Vec::new())
        } else {
            match client.send(self.request(&sent)).await {
                Ok(response) => self.split(&sent, &items, response.status.as_u16(), &response.body),
                Err(err) => Err(BatchError::Batch(err.to_string())),
            }
        }?;
        answers.resize_with(items.len(), || Err(BatchError::Closed));
        Ok(answers.into_iter().zip(refused).map(|(answer, refused)| refused.map_or(answer, Err)).collect())
    }

    /// A [`Batcher`] of ids flushing through this template and `client`.
    pub fn batcher(
        self,
        client: LimitedClient,
        settings: BatchSettings,
    ) -> Result<Batcher<String, Value>, BatchSettingsError> {
        let template = std::sync::Arc::new(self);
        Batcher::new(settings, move |items: Vec<String>| {
            let (template, client) = (std::sync::Arc::clone(&template), client.clone());
            async move { template.send(&client, items).await }
        })
    }
}

/// A JSON id as text: a string as it is, a number in its shortest form.
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// The start of a body, for an error message.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(QUOTED_BODY) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|id| (*id).to_owned()).collect()
    }

    fn template(format: BatchFormat) -> BatchTemplate {
        let url = Url::parse("http://127.0.0.1:1/items?v=2").unwrap();
        BatchTemplate::new(url, IdsQuery::comma("ids").unwrap(), format)
    }

    #[test]
    fn ids_join_into_one_parameter_after_the_urls_own_query() {
        let url = template(BatchFormat::items_by_id()).url_for(&ids(&["1", "2", "a b"]));
        assert_eq!(url.as_str(), "http://127.0.0.1:1/items?v=2&ids=1,2,a+b");
    }

    #[test]
    fn bad_parameters_and_separators_are_refused() {
        assert_eq!(IdsQuery::new("", ","), Err(TemplateError::NoParam));
        assert!(matches!(IdsQuery::new("i&d", ","), Err(TemplateError::BadParam(_))));
        assert!(matches!(IdsQuery::new("ids", "&"), Err(TemplateError::BadSeparator(_))));
        assert!(matches!(IdsQuery::new("ids", ""), Err(TemplateError::BadSeparator(_))));
        assert!(IdsQuery::new("ids[]", "|").is_ok());
    }

    #[test]
    fn an_id_missing_from_the_answer_fails_only_its_caller() {
        let body = br#"{"items": [{"id": 2, "name": "b"}, {"id": "1", "name": "a"}]}"#;
        let items = ids(&["1", "3", "2", "1"]);
        let (sent, _) = template(BatchFormat::items_by_id()).unique_ids(&items);
        assert_eq!(sent, ids(&["1", "3", "2"]));
        let parts = template(BatchFormat::items_by_id()).split(&sent, &items, 200, body).unwrap();
        assert_eq!(parts[0].as_ref().unwrap()["name"], "a");
        assert!(matches!(&parts[1], Err(BatchError::Item(message)) if message.contains("id 3")));
        assert_eq!(parts[2].as_ref().unwrap()["name"], "b");
        assert_eq!(parts[3], parts[0]);
    }

    #[test]
    fn positional_and_keyed_answers_split_too() {
        let sent = ids(&["7", "8"]);
        let positional = template(BatchFormat::Positional { pointer: String::new() });
        let parts = positional.split(&sent, &sent, 200, b"[\"seven\"]").unwrap();
        assert_eq!(parts[0], Ok(Value::from("seven")));
        assert!(parts[1].is_err());
        let keyed = template(BatchFormat::Keyed { pointer: "/data".to_owned() });
        let parts = keyed.split(&sent, &sent, 200, br#"{"data": {"8": 1, "7": 2}}"#).unwrap();
        assert_eq!(parts, vec![Ok(Value::from(2)), Ok(Value::from(1))]);
    }

    #[test]
    fn a_refused_or_unreadable_answer_fails_the_batch() {
        let t = template(BatchFormat::items_by_id());
        let sent = ids(&["1"]);
        let refused = t.split(&sent, &sent, 400, br#"{"error": "unknown id 0"}"#).unwrap_err();
        assert!(refused.to_string().contains("400") && refused.to_string().contains("unknown id 0"), "{refused}");
        assert!(t.split(&sent, &sent, 200, b"not json").is_err());
        assert!(t.split(&sent, &sent, 200, br#"{"items": {}}"#).is_err());
    }
}
