//! Telemetry: log setup and the Prometheus registry with bounded label sets.
//!
//! Labels come only from fixed vocabularies (method names we know, error classes, configured
//! namespaces, states) — never from request content.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::LogFormat;
use crate::upstream::State;

/// Logs go to stderr (stdout is the MCP channel in `--stdio` mode). `RUST_LOG` overrides the level.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Methods we count by name; anything else is `other`, so a client cannot grow the label set.
const KNOWN_METHODS: [&str; 18] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankingLabels {
    ranker: &'static str,
}

/// How a task was ranked: both rankers, BM25 alone (no embedder, or tools not indexed yet), or
/// BM25 because the query could not be embedded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranked {
    Hybrid,
    Bm25,
    Fallback,
}

impl Ranked {
    const ALL: [Ranked; 3] = [Ranked::Hybrid, Ranked::Bm25, Ranked::Fallback];

    pub fn as_str(self) -> &'static str {
        match self {
            Ranked::Hybrid => "hybrid",
            Ranked::Bm25 => "bm25",
            Ranked::Fallback => "bm25_fallback",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    namespace: String,
    state: &'static str,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    upstream_state: Family<UpstreamLabels, Gauge>,
    tokens_saved: Counter,
    core_hash_changes: Counter,
    tools_exposed: Counter,
    tools_dropped: Counter,
    last_exposed: Gauge,
    last_dropped: Gauge,
    rankings: Family<RankingLabels, Counter>,
    tools_embedded: Counter,
    /// The current core hash and its size, for /metrics.json (strings are not Prometheus values).
    core: Mutex<(String, usize)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gatehouse");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "MCP requests by method and outcome (ok or error class)", requests.clone());
        let upstream_state = Family::<UpstreamLabels, Gauge>::default();
        registry.register("upstream_state", "1 for each upstream's current health state", upstream_state.clone());
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let tokens_saved =
            counter(&mut registry, "tokens_saved", "BPE tokens (o200k) of tool definitions gating withheld");
        let core_hash_changes = counter(
            &mut registry,
            "core_hash_changes",
            "Times the byte-stable core changed (should stay 0 between config/schema changes)",
        );
        let tools_exposed =
            counter(&mut registry, "tools_exposed", "Tool definitions sent in gated tools/list answers");
        let tools_dropped =
            counter(&mut registry, "tools_dropped", "Tool definitions withheld from gated tools/list answers");
        let last_exposed = gauge(&mut registry, "tools_exposed_last", "Tools exposed by the latest gated tools/list");
        let last_dropped = gauge(&mut registry, "tools_dropped_last", "Tools withheld by the latest gated tools/list");
        let rankings = Family::<RankingLabels, Counter>::default();
        registry.register("rankings", "Task rankings by ranker (hybrid, bm25, bm25_fallback)", rankings.clone());
        let tools_embedded =
            counter(&mut registry, "tools_embedded", "Tool passages embedded for dense ranking (cache misses)");
        Self {
            rankings,
            tools_embedded,
            registry: Mutex::new(registry),
            requests,
            upstream_state,
            tokens_saved,
            core_hash_changes,
            tools_exposed,
            tools_dropped,
            last_exposed,
            last_dropped,
            core: Mutex::new((String::new(), 0)),
        }
    }

    pub fn count_request(&self, method: &str, outcome: &'static str) {
        let method = KNOWN_METHODS.iter().find(|m| **m == method).copied().unwrap_or("other");
        self.requests.get_or_create(&RequestLabels { method, outcome }).inc();
    }

    pub fn set_upstream_state(&self, namespace: &str, state: State) {
        for s in State::ALL {
            let labels = UpstreamLabels { namespace: namespace.to_string(), state: s.as_str() };
            self.upstream_state.get_or_create(&labels).set(i64::from(s == state));
        }
    }

    pub fn core_hash_changed(&self) {
        self.core_hash_changes.inc();
    }

    pub fn set_core(&self, hash: &str, tools: usize) {
        *self.core.lock().expect("metrics lock poisoned") = (hash.to_string(), tools);
    }

    /// One gated listing: what it showed and what it withheld.
    pub fn gated(&self, exposed: usize, dropped: usize, tokens_withheld: u64) {
        self.tools_exposed.inc_by(exposed as u64);
        self.tools_dropped.inc_by(dropped as u64);
        self.last_exposed.set(exposed as i64);
        self.last_dropped.set(dropped as i64);
        self.tokens_saved.inc_by(tokens_withheld);
    }

    pub fn ranked(&self, how: Ranked) {
        self.rankings.get_or_create(&RankingLabels { ranker: how.as_str() }).inc();
    }

    pub fn embedded(&self, tools: usize) {
        self.tools_embedded.inc_by(tools as u64);
    }

    /// `/metrics.json`: the headline numbers plus what Prometheus cannot carry (hash strings).
    pub fn json(&self) -> serde_json::Value {
        let (core_hash, core_tools) = self.core.lock().expect("metrics lock poisoned").clone();
        serde_json::json!({
            "core_hash": core_hash,
            "core_tools": core_tools,
            "core_hash_changes_total": self.core_hash_changes.get(),
            "tokens_saved_total": self.tokens_saved.get(),
            "tools_exposed_total": self.tools_exposed.get(),
            "tools_dropped_total": self.tools_dropped.get(),
            "tools_exposed_last": self.last_exposed.get(),
            "tools_dropped_last": self.last_dropped.get(),
            "tools_embedded_total": self.tools_embedded.get(),
            "rankings_total": Ranked::ALL
                .iter()
                .map(|r| {
                    let n = self.rankings.get_or_create(&RankingLabels { ranker: r.as_str() }).get();
                    (r.as_str().to_string(), serde_json::Value::from(n))
                })
                .collect::<serde_json::Map<_, _>>(),
        })
    }

    /// OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().expect("metrics lock poisoned");
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}
