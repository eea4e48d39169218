//! Gating: what an agent sees of the catalog — a byte-stable **core** (pinned tools and the
//! gateway's own tools, in canonical order and RFC 8785 serialisation, hashed) followed by a
//! small task-relevant **tail** — so an LLM provider's prompt-cache prefix survives from request
//! to request while the context stays small.
//!
//! A [`View`] is built once per catalog snapshot, off the request path; serving a manifest is a
//! ranking plus byte splicing. Must not do I/O.

pub mod context;
pub mod tails;
pub mod tokens;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::catalog::{Namer, Snapshot};
use crate::config::{Config, GatingConfig};
use crate::ranking::{self, Lexical};
use crate::telemetry::Metrics;

/// Gatehouse's own tools, in the reserved `gateway` namespace.
pub const SEARCH_TOOL: &str = "search_tools";
pub const CALL_TOOL: &str = "call_tool";

/// One entry of a view: a tool as exposed, serialised canonically, with its token count.
pub struct Entry {
    pub name: Arc<str>,
    pub json: Bytes,
    pub tokens: u32,
}

/// A catalog snapshot as the gate sees it.
pub struct View {
    pub version: u64,
    /// Canonical order (by exposed name); the first `core_len` entries form the core.
    pub entries: Vec<Entry>,
    by_name: HashMap<Arc<str>, usize>,
    pub core: Vec<usize>,
    /// The core's items, canonically serialised and comma-joined (no brackets).
    pub core_json: Bytes,
    pub core_hash: String,
    pub core_tokens: u64,
    pub all_tokens: u64,
    /// `[every entry]`: the listing when gating is off.
    pub full_json: Bytes,
    ranker: Lexical,
    /// Entry index of each ranker document (the catalog tools; the gateway's own tools are
    /// always in the core and never ranked).
    ranked: Vec<usize>,
}

/// The tools a request exposes, and what it withheld.
pub struct Manifest {
    /// Tail entry indices, in the order they follow the core.
    pub tail: Vec<usize>,
    pub exposed_tokens: u64,
    pub withheld_tokens: u64,
}

/// A search hit for `gateway__search_tools` and `gatehouse search`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Found {
    pub name: String,
    pub description: String,
    pub score: f32,
}

pub struct Gate {
    pub settings: GatingConfig,
    pub search_enabled: bool,
    namer: Namer,
    /// Per-upstream `pin` lists (upstream-local names), by namespace.
    upstream_pins: HashMap<String, Vec<String>>,
    view: RwLock<Option<Arc<View>>>,
    metrics: Arc<Metrics>,
}

impl Gate {
    pub fn new(config: &Config, namer: Namer, metrics: Arc<Metrics>) -> Self {
        let pins = config.upstreams.iter().map(|u| (u.namespace.clone(), u.pin.clone())).collect();
        Self::with_settings(config.gating.clone(), config.rag.enabled, pins, namer, metrics)
    }

    /// A gate without a whole config (benchmarks, simulations).
    pub fn with_settings(
        settings: GatingConfig,
        search_enabled: bool,
        upstream_pins: HashMap<String, Vec<String>>,
        namer: Namer,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self { metrics, settings, search_enabled, upstream_pins, namer, view: RwLock::new(None) }
    }

    /// The exposed name of one of Gatehouse's own tools (always prefixed: `gateway` is reserved).
    pub fn own_tool(&self, tool: &str) -> String {
        format!("gateway{}{tool}", self.namer.separator())
    }

    /// The view of `snapshot`, building it if the cached one is older.
    pub fn view(&self, snapshot: &Snapshot) -> Arc<View> {
        if let Some(view) =
            self.view.read().expect("gate lock poisoned").as_ref().filter(|v| v.version == snapshot.version)
        {
            return view.clone();
        }
        let view = Arc::new(self.build(snapshot));
        let mut slot = self.view.write().expect("gate lock poisoned");
        if slot.as_ref().is_none_or(|v| v.version < view.version) {
            if let Some(previous) = slot.as_ref().filter(|v| v.core_hash != view.core_hash) {
                // The cacheable prefix moved: every agent's prompt cache misses once.
                tracing::info!(from = %&previous.core_hash[..12], to = %&view.core_hash[..12], "core hash changed");
                self.metrics.core_hash_changed();
            }
            self.metrics.set_core(&view.core_hash, view.core.len());
            *slot = Some(view.clone());
        }
        view
    }

