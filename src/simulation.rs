//! Prompt-cache simulation: replays multi-turn conversations (consecutive queries of one BFCL
//! category as the turns of one conversation) through four tool-exposure policies and counts,
//! per turn, the definition tokens sent, the tokens an LLM provider's prefix cache would serve
//! (the longest common prefix with the previous turn's tool bytes), the cost at cache-read 0.1×
//! and cache-write 1.25× the input price, and whether the turn's gold tools were in view.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::Value;

use crate::catalog::{Catalog, Listing, Namer};
use crate::config::{DEFAULT_FLOOR, GatingConfig};
use crate::evaluation::{QueryRecord, ToolRecord};
use crate::gate::tails::Tails;
use crate::gate::{self, Gate, View};
use crate::telemetry::Metrics;

const TURNS_PER_CONVERSATION: usize = 8;
const TAIL_K: usize = 8;
const CACHE_READ: f64 = 0.1;
const CACHE_WRITE: f64 = 1.25;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    Full,
    NaiveTopK,
    CanonicalTail,
    StableTail,
}

impl Policy {
    const ALL: [Policy; 4] = [Policy::Full, Policy::NaiveTopK, Policy::CanonicalTail, Policy::StableTail];

    fn label(self) -> &'static str {
        match self {
            Self::Full => "full catalog",
            Self::NaiveTopK => "naive top-8, score order",
            Self::CanonicalTail => "core + canonical tail",
            Self::StableTail => "core + session-stable tail",
        }
    }
}

#[derive(Default)]
struct Totals {
    turns: usize,
    sent: u64,
    cached: u64,
    cost: f64,
    gold_in_view: usize,
}

/// Runs the simulation over a catalog and queries in the `bench/data` layout.
pub fn prompt_cache(tools: &[ToolRecord], queries: &[QueryRecord]) -> String {
    let view = build_view(tools);
    // Exposed names are `bfcl__<tool id>` (shortened when needed): map them back to ids.
    let exposed: std::collections::HashMap<String, String> =
        tools.iter().map(|t| (Namer::new("__", true).expose("bfcl", &t.id), t.id.clone())).collect();

    let mut totals: Vec<Totals> = Policy::ALL.iter().map(|_| Totals::default()).collect();
    for conversation in conversations(queries) {
        let tails = Tails::new(32, 1);
        let key = (Arc::from("sim"), "conversation".to_string());
        let mut previous: Vec<Vec<usize>> = vec![Vec::new(); Policy::ALL.len()];
        for query in conversation {
            let ranked = view.rank(&query.query, TAIL_K, DEFAULT_FLOOR);
            for (p, policy) in Policy::ALL.iter().enumerate() {
                let shown: Vec<usize> = match policy {
                    Policy::Full => (0..view.entries.len()).collect(),
                    Policy::NaiveTopK => ranked.iter().map(|(i, _)| *i).collect(),
                    Policy::CanonicalTail => {
                        let tail = gate::canonical_order(ranked.iter().map(|(i, _)| *i).collect());
                        view.core.iter().copied().chain(tail).collect()
                    }
                    Policy::StableTail => {
                        let picks: Vec<String> = gate::canonical_order(ranked.iter().map(|(i, _)| *i).collect())
                            .into_iter()
                            .map(|i| view.entries[i].name.to_string())
                            .collect();
                        let tail = tails.extend(&key, &picks);
                        view.core.iter().copied().chain(tail.iter().filter_map(|n| view.index_of(n))).collect()
                    }
                };
                // Entries are byte-identical across turns, so the longest common byte prefix is
                // the run of leading entries both lists share; one token per separator.
                let cost_of =
                    |entries: &[usize]| entries.iter().map(|&i| u64::from(view.entries[i].tokens) + 1).sum::<u64>();
                let common = previous[p].iter().zip(&shown).take_while(|(a, b)| a == b).count();
                let sent = cost_of(&shown) + 1;
                let cached = if previous[p].is_empty() { 0 } else { cost_of(&shown[..common]) };
                let t = &mut totals[p];
                t.turns += 1;
                t.sent += sent;
                t.cached += cached.min(sent);
                t.cost += cached.min(sent) as f64 * CACHE_READ + sent.saturating_sub(cached) as f64 * CACHE_WRITE;
                let names: HashSet<&str> = shown
                    .iter()
                    .filter_map(|&i| exposed.get(view.entries[i].name.as_ref()).map(String::as_str))
                    .collect();
                if query.gold.iter().all(|group| group.iter().any(|id| names.contains(id.as_str()))) {
                    t.gold_in_view += 1;
                }
                previous[p] = shown;
            }
        }
    }

    let mut out = String::new();
    let conversations = conversations(queries).len();
    let _ = writeln!(
        out,
        "{} tools, {} conversations of up to {TURNS_PER_CONVERSATION} turns (consecutive queries of one category), tail {TAIL_K}",
        tools.len(),
        conversations
    );
    let _ = writeln!(
        out,
        "{:<28} {:>12} {:>12} {:>9} {:>14} {:>12}",
        "policy", "sent/turn", "cached/turn", "hit %", "cost/turn", "gold in view"
    );
    let full_cost = totals[0].cost / totals[0].turns.max(1) as f64;
    for (policy, t) in Policy::ALL.iter().zip(&totals) {
        let n = t.turns.max(1) as f64;
        let _ = writeln!(
            out,
            "{:<28} {:>12.0} {:>12.0} {:>8.1}% {:>8.0} ({:>4.1}%) {:>11.1}%",
            policy.label(),
            t.sent as f64 / n,
            t.cached as f64 / n,
            100.0 * t.cached as f64 / t.sent.max(1) as f64,
            t.cost / n,
            100.0 * (t.cost / n) / full_cost,
            100.0 * t.gold_in_view as f64 / n
        );
    }
    let _ = writeln!(
        out,
        "cost in input-token units: cached tokens at {CACHE_READ}×, the rest written at {CACHE_WRITE}×; (%) is relative to the full catalog"
    );
    out
}

