//! Dense embeddings: the [`Embedder`] trait and its implementations — a small sentence model run
//! in-process on the CPU from files on disk ([`Local`], feature `local-embeddings`), and any
//! OpenAI-compatible `/v1/embeddings` endpoint ([`OpenAi`]). Vectors are L2-normalised, so a dot
//! product is the cosine similarity.

use std::future::Future;
use std::pin::Pin;

pub type Vector = Vec<f32>;
pub type EmbedFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<Vector>, EmbedError>> + Send + 'a>>;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("model files: {0}")]
    Model(String),
    #[error("embedding failed: {0}")]
    Inference(String),
    #[error("embedding service: {0}")]
    Service(String),
}

/// Turns texts into unit vectors. Two real implementations, hence a trait.
pub trait Embedder: Send + Sync {
    /// Identifies the model, so cached vectors of another model are never mixed in.
    fn id(&self) -> &str;
    fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_>;
}

/// Cosine similarity of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn normalise(mut v: Vector) -> Vector {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(feature = "local-embeddings")]
pub use local::Local;

#[cfg(feature = "local-embeddings")]
mod local {
    use std::path::Path;
    use std::sync::Arc;

    use candle_core::{DType, Device, Tensor};
    use candle_nn::VarBuilder;
    use candle_transformers::models::bert::{BertModel, Config};
    use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

    use super::{EmbedError, EmbedFuture, Embedder, Vector, normalise};

    /// Longest input in word pieces; tool documents and tasks are short.
    const MAX_TOKENS: usize = 256;
    const BATCH: usize = 32;

    /// A BERT-family sentence model (all-MiniLM-L6-v2 by default) with mean pooling.
    pub struct Local {
        id: String,
        inner: Arc<Inner>,
    }

    struct Inner {
        model: BertModel,
        tokenizer: Tokenizer,
    }

    impl Local {
        /// Loads `config.json`, `tokenizer.json` and `model.safetensors` from `dir`.
        pub fn load(dir: &Path) -> Result<Self, EmbedError> {
            let read = |name: &str| {
                std::fs::read(dir.join(name))
                    .map_err(|e| EmbedError::Model(format!("{name} in {}: {e}", dir.display())))
            };
            let config: Config = serde_json::from_slice(&read("config.json")?)
                .map_err(|e| EmbedError::Model(format!("config.json: {e}")))?;
            let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
                .map_err(|e| EmbedError::Model(format!("tokenizer.json: {e}")))?;
            // Our own padding (to the longest in a batch) and truncation, whatever the file says.
            tokenizer.with_padding(Some(PaddingParams {
                strategy: PaddingStrategy::BatchLongest,
                ..PaddingParams::default()
            }));
            tokenizer
                .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..TruncationParams::default() }))
                .map_err(|e| EmbedError::Model(format!("tokenizer: {e}")))?;
            let weights = read("model.safetensors")?;
            let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
                .map_err(|e| EmbedError::Model(e.to_string()))?;
            let model = BertModel::load(vb, &config).map_err(|e| EmbedError::Model(e.to_string()))?;
            let name = dir.file_name().map_or_else(|| "local".into(), |n| n.to_string_lossy().into_owned());
            Ok(Self { id: format!("local:{name}"), inner: Arc::new(Inner { model, tokenizer }) })
        }
    }

    impl Embedder for Local {
        fn id(&self) -> &str {
            &self.id
        }

        fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_> {
            let inner = self.inner.clone();
            Box::pin(async move {
                // CPU-bound: off the async workers.
                tokio::task::spawn_blocking(move || inner.embed_all(&texts))
                    .await
                    .map_err(|e| EmbedError::Inference(e.to_string()))?
            })
        }
    }

    impl Inner {
        fn embed_all(&self, texts: &[String]) -> Result<Vec<Vector>, EmbedError> {
            // A batch is padded to its longest text: batching texts of similar length wastes
            // far less compute than batching them in the order given.
            let mut order: Vec<usize> = (0..texts.len()).collect();
            order.sort_by_key(|&i| texts[i].len());
            let mut out = vec![Vector::new(); texts.len()];
            for batch in order.chunks(BATCH) {
                let batch_texts: Vec<String> = batch.iter().map(|&i| texts[i].clone()).collect();
                let vectors = self.embed_batch(&batch_texts).map_err(|e| EmbedError::Inference(e.to_string()))?;
                for (&i, vector) in batch.iter().zip(vectors) {
                    out[i] = vector;
                }
            }
            Ok(out)
        }

        fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vector>, Box<dyn std::error::Error + Send + Sync>> {
            let encodings = self.tokenizer.encode_batch(texts.to_vec(), true)?;
            let ids: Vec<Vec<u32>> = encodings.iter().map(|e| e.get_ids().to_vec()).collect();
            let masks: Vec<Vec<u32>> = encodings.iter().map(|e| e.get_attention_mask().to_vec()).collect();
            let device = &self.model.device;
            let input_ids = Tensor::new(ids, device)?;
            let attention_mask = Tensor::new(masks, device)?;
            let token_type_ids = input_ids.zeros_like()?;
            let hidden = self.model.forward(&input_ids, &token_type_ids, Some(&attention_mask))?;
            // Mean pooling over real (unpadded) tokens, as sentence-transformers does.
            let mask = attention_mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
            let pooled = summed.broadcast_div(&counts)?;
            Ok(pooled.to_vec2::<f32>()?.into_iter().map(normalise).collect())
        }
    }
}

