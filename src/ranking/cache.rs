//! Embedding cache: vectors by (model, SHA-256 of the embedded text), in memory and persisted —
//! in the store (the gateway: shared by replicas) or under a directory (the benchmarks) — so a
//! restart or a catalog change re-embeds only what changed.
//!
//! On disk: one append-only file per model, `<model>.vec`, of fixed-size records
//! `[32-byte text hash][dims × f32 little-endian]` after a header line `gatehouse-vectors <dims>\n`.
//! A torn last record (crash mid-write) is ignored on load. In the store: one row per vector.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::embed::{EmbedError, Embedder, Vector};

pub type Key = [u8; 32];

pub fn key(text: &str) -> Key {
    Sha256::digest(text.as_bytes()).into()
}

pub struct VectorCache {
    backing: Backing,
    vectors: Mutex<HashMap<Key, Vector>>,
}

enum Backing {
    Memory,
    File(PathBuf),
    Store { store: crate::store::Store, model: String },
}

impl VectorCache {
    /// Memory only.
    pub fn memory() -> Self {
        Self { backing: Backing::Memory, vectors: Mutex::new(HashMap::new()) }
    }

    /// Loads what the store holds for `model`.
    pub async fn in_store(store: crate::store::Store, model: &str) -> Result<Self, crate::store::StoreError> {
        let vectors = store
            .embeddings(model)
            .await?
            .into_iter()
            .filter_map(|(key, bytes)| {
                let key: Key = key.try_into().ok()?;
                let vector = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                Some((key, vector))
            })
            .collect();
        Ok(Self { backing: Backing::Store { store, model: model.to_string() }, vectors: Mutex::new(vectors) })
    }

    /// Loads what `dir` holds for `model` (creating the directory if needed).
    pub fn open(dir: &Path, model: &str) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let safe: String =
            model.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
        let file = dir.join(format!("{safe}.vec"));
        let vectors = match std::fs::read(&file) {
            Ok(bytes) => parse(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Self { backing: Backing::File(file), vectors: Mutex::new(vectors) })
    }

