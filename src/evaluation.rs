//! Retrieval quality: run a ranker over a tool catalog and a set of queries with gold answers
//! (the layout of `bench/data/`), and report Recall@k, Complete@10, MRR@20 and nDCG@10 — for
//! the synthetic and the live (user-contributed) queries separately, and on a fixed split so
//! tuning never sees the queries it is reported on.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::ranking::{self, Lexical};

#[derive(Deserialize)]
pub struct ToolRecord {
    pub id: String,
    #[serde(flatten)]
    pub definition: Value,
}

impl ToolRecord {
    /// The MCP server the tool came from: its namespace in a gateway.
    pub fn server(&self) -> &str {
        self.definition.get("server").and_then(Value::as_str).unwrap_or_default()
    }
}

#[derive(Deserialize)]
pub struct QueryRecord {
    pub id: String,
    pub query: String,
    #[serde(default)]
    pub gold: Vec<Vec<String>>,
    #[serde(default)]
    pub meta: Value,
}

impl QueryRecord {
    /// BFCL's `live_*` categories are user-contributed; the rest are synthetic.
    pub fn is_live(&self) -> bool {
        self.meta.get("category").and_then(Value::as_str).is_some_and(|c| c.starts_with("live"))
    }

    /// Half of the queries (by a hash of the id, so stable across runs and machines) are for
    /// tuning; the other half only for reporting.
    pub fn split(&self) -> Split {
        if Sha256::digest(self.id.as_bytes())[0] % 2 == 0 { Split::Tune } else { Split::Test }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Tune,
    Test,
}

pub fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1)))
        .collect()
}

/// Per-query scores, averaged later.
#[derive(Debug, Default, Clone, Copy)]
pub struct Scores {
    pub recall_1: f64,
    pub recall_5: f64,
    pub recall_10: f64,
    pub complete_10: f64,
    pub mrr_20: f64,
    pub ndcg_10: f64,
}

/// Scores one ranking (tool ids, best first) against gold groups.
pub fn score(ranking: &[&str], gold: &[Vec<String>]) -> Scores {
    if gold.is_empty() {
        return Scores::default();
    }
    let groups: Vec<HashSet<&str>> = gold.iter().map(|g| g.iter().map(String::as_str).collect()).collect();
    let found_within = |k: usize| groups.iter().filter(|g| ranking.iter().take(k).any(|id| g.contains(id))).count();
    let n = groups.len() as f64;
    let first = ranking.iter().take(20).position(|id| groups.iter().any(|g| g.contains(id)));
    // nDCG with binary gains per group: a group counts once, at its best-ranked member.
    let mut credited = vec![false; groups.len()];
    let mut dcg = 0.0;
    for (i, id) in ranking.iter().take(10).enumerate() {
        if let Some(g) = groups.iter().enumerate().position(|(j, g)| !credited[j] && g.contains(id)) {
            credited[g] = true;
            dcg += 1.0 / ((i + 2) as f64).log2();
        }
    }
    let ideal: f64 = (0..groups.len().min(10)).map(|i| 1.0 / ((i + 2) as f64).log2()).sum();
    Scores {
        recall_1: found_within(1) as f64 / n,
        recall_5: found_within(5) as f64 / n,
        recall_10: found_within(10) as f64 / n,
        complete_10: if found_within(10) == groups.len() { 1.0 } else { 0.0 },
        mrr_20: first.map_or(0.0, |p| 1.0 / (p + 1) as f64),
        ndcg_10: dcg / ideal,
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub queries: usize,
    pub mean: Scores,
}

fn summarise<'a>(scores: impl Iterator<Item = &'a Scores>) -> Summary {
    let mut sum = Scores::default();
    let mut n = 0;
    for s in scores {
        n += 1;
        sum.recall_1 += s.recall_1;
        sum.recall_5 += s.recall_5;
        sum.recall_10 += s.recall_10;
        sum.complete_10 += s.complete_10;
        sum.mrr_20 += s.mrr_20;
        sum.ndcg_10 += s.ndcg_10;
    }
    let d = n.max(1) as f64;
    Summary {
        queries: n,
        mean: Scores {
            recall_1: sum.recall_1 / d,
            recall_5: sum.recall_5 / d,
            recall_10: sum.recall_10 / d,
            complete_10: sum.complete_10 / d,
            mrr_20: sum.mrr_20 / d,
            ndcg_10: sum.ndcg_10 / d,
        },
    }
}

/// The result of a run: scores per query with its part (live?) and split.
pub struct Run {
    pub per_query: Vec<(bool, Split, Scores)>,
}

