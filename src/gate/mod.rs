//! Gating: what an agent sees of the catalog — a byte-stable **core** (pinned tools and the
//! gateway's own tools, in canonical order and RFC 8785 serialisation, hashed) followed by a
//! small task-relevant **tail** — so an LLM provider's prompt-cache prefix survives from request
//! to request while the context stays small.
//!
//! A [`View`] is built once per catalog snapshot, off the request path; serving a manifest is a
//! ranking plus byte splicing. The only I/O is a task's embedding for hybrid ranking
//! ([`Gate::rank`]), bounded by a timeout and falling back to BM25; tool vectors are kept current
//! by [`keep_indexed`], off the request path.

pub mod context;
pub mod tails;
pub mod tokens;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::catalog::{Catalog, Namer, Snapshot};
use crate::config::{Config, GatingConfig};
use crate::contracts::Contracts;
use crate::pipeline::Principal;
use crate::policy::Policy;
use crate::ranking::semantic::Semantic;
use crate::ranking::{self, Dense, Lexical};
use crate::telemetry::{Metrics, Ranked};

/// Gatehouse's own tools, in the reserved `gateway` namespace.
pub const SEARCH_TOOL: &str = "search_tools";
pub const CALL_TOOL: &str = "call_tool";

/// One entry of a view: a tool as exposed, serialised canonically, with its token count.
pub struct Entry {
    /// The name agents see (with `expose_versions`, the exact-version name).
    pub name: Arc<str>,
    /// The catalog's name for it (None: one of the gateway's own tools).
    pub tool: Option<Arc<str>>,
    pub json: Bytes,
    pub tokens: u32,
}

/// A catalog snapshot as the gate sees it.
pub struct View {
    pub version: u64,
    /// The contracts generation it was built under (quarantined tools are left out).
    contracts_generation: u64,
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
    /// Each ranked document as a passage for the embedding model, aligned with `ranked`.
    pub passages: Vec<String>,
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
    /// The dense half of hybrid ranking, once an embedder is loaded ([`keep_indexed`]).
    semantic: OnceLock<Arc<Semantic>>,
    indexing: tokio::sync::watch::Sender<Indexing>,
    /// Tools whose definition drifted from their contract are not shown.
    contracts: Option<Arc<Contracts>>,
    /// Tools a principal may not call are not shown to it either.
    policy: Option<Arc<Policy>>,
    visibility: std::sync::Mutex<lru::LruCache<(u64, u64, Principal), Arc<Visibility>>>,
}

/// What one principal may see of a view, when a policy is active: the view's core and full
/// list minus forbidden tools, serialised once per (view, principal) and cached.
pub struct Visibility {
    allowed: Vec<bool>,
    pub core: Vec<usize>,
    pub core_json: Bytes,
    pub full_json: Bytes,
    pub core_tokens: u64,
    pub all_tokens: u64,
}

impl Visibility {
    pub fn allows(&self, index: usize) -> bool {
        self.allowed.get(index).copied().unwrap_or(false)
    }
}

/// Principals whose visibility is kept (per catalog version).
const VISIBILITY_CACHE: usize = 1024;

/// Where hybrid ranking stands (for `/healthz` and the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Indexing {
    /// No embedder configured, or it could not be loaded: BM25 alone.
    Off,
    /// Loading the embedder, or embedding what a catalog change added.
    Loading,
    /// Catalog `version` is embedded: hybrid ranking.
    Ready { version: u64 },
    /// The last attempt failed; retrying with backoff. Ranking is BM25 for catalog changes
    /// since the last success.
    Failing,
}

impl Gate {
    pub fn new(
        config: &Config,
        namer: Namer,
        metrics: Arc<Metrics>,
        contracts: Arc<Contracts>,
        policy: Arc<Policy>,
    ) -> Self {
        let pins = config.upstreams.iter().map(|u| (u.namespace.clone(), u.pin.clone())).collect();
        let mut gate = Self::with_settings(config.gating.clone(), config.rag.enabled, pins, namer, metrics);
        gate.contracts = Some(contracts);
        gate.policy = Some(policy).filter(|p| p.is_active());
        gate
    }

