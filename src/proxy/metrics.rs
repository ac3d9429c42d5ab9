//! The proxy's metrics (prometheus-client): what each request ended as, what the upstream
//! answered, retries, queue waits and upstream latency, counted as they happen; and, read at
//! each scrape, every key's queue, requests in flight and budgets left, and the shared store's
//! state. Served as Prometheus text or OpenMetrics by the admin listener (`admin.rs`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::RwLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry as MetricRegistry, Unit as MetricUnit};

use crate::engine::Overload;
use crate::engine::Registry;
use crate::http::admission::Refusal;
use crate::store::{StoreHealth, StoreState};

/// What a request to the proxy ended as: each request counts once, under one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The upstream's answer went back (whatever its status).
    Forwarded,
    /// Answered from the cache, nothing sent.
    Cached,
    /// Turned away with the proxy's 429 (load shedding).
    Shed,
    /// No answer from the upstream (502, 504), or a body that broke on the way (400).
    Failed,
    /// Refused before anything else: no route, a path that leaves its route, a malformed body.
    Refused,
    /// Still running when the drain deadline passed (503).
    CutOff,
}

impl Ended {
    /// How many outcomes there are (`CutOff` is the last).
    const COUNT: usize = Ended::CutOff as usize + 1;

    fn label(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Cached => "cached",
            Self::Shed => "shed",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::CutOff => "cut_off",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    key: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    key: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    key: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    key: String,
    class: &'static str,
}

type Histograms = Family<KeyLabels, Histogram, fn() -> Histogram>;

/// The proxy's counters and histograms, and the registry that encodes them with the live
/// gauges.
#[derive(Debug)]
pub struct ProxyMetrics {
    registry: MetricRegistry,
    requests: Family<OutcomeLabels, Counter>,
    shed: Family<ShedLabels, Counter>,
    upstream_responses: Family<StatusLabels, Counter>,
    upstream_unanswered: Family<KeyLabels, Counter>,
    throttled: Family<KeyLabels, Counter>,
    retries: Family<KeyLabels, Counter>,
    queue_wait: Histograms,
    upstream_latency: Histograms,
    reloads: Family<ReloadLabels, Counter>,
    /// Each key's series, looked up in the families once per key rather than once per request
    /// (a family lookup hashes and allocates its labels).
    /// Found by every request: hashed with foldhash (the keys are the configuration's, not a caller's).
    keys: RwLock<HashMap<String, Arc<KeySeries>, foldhash::fast::RandomState>>,
}

/// One key's series in the families, each taken on its first use (so a series shows in the
/// exposition only once it has counted something, as a family's own lookup does).
#[derive(Debug, Default)]
struct KeySeries {
    /// The key, as the series' label.
    key: String,
    ended: [OnceLock<Counter>; Ended::COUNT],
    responses: [OnceLock<Counter>; 5],
    unanswered: OnceLock<Counter>,
    throttled: OnceLock<Counter>,
    retries: OnceLock<Counter>,
    queue_wait: OnceLock<Histogram>,
    latency: OnceLock<Histogram>,
}

/// One key's counters, looked up once for a request: its steps count without another lookup.
#[derive(Debug)]
pub struct KeyMetrics<'a> {
    metrics: &'a ProxyMetrics,
    series: Arc<KeySeries>,
}

