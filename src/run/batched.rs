//! Batched endpoints in a burst: each request asks for one item (request `i` for id `i + 1`),
//! and a [`Batcher`] per endpoint sends the items as `?ids=...` GETs through the client, so
//! the limiter admits batches. The request that opened a batch carries its HTTP attempts;
//! the others record none, so attempts and statuses count what went upstream.

use std::sync::Arc;

use http::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::runner::{Failure, RequestOutcome, failure};
use super::spec::BurstSpec;
use crate::engine::Priority;
use crate::http::batch::{BatchError, BatchFormat, BatchTemplate, Batcher, FlushResult};
use crate::http::{AttemptRecord, LimitedClient};

/// The kind of a request whose batch was answered without its item.
pub const MISSING_ITEM: &str = "missing from the batch's answer";

/// A request's part in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRole {
    /// It opened the batch: its record carries the batch's HTTP attempts.
    Leader,
    /// It rode in a batch another request opened: it sent nothing of its own.
    Member,
}

/// One item handed to a batch: who asks, with the headers and lane of its request.
pub(super) struct Item {
    pub index: usize,
    pub headers: HeaderMap,
    pub priority: Priority,
}

/// How one item of a batch ended.
pub(super) struct ItemPart {
    pub outcome: RequestOutcome,
    pub attempts: Vec<AttemptRecord>,
    pub from_cache: bool,
    pub coalesced: bool,
    pub role: BatchRole,
}

/// The batcher of each endpoint of `spec` (`None` for endpoints without a batch plan).
pub(super) fn batchers(
    spec: &BurstSpec,
    client: &LimitedClient,
    cancel: &CancellationToken,
) -> Vec<Option<Batcher<Item, ItemPart>>> {
    spec.endpoints
        .iter()
        .map(|endpoint| {
            let plan = endpoint.batch.as_ref()?;
            let template =
                Arc::new(BatchTemplate::new(endpoint.url.clone(), plan.query.clone(), BatchFormat::items_by_id()));
            let (client, cancel) = (client.clone(), cancel.clone());
            let flush = move |items: Vec<Item>| {
                let (template, client, cancel) = (Arc::clone(&template), client.clone(), cancel.clone());
                async move { send(&template, &client, &cancel, items).await }
            };
            // The plan's settings were checked when it was made.
            Batcher::new(plan.settings, flush).ok()
        })
        .collect()
}

/// The id request `index` asks for.
pub(super) fn item_id(index: usize) -> String {
    index.saturating_add(1).to_string()
}

/// Sends one batch and tells each item how it ended; never fails as a whole, so every
/// item keeps the batch's status and cause.
async fn send(
    template: &BatchTemplate,
    client: &LimitedClient,
    cancel: &CancellationToken,
    items: Vec<Item>,
) -> FlushResult<ItemPart> {
    let ids: Vec<String> = items.iter().map(|item| item_id(item.index)).collect();
    let (sent, _) = template.unique_ids(&ids);
    let mut request = template.request(&sent);
    if let Some(first) = items.first() {
        request.headers.clone_from(&first.headers);
        request.priority = first.priority;
    }
    let mut attempts = Vec::new();
    let answer = tokio::select! {
        biased;
        () = cancel.cancelled() => None,
        answer = client.send_recorded(request, &mut attempts) => Some(answer),
    };
    let (outcomes, from_cache, coalesced): (Vec<RequestOutcome>, bool, bool) = match answer {
        None => (vec![RequestOutcome::Cancelled; ids.len()], false, false),
        Some(Err(err)) => (vec![failure(&err); ids.len()], false, false),
        Some(Ok(response)) => {
            let status = response.status.as_u16();
            let outcomes = if status >= 400 {
                let error = format!("final status {}", response.status);
                vec![RequestOutcome::Failed { status: Some(status), kind: Failure::FinalStatus, error }; ids.len()]
            } else {
                match template.split(&sent, &ids, status, &response.body) {
                    Ok(parts) => parts.into_iter().map(|part| item_outcome(status, part)).collect(),
                    Err(err) => vec![item_outcome(status, Err(err)); ids.len()],
                }
            };
            (outcomes, response.from_cache, response.coalesced)
        }
    };
    let mut attempts = Some(attempts);
    Ok(outcomes
        .into_iter()
        .map(|outcome| {
            let (role, attempts) = match attempts.take() {
                Some(attempts) => (BatchRole::Leader, attempts),
                None => (BatchRole::Member, Vec::new()),
            };
            Ok(ItemPart { outcome, attempts, from_cache, coalesced, role })
        })
        .collect())
}

fn item_outcome(status: u16, part: Result<serde_json::Value, BatchError>) -> RequestOutcome {
    match part {
        Ok(_) => RequestOutcome::Succeeded { status },
        Err(err) => {
            RequestOutcome::Failed { status: Some(status), kind: Failure::Cause(MISSING_ITEM), error: err.to_string() }
        }
    }
}