/// The view a gateway with the BFCL catalog behind one upstream would serve.
fn build_view(tools: &[ToolRecord]) -> Arc<View> {
    let namer = Namer::new("__", true);
    let catalog = Catalog::new(namer.clone(), vec!["bfcl".into()]);
    let listing = Listing {
        tools: tools
            .iter()
            .map(|t| {
                let mut def = t.definition.clone();
                def["name"] = Value::String(t.id.clone());
                def.as_object_mut()
                    .map(|o| o.retain(|k, _| matches!(k.as_str(), "name" | "description" | "inputSchema")));
                def
            })
            .collect(),
        ..Listing::default()
    };
    catalog.update(0, Some(listing));
    let settings = GatingConfig {
        enabled: true,
        tail_k: TAIL_K,
        session_tail_max: 32,
        pin: Vec::new(),
        floor: DEFAULT_FLOOR,
        max_conversations: 1,
    };
    let gate = Gate::with_settings(settings, true, Default::default(), namer, Arc::new(Metrics::new()));
    gate.view(&catalog.snapshot())
}

/// Consecutive queries of one category, in file order, cut into conversations.
fn conversations(queries: &[QueryRecord]) -> Vec<Vec<&QueryRecord>> {
    let mut out: Vec<Vec<&QueryRecord>> = Vec::new();
    let mut last_category = None;
    for q in queries {
        let category = q.meta.get("category").and_then(Value::as_str);
        let start = category != last_category || out.last().is_none_or(|c| c.len() == TURNS_PER_CONVERSATION);
        if start {
            out.push(Vec::new());
        }
        if let Some(c) = out.last_mut() {
            c.push(q);
        }
        last_category = category;
    }
    out
}
