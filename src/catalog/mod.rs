//! The merged catalog: every up upstream's tools, resources, templates and prompts under exposed
//! names, the routing table back to (upstream, original name), and fingerprints.
//!
//! A [`Snapshot`] is immutable and rebuilt only when some namespace's listing actually changed,
//! so serving a listing is a pointer clone plus pre-serialised bytes. Must not do I/O.

pub mod fingerprint;
pub mod names;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::watch;

pub use names::Namer;

/// What one upstream lists, as it sent it (objects only; anything else was dropped on receipt).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    pub tools: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    pub prompts: Vec<Value>,
}

/// Where an exposed name goes.
#[derive(Debug, Clone)]
pub struct Route {
    pub upstream: usize,
    pub namespace: Arc<str>,
    /// The upstream's own name (or URI).
    pub name: Arc<str>,
}

/// A tool as exposed, with its route and fingerprint.
#[derive(Debug, Clone)]
pub struct Tool {
    pub exposed: Arc<str>,
    pub route: Route,
    pub definition: Arc<Value>,
    pub fingerprint: Arc<str>,
}

/// Why a name did not route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    Unknown,
    /// The name belongs to a configured namespace whose upstream is not up.
    Down(Arc<str>),
}

/// One immutable view of the merged catalog.
#[derive(Debug)]
pub struct Snapshot {
    /// Increments on every rebuild that changed something.
    pub version: u64,
    pub tools: Vec<Tool>,
    tool_index: HashMap<Arc<str>, usize>,
    prompts: HashMap<String, Route>,
    resources: HashMap<String, Route>,
    /// (upstream, template text up to its first `{`) for unprefixed template routing.
    template_prefixes: Vec<(usize, Arc<str>, String)>,
    pub tools_json: JsonArray,
    pub resources_json: JsonArray,
    pub templates_json: JsonArray,
    pub prompts_json: JsonArray,
    /// Per namespace that is up: the fingerprint of its tool listing.
    pub fingerprints: BTreeMap<Arc<str>, String>,
    /// Per kind, a hash of what agents see, to tell which `list_changed` to send.
    pub view_hashes: ViewHashes,
    /// Namespaces that are up → a route with an empty name (the upstream index).
    namespace_index: HashMap<Arc<str>, Route>,
    /// Namespaces configured but contributing nothing because their upstream is not up.
    down: Vec<Arc<str>>,
    namer: Namer,
    /// Problems found while merging (name collisions in unprefixed mode), for /healthz and logs.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ViewHashes {
    pub tools: u64,
    pub resources: u64,
    pub prompts: u64,
}

impl Snapshot {
    pub fn tool(&self, exposed: &str) -> Result<&Tool, Miss> {
        match self.tool_index.get(exposed) {
            Some(&i) => Ok(&self.tools[i]),
            None => Err(self.miss(self.namer.namespace_of(exposed))),
        }
    }

    pub fn prompt(&self, exposed: &str) -> Result<&Route, Miss> {
        self.prompts.get(exposed).ok_or_else(|| self.miss(self.namer.namespace_of(exposed)))
    }

    /// Routes a resource URI: `ns+uri` when prefixed; otherwise an exact listed URI, then the
    /// upstream whose template prefix matches, then the only upstream if there is one.
    pub fn resource(&self, exposed: &str) -> Result<Route, Miss> {
        if let Some(route) = self.resources.get(exposed) {
            return Ok(route.clone());
        }
        if self.namer.prefixed() {
            let Some((ns, uri)) = names::split_uri(exposed) else {
                return Err(Miss::Unknown);
            };
            if let Some(route) = self.route_namespace(ns, uri) {
                return Ok(route);
            }
            return Err(self.miss(Some(ns)));
        }
        let by_template = self
            .template_prefixes
            .iter()
            .filter(|(_, _, prefix)| exposed.starts_with(prefix.as_str()))
            .max_by_key(|(_, _, prefix)| prefix.len());
        if let Some((upstream, ns, _)) = by_template {
            return Ok(Route { upstream: *upstream, namespace: ns.clone(), name: exposed.into() });
        }
        let up: Vec<&Route> = self.namespace_routes().collect();
        match up.as_slice() {
            [only] if self.down.is_empty() => {
                Ok(Route { upstream: only.upstream, namespace: only.namespace.clone(), name: exposed.into() })
            }
            _ => Err(self.miss(None)),
        }
    }

