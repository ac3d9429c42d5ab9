//! The admin listener, apart from the callers' one: `GET /metrics` (Prometheus text, or
//! OpenMetrics when the scraper's `Accept` asks for it), `GET /healthz` (the process answers)
//! `GET /readyz` (routes loaded, and the shared store reachable or its fail policy going on),
//! and `POST /reload` (routes and limits reread, as SIGHUP does).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::forward::Proxy;
use crate::store::{FailPolicy, StoreState};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The admin routes over the proxy's state.
pub(crate) fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/reload", post(reload))
        .with_state(proxy)
}

async fn metrics(State(proxy): State<Arc<Proxy>>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    let content_type =
        if openmetrics { OPENMETRICS } else { prometheus_client::encoding::prometheus_text::CONTENT_TYPE };
    match proxy.metrics.encode(openmetrics) {
        Ok(text) => ([(CONTENT_TYPE, content_type)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the metrics could not be encoded\n").into_response(),
    }
}

/// Rereads the routes and limits (the installed `Reloader`): 200 with what now applies, or
/// 422 with why the new configuration was refused (the old one stays).
async fn reload(State(proxy): State<Arc<Proxy>>) -> (StatusCode, String) {
    // The reloader reads files: off the runtime's worker threads.
    let outcome = tokio::task::spawn_blocking(move || proxy.reload_from_source()).await;
    match outcome {
        Ok(Ok(reloaded)) => (StatusCode::OK, format!("{}\n", reloaded.describe())),
        Ok(Err(err)) => {
            tracing::warn!("reload refused, the old configuration stays: {err}");
            (StatusCode::UNPROCESSABLE_ENTITY, format!("reload refused, the old configuration stays: {err}\n"))
        }
        Err(join) => (StatusCode::INTERNAL_SERVER_ERROR, format!("the reload failed: {join}\n")),
    }
}

/// Ready unless budgets are shared and the store is away under a fail policy that waits for
/// it (then every request would wait, and a balancer should send callers elsewhere).
async fn ready(State(proxy): State<Arc<Proxy>>) -> (StatusCode, String) {
    let Some(shared) = &proxy.shared else { return (StatusCode::OK, "ready\n".to_owned()) };
    match shared.health.state() {
        StoreState::Degraded { policy: FailPolicy::Closed, error } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the shared store is away ({error}) and its fail policy waits for it\n"),
        ),
        StoreState::Degraded { policy, .. } => {
            (StatusCode::OK, format!("ready: the shared store is away; going on by its fail policy ({policy})\n"))
        }
        _ => (StatusCode::OK, "ready\n".to_owned()),
    }
}
