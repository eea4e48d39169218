//! Tool contracts (SPEC §9 stage 2): every tool definition is pinned by its RFC 8785 fingerprint
//! the first time it is seen (trust on first use). A later definition with another fingerprint is
//! **drift**: by default the tool is quarantined — hidden from listings, its calls refused with
//! `contract_drift` — until an operator approves it (`gatehouse contracts approve NAME`).
//!
//! The pinned fingerprints live in the store and, for the request path, in memory: deciding
//! whether a tool is callable is a map lookup, and a drifted definition is refused from the
//! moment it enters the catalog (the pins were loaded before). Reconciling with the store (new
//! pins, recorded drift, approvals made by another process) runs in the background.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::{Catalog, Namer, Snapshot, Tool};
use crate::config::{DeclaredContract, DriftPolicy};
use crate::store::{self, Contract, Drift, Store, StoreError};

/// The version a tool gets when it is first pinned; an approved drift moves to the next major.
pub const FIRST_VERSION: &str = "1.0.0";

/// The stored definition of a contract declared in config before its tool was seen.
const DECLARED: &str = "\"(declared in config)\"";

#[derive(Debug, Clone)]
struct Pinned {
    version: String,
    fingerprint: String,
    /// The name it was last exposed as (kept current in the store for the CLI).
    exposed: String,
}

/// A contract's identity: the upstream's namespace and its own tool name — stable whatever
/// the exposed name (prefix mode, separator) is.
type Key = (Arc<str>, Arc<str>);

fn key(tool: &Tool) -> Key {
    (tool.route.namespace.clone(), tool.route.name.clone())
}

/// What a tool's current definition is, against its contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Not pinned yet (it will be, as it is now).
    FirstUse,
    Current {
        version: String,
    },
    /// Changed since pinned; `allowed` by the upstream's drift policy or not.
    Drifted {
        version: String,
        allowed: bool,
    },
}

pub struct Contracts {
    store: Store,
    policies: HashMap<String, DriftPolicy>,
    /// Namespaces whose tools are exposed under their exact version (`expose_versions`).
    versioned: HashSet<String>,
    pinned: RwLock<HashMap<Key, Pinned>>,
    /// Bumped whenever which tools are quarantined may have changed (views rebuild, agents
    /// are told their list changed).
    generation: watch::Sender<u64>,
}