impl Run {
    pub fn summary(&self, live: Option<bool>, split: Option<Split>) -> Summary {
        summarise(
            self.per_query
                .iter()
                .filter(|(l, s, _)| live.is_none_or(|v| v == *l) && split.is_none_or(|v| v == *s))
                .map(|(_, _, scores)| scores),
        )
    }

    /// A table: rows for synthetic, live and all queries, on the test half and on everything.
    pub fn report(&self, ranker: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "ranker: {ranker}");
        let _ = writeln!(
            out,
            "{:<26} {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} {:>8}",
            "queries", "n", "R@1", "R@5", "R@10", "C@10", "MRR@20", "nDCG@10"
        );
        for (label, split) in [("test half", Some(Split::Test)), ("all", None)] {
            for (part, live) in [("synthetic", Some(false)), ("live", Some(true)), ("all", None)] {
                let s = self.summary(live, split);
                let m = s.mean;
                let _ = writeln!(
                    out,
                    "{:<26} {:>7} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>7.1} {:>8.1}",
                    format!("{part} ({label})"),
                    s.queries,
                    m.recall_1 * 100.0,
                    m.recall_5 * 100.0,
                    m.recall_10 * 100.0,
                    m.complete_10 * 100.0,
                    m.mrr_20 * 100.0,
                    m.ndcg_10 * 100.0
                );
            }
        }
        out
    }
}

/// Every tool passage and query embedded once (the slow part), for the dense and hybrid runs.
pub struct Embedded {
    pub tools: Vec<crate::ranking::embed::Vector>,
    pub queries: Vec<crate::ranking::embed::Vector>,
    pub seconds: f64,
}

pub async fn embed_all(
    embedder: &dyn crate::ranking::embed::Embedder,
    cache: &crate::ranking::cache::VectorCache,
    tools: &[ToolRecord],
    queries: &[QueryRecord],
) -> Result<Embedded, String> {
    let started = std::time::Instant::now();
    let passages: Vec<String> = tools.iter().map(|t| ranking::tool_passage(&t.definition, t.server())).collect();
    let (tool_vectors, fresh) = cache.embed(embedder, &passages).await.map_err(|e| e.to_string())?;
    let indexing = started.elapsed().as_secs_f64();
    let texts: Vec<String> = queries.iter().map(|q| q.query.clone()).collect();
    let (query_vectors, _) = cache.embed(embedder, &texts).await.map_err(|e| e.to_string())?;
    if fresh > 0 {
        eprintln!(
            "embedded {fresh} tool passages in {indexing:.1} s ({:.0} passages/s)",
            fresh as f64 / indexing.max(1e-9)
        );
    }
    Ok(Embedded { tools: tool_vectors, queries: query_vectors, seconds: indexing })
}

/// Ranks every query densely, or by fusing BM25 and dense (`dense_weight` in [0, 1]).
pub fn run_embedded(
    tools: &[ToolRecord],
    queries: &[QueryRecord],
    embedded: &Embedded,
    dense_weight: Option<f32>,
) -> Run {
    let rankers = Rankers::new(tools, embedded);
    let per_query = queries
        .iter()
        .zip(&embedded.queries)
        .map(|(q, v)| {
            let hits = match dense_weight {
                None => rankers.dense.search(v, 20),
                Some(w) => rankers.hybrid(&q.query, v, w, 20),
            };
            (q.is_live(), q.split(), score(&ids(tools, &hits), &q.gold))
        })
        .collect();
    Run { per_query }
}

/// The three rankers over one catalog.
struct Rankers {
    lexical: Lexical,
    dense: ranking::Dense,
}

impl Rankers {
    fn new(tools: &[ToolRecord], embedded: &Embedded) -> Self {
        Self { lexical: lexical(tools, &ranking::WEIGHTS), dense: ranking::Dense::new(embedded.tools.clone()) }
    }

    fn hybrid(&self, query: &str, vector: &[f32], dense_weight: f32, k: usize) -> Vec<ranking::Hit> {
        ranking::fuse(&self.lexical.search(query, 100), &self.dense.search(vector, 100), dense_weight, k)
    }
}

fn ids<'a>(tools: &'a [ToolRecord], hits: &[ranking::Hit]) -> Vec<&'a str> {
    hits.iter().map(|h| tools[h.index].id.as_str()).collect()
}

