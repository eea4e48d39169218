//! Ranking: which tools fit a task. Lexical (BM25 over weighted tool fields) today; dense and
//! hybrid rankers plug in beside it.
//!
//! Owns no I/O and knows nothing of the catalog or the wire: it ranks documents it is given.

pub mod bm25;
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
