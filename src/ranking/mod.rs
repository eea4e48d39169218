//! Ranking: which tools fit a task. Lexical (BM25 over weighted tool fields, the default),
//! dense (cosine over sentence embeddings) and hybrid (a weighted fusion of the two).
//!
//! Knows nothing of the catalog or the wire: it ranks documents it is given. Only
//! [`semantic`] (embedding through an [`embed::Embedder`]) and [`cache`] do I/O.

pub mod bm25;
pub mod cache;
pub mod embed;
pub mod semantic;
pub mod text;

use serde_json::Value;

use bm25::{Bm25, WeightedTerms};

/// Field weights of a tool document. Chosen on the tuning half of the BFCL queries (see the
/// README's retrieval benchmark); the other half is only ever used to report.
pub struct Weights {
    pub name: f32,
    pub title: f32,
    pub description: f32,
    pub parameter_names: f32,
    pub parameter_descriptions: f32,
    pub namespace: f32,
}

/// Hybrid fusion: the dense score's weight (BM25, normalised by its ceiling, gets the rest).
/// Chosen on the BFCL tuning half (`gatehouse bench tune-hybrid`).
pub const DENSE_WEIGHT: f32 = 0.4;

pub const WEIGHTS: Weights = Weights {
    name: 3.0,
    title: 2.0,
    description: 1.0,
    parameter_names: 1.5,
    parameter_descriptions: 0.5,
    namespace: 1.0,
};

/// A tool definition as a searchable document: the name split into words, title, description,
/// parameter names and descriptions (nested objects included), and the namespace.
pub fn tool_document(definition: &Value, namespace: &str) -> WeightedTerms {
    tool_document_weighted(definition, namespace, &WEIGHTS)
}

/// [`tool_document`] with explicit weights (for tuning).
pub fn tool_document_weighted(definition: &Value, namespace: &str, weights: &Weights) -> WeightedTerms {
    let text = |key: &str| definition.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut names = String::new();
    let mut descriptions = String::new();
    if let Some(schema) = definition.get("inputSchema") {
        collect_parameters(schema, &mut names, &mut descriptions, 0);
    }
    let title =
        definition.get("annotations").and_then(|a| a.get("title")).and_then(Value::as_str).unwrap_or(text("title"));
    vec![
        (weights.name, text::terms(text("name"))),
        (weights.title, text::terms(title)),
        (weights.description, text::terms(text("description"))),
        (weights.parameter_names, text::terms(&names)),
        (weights.parameter_descriptions, text::terms(&descriptions)),
        (weights.namespace, text::terms(namespace)),
    ]
}

fn collect_parameters(schema: &Value, names: &mut String, descriptions: &mut String, depth: usize) {
    // Deep schemas add little and could be made to cost a lot: stop at a sane depth.
    if depth > 4 {
        return;
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            names.push_str(name);
            names.push(' ');
            if let Some(d) = property.get("description").and_then(Value::as_str) {
                descriptions.push_str(d);
                descriptions.push(' ');
            }
            collect_parameters(property, names, descriptions, depth + 1);
        }
    }
    if let Some(items) = schema.get("items") {
        collect_parameters(items, names, descriptions, depth + 1);
    }
}

/// A ranked result: document index, raw score, and the score normalised into `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub index: usize,
    pub score: f32,
    pub relevance: f32,
}

/// The lexical ranker over a fixed set of documents.
pub struct Lexical {
    index: Bm25,
}

impl Lexical {
    pub fn new(documents: &[WeightedTerms]) -> Self {
        Self { index: Bm25::build(documents) }
    }

    /// The `k` best documents for `query`, best first, with relevance in `[0, 1]`.
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit> {
        let (scores, ceiling) = self.index.scores(&text::terms(query));
        bm25::top_k(&scores, k)
            .into_iter()
            .map(|(index, score)| Hit { index, score, relevance: if ceiling > 0.0 { score / ceiling } else { 0.0 } })
            .collect()
    }
}

/// A tool as one natural-language passage, for a sentence-embedding model: the name in words,
/// title, description and parameters.
pub fn tool_passage(definition: &Value, namespace: &str) -> String {
    let text = |key: &str| definition.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut passage = text::words(text("name")).join(" ");
    let title = text("title");
    if !title.is_empty() {
        passage.push_str(" — ");
        passage.push_str(title);
    }
    passage.push_str(": ");
    passage.push_str(text("description"));
    let mut names = String::new();
    let mut descriptions = String::new();
    if let Some(schema) = definition.get("inputSchema") {
        collect_parameters(schema, &mut names, &mut descriptions, 0);
    }
    if !names.trim().is_empty() {
        passage.push_str(" Parameters: ");
        passage.push_str(&text::words(&names).join(" "));
        passage.push('.');
    }
    if !namespace.is_empty() {
        passage.push_str(" Server: ");
        passage.push_str(namespace);
        passage.push('.');
    }
    passage
}