    /// Namespaces currently up, with their upstream index (one route per namespace).
    fn namespace_routes(&self) -> impl Iterator<Item = &Route> {
        self.namespace_index.values()
    }

    fn route_namespace(&self, ns: &str, name: &str) -> Option<Route> {
        self.namespace_index.get(ns).map(|r| Route {
            upstream: r.upstream,
            namespace: r.namespace.clone(),
            name: name.into(),
        })
    }

    fn miss(&self, claimed: Option<&str>) -> Miss {
        let down = match claimed {
            Some(ns) => self.down.iter().find(|d| &***d == ns),
            // Unprefixed names cannot say where they belong unless there is only one upstream.
            None if self.down.len() == 1 && self.namespace_index.is_empty() => self.down.first(),
            None => None,
        };
        down.map_or(Miss::Unknown, |ns| Miss::Down(ns.clone()))
    }

    /// Turns an upstream resource URI back into the exposed form.
    pub fn expose_uri(&self, namespace: &str, uri: &str) -> String {
        names::expose_uri(namespace, uri, self.namer.prefixed())
    }
}

/// The live catalog: per-upstream listings in, snapshots out.
pub struct Catalog {
    namer: Namer,
    namespaces: Vec<Arc<str>>,
    listings: Mutex<Vec<Option<(Listing, String)>>>,
    tx: watch::Sender<Arc<Snapshot>>,
}

impl Catalog {
    pub fn new(namer: Namer, namespaces: Vec<String>) -> Self {
        let namespaces: Vec<Arc<str>> = namespaces.into_iter().map(Arc::from).collect();
        let parts = vec![None; namespaces.len()];
        let first = build(&namer, &namespaces, &parts, 0);
        let (tx, _) = watch::channel(Arc::new(first));
        Self { namer, namespaces, listings: Mutex::new(parts), tx }
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.tx.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.tx.subscribe()
    }

    pub fn namer(&self) -> &Namer {
        &self.namer
    }

    /// Records what an upstream lists now (`None`: it is not up). Returns the upstream's tool
    /// fingerprint. Rebuilds the snapshot only if something an agent could see changed.
    pub fn update(&self, upstream: usize, listing: Option<Listing>) -> Option<String> {
        let mut parts = self.listings.lock().expect("catalog lock poisoned");
        let fingerprint = listing.as_ref().map(|l| {
            let fps: Vec<String> = l.tools.iter().map(fingerprint::tool_fingerprint).collect();
            let names: Vec<&str> =
                l.tools.iter().map(|t| t.get("name").and_then(Value::as_str).unwrap_or("")).collect();
            fingerprint::combine(names.into_iter().zip(fps.iter().map(String::as_str)).collect())
        });
        let next = listing.map(|l| (l, fingerprint.clone().unwrap_or_default()));
        if parts[upstream] == next {
            return fingerprint;
        }
        parts[upstream] = next;
        let version = self.tx.borrow().version + 1;
        let snapshot = build(&self.namer, &self.namespaces, &parts, version);
        for warning in &snapshot.warnings {
            tracing::error!(target: "gatehouse::catalog", "{warning}");
        }
        self.tx.send_replace(Arc::new(snapshot));
        fingerprint
    }
}