    pub fn len(&self) -> usize {
        self.vectors.lock().expect("vector cache poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Vectors for `texts`: cached ones as they are, the rest embedded (in one call) and kept.
    /// Returns the vectors and how many had to be embedded.
    pub async fn embed(&self, embedder: &dyn Embedder, texts: &[String]) -> Result<(Vec<Vector>, usize), EmbedError> {
        let keys: Vec<Key> = texts.iter().map(|t| key(t)).collect();
        let missing: Vec<usize> = {
            let vectors = self.vectors.lock().expect("vector cache poisoned");
            (0..texts.len()).filter(|&i| !vectors.contains_key(&keys[i])).collect()
        };
        if !missing.is_empty() {
            let fresh = embedder.embed(missing.iter().map(|&i| texts[i].clone()).collect()).await?;
            let new: Vec<(Key, Vector)> = missing.iter().map(|&i| keys[i]).zip(fresh).collect();
            if let Err(e) = self.persist(&new).await {
                tracing::warn!(error = %e, "could not persist embeddings; they stay in memory");
            }
            self.vectors.lock().expect("vector cache poisoned").extend(new);
        }
        let vectors = self.vectors.lock().expect("vector cache poisoned");
        Ok((keys.iter().map(|k| vectors.get(k).cloned().unwrap_or_default()).collect(), missing.len()))
    }

    async fn persist(&self, new: &[(Key, Vector)]) -> Result<(), String> {
        match &self.backing {
            Backing::Memory => Ok(()),
            Backing::File(file) => append(file, new).map_err(|e| e.to_string()),
            Backing::Store { store, model } => {
                let rows: Vec<(Vec<u8>, Vec<u8>)> =
                    new.iter().map(|(k, v)| (k.to_vec(), v.iter().flat_map(|x| x.to_le_bytes()).collect())).collect();
                store.put_embeddings(model, &rows).await.map_err(|e| e.to_string())
            }
        }
    }
}

fn append(file: &Path, new: &[(Key, Vector)]) -> std::io::Result<()> {
    let Some(dims) = new.first().map(|(_, v)| v.len()) else { return Ok(()) };
    let fresh = !file.exists();
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(file)?;
    if fresh {
        writeln!(out, "gatehouse-vectors {dims}")?;
    }
    let mut buffer = Vec::with_capacity(new.len() * (32 + dims * 4));
    for (k, v) in new.iter().filter(|(_, v)| v.len() == dims) {
        buffer.extend_from_slice(k);
        for x in v {
            buffer.extend_from_slice(&x.to_le_bytes());
        }
    }
    out.write_all(&buffer)
}

fn parse(bytes: &[u8]) -> HashMap<Key, Vector> {
    let mut out = HashMap::new();
    let Some(newline) = bytes.iter().position(|b| *b == b'\n') else { return out };
    let dims: usize = std::str::from_utf8(&bytes[..newline])
        .ok()
        .and_then(|h| h.strip_prefix("gatehouse-vectors "))
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or(0);
    if dims == 0 {
        return out;
    }
    for record in bytes[newline + 1..].chunks_exact(32 + dims * 4) {
        let mut k = [0u8; 32];
        k.copy_from_slice(&record[..32]);
        let v = record[32..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        out.insert(k, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranking::embed::EmbedFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Embeds a text as [its length, 1]; counts what it was asked to embed.
    struct Counting(AtomicUsize);

    impl Embedder for Counting {
        fn id(&self) -> &str {
            "counting"
        }
        fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_> {
            self.0.fetch_add(texts.len(), Ordering::SeqCst);
            Box::pin(async move { Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect()) })
        }
    }

    fn texts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn only_new_texts_are_embedded_and_a_reopened_cache_remembers() {
        let dir = tempfile::tempdir().unwrap();
        let embedder = Counting(AtomicUsize::new(0));
        let cache = VectorCache::open(dir.path(), "m/1").unwrap();
        let (v, fresh) = cache.embed(&embedder, &texts(&["a", "bb"])).await.unwrap();
        assert_eq!((v, fresh), (vec![vec![1.0, 1.0], vec![2.0, 1.0]], 2));
        let (_, fresh) = cache.embed(&embedder, &texts(&["bb", "ccc"])).await.unwrap();
        assert_eq!(fresh, 1, "only ccc is new");

        let reopened = VectorCache::open(dir.path(), "m/1").unwrap();
        assert_eq!(reopened.len(), 3);
        let (v, fresh) = reopened.embed(&embedder, &texts(&["ccc"])).await.unwrap();
        assert_eq!((v, fresh), (vec![vec![3.0, 1.0]], 0));
        assert_eq!(embedder.0.load(Ordering::SeqCst), 3);
        assert!(VectorCache::open(dir.path(), "other").unwrap().is_empty(), "per model");
    }

    #[tokio::test]
    async fn a_store_backed_cache_survives_a_reopen() {
        let store = crate::store::Store::open("sqlite::memory:").await.unwrap();
        let embedder = Counting(AtomicUsize::new(0));
        let cache = VectorCache::in_store(store.clone(), "m").await.unwrap();
        cache.embed(&embedder, &texts(&["a", "bb"])).await.unwrap();
        let reopened = VectorCache::in_store(store, "m").await.unwrap();
        let (v, fresh) = reopened.embed(&embedder, &texts(&["bb"])).await.unwrap();
        assert_eq!((v, fresh), (vec![vec![2.0, 1.0]], 0));
        assert_eq!(embedder.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_torn_last_record_is_ignored() {
        let mut bytes = b"gatehouse-vectors 2\n".to_vec();
        bytes.extend_from_slice(&[7u8; 32]);
        bytes.extend_from_slice(&1.5f32.to_le_bytes());
        bytes.extend_from_slice(&2.5f32.to_le_bytes());
        bytes.extend_from_slice(&[9u8; 20]);
        let parsed = parse(&bytes);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[&[7u8; 32]], vec![1.5, 2.5]);
    }
}
