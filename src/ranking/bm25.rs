//! BM25 over weighted fields (BM25F-style: each field's term counts are scaled by its weight
//! before saturation), the embedded default ranker: no model, no key.

use std::collections::HashMap;

/// Term frequency saturation and length normalisation (the usual defaults).
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// A built index. Documents are numbered by their position at build time.
#[derive(Debug, Default)]
pub struct Bm25 {
    postings: HashMap<String, Vec<(u32, f32)>>,
    doc_len: Vec<f32>,
    avg_len: f32,
}

/// One document: its terms, each group with the weight of the field it came from.
pub type WeightedTerms = Vec<(f32, Vec<String>)>;

impl Bm25 {
    pub fn build(docs: &[WeightedTerms]) -> Self {
        let mut postings: HashMap<String, Vec<(u32, f32)>> = HashMap::new();
        let mut doc_len = Vec::with_capacity(docs.len());
        for (doc, fields) in docs.iter().enumerate() {
            let mut tf: HashMap<&str, f32> = HashMap::new();
            let mut len = 0.0;
            for (weight, terms) in fields {
                for term in terms {
                    *tf.entry(term.as_str()).or_default() += weight;
                    len += weight;
                }
            }
            for (term, weight) in tf {
                postings.entry(term.to_string()).or_default().push((doc as u32, weight));
            }
            doc_len.push(len);
        }
        let avg_len = if doc_len.is_empty() { 1.0 } else { doc_len.iter().sum::<f32>() / doc_len.len() as f32 };
        Self { postings, doc_len, avg_len: avg_len.max(f32::EPSILON) }
    }

    pub fn len(&self) -> usize {
        self.doc_len.len()
    }

    pub fn is_empty(&self) -> bool {
        self.doc_len.is_empty()
    }

    fn idf(&self, df: usize) -> f32 {
        let n = self.doc_len.len() as f32;
        (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln()
    }

    /// Scores every document for the query; also returns the best score a document could
    /// reach for these terms, to normalise scores into `[0, 1]` for a relevance floor.
    pub fn scores(&self, query: &[String]) -> (Vec<f32>, f32) {
        let mut scores = vec![0.0f32; self.doc_len.len()];
        let mut ceiling = 0.0;
        let mut seen: Vec<&str> = Vec::with_capacity(query.len());
        for term in query {
            if seen.contains(&term.as_str()) {
                continue;
            }
            seen.push(term);
            let Some(list) = self.postings.get(term) else { continue };
            let idf = self.idf(list.len());
            ceiling += idf * (K1 + 1.0);
            for &(doc, tf) in list {
                let norm = K1 * (1.0 - B + B * self.doc_len[doc as usize] / self.avg_len);
                scores[doc as usize] += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        (scores, ceiling)
    }
}

/// The `k` best `(index, score)` pairs, best first; ties broken by index so results are
/// deterministic.
pub fn top_k(scores: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = scores.iter().copied().enumerate().filter(|(_, s)| *s > 0.0).collect();
    let k = k.min(ranked.len());
    if k == 0 {
        return Vec::new();
    }
    let by_score = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < ranked.len() {
        ranked.select_nth_unstable_by(k - 1, by_score);
        ranked.truncate(k);
    }
    ranked.sort_unstable_by(by_score);
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranking::text::terms;

    fn doc(text: &str) -> WeightedTerms {
        vec![(1.0, terms(text))]
    }

    #[test]
    fn the_matching_document_ranks_first() {
        let index =
            Bm25::build(&[doc("weather forecast for a city"), doc("stock price quote"), doc("city population")]);
        let (scores, ceiling) = index.scores(&terms("what's the weather in Tokyo city"));
        let ranked = top_k(&scores, 3);
        assert_eq!(ranked[0].0, 0);
        assert!(ranked.iter().all(|(i, _)| *i != 1), "no shared term, no score");
        assert!(ranked[0].1 <= ceiling);
    }

    #[test]
    fn field_weights_count() {
        let heavy = vec![(3.0, terms("factorial"))];
        let light = vec![(0.5, terms("factorial"))];
        let index = Bm25::build(&[light, heavy]);
        let (scores, _) = index.scores(&terms("factorial"));
        assert!(scores[1] > scores[0]);
    }

    #[test]
    fn rare_terms_weigh_more_than_common_ones() {
        let index = Bm25::build(&[doc("list files"), doc("list users"), doc("list groups"), doc("delete files")]);
        let (scores, _) = index.scores(&terms("list delete"));
        assert_eq!(top_k(&scores, 1)[0].0, 3, "'delete' is rarer than 'list'");
    }

    #[test]
    fn top_k_is_deterministic_and_bounded() {
        let scores = [0.5, 0.9, 0.9, 0.0, 0.1];
        assert_eq!(top_k(&scores, 2), [(1, 0.9), (2, 0.9)]);
        assert_eq!(top_k(&scores, 10).len(), 4, "zero scores are not results");
        assert!(top_k(&[], 3).is_empty());
    }
}