    /// Gatehouse's own tool definitions that belong in the core.
    fn own_tools(&self) -> Vec<Value> {
        let mut tools = Vec::new();
        if self.search_enabled {
            tools.push(json!({
                "name": self.own_tool(SEARCH_TOOL),
                "description": "Search every tool behind this gateway by what you want to do. Returns tool names, \
                                descriptions and relevance scores; call a found tool directly (or through call_tool).",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "query": { "type": "string", "description": "What you want to do, in plain words." },
                        "limit": { "type": "integer", "minimum": 1, "maximum": 50, "description": "How many tools to return (default 8)." }
                    },
                    "required": ["query"]
                },
                "annotations": { "readOnlyHint": true }
            }));
        }
        if self.settings.enabled {
            tools.push(json!({
                "name": self.own_tool(CALL_TOOL),
                "description": "Call any tool behind this gateway by name, including tools not in your current list.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string", "description": "The tool's full name, as search_tools returns it." },
                        "arguments": { "type": "object", "description": "The tool's arguments." }
                    },
                    "required": ["name"]
                }
            }));
        }
        tools
    }

    fn build(&self, snapshot: &Snapshot) -> View {
        let pinned: HashSet<String> = self
            .settings
            .pin
            .iter()
            .cloned()
            .chain(self.upstream_pins.iter().flat_map(|(ns, pins)| pins.iter().map(|p| self.namer.expose(ns, p))))
            .collect();
        let mut definitions: Vec<(Arc<str>, Value, bool, Option<&str>)> = snapshot
            .tools
            .iter()
            .map(|t| {
                (t.exposed.clone(), (*t.definition).clone(), pinned.contains(&*t.exposed), Some(&*t.route.namespace))
            })
            .collect();
        for own in self.own_tools() {
            let name: Arc<str> = own["name"].as_str().unwrap_or_default().into();
            definitions.push((name, own, true, None));
        }
        // Canonical order: by exposed name, whatever order upstreams listed tools in.
        definitions.sort_by(|a, b| a.0.cmp(&b.0));

        let mut entries = Vec::with_capacity(definitions.len());
        let mut core = Vec::new();
        let mut documents = Vec::new();
        let mut ranked = Vec::new();
        for (i, (name, definition, in_core, namespace)) in definitions.iter().enumerate() {
            let json = Bytes::from(canonical(definition));
            let tokens = tokens::count(&json);
            entries.push(Entry { name: name.clone(), json, tokens });
            if *in_core {
                core.push(i);
            }
            if let Some(ns) = namespace {
                documents.push(ranking::tool_document(definition, ns));
                ranked.push(i);
            }
        }
        let core_json = Bytes::from(core.iter().map(|&i| &entries[i].json[..]).collect::<Vec<_>>().join(&b","[..]));
        let core_hash = hex::encode(Sha256::digest(&core_json));
        let core_tokens = core.iter().map(|&i| u64::from(entries[i].tokens)).sum();
        let all_tokens = entries.iter().map(|e| u64::from(e.tokens)).sum();
        let by_name = entries.iter().enumerate().map(|(i, e)| (e.name.clone(), i)).collect();
        let mut full = b"[".to_vec();
        full.extend(entries.iter().map(|e| &e.json[..]).collect::<Vec<_>>().join(&b","[..]));
        full.push(b']');
        View {
            full_json: Bytes::from(full),
            version: snapshot.version,
            entries,
            by_name,
            core,
            core_json,
            core_hash,
            core_tokens,
            all_tokens,
            ranker: Lexical::new(&documents),
            ranked,
        }
    }
}

impl View {
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn is_core(&self, index: usize) -> bool {
        self.core.binary_search(&index).is_ok()
    }

    /// The best non-core tools for `task` above `floor`, best first.
    pub fn rank(&self, task: &str, k: usize, floor: f32) -> Vec<(usize, f32)> {
        self.ranker
            .search(task, k + self.core.len())
            .into_iter()
            .filter(|hit| hit.relevance >= floor)
            .map(|hit| (self.ranked[hit.index], hit.relevance))
            .filter(|(i, _)| !self.is_core(*i))
            .take(k)
            .collect()
    }

    /// The manifest for a tail: token accounting for what was shown and withheld.
    pub fn manifest(&self, tail: Vec<usize>) -> Manifest {
        let tail_tokens: u64 = tail.iter().map(|&i| u64::from(self.entries[i].tokens)).sum();
        let exposed_tokens = self.core_tokens + tail_tokens;
        Manifest { tail, exposed_tokens, withheld_tokens: self.all_tokens - exposed_tokens }
    }

    /// `[core…, tail…]` as chunks that share the view's bytes.
    pub fn render(&self, tail: &[usize]) -> Vec<Bytes> {
        let mut chunks = Vec::with_capacity(2 + tail.len() * 2);
        chunks.push(Bytes::from_static(b"["));
        let mut first = self.core_json.is_empty();
        if !first {
            chunks.push(self.core_json.clone());
        }
        for &i in tail {
            if !first {
                chunks.push(Bytes::from_static(b","));
            }
            first = false;
            chunks.push(self.entries[i].json.clone());
        }
        chunks.push(Bytes::from_static(b"]"));
        chunks
    }

    pub fn found(&self, index: usize, score: f32) -> Found {
        let definition: Value = serde_json::from_slice(&self.entries[index].json).unwrap_or(Value::Null);
        Found {
            name: self.entries[index].name.to_string(),
            description: definition.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
            score,
        }
    }
}

/// RFC 8785 canonical JSON: the same definition always serialises to the same bytes.
fn canonical(value: &Value) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(value).unwrap_or_else(|_| value.to_string().into_bytes())
}

/// Canonical tail order: by name (entries are stored by name, so by index), so two requests
/// with the same tools send the same bytes whatever their scores.
pub fn canonical_order(mut tail: Vec<usize>) -> Vec<usize> {
    tail.sort_unstable();
    tail
}

#[cfg(test)]
mod tests;
