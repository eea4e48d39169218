//! Context selection (`POST /context/select`): the core/tail split applied to conversation
//! fragments and retrieved documents. Pinned items form a byte-stable core hashed exactly like
//! the tool core; the tail is the most task-relevant rest, above the floor and within a token
//! budget.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::tokens;
use crate::ranking::{Lexical, text};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub task: String,
    pub items: Vec<Item>,
    #[serde(default)]
    pub k: Option<usize>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub id: String,
    pub text: String,
    #[serde(default, skip_serializing)]
    pub pinned: bool,
}

#[derive(Debug, Serialize)]
pub struct Selection {
    pub core: Vec<Item>,
    pub tail: Vec<Item>,
    pub core_hash: String,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// Items a single request may carry (the body limit bounds their size).
pub const MAX_ITEMS: usize = 10_000;

pub fn select(request: Request, default_k: usize, floor: f32) -> Result<Selection, String> {
    if request.items.len() > MAX_ITEMS {
        return Err(format!("items: at most {MAX_ITEMS} per request"));
    }
    let mut ids = std::collections::HashSet::new();
    if let Some(dup) = request.items.iter().find(|i| !ids.insert(i.id.as_str())) {
        return Err(format!("items: duplicate id {:?}", dup.id.chars().take(64).collect::<String>()));
    }
    let counts: Vec<u64> = request.items.iter().map(|i| tokens::count_text(&i.text)).collect();
    let tokens_in = counts.iter().sum();

    // Core: pinned items in canonical (id) order, hashed over their canonical JSON.
    let mut core: Vec<usize> = (0..request.items.len()).filter(|&i| request.items[i].pinned).collect();
    core.sort_by(|a, b| request.items[*a].id.cmp(&request.items[*b].id));
    let core_items: Vec<&Item> = core.iter().map(|&i| &request.items[i]).collect();
    let core_value = serde_json::to_value(&core_items).unwrap_or(Value::Null);
    let core_bytes = serde_json_canonicalizer::to_vec(&core_value).unwrap_or_default();
    let core_hash = hex::encode(Sha256::digest(&core_bytes));
    let mut tokens_out: u64 = core.iter().map(|&i| counts[i]).sum();

    // Tail: the most relevant unpinned items above the floor, best first, while the budget
    // lasts; then in canonical order so equal selections are equal bytes.
    let rest: Vec<usize> = (0..request.items.len()).filter(|&i| !request.items[i].pinned).collect();
    let documents: Vec<_> = rest.iter().map(|&i| vec![(1.0, text::terms(&request.items[i].text))]).collect();
    let ranker = Lexical::new(&documents);
    let k = request.k.unwrap_or(default_k);
    let budget = request.max_tokens.unwrap_or(u64::MAX);
    let mut tail = Vec::new();
    for hit in ranker.search(&request.task, rest.len()) {
        if tail.len() == k || hit.relevance < floor {
            break;
        }
        let item = rest[hit.index];
        if tokens_out + counts[item] > budget {
            continue; // a smaller, less relevant item may still fit
        }
        tokens_out += counts[item];
        tail.push(item);
    }
    tail.sort_by(|a, b| request.items[*a].id.cmp(&request.items[*b].id));
    let pick = |i: &usize| request.items[*i].clone();
    Ok(Selection {
        core: core.iter().map(pick).collect(),
        tail: tail.iter().map(pick).collect(),
        core_hash,
        tokens_in,
        tokens_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, text: &str, pinned: bool) -> Item {
        Item { id: id.into(), text: text.into(), pinned }
    }

    fn request(items: Vec<Item>, k: Option<usize>, max_tokens: Option<u64>) -> Request {
        Request { task: "refund the duplicate invoice payment".into(), items, k, max_tokens }
    }

    fn items() -> Vec<Item> {
        vec![
            item("summary", "Rolling summary: customer Ada, account 42.", true),
            item("policy", "Refunds within 30 days are allowed.", true),
            item("m1", "The invoice was paid twice by mistake.", false),
            item("m2", "Weather is nice today.", false),
            item("m3", "Customer asks for a refund of the duplicate payment.", false),
        ]
    }

    #[test]
    fn pinned_items_form_a_hashed_core_independent_of_the_task_and_input_order() {
        let a = select(request(items(), None, None), 8, 0.1).unwrap();
        let mut shuffled = items();
        shuffled.reverse();
        let mut other = request(shuffled, None, None);
        other.task = "something else entirely".into();
        let b = select(other, 8, 0.1).unwrap();
        assert_eq!(a.core_hash, b.core_hash);
        assert_eq!(a.core.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["policy", "summary"]);
    }

    #[test]
    fn the_tail_is_relevant_bounded_and_canonical() {
        let s = select(request(items(), None, None), 8, 0.1).unwrap();
        assert_eq!(s.tail.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["m1", "m3"], "weather stays out");
        assert!(s.tokens_out < s.tokens_in);
        let one = select(request(items(), Some(1), None), 8, 0.1).unwrap();
        assert_eq!(one.tail.len(), 1);
        assert_eq!(one.tail[0].id, "m3", "the best one");
    }

    #[test]
    fn the_token_budget_is_respected() {
        let core_only = select(request(items(), None, Some(1)), 8, 0.1).unwrap();
        assert!(core_only.tail.is_empty());
        let s = select(request(items(), None, Some(core_only.tokens_out + 12)), 8, 0.1).unwrap();
        assert!(s.tokens_out <= core_only.tokens_out + 12);
    }

    #[test]
    fn bad_requests_are_named() {
        let dup = vec![item("x", "a", false), item("x", "b", false)];
        assert!(select(request(dup, None, None), 8, 0.1).unwrap_err().contains("duplicate id"));
    }
}
