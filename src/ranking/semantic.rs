//! The dense half of hybrid ranking at run time: tool vectors kept current for the catalog (off
//! the request path, through the persistent [`VectorCache`]) and query vectors behind a bounded
//! LRU. The one part of ranking that does I/O, always through an [`Embedder`].
//!
//! Every failure here is survivable: callers fall back to BM25.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lru::LruCache;

use super::Dense;
use super::cache::VectorCache;
use super::embed::{EmbedError, Embedder, Vector};

pub struct Semantic {
    embedder: Arc<dyn Embedder>,
    cache: VectorCache,
    queries: Mutex<LruCache<String, Vector>>,
    query_timeout: Duration,
    /// Tool vectors of one catalog version, aligned with that view's ranked documents.
    current: RwLock<Option<(u64, Arc<Dense>)>>,
}

impl Semantic {
    pub fn new(embedder: Arc<dyn Embedder>, cache: VectorCache, query_cache: usize, query_timeout: Duration) -> Self {
        Self {
            embedder,
            cache,
            queries: Mutex::new(LruCache::new(NonZeroUsize::new(query_cache.max(1)).unwrap_or(NonZeroUsize::MIN))),
            query_timeout,
            current: RwLock::new(None),
        }
    }

    pub fn model(&self) -> &str {
        self.embedder.id()
    }

    /// Embeds what is new among `passages` (catalog `version`'s ranked documents, in order) and
    /// makes them the vectors of that version. Returns how many had to be embedded.
    pub async fn index(&self, version: u64, passages: &[String]) -> Result<usize, EmbedError> {
        let (vectors, fresh) = self.cache.embed(&*self.embedder, passages).await?;
        let mut current = self.current.write().expect("semantic index poisoned");
        if current.as_ref().is_none_or(|(v, _)| *v <= version) {
            *current = Some((version, Arc::new(Dense::new(vectors))));
        }
        Ok(fresh)
    }

    /// The tool vectors of catalog `version`, once indexed.
    pub fn vectors(&self, version: u64) -> Option<Arc<Dense>> {
        self.current
            .read()
            .expect("semantic index poisoned")
            .as_ref()
            .filter(|(v, _)| *v == version)
            .map(|(_, d)| d.clone())
    }

    /// The vector of a task or query: from the LRU, else embedded within the query timeout.
    pub async fn query(&self, text: &str) -> Result<Vector, EmbedError> {
        if let Some(v) = self.queries.lock().expect("query cache poisoned").get(text) {
            return Ok(v.clone());
        }
        let embedded =
            tokio::time::timeout(self.query_timeout, self.embedder.embed(vec![text.to_string()])).await.map_err(
                |_| EmbedError::Service(format!("query embedding took longer than {:?}", self.query_timeout)),
            )??;
        let vector = embedded.into_iter().next().ok_or_else(|| EmbedError::Service("no vector returned".into()))?;
        self.queries.lock().expect("query cache poisoned").put(text.to_string(), vector.clone());
        Ok(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranking::embed::EmbedFuture;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// [1, 0] for texts about weather, [0, 1] otherwise; can be switched to failing.
    struct Keyword {
        calls: AtomicUsize,
        broken: AtomicBool,
    }

    impl Embedder for Keyword {
        fn id(&self) -> &str {
            "keyword"
        }
        fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_> {
            self.calls.fetch_add(texts.len(), Ordering::SeqCst);
            let broken = self.broken.load(Ordering::SeqCst);
            Box::pin(async move {
                if broken {
                    return Err(EmbedError::Service("HTTP 503".into()));
                }
                Ok(texts.iter().map(|t| if t.contains("weather") { vec![1.0, 0.0] } else { vec![0.0, 1.0] }).collect())
            })
        }
    }

    fn semantic() -> (Arc<Keyword>, Semantic) {
        let embedder = Arc::new(Keyword { calls: AtomicUsize::new(0), broken: AtomicBool::new(false) });
        let semantic = Semantic::new(embedder.clone(), VectorCache::memory(), 2, Duration::from_secs(1));
        (embedder, semantic)
    }

    #[tokio::test]
    async fn vectors_belong_to_the_version_they_were_indexed_for() {
        let (_, s) = semantic();
        let passages = vec!["weather report".to_string(), "send email".to_string()];
        assert_eq!(s.index(3, &passages).await.unwrap(), 2);
        assert!(s.vectors(2).is_none() && s.vectors(4).is_none());
        let dense = s.vectors(3).expect("indexed");
        assert_eq!(dense.search(&[1.0, 0.0], 1)[0].index, 0);
        // An older version finishing late never replaces a newer one.
        s.index(2, &passages).await.unwrap();
        assert!(s.vectors(3).is_some());
    }

    #[tokio::test]
    async fn queries_are_cached_in_a_bounded_lru_and_failures_are_errors() {
        let (embedder, s) = semantic();
        s.query("weather?").await.unwrap();
        s.query("weather?").await.unwrap();
        assert_eq!(embedder.calls.load(Ordering::SeqCst), 1, "the second query came from the cache");
        s.query("b").await.unwrap();
        s.query("c").await.unwrap(); // evicts "weather?" (capacity 2)
        embedder.broken.store(true, Ordering::SeqCst);
        assert!(s.query("c").await.is_ok(), "cached: no call");
        assert!(s.query("weather?").await.is_err(), "evicted, and the embedder is down");
    }
}