/// Any OpenAI-compatible `/v1/embeddings` endpoint (`base_url`, `model`, key from the env).
pub struct OpenAi {
    id: String,
    http: reqwest::Client,
    url: reqwest::Url,
    model: String,
    key: Option<String>,
    batch: usize,
}

impl OpenAi {
    pub fn new(
        base_url: &reqwest::Url,
        model: &str,
        key: Option<String>,
        timeout: std::time::Duration,
    ) -> Result<Self, EmbedError> {
        let url = base_url.join("embeddings").map_err(|e| EmbedError::Service(e.to_string()))?;
        let http = crate::egress::client(&crate::egress::Options {
            peer: "embeddings",
            tls_verify: true,
            ca_bundle: None,
            connect_timeout: timeout,
            timeout: Some(timeout),
        })
        .map_err(EmbedError::Service)?;
        Ok(Self { id: format!("openai:{model}"), http, url, model: model.to_string(), key, batch: 64 })
    }
}

impl Embedder for OpenAi {
    fn id(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_> {
        Box::pin(async move {
            #[derive(serde::Deserialize)]
            struct Item {
                index: usize,
                embedding: Vector,
            }
            #[derive(serde::Deserialize)]
            struct Reply {
                data: Vec<Item>,
            }
            let mut out = Vec::with_capacity(texts.len());
            for batch in texts.chunks(self.batch) {
                let mut request = self.http.post(self.url.clone()).header("content-type", "application/json");
                if let Some(key) = &self.key {
                    request = request.bearer_auth(key);
                }
                let body = serde_json::json!({ "model": self.model, "input": batch });
                let response = request
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| EmbedError::Service(e.without_url().to_string()))?;
                if !response.status().is_success() {
                    return Err(EmbedError::Service(format!("HTTP {}", response.status())));
                }
                let bytes = response.bytes().await.map_err(|e| EmbedError::Service(e.without_url().to_string()))?;
                let mut reply: Reply =
                    serde_json::from_slice(&bytes).map_err(|e| EmbedError::Service(format!("reply: {e}")))?;
                if reply.data.len() != batch.len() {
                    return Err(EmbedError::Service(format!(
                        "asked for {} vectors, got {}",
                        batch.len(),
                        reply.data.len()
                    )));
                }
                reply.data.sort_by_key(|i| i.index);
                out.extend(reply.data.into_iter().map(|i| normalise(i.embedding)));
            }
            Ok(out)
        })
    }
}