    /// What `principal` may see of `view`, or None when no policy restricts anything.
    pub fn visibility(&self, view: &View, snapshot: &Snapshot, principal: &Principal) -> Option<Arc<Visibility>> {
        let policy = self.policy.as_ref()?;
        let key = (view.version, view.contracts_generation, principal.clone());
        if let Some(hit) = self.visibility.lock().expect("visibility lock poisoned").get(&key) {
            return Some(hit.clone());
        }
        // The gateway's own tools are always visible; catalog tools as the policy decides.
        let allowed: Vec<bool> = view
            .entries
            .iter()
            .map(|e| match &e.tool {
                None => true,
                Some(name) => snapshot.tool(name).is_ok_and(|tool| policy.decide(principal, tool).allowed),
            })
            .collect();
        let core: Vec<usize> = view.core.iter().copied().filter(|&i| allowed[i]).collect();
        let join = |indices: &mut dyn Iterator<Item = usize>| {
            indices.map(|i| &view.entries[i].json[..]).collect::<Vec<_>>().join(&b","[..])
        };
        let core_json = Bytes::from(join(&mut core.iter().copied()));
        let mut full = b"[".to_vec();
        full.extend(join(&mut (0..view.entries.len()).filter(|&i| allowed[i])));
        full.push(b']');
        let tokens =
            |indices: &mut dyn Iterator<Item = usize>| indices.map(|i| u64::from(view.entries[i].tokens)).sum();
        let visibility = Arc::new(Visibility {
            core_tokens: tokens(&mut core.iter().copied()),
            all_tokens: tokens(&mut (0..view.entries.len()).filter(|&i| allowed[i])),
            allowed,
            core,
            core_json,
            full_json: Bytes::from(full),
        });
        self.visibility.lock().expect("visibility lock poisoned").put(key, visibility.clone());
        Some(visibility)
    }