impl Contracts {
    /// Loads every pinned contract; called before the gateway serves. Contracts declared in
    /// config are written first: the operator's version and fingerprint override whatever was
    /// pinned before (to change one, change the config).
    pub async fn load(
        store: Store,
        policies: HashMap<String, DriftPolicy>,
        declared: &[DeclaredContract],
        namer: &Namer,
        versioned: HashSet<String>,
    ) -> Result<Self, StoreError> {
        let now = store::now_ms();
        for d in declared {
            let exposed = namer.expose(&d.namespace, &d.tool);
            let contract = Contract {
                namespace: d.namespace.clone(),
                tool: d.tool.clone(),
                exposed: exposed.clone(),
                version: d.version.clone(),
                fingerprint: d.fingerprint.clone(),
                definition: DECLARED.into(),
                drift: None,
                pinned_ms: now,
                updated_ms: now,
            };
            match store.contract_of(&d.namespace, &d.tool).await? {
                None => {
                    store.pin(&contract).await?;
                }
                Some(c) if c.fingerprint != d.fingerprint || c.version != d.version => {
                    let pinned = Drift { fingerprint: d.fingerprint.clone(), definition: DECLARED.into() };
                    store.repin((&d.namespace, &d.tool), &d.version, &pinned, now).await?;
                }
                Some(_) => {}
            }
        }
        let contracts =
            Self { store, policies, versioned, pinned: RwLock::new(HashMap::new()), generation: watch::Sender::new(0) };
        contracts.reload().await?;
        Ok(contracts)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn policy(&self, namespace: &str) -> DriftPolicy {
        self.policies.get(namespace).copied().unwrap_or_default()
    }

    pub fn standing(&self, tool: &Tool) -> Standing {
        let pinned = self.pinned.read().expect("contracts lock poisoned");
        match pinned.get(&key(tool)) {
            None => Standing::FirstUse,
            Some(p) if p.fingerprint == *tool.fingerprint => Standing::Current { version: p.version.clone() },
            Some(p) => Standing::Drifted {
                version: p.version.clone(),
                allowed: self.policy(&tool.route.namespace) != DriftPolicy::Quarantine,
            },
        }
    }

    /// The version a tool is served under now (its pin, or the first-use version).
    pub fn version(&self, tool: &Tool) -> String {
        match self.standing(tool) {
            Standing::FirstUse => FIRST_VERSION.to_string(),
            Standing::Current { version } | Standing::Drifted { version, .. } => version,
        }
    }

    /// The name agents see: the exposed name, or with `expose_versions` the exact-version name.
    pub fn listed_name(&self, tool: &Tool) -> Option<String> {
        self.versioned.contains(&*tool.route.namespace).then(|| versioned_name(&tool.exposed, &self.version(tool)))
    }

    /// The tool an exact-version name denotes — only while that is its current version, so a
    /// caller never reaches a definition other than the one it named.
    pub fn resolve_versioned<'s>(&self, snapshot: &'s Snapshot, name: &str) -> Option<&'s Tool> {
        name.rmatch_indices("_v").find_map(|(at, _)| {
            let tool = snapshot.tool(&name[..at]).ok()?;
            (self.listed_name(tool).as_deref() == Some(name)).then_some(tool)
        })
    }

    /// Whether agents may see and call `tool`.
    pub fn admits(&self, tool: &Tool) -> bool {
        !matches!(self.standing(tool), Standing::Drifted { allowed: false, .. })
    }

    async fn reload(&self) -> Result<(), StoreError> {
        self.reload_after(&[]).await
    }

    /// Reloads every pin. `ours` are the (key, fingerprint) pins this process just wrote from
    /// the catalog it serves: those record what agents already see. Any other change — an
    /// approval, a re-pin, or a pin another replica wrote first with another fingerprint — may
    /// change what agents may see, so views rebuild and agents are told.
    async fn reload_after(&self, ours: &[(Key, String)]) -> Result<(), StoreError> {
        let all = self.store.contracts().await?;
        let fresh: HashMap<Key, Pinned> = all
            .into_iter()
            .map(|c| {
                let key: Key = (c.namespace.as_str().into(), c.tool.as_str().into());
                (key, Pinned { version: c.version, fingerprint: c.fingerprint, exposed: c.exposed })
            })
            .collect();
        let mut pinned = self.pinned.write().expect("contracts lock poisoned");
        let changed_or_removed =
            pinned.iter().any(|(k, p)| fresh.get(k).is_none_or(|f| f.fingerprint != p.fingerprint));
        let added_elsewhere = fresh
            .iter()
            .filter(|(k, _)| !pinned.contains_key(*k))
            .any(|(k, f)| !ours.iter().any(|(ok, ofp)| ok == k && *ofp == f.fingerprint));
        *pinned = fresh;
        drop(pinned);
        if changed_or_removed || added_elsewhere {
            self.generation.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// Pins first-seen tools, records drift (or re-pins it under `drift = "accept"`).
    pub async fn reconcile(&self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let now = store::now_ms();
        let mut touched = false;
        let mut first_seen = Vec::new();
        for tool in &snapshot.tools {
            // Same tool, new exposed name (prefix mode or separator changed): the CLI finds
            // contracts by the name agents see.
            let renamed = self
                .pinned
                .read()
                .expect("contracts lock poisoned")
                .get(&key(tool))
                .is_some_and(|p| p.exposed != *tool.exposed);
            if renamed {
                self.store.rename(&tool.route.namespace, &tool.route.name, &tool.exposed).await?;
                touched = true;
            }
            let definition = || {
                serde_json_canonicalizer::to_string(&*tool.definition).unwrap_or_else(|_| tool.definition.to_string())
            };
            match self.standing(tool) {
                Standing::Current { .. } => {}
                Standing::FirstUse => {
                    let contract = Contract {
                        namespace: tool.route.namespace.to_string(),
                        tool: tool.route.name.to_string(),
                        exposed: tool.exposed.to_string(),
                        version: FIRST_VERSION.into(),
                        fingerprint: tool.fingerprint.to_string(),
                        definition: definition(),
                        drift: None,
                        pinned_ms: now,
                        updated_ms: now,
                    };
                    first_seen.push(contract);
                }
                Standing::Drifted { version, .. } => {
                    let drift = Drift { fingerprint: tool.fingerprint.to_string(), definition: definition() };
                    match self.policy(&tool.route.namespace) {
                        DriftPolicy::Accept => {
                            let next = next_major(&version);
                            self.store.repin((&tool.route.namespace, &tool.route.name), &next, &drift, now).await?;
                            tracing::warn!(tool = %tool.exposed, version = %next, "contract drift accepted (drift = \"accept\")");
                        }
                        policy => {
                            self.store.record_drift(&tool.route.namespace, &tool.route.name, &drift, now).await?;
                            tracing::warn!(
                                tool = %tool.exposed,
                                pinned = %version,
                                action = if policy == DriftPolicy::Warn { "still served (drift = \"warn\")" } else { "quarantined" },
                                "contract drift: the tool's definition changed; review with `gatehouse contracts diff`"
                            );
                        }
                    }
                    touched = true;
                }
            }
        }
        let mut ours = Vec::with_capacity(first_seen.len());
        if !first_seen.is_empty() {
            let pinned = self.store.pin_all(&first_seen).await?;
            tracing::info!(pinned, "contracts pinned on first use");
            ours.extend(first_seen.into_iter().map(|c| ((c.namespace.into(), c.tool.into()), c.fingerprint)));
            touched = true;
        }
        if touched { self.reload_after(&ours).await } else { Ok(()) }
    }
}

/// Approves a tool's pending drift: its new definition becomes the contract at the next major
/// version. Returns the new version, or None if nothing was pending.
pub async fn approve(store: &Store, exposed: &str) -> Result<Option<String>, StoreError> {
    let Some(contract) = store.contract(exposed).await? else { return Ok(None) };
    let at = (contract.namespace.as_str(), contract.tool.as_str());
    let Some(drift) = contract.drift else { return Ok(None) };
    let next = next_major(&contract.version);
    store.repin(at, &next, &drift, store::now_ms()).await?;
    Ok(Some(next))
}

/// `name@1.2.0` as a name LLM APIs accept: `name_v1_2_0` (other SemVer punctuation as `_`).
pub fn versioned_name(exposed: &str, version: &str) -> String {
    let version: String = version.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{exposed}_v{version}")
}

fn next_major(version: &str) -> String {
    match semver::Version::parse(version) {
        Ok(v) => semver::Version::new(v.major + 1, 0, 0).to_string(),
        Err(_) => FIRST_VERSION.into(),
    }
}

/// How often the store is checked for changes made elsewhere (an approval from the CLI, another
/// replica's pins).
const POLL: Duration = Duration::from_secs(2);

/// Polls between unconditional reloads (every 30 s).
const FULL_RELOAD_EVERY: u64 = 15;

/// Keeps the store in step with the catalog, and the pins in step with the store.
pub async fn keep_reconciled(contracts: Arc<Contracts>, catalog: Arc<Catalog>) {
    let mut changes = catalog.subscribe();
    let mut seen_ms = 0;
    let mut pending = true;
    let mut polls: u64 = 0;
    loop {
        if pending {
            let snapshot = changes.borrow_and_update().clone();
            pending = match contracts.reconcile(&snapshot).await {
                Ok(()) => false,
                Err(e) => {
                    tracing::error!(error = %e, "recording contracts failed; retrying");
                    true
                }
            };
        }
        tokio::select! {
            changed = changes.changed() => match changed {
                Ok(()) => pending = true,
                Err(_) => return,
            },
            () = tokio::time::sleep(POLL) => {
                polls += 1;
                match contracts.store.contracts_changed_ms().await {
                    // The latest change time comes from the clock of whichever host made it; a
                    // full reload every FULL_RELOAD_EVERY polls bounds what a lagging clock hides.
                    Ok(ms) if ms != seen_ms || polls % FULL_RELOAD_EVERY == 0 => {
                        seen_ms = ms;
                        if let Err(e) = contracts.reload().await {
                            tracing::error!(error = %e, "reloading contracts failed");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "reading contracts failed"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_names_are_llm_safe() {
        assert_eq!(versioned_name("gh__create_issue", "1.2.0"), "gh__create_issue_v1_2_0");
        assert_eq!(versioned_name("t", "2.0.0-rc.1"), "t_v2_0_0_rc_1");
    }

    #[test]
    fn an_approved_drift_is_the_next_major_version() {
        assert_eq!(next_major("1.0.0"), "2.0.0");
        assert_eq!(next_major("2.3.4"), "3.0.0");
        assert_eq!(next_major("garbage"), "1.0.0");
    }
}