fn build(namer: &Namer, namespaces: &[Arc<str>], parts: &[Option<(Listing, String)>], version: u64) -> Snapshot {
    let mut tools: Vec<Tool> = Vec::new();
    let mut prompts: BTreeMap<String, (Route, Value)> = BTreeMap::new();
    let mut resources: BTreeMap<String, (Route, Value)> = BTreeMap::new();
    let mut templates: BTreeMap<String, (Route, Value)> = BTreeMap::new();
    let mut template_prefixes = Vec::new();
    let mut fingerprints = BTreeMap::new();
    let mut namespace_index = HashMap::new();
    let mut down = Vec::new();
    let mut warnings = Vec::new();
    let mut tool_owner: HashMap<String, Arc<str>> = HashMap::new();

    for (upstream, (ns, part)) in namespaces.iter().zip(parts).enumerate() {
        let Some((listing, fp)) = part else {
            down.push(ns.clone());
            continue;
        };
        fingerprints.insert(ns.clone(), fp.clone());
        let route = |name: &str| Route { upstream, namespace: ns.clone(), name: name.into() };
        namespace_index.insert(ns.clone(), route(""));

        for def in &listing.tools {
            let Some(name) = def.get("name").and_then(Value::as_str) else {
                continue;
            };
            let exposed = namer.expose(ns, name);
            if let Some(owner) = tool_owner.get(&exposed) {
                warnings.push(format!(
                    "tool name collision: {exposed:?} is offered by upstreams {owner:?} and {ns:?}; keeping \
                     {owner:?}'s (use prefix_mode = \"always\" to expose both)"
                ));
                continue;
            }
            tool_owner.insert(exposed.clone(), ns.clone());
            let mut exposed_def = def.clone();
            exposed_def["name"] = json!(exposed);
            tools.push(Tool {
                exposed: exposed.into(),
                route: route(name),
                fingerprint: fingerprint::tool_fingerprint(def).into(),
                definition: Arc::new(exposed_def),
            });
        }
        for def in &listing.prompts {
            let Some(name) = def.get("name").and_then(Value::as_str) else {
                continue;
            };
            let exposed = namer.expose(ns, name);
            let mut d = def.clone();
            d["name"] = json!(exposed);
            prompts.entry(exposed).or_insert((route(name), d));
        }
        for def in &listing.resources {
            let Some(uri) = def.get("uri").and_then(Value::as_str) else {
                continue;
            };
            let exposed = names::expose_uri(ns, uri, namer.prefixed());
            let mut d = def.clone();
            d["uri"] = json!(exposed);
            resources.entry(exposed).or_insert((route(uri), d));
        }
        for def in &listing.templates {
            let Some(template) = def.get("uriTemplate").and_then(Value::as_str) else {
                continue;
            };
            let exposed = names::expose_uri(ns, template, namer.prefixed());
            let prefix = template.split('{').next().unwrap_or("").to_string();
            if !prefix.is_empty() {
                template_prefixes.push((upstream, ns.clone(), prefix));
            }
            let mut d = def.clone();
            d["uriTemplate"] = json!(exposed);
            templates.entry(exposed).or_insert((route(template), d));
        }
    }

    // Canonical order (by exposed name) so the bytes never depend on upstream timing.
    tools.sort_by(|a, b| a.exposed.cmp(&b.exposed));
    let tool_index = tools.iter().enumerate().map(|(i, t)| (t.exposed.clone(), i)).collect();
    let tools_json = to_raw(tools.iter().map(|t| &*t.definition));
    let prompts_json = to_raw(prompts.values().map(|(_, d)| d));
    let resources_json = to_raw(resources.values().map(|(_, d)| d));
    let templates_json = to_raw(templates.values().map(|(_, d)| d));
    let view_hashes = ViewHashes {
        tools: hash64(tools_json.get()),
        resources: hash64(resources_json.get()) ^ hash64(templates_json.get()).rotate_left(1),
        prompts: hash64(prompts_json.get()),
    };

    Snapshot {
        version,
        tools,
        tool_index,
        prompts: prompts.into_iter().map(|(k, (r, _))| (k, r)).collect(),
        resources: resources.into_iter().map(|(k, (r, _))| (k, r)).collect(),
        template_prefixes,
        tools_json,
        resources_json,
        templates_json,
        prompts_json,
        fingerprints,
        view_hashes,
        namespace_index,
        down,
        namer: namer.clone(),
        warnings,
    }
}

/// A serialised JSON array, shared (never copied) by every response that lists it.
#[derive(Debug, Clone)]
pub struct JsonArray(Bytes);

impl JsonArray {
    pub fn bytes(&self) -> Bytes {
        self.0.clone()
    }

    pub fn get(&self) -> &str {
        std::str::from_utf8(&self.0).expect("serde_json writes UTF-8")
    }
}

fn to_raw<'a>(items: impl Iterator<Item = &'a Value>) -> JsonArray {
    let values: Vec<&Value> = items.collect();
    JsonArray(Bytes::from(serde_json::to_vec(&values).expect("JSON values serialise")))
}

fn hash64(text: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests;