/// Dense ranking: cosine similarity of unit vectors, kept in one contiguous matrix so a query
/// against ten thousand tools is a single pass over memory.
pub struct Dense {
    dims: usize,
    /// Row-major: vector `i` is `matrix[i * dims..(i + 1) * dims]`.
    matrix: Vec<f32>,
}

impl Dense {
    /// Vectors of another length than the first (a failed embedding) score zero.
    pub fn new(vectors: Vec<embed::Vector>) -> Self {
        let dims = vectors.first().map_or(0, Vec::len);
        let mut matrix = Vec::with_capacity(vectors.len() * dims);
        for v in &vectors {
            if v.len() == dims {
                matrix.extend_from_slice(v);
            } else {
                matrix.extend(std::iter::repeat_n(0.0, dims));
            }
        }
        Self { dims, matrix }
    }

    pub fn search(&self, query: &[f32], k: usize) -> Vec<Hit> {
        if self.dims == 0 || query.len() != self.dims {
            return Vec::new();
        }
        let scores: Vec<f32> = self.matrix.chunks_exact(self.dims).map(|v| dot(v, query).max(0.0)).collect();
        bm25::top_k(&scores, k).into_iter().map(|(index, score)| Hit { index, score, relevance: score }).collect()
    }
}

/// A dot product in eight independent lanes, which the compiler turns into SIMD (a single
/// running sum cannot be reordered, so it would not be).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Hybrid ranking: a weighted sum of the two rankers' relevances (BM25 normalised into [0, 1],
/// cosine as is), so a strong signal from either side can carry a tool. `dense_weight` is in
/// [0, 1]; the result's relevance is the fused score.
pub fn fuse(lexical: &[Hit], dense: &[Hit], dense_weight: f32, k: usize) -> Vec<Hit> {
    let mut fused: std::collections::HashMap<usize, f32> = std::collections::HashMap::new();
    for h in lexical {
        *fused.entry(h.index).or_default() += (1.0 - dense_weight) * h.relevance;
    }
    for h in dense {
        *fused.entry(h.index).or_default() += dense_weight * h.relevance;
    }
    let mut hits: Vec<Hit> = fused.into_iter().map(|(index, score)| Hit { index, score, relevance: score }).collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    hits.truncate(k);
    hits
}

/// Rescales a ranking's relevances so its best hit is 1 (for fusing rankers whose scores live
/// on different scales).
pub fn by_top(hits: &[Hit]) -> Vec<Hit> {
    let top = hits.first().map_or(0.0, |h| h.relevance);
    hits.iter().map(|h| Hit { relevance: if top > 0.0 { h.relevance / top } else { 0.0 }, ..*h }).collect()
}

/// Rescales relevances to `[0, 1]` between the worst and best of these hits (a ranker whose
/// scores bunch in a narrow band, like cosine similarity, then spreads over the whole range).
pub fn min_max(hits: &[Hit]) -> Vec<Hit> {
    let top = hits.iter().map(|h| h.relevance).fold(f32::MIN, f32::max);
    let bottom = hits.iter().map(|h| h.relevance).fold(f32::MAX, f32::min);
    let span = top - bottom;
    hits.iter().map(|h| Hit { relevance: if span > 0.0 { (h.relevance - bottom) / span } else { 1.0 }, ..*h }).collect()
}

/// Relevance by rank alone, `1 / (k + rank)` scaled so the first hit is 1 (reciprocal-rank
/// fusion when fused).
pub fn reciprocal_ranks(hits: &[Hit], k: f32) -> Vec<Hit> {
    hits.iter().enumerate().map(|(rank, h)| Hit { relevance: (k + 1.0) / (k + 1.0 + rank as f32), ..*h }).collect()
}

#[cfg(test)]
mod dense_tests {
    use super::*;

    #[test]
    fn dense_search_scores_are_dot_products_whatever_the_dimension() {
        let v = |seed: f32| embed::normalise((0..10).map(|i| ((i as f32) * seed).sin()).collect());
        let vectors = vec![v(1.0), v(2.0), v(3.0), vec![1.0; 3]];
        let query = v(2.0);
        let hits = Dense::new(vectors.clone()).search(&query, 4);
        assert_eq!(hits[0].index, 1);
        let expected: f32 = vectors[1].iter().zip(&query).map(|(a, b)| a * b).sum();
        assert!((hits[0].score - expected).abs() < 1e-5 && (hits[0].score - 1.0).abs() < 1e-5);
        assert!(hits.iter().all(|h| h.index != 3 || h.score == 0.0), "a malformed vector scores zero");
        assert!(Dense::new(vectors).search(&[1.0, 0.0], 4).is_empty(), "a query of the wrong size finds nothing");
    }
}