    /// A gate without a whole config (benchmarks, simulations).
    pub fn with_settings(
        settings: GatingConfig,
        search_enabled: bool,
        upstream_pins: HashMap<String, Vec<String>>,
        namer: Namer,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            metrics,
            settings,
            search_enabled,
            upstream_pins,
            namer,
            view: RwLock::new(None),
            semantic: OnceLock::new(),
            indexing: tokio::sync::watch::Sender::new(Indexing::Off),
            contracts: None,
            policy: None,
            visibility: std::sync::Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(VISIBILITY_CACHE).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        }
    }

    pub fn mark_loading(&self) {
        self.indexing.send_replace(Indexing::Loading);
    }

    pub fn indexing(&self) -> tokio::sync::watch::Receiver<Indexing> {
        self.indexing.subscribe()
    }

    /// Where hybrid ranking stands for catalog `version`: an index of an older catalog means
    /// the new one is still being embedded.
    pub fn indexing_of(&self, version: u64) -> Indexing {
        match *self.indexing.borrow() {
            Indexing::Ready { version: indexed } if indexed != version => Indexing::Loading,
            state => state,
        }
    }

    /// Turns on hybrid ranking with `semantic` (once; later calls are ignored).
    pub fn set_semantic(&self, semantic: Arc<Semantic>) {
        let _ = self.semantic.set(semantic);
    }

    /// The best non-core tools for `task` above `floor`, best first: hybrid when the view's
    /// tools are embedded and the task can be, otherwise BM25 — never an error.
    /// Only tools `visible` allows are returned (the principal's view under a policy).
    pub async fn rank(
        &self,
        view: &View,
        task: &str,
        k: usize,
        floor: f32,
        visible: Option<&Visibility>,
    ) -> Vec<(usize, f32)> {
        let dense = self.semantic.get().and_then(|s| Some((s, s.vectors(view.version)?)));
        let Some((semantic, dense)) = dense else {
            self.metrics.ranked(Ranked::Bm25);
            return view.rank_visible(task, k, floor, visible);
        };
        match semantic.query(task).await {
            Ok(query) => {
                self.metrics.ranked(Ranked::Hybrid);
                view.rank_hybrid(task, &query, &dense, k, floor, visible)
            }
            Err(e) => {
                tracing::warn!(error = %e, model = semantic.model(), "task embedding failed; ranking with BM25 alone");
                self.metrics.ranked(Ranked::Fallback);
                view.rank_visible(task, k, floor, visible)
            }
        }
    }

    /// The exposed name of one of Gatehouse's own tools (always prefixed: `gateway` is reserved).
    pub fn own_tool(&self, tool: &str) -> String {
        format!("gateway{}{tool}", self.namer.separator())
    }

    /// The view of `snapshot`, building it if the cached one is older.
    pub fn view(&self, snapshot: &Snapshot) -> Arc<View> {
        let generation = self.contracts.as_ref().map_or(0, |c| c.generation());
        if let Some(view) = self
            .view
            .read()
            .expect("gate lock poisoned")
            .as_ref()
            .filter(|v| v.version == snapshot.version && v.contracts_generation == generation)
        {
            return view.clone();
        }
        let view = Arc::new(self.build(snapshot, generation));
        let mut slot = self.view.write().expect("gate lock poisoned");
        if slot.as_ref().is_none_or(|v| (v.version, v.contracts_generation) < (view.version, generation)) {
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

    fn build(&self, snapshot: &Snapshot, contracts_generation: u64) -> View {
        let pinned: HashSet<String> = self
            .settings
            .pin
            .iter()
            .cloned()
            .chain(self.upstream_pins.iter().flat_map(|(ns, pins)| pins.iter().map(|p| self.namer.expose(ns, p))))
            .collect();
        let mut definitions: Vec<(Arc<str>, Value, bool, Option<&crate::catalog::Tool>)> = snapshot
            .tools
            .iter()
            .filter(|t| self.contracts.as_ref().is_none_or(|c| c.admits(t)))
            .map(|t| {
                let mut definition = (*t.definition).clone();
                // `expose_versions`: listed under the exact-version name.
                let name = match self.contracts.as_ref().and_then(|c| c.listed_name(t)) {
                    Some(versioned) => {
                        definition["name"] = Value::String(versioned.clone());
                        Arc::from(versioned)
                    }
                    None => t.exposed.clone(),
                };
                (name, definition, pinned.contains(&*t.exposed), Some(t))
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
        let mut passages = Vec::new();
        let mut ranked = Vec::new();
        for (i, (name, definition, in_core, tool)) in definitions.iter().enumerate() {
            let json = Bytes::from(canonical(definition));
            let tokens = tokens::count(&json);
            entries.push(Entry { name: name.clone(), tool: tool.map(|t| t.exposed.clone()), json, tokens });
            if *in_core {
                core.push(i);
            }
            if let Some(ns) = tool.map(|t| &*t.route.namespace) {
                documents.push(ranking::tool_document(definition, ns));
                passages.push(ranking::tool_passage(definition, ns));
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
            contracts_generation,
            entries,
            by_name,
            core,
            core_json,
            core_hash,
            core_tokens,
            all_tokens,
            ranker: Lexical::new(&documents),
            ranked,
            passages,
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

    /// The best non-core tools for `task` above `floor` by BM25, best first.
    pub fn rank(&self, task: &str, k: usize, floor: f32) -> Vec<(usize, f32)> {
        self.rank_visible(task, k, floor, None)
    }

    /// [`View::rank`] among the tools `visible` allows.
    pub fn rank_visible(&self, task: &str, k: usize, floor: f32, visible: Option<&Visibility>) -> Vec<(usize, f32)> {
        // Forbidden tools are skipped after ranking, so look deeper when some may be.
        let depth = if visible.is_some() { (k + self.core.len()).max(HYBRID_DEPTH) } else { k + self.core.len() };
        self.non_core(self.ranker.search(task, depth), k, floor, visible)
    }

    /// [`View::rank`] fusing BM25 with cosine similarity to `query` (the task's embedding) over
    /// `dense` (this view's tool vectors). The floor applies to the fused relevance.
    pub fn rank_hybrid(
        &self,
        task: &str,
        query: &[f32],
        dense: &Dense,
        k: usize,
        floor: f32,
        visible: Option<&Visibility>,
    ) -> Vec<(usize, f32)> {
        // Fusion needs more than k candidates from each side: a tool second on both lists
        // can beat one first on only one of them.
        let depth = (k + self.core.len()).max(HYBRID_DEPTH);
        let fused =
            ranking::fuse(&self.ranker.search(task, depth), &dense.search(query, depth), ranking::DENSE_WEIGHT, depth);
        self.non_core(fused, k, floor, visible)
    }

    fn non_core(
        &self,
        hits: Vec<ranking::Hit>,
        k: usize,
        floor: f32,
        visible: Option<&Visibility>,
    ) -> Vec<(usize, f32)> {
        hits.into_iter()
            .filter(|hit| hit.relevance >= floor)
            .map(|hit| (self.ranked[hit.index], hit.relevance))
            .filter(|(i, _)| !self.is_core(*i) && visible.is_none_or(|v| v.allows(*i)))
            .take(k)
            .collect()
    }

    /// The manifest for a tail: token accounting for what was shown and withheld (of what the
    /// principal may see).
    pub fn manifest(&self, tail: Vec<usize>) -> Manifest {
        self.manifest_for(tail, None)
    }

    pub fn manifest_for(&self, tail: Vec<usize>, visible: Option<&Visibility>) -> Manifest {
        let (core_tokens, all_tokens) =
            visible.map_or((self.core_tokens, self.all_tokens), |v| (v.core_tokens, v.all_tokens));
        let tail_tokens: u64 = tail.iter().map(|&i| u64::from(self.entries[i].tokens)).sum();
        let exposed_tokens = core_tokens + tail_tokens;
        Manifest { tail, exposed_tokens, withheld_tokens: all_tokens.saturating_sub(exposed_tokens) }
    }

    /// `[core…, tail…]` as chunks that share the view's bytes.
    pub fn render(&self, tail: &[usize]) -> Vec<Bytes> {
        self.render_for(tail, None)
    }

    /// [`View::render`] with the principal's core when a policy restricts it.
    pub fn render_for(&self, tail: &[usize], visible: Option<&Visibility>) -> Vec<Bytes> {
        let core_json = visible.map_or(&self.core_json, |v| &v.core_json);
        let mut chunks = Vec::with_capacity(2 + tail.len() * 2);
        chunks.push(Bytes::from_static(b"["));
        let mut first = core_json.is_empty();
        if !first {
            chunks.push(core_json.clone());
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

/// Candidates taken from each ranker before fusion (as in the retrieval benchmark).
const HYBRID_DEPTH: usize = 100;

/// Keeps the tool vectors of the current catalog embedded, off the request path: loads the
/// embedder, then embeds what each new catalog snapshot added (the cache holds the rest). A
/// failure is logged and retried with backoff (sooner if the catalog changes); meanwhile
/// ranking is BM25.
pub async fn keep_indexed(
    gate: Arc<Gate>,
    catalog: Arc<Catalog>,
    load: impl FnOnce() -> Result<Semantic, String> + Send + 'static,
) {
    gate.mark_loading();
    let semantic = match tokio::task::spawn_blocking(load).await {
        Ok(Ok(semantic)) => Arc::new(semantic),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "embedder unavailable: ranking with BM25 alone");
            gate.indexing.send_replace(Indexing::Off);
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "embedder failed to load: ranking with BM25 alone");
            gate.indexing.send_replace(Indexing::Off);
            return;
        }
    };
    tracing::info!(model = semantic.model(), "embedder loaded; hybrid ranking once the catalog is indexed");
    gate.set_semantic(semantic.clone());
    let mut changes = catalog.subscribe();
    let mut backoff = INDEX_RETRY_FIRST;
    loop {
        let snapshot = changes.borrow_and_update().clone();
        let view = gate.view(&snapshot);
        let started = Instant::now();
        match semantic.index(view.version, &view.passages).await {
            Ok(fresh) => {
                backoff = INDEX_RETRY_FIRST;
                gate.metrics.embedded(fresh);
                gate.indexing.send_replace(Indexing::Ready { version: view.version });
                if fresh > 0 {
                    tracing::info!(
                        tools = view.passages.len(),
                        embedded = fresh,
                        took_ms = started.elapsed().as_millis() as u64,
                        "tool embeddings indexed"
                    );
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "embedding the catalog failed; ranking with BM25 meanwhile");
                gate.indexing.send_replace(Indexing::Failing);
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(INDEX_RETRY_MAX);
            }
        }
    }
}

const INDEX_RETRY_FIRST: Duration = Duration::from_secs(1);
const INDEX_RETRY_MAX: Duration = Duration::from_secs(600);

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