impl KeyMetrics<'_> {
    fn key_labels(&self) -> KeyLabels {
        KeyLabels { key: self.series.key.clone() }
    }

    fn counter<'s>(&self, family: &Family<KeyLabels, Counter>, slot: &'s OnceLock<Counter>) -> &'s Counter {
        slot.get_or_init(|| family.get_or_create(&self.key_labels()).clone())
    }

    fn histogram<'s>(&self, family: &Histograms, slot: &'s OnceLock<Histogram>) -> &'s Histogram {
        slot.get_or_init(|| family.get_or_create(&self.key_labels()).clone())
    }

    /// The request ended as `outcome`.
    pub fn ended(&self, outcome: Ended) {
        // One slot per outcome, in the enum's order.
        if let Some(slot) = self.series.ended.get(outcome as usize) {
            let labels = || OutcomeLabels { key: self.series.key.clone(), outcome: outcome.label() };
            slot.get_or_init(|| self.metrics.requests.get_or_create(&labels()).clone()).inc();
        }
    }

    /// The request was shed for `refusal`: counted as its outcome and by reason.
    pub fn shed(&self, refusal: &Refusal) {
        let reason = match refusal {
            Refusal::Limiter(_) | Refusal::Shed(Overload::Invalid(_)) => "invalid",
            Refusal::Shed(Overload::QueueFull { .. }) => "queue_full",
            Refusal::Shed(Overload::TooLong { .. }) => "wait_too_long",
            Refusal::Shed(Overload::Waited { .. }) => "waited_too_long",
            Refusal::Shared(_) => "shared_store",
            Refusal::SharedTooSlow => "shared_too_slow",
        };
        self.metrics.shed.get_or_create(&ShedLabels { key: self.series.key.clone(), reason }).inc();
        self.ended(Ended::Shed);
    }

    /// An attempt was admitted after waiting `waited`.
    pub fn admitted(&self, waited: Duration) {
        self.histogram(&self.metrics.queue_wait, &self.series.queue_wait).observe(waited.as_secs_f64());
    }

    /// An attempt's upstream answer (`None`: none came) after `latency`.
    pub fn answered(&self, status: Option<u16>, latency: Duration) {
        let series = &self.series;
        let Some(status) = status else {
            self.counter(&self.metrics.upstream_unanswered, &series.unanswered).inc();
            return;
        };
        self.histogram(&self.metrics.upstream_latency, &series.latency).observe(latency.as_secs_f64());
        let index = match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        };
        if let (Some(slot), Some(class)) = (series.responses.get(index), CLASSES.get(index)) {
            let labels = || StatusLabels { key: series.key.clone(), class };
            slot.get_or_init(|| self.metrics.upstream_responses.get_or_create(&labels()).clone()).inc();
        }
        if status == 429 {
            self.counter(&self.metrics.throttled, &series.throttled).inc();
        }
    }

    /// An attempt will be sent again.
    pub fn retried(&self) {
        self.counter(&self.metrics.retries, &self.series.retries).inc();
    }
}

/// Status classes, as `StatusLabels::class` names them.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// 1 ms to about 65 s, doubling.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl ProxyMetrics {
    /// Metrics for a proxy pacing by `limits`, sharing budgets through `store` when it does.
    pub fn new(limits: Arc<Registry>, store: Option<Arc<StoreHealth>>) -> Self {
        let mut metrics = Self {
            requests: Family::default(),
            shed: Family::default(),
            upstream_responses: Family::default(),
            upstream_unanswered: Family::default(),
            throttled: Family::default(),
            retries: Family::default(),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            upstream_latency: Family::new_with_constructor(seconds_histogram),
            reloads: Family::default(),
            registry: MetricRegistry::default(),
            keys: RwLock::default(),
        };
        let registry = &mut metrics.registry;
        registry.register(
            "ratescope_proxy_requests",
            "Requests to the proxy by how they ended, per limiter key (the upstream host:port for a route without limits)",
            metrics.requests.clone(),
        );
        registry.register(
            "ratescope_proxy_shed",
            "Requests turned away with the proxy's 429, by why",
            metrics.shed.clone(),
        );
        registry.register(
            "ratescope_proxy_upstream_responses",
            "Upstream answers to attempts (retries included), by status class",
            metrics.upstream_responses.clone(),
        );
        registry.register(
            "ratescope_proxy_upstream_unanswered",
            "Attempts that got no upstream answer (unreachable, or none in time)",
            metrics.upstream_unanswered.clone(),
        );
        registry.register(
            "ratescope_proxy_upstream_throttled",
            "Upstream answers with status 429",
            metrics.throttled.clone(),
        );
        registry.register(
            "ratescope_proxy_retries",
            "Attempts sent again after a throttling answer or an error",
            metrics.retries.clone(),
        );
        registry.register_with_unit(
            "ratescope_proxy_queue_wait",
            "Time each admitted attempt waited for its key's limiter (and shared budget)",
            MetricUnit::Seconds,
            metrics.queue_wait.clone(),
        );
        registry.register_with_unit(
            "ratescope_proxy_upstream_latency",
            "Time from sending an attempt upstream to its answer's head",
            MetricUnit::Seconds,
            metrics.upstream_latency.clone(),
        );
        registry.register(
            "ratescope_proxy_reloads",
            "Reloads of routes and limits (SIGHUP, POST /reload), applied or refused",
            metrics.reloads.clone(),
        );
        // Both results from the start, so a failure shows as a rise from zero.
        for result in ["applied", "refused"] {
            drop(metrics.reloads.get_or_create(&ReloadLabels { result }));
        }
        registry.register_collector(Box::new(ScrapeGauges { limits, store }));
        metrics
    }

    /// A request ended as `outcome`, under limiter key `key`.
    pub fn ended(&self, key: &str, outcome: Ended) {
        self.key(key).ended(outcome);
    }

    /// `key`'s series (found or made once per key), to count a request's steps under.
    pub fn key(&self, key: &str) -> KeyMetrics<'_> {
        let found = self.keys.read().get(key).map(Arc::clone);
        let series = found.unwrap_or_else(|| {
            let made = || Arc::new(KeySeries { key: key.to_owned(), ..KeySeries::default() });
            Arc::clone(self.keys.write().entry(key.to_owned()).or_insert_with(made))
        });
        KeyMetrics { metrics: self, series }
    }

    /// A reload was applied (`true`) or refused.
    pub fn reloaded(&self, applied: bool) {
        self.reloads.get_or_create(&ReloadLabels { result: if applied { "applied" } else { "refused" } }).inc();
    }

    /// Everything, in the Prometheus text format (0.0.4), or in OpenMetrics (ending `# EOF`).
    pub fn encode(&self, openmetrics: bool) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        if openmetrics {
            prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)?;
        }
        Ok(text)
    }
}

