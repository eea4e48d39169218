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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
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
struct UpstreamLabels {
    namespace: String,
    state: &'static str,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    upstream_state: Family<UpstreamLabels, Gauge>,
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
        registry.register(
            "requests",
            "MCP requests by method and outcome (ok or error class)",
            requests.clone(),
        );
        let upstream_state = Family::<UpstreamLabels, Gauge>::default();
        registry.register(
            "upstream_state",
            "1 for each upstream's current health state",
            upstream_state.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            upstream_state,
        }
    }

    pub fn count_request(&self, method: &str, outcome: &'static str) {
        let method = KNOWN_METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        self.requests
            .get_or_create(&RequestLabels { method, outcome })
            .inc();
    }

    pub fn set_upstream_state(&self, namespace: &str, state: State) {
        for s in State::ALL {
            let labels = UpstreamLabels {
                namespace: namespace.to_string(),
                state: s.as_str(),
            };
            self.upstream_state
                .get_or_create(&labels)
                .set(i64::from(s == state));
        }
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