/// How much better any way of mixing these rankers could do, and why hybrid misses: per query
/// the best of BM25, dense and hybrid chosen *with hindsight* (an upper bound for any selector
/// or fusion of the three), then, for every gold tool hybrid leaves out of its top 5, where it
/// ranked and whether a near-duplicate of it (passage cosine at least 0.7 or 0.8) took its place.
pub fn ceiling(tools: &[ToolRecord], queries: &[QueryRecord], embedded: &Embedded) -> String {
    let rankers = Rankers::new(tools, embedded);
    let mut misses = 0usize;
    let mut near_duplicates = [0usize; 2];
    let mut ranked_at = [0usize; 4]; // 6–10, 11–20, 21–100, beyond 100
    let per_query = queries
        .iter()
        .zip(&embedded.queries)
        .map(|(q, v)| {
            let hybrid = rankers.hybrid(&q.query, v, ranking::DENSE_WEIGHT, 100);
            for group in &q.gold {
                let gold: Vec<usize> =
                    tools.iter().enumerate().filter(|(_, t)| group.contains(&t.id)).map(|(i, _)| i).collect();
                let position = hybrid.iter().position(|h| gold.contains(&h.index));
                if position.is_some_and(|p| p < 5) {
                    continue;
                }
                misses += 1;
                ranked_at[match position {
                    Some(p) if p < 10 => 0,
                    Some(p) if p < 20 => 1,
                    Some(_) => 2,
                    None => 3,
                }] += 1;
                let closest = hybrid
                    .iter()
                    .take(5)
                    .flat_map(|h| gold.iter().map(move |&g| cosine(&embedded.tools[h.index], &embedded.tools[g])))
                    .fold(f32::MIN, f32::max);
                for (count, threshold) in near_duplicates.iter_mut().zip([0.7, 0.8]) {
                    *count += usize::from(closest >= threshold);
                }
            }
            let candidates = [
                score(&ids(tools, &rankers.lexical.search(&q.query, 20)), &q.gold),
                score(&ids(tools, &rankers.dense.search(v, 20)), &q.gold),
                score(&ids(tools, &hybrid[..hybrid.len().min(20)]), &q.gold),
            ];
            let best = candidates
                .into_iter()
                .max_by(|a, b| a.recall_5.total_cmp(&b.recall_5).then(a.ndcg_10.total_cmp(&b.ndcg_10)))
                .unwrap_or_default();
            (q.is_live(), q.split(), best)
        })
        .collect();
    let mut out = Run { per_query }.report("best of bm25, dense and hybrid per query, chosen with hindsight");
    let groups: usize = queries.iter().map(|q| q.gold.len()).sum();
    let _ = writeln!(
        out,
        "\nhybrid misses {misses} of {groups} gold tools in its top 5; ranked 6-10: {}, 11-20: {}, 21-100: {}, \
         below 100: {}",
        ranked_at[0], ranked_at[1], ranked_at[2], ranked_at[3]
    );
    let _ = writeln!(
        out,
        "of those misses, a near-duplicate of the gold tool is in the top 5 instead: {} (passage cosine >= 0.7), \
         {} (>= 0.8)",
        near_duplicates[0], near_duplicates[1]
    );
    out
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    // Passage vectors are unit length: the dot product is the cosine.
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// BM25 over the tools' documents (each tool's `server` as its namespace).
fn lexical(tools: &[ToolRecord], weights: &ranking::Weights) -> Lexical {
    let documents: Vec<_> =
        tools.iter().map(|t| ranking::tool_document_weighted(&t.definition, t.server(), weights)).collect();
    Lexical::new(&documents)
}

/// Ranks every query with BM25 over the tool documents.
pub fn run_lexical(tools: &[ToolRecord], queries: &[QueryRecord]) -> Run {
    run_lexical_weighted(tools, queries, &ranking::WEIGHTS)
}

pub fn run_lexical_weighted(tools: &[ToolRecord], queries: &[QueryRecord], weights: &ranking::Weights) -> Run {
    let ranker = lexical(tools, weights);
    let per_query = queries
        .iter()
        .map(|q| {
            let hits = ranker.search(&q.query, 20);
            let ids: Vec<&str> = hits.iter().map(|h| tools[h.index].id.as_str()).collect();
            (q.is_live(), q.split(), score(&ids, &q.gold))
        })
        .collect();
    Run { per_query }
}

/// Grid search over field weights on the tuning half only (prints the best few). Test-half
/// figures are never consulted here.
pub fn tune_weights(tools: &[ToolRecord], queries: &[QueryRecord]) -> String {
    let tune: Vec<&QueryRecord> = queries.iter().filter(|q| q.split() == Split::Tune).collect();
    let tune_owned: Vec<QueryRecord> = tune
        .iter()
        .map(|q| QueryRecord { id: q.id.clone(), query: q.query.clone(), gold: q.gold.clone(), meta: q.meta.clone() })
        .collect();
    let mut results: Vec<(f64, String)> = Vec::new();
    for name in [1.0, 2.0, 3.0, 4.0] {
        for description in [1.0, 1.5] {
            for parameter_names in [0.5, 1.0, 1.5] {
                for parameter_descriptions in [0.25, 0.5, 1.0] {
                    let w = ranking::Weights {
                        name,
                        title: 2.0,
                        description,
                        parameter_names,
                        parameter_descriptions,
                        namespace: 1.0,
                    };
                    let run = run_lexical_weighted(tools, &tune_owned, &w);
                    let s = run.summary(None, None).mean;
                    results.push((s.ndcg_10 + s.recall_5, format!("name {name} desc {description} pnames {parameter_names} pdesc {parameter_descriptions}: R@5 {:.1} nDCG@10 {:.1}", s.recall_5 * 100.0, s.ndcg_10 * 100.0)));
                }
            }
        }
    }
    results.sort_by(|a, b| b.0.total_cmp(&a.0));
    results.into_iter().take(8).map(|(_, l)| l + "\n").collect()
}

/// The relevance floor: for the tuning half, how the relevance of gold tools in each top 8
/// compares with that of the other tools there and with the best hit of queries that have no
/// fitting tool (BFCL's irrelevance set). Prints, per candidate floor, the share of each kept.
pub fn tune_floor(tools: &[ToolRecord], queries: &[QueryRecord], irrelevant: &[QueryRecord]) -> String {
    let ranker = lexical(tools, &ranking::WEIGHTS);
    let (mut gold_hits, mut other_hits) = (Vec::new(), Vec::new());
    for q in queries.iter().filter(|q| q.split() == Split::Tune) {
        let gold: HashSet<&str> = q.gold.iter().flatten().map(String::as_str).collect();
        for hit in ranker.search(&q.query, 8) {
            if gold.contains(tools[hit.index].id.as_str()) {
                gold_hits.push(hit.relevance)
            } else {
                other_hits.push(hit.relevance)
            }
        }
    }
    let irrelevant_best: Vec<f32> = irrelevant
        .iter()
        .filter(|q| q.split() == Split::Tune)
        .filter_map(|q| ranker.search(&q.query, 1).first().map(|h| h.relevance))
        .collect();
    let share = |values: &[f32], floor: f32| {
        100.0 * values.iter().filter(|v| **v >= floor).count() as f64 / values.len().max(1) as f64
    };
    let mut out =
        format!("{:>6} {:>16} {:>18} {:>22}\n", "floor", "gold kept (%)", "others kept (%)", "irrelevant top-1 (%)");
    for floor in [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5] {
        let _ = writeln!(
            out,
            "{floor:>6.2} {:>16.1} {:>18.1} {:>22.1}",
            share(&gold_hits, floor),
            share(&other_hits, floor),
            share(&irrelevant_best, floor)
        );
    }
    out
}

/// Grid search of hybrid fusion on the tuning half only: dense weight × score normalisation.
pub fn tune_hybrid(tools: &[ToolRecord], queries: &[QueryRecord], embedded: &Embedded) -> String {
    let lexical = lexical(tools, &ranking::WEIGHTS);
    let dense = ranking::Dense::new(embedded.tools.clone());
    let tune: Vec<(usize, &QueryRecord)> =
        queries.iter().enumerate().filter(|(_, q)| q.split() == Split::Tune).collect();
    let prepared: Vec<(Vec<ranking::Hit>, Vec<ranking::Hit>)> =
        tune.iter().map(|(i, q)| (lexical.search(&q.query, 100), dense.search(&embedded.queries[*i], 100))).collect();
    let mut rows = Vec::new();
    // Normalisations: 0 ceiling (BM25 / its ceiling, cosine as is), 1 both by their top hit,
    // 2 cosine min-max over its candidates, 3 reciprocal-rank fusion (k = 60).
    for mode in [0, 1, 2, 3] {
        for weight in [0.3, 0.4, 0.5, 0.6, 0.7, 0.8] {
            let per_query = tune
                .iter()
                .zip(&prepared)
                .map(|((_, q), (lex, den))| {
                    let (lex, den) = match mode {
                        1 => (ranking::by_top(lex), ranking::by_top(den)),
                        2 => (lex.clone(), ranking::min_max(den)),
                        3 => (ranking::reciprocal_ranks(lex, 60.0), ranking::reciprocal_ranks(den, 60.0)),
                        _ => (lex.clone(), den.clone()),
                    };
                    let hits = ranking::fuse(&lex, &den, weight, 20);
                    let ids: Vec<&str> = hits.iter().map(|h| tools[h.index].id.as_str()).collect();
                    (q.is_live(), q.split(), score(&ids, &q.gold))
                })
                .collect();
            let run = Run { per_query };
            let all = run.summary(None, None).mean;
            let live = run.summary(Some(true), None).mean;
            rows.push(format!(
                "normalise {} weight {weight:.1}: R@5 {:.1} nDCG@10 {:.1} live R@5 {:.1}\n",
                ["ceiling", "by top ", "min-max", "rrf-60 "][mode],
                all.recall_5 * 100.0,
                all.ndcg_10 * 100.0,
                live.recall_5 * 100.0
            ));
        }
    }
    rows.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gold(groups: &[&[&str]]) -> Vec<Vec<String>> {
        groups.iter().map(|g| g.iter().map(|s| s.to_string()).collect()).collect()
    }

    #[test]
    fn a_perfect_single_answer_scores_one_everywhere() {
        let s = score(&["a", "b", "c"], &gold(&[&["a"]]));
        assert_eq!((s.recall_1, s.recall_5, s.complete_10, s.mrr_20, s.ndcg_10), (1.0, 1.0, 1.0, 1.0, 1.0));
    }

    #[test]
    fn groups_count_once_and_any_member_satisfies_them() {
        // Two groups; the first is satisfied by either x or y (both ranked), the second missed.
        let s = score(&["x", "y", "z"], &gold(&[&["x", "y"], &["q"]]));
        assert_eq!(s.recall_5, 0.5);
        assert_eq!(s.complete_10, 0.0);
        assert_eq!(s.mrr_20, 1.0);
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!((s.ndcg_10 - 1.0 / ideal).abs() < 1e-9, "y does not count again for group one");
    }

    #[test]
    fn rank_positions_matter() {
        let s = score(&["n1", "n2", "hit"], &gold(&[&["hit"]]));
        assert_eq!(s.recall_1, 0.0);
        assert_eq!(s.recall_5, 1.0);
        assert!((s.mrr_20 - 1.0 / 3.0).abs() < 1e-9);
        assert!((s.ndcg_10 - 1.0 / 4f64.log2()).abs() < 1e-9);
    }

    #[test]
    fn the_ceiling_counts_misses_and_the_near_duplicates_that_took_their_place() {
        let tool = |id: &str, description: &str| ToolRecord {
            id: id.into(),
            definition: serde_json::json!({ "name": id, "description": description }),
        };
        let unit = |v: Vec<f32>| crate::ranking::embed::normalise(v);
        let axis = |i: usize| unit((0..8).map(|j| if i == j { 1.0 } else { 0.0 }).collect());
        let mut tools: Vec<ToolRecord> = (0..7).map(|i| tool(&format!("alpha_{i}"), "alpha thing")).collect();
        tools.push(tool("omega", "omega"));
        // alpha_0 is a near-duplicate of omega (cosine 0.83); the rest are unrelated to it.
        let mut vectors: Vec<Vec<f32>> = (0..7).map(axis).collect();
        vectors[0] = unit(vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.5]);
        vectors.push(axis(7));
        let query = |id: &str, text: &str| QueryRecord {
            id: id.into(),
            query: text.into(),
            gold: vec![vec!["omega".into()]],
            meta: Value::Null,
        };
        let queries = vec![query("missed", "alpha thing"), query("found", "omega")];
        let embedded = Embedded {
            tools: vectors,
            queries: vec![unit(vec![3.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), axis(7)],
            seconds: 0.0,
        };
        let report = ceiling(&tools, &queries, &embedded);
        assert!(report.contains("hybrid misses 1 of 2 gold tools in its top 5"), "{report}");
        assert!(report.contains("below 100: 1"), "{report}");
        assert!(report.contains("instead: 1 (passage cosine >= 0.7), 1 (>= 0.8)"), "{report}");
        let all = report.lines().find(|l| l.starts_with("all (all)")).unwrap_or_default();
        assert!(all.contains(" 50.0 "), "one of two queries is answerable by any ranker: {all}");
    }

    #[test]
    fn the_split_is_stable_and_roughly_even() {
        let q = |id: &str| QueryRecord { id: id.into(), query: String::new(), gold: vec![], meta: Value::Null };
        assert_eq!(q("simple_python_0").split(), q("simple_python_0").split());
        let tune = (0..1000).filter(|i| q(&format!("q{i}")).split() == Split::Tune).count();
        assert!((400..600).contains(&tune), "{tune}");
    }
}