/// The gauges read at each scrape: every active key's queue, requests in flight and budgets
/// left; the shared store's state and round trips.
#[derive(Debug)]
struct ScrapeGauges {
    limits: Arc<Registry>,
    store: Option<Arc<StoreHealth>>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    key: String,
    budget: String,
    unit: String,
}

impl Collector for ScrapeGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshots: Vec<_> = self.limits.active().iter().map(|limiter| limiter.snapshot()).collect();
        let mut queued = encoder.encode_descriptor(
            "ratescope_proxy_queued",
            "Requests waiting in the key's limiter now",
            None,
            MetricType::Gauge,
        )?;
        for snapshot in &snapshots {
            let labels = KeyLabels { key: snapshot.key.clone() };
            ConstGauge::new(snapshot.queued_total() as i64).encode(queued.encode_family(&labels)?)?;
        }
        let mut in_flight = encoder.encode_descriptor(
            "ratescope_proxy_in_flight",
            "Requests of the key holding a permit now (sent, or streaming their answer)",
            None,
            MetricType::Gauge,
        )?;
        for snapshot in &snapshots {
            let labels = KeyLabels { key: snapshot.key.clone() };
            ConstGauge::new(snapshot.in_flight as i64).encode(in_flight.encode_family(&labels)?)?;
        }
        let mut remaining = encoder.encode_descriptor(
            "ratescope_proxy_budget_remaining",
            "What each budget of the key holds now, in its unit",
            None,
            MetricType::Gauge,
        )?;
        for snapshot in &snapshots {
            for budget in &snapshot.budgets {
                let labels = BudgetLabels {
                    key: snapshot.key.clone(),
                    budget: budget.name.clone(),
                    unit: budget.unit.to_string(),
                };
                ConstGauge::new(budget.available.max(0.0)).encode(remaining.encode_family(&labels)?)?;
            }
        }
        if let Some(store) = &self.store {
            let up = match store.state() {
                StoreState::Degraded { .. } => 0,
                _ => 1,
            };
            let up_encoder = encoder.encode_descriptor(
                "ratescope_proxy_store_up",
                "1 while the shared store answers (or has not been asked yet), 0 while its fail policy acts",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(up).encode(up_encoder)?;
            let trips = encoder.encode_descriptor(
                "ratescope_proxy_store_round_trips",
                "Round trips to the shared store",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(store.counts().round_trips).encode(trips)?;
        }
        Ok(())
    }
}
