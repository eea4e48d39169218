//! Wiring: builds upstreams, catalog, pipeline and front door from a [`Config`] and runs them.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::catalog::{Catalog, Namer};
use crate::config::{Config, EmbeddingConfig};
use crate::contracts::{self, Contracts};
use crate::front::{self, Front};
use crate::gate;
use crate::pipeline::Principal;
use crate::policy::Policy;
use crate::ranking::cache::VectorCache;
use crate::ranking::embed::Embedder;
use crate::ranking::semantic::Semantic;
use crate::store::Store;
use crate::telemetry::Metrics;
use crate::upstream::{self, Upstream};

/// How long open connections (SSE streams never end on their own) get after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("upstream {namespace}: {reason}")]
    Upstream { namespace: String, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("serving failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error("policy: {0}")]
    Policy(String),
    #[error("store {url}: {source}")]
    Store { url: String, source: crate::store::StoreError },
}

/// A built gateway whose background tasks (upstream supervisors, notification fan-out) run.
pub struct Gateway {
    pub front: Arc<Front>,
    stdio_principal: Principal,
}

impl Gateway {
    pub async fn start(config: &Config) -> Result<Self, StartError> {
        let store_error = |source| StartError::Store { url: crate::config::redact_url(&config.store.url), source };
        let store = Store::open(&config.store.url).await.map_err(store_error)?;
        let audit_key = store.secret(crate::pipeline::audit::HASH_KEY).await.map_err(store_error)?;
        let policies = config.upstreams.iter().map(|u| (u.namespace.clone(), u.drift)).collect();
        // Pins are loaded before anything is served, so a drifted tool is refused from the start.
        let namer = Namer::new(&config.gateway.separator, config.prefixed());
        let versioned = config.upstreams.iter().filter(|u| u.expose_versions).map(|u| u.namespace.clone()).collect();
        let contracts = Arc::new(
            Contracts::load(store, policies, &config.contracts, &namer, versioned).await.map_err(store_error)?,
        );
        let metrics = Arc::new(Metrics::new());
        let max_response = config.gateway.max_response_bytes;
        let upstreams: Vec<Arc<Upstream>> = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| {
                Upstream::new(i, u.clone(), max_response, metrics.clone())
                    .map(Arc::new)
                    .map_err(|reason| StartError::Upstream { namespace: u.namespace.clone(), reason })
            })
            .collect::<Result<_, _>>()?;
        let upstreams: Arc<[Arc<Upstream>]> = upstreams.into();
        let catalog = Arc::new(Catalog::new(namer, config.upstreams.iter().map(|u| u.namespace.clone()).collect()));

        let mut first_loads = Vec::new();
        for upstream in upstreams.iter() {
            let (tx, rx) = watch::channel(false);
            first_loads.push(rx);
            // The catalog is never staler than manifest_ttl, nor probed less than probe_interval.
            let refresh = config.gateway.manifest_ttl.min(upstream.config.probe_interval);
            tokio::spawn(upstream::supervise(upstream.clone(), catalog.clone(), refresh, tx));
        }
        let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel::<Arc<str>>();
        let policy =
            Arc::new(Policy::new(config.policy.as_ref(), config.mutating.clone()).map_err(StartError::Policy)?);
        if !policy.is_active() {
            tracing::warn!("no [policy]: every authenticated caller may call every tool");
        }
        let parts = front::Parts {
            catalog: catalog.clone(),
            upstreams,
            first_loads,
            metrics,
            ended_sessions: ended_tx,
            contracts: contracts.clone(),
            policy,
            audit_key,
        };
        let front = Arc::new(Front::new(config, parts));
        // Ended agent sessions release their resource subscriptions and close their per-client
        // upstream sessions.
        let ended = front.clone();
        tokio::spawn(async move {
            while let Some(id) = ended_rx.recv().await {
                front::release_subscriptions(&ended, &id).await;
                for upstream in ended.upstreams.iter() {
                    upstream.end_session(&id).await;
                }
            }
        });
        for upstream in 0..front.upstreams.len() {
            tokio::spawn(front::fan_out_resource_updates(front.clone(), upstream));
        }
        tokio::spawn(contracts::keep_reconciled(contracts, catalog.clone()));
        if let Some(load) = embedder_loader(config, front.contracts.store().clone()) {
            // Loading from here on, so nobody sees "off" before the task runs.
            front.gate.mark_loading();
            tokio::spawn(gate::keep_indexed(front.gate.clone(), catalog, load));
        }
        tokio::spawn(front::fan_out_list_changed(front.clone()));
        let sweeper = front.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(60));
            loop {
                every.tick().await;
                let n = sweeper.sessions.sweep();
                if n > 0 {
                    tracing::debug!(expired = n, "idle sessions expired");
                }
            }
        });
        Ok(Self { front, stdio_principal: Principal::from_spec(&config.auth.stdio) })
    }

    /// Serves Streamable HTTP on `listener` until `shutdown` resolves.
    pub async fn serve_http(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        if let Ok(addr) = listener.local_addr() {
            self.front.set_listen_addr(addr);
        }
        let app = front::http::router(self.front.clone());
        // Small JSON-RPC answers must not wait for Nagle's algorithm.
        let listener = listener.tap_io(|stream| {
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        });
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        });
        let mut server = std::pin::pin!(server.into_future());
        tokio::select! {
            result = &mut server => return result.map_err(StartError::Serve),
            () = shutdown => {}
        }
        tracing::info!("shutting down: no new connections; open streams get {SHUTDOWN_GRACE:?}");
        let _ = stop_tx.send(true);
        let served = match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
            Ok(result) => result.map_err(StartError::Serve),
            Err(_) => Ok(()),
        };
        self.stop_upstreams().await;
        self.front.pipeline.audit.flush().await;
        served
    }

    pub async fn serve_stdio(&self) -> Result<(), StartError> {
        let served =
            front::stdio::serve(self.front.clone(), self.stdio_principal.clone()).await.map_err(StartError::Serve);
        self.stop_upstreams().await;
        self.front.pipeline.audit.flush().await;
        served
    }

    /// Stops every child process (stdio upstreams), so none outlives the gateway.
    pub async fn stop_upstreams(&self) {
        let stops = self.front.upstreams.iter().map(|u| u.shutdown());
        futures_util::future::join_all(stops).await;
    }
}

/// What loads the configured embedder (and its vector cache), or None for BM25 alone. Loading
/// a local model reads ~90 MB and runs on a blocking thread, after start-up.
fn embedder_loader(
    config: &Config,
    store: Store,
) -> Option<impl FnOnce() -> Result<Semantic, String> + Send + 'static> {
    let embedding = config.embedding.clone();
    if config.rag.persist_dir.is_some() && !matches!(embedding, EmbeddingConfig::None) {
        tracing::info!("tool embeddings are kept in the store; [rag] persist_dir is no longer used for them");
    }
    // The loader runs on a blocking thread; the store is read through the runtime from there.
    let runtime = tokio::runtime::Handle::current();
    type LoadEmbedder = Box<dyn FnOnce() -> Result<Arc<dyn Embedder>, String> + Send>;
    let (embedder, query_cache, query_timeout): (LoadEmbedder, _, _) = match embedding {
        EmbeddingConfig::None => return None,
        #[cfg(feature = "local-embeddings")]
        EmbeddingConfig::Local { model_dir, query_cache } => (
            Box::new(move || {
                crate::ranking::embed::Local::load(&model_dir)
                    .map(|e| Arc::new(e) as Arc<dyn Embedder>)
                    .map_err(|e| format!("{e} (run scripts/fetch-model)"))
            }),
            query_cache,
            // A local model answers in milliseconds; anything slower means an overloaded CPU.
            Duration::from_secs(2),
        ),
        #[cfg(not(feature = "local-embeddings"))]
        EmbeddingConfig::Local { .. } => return None,
        EmbeddingConfig::OpenAi { base_url, model, api_key, timeout, query_cache } => (
            Box::new(move || {
                crate::ranking::embed::OpenAi::new(&base_url, &model, api_key.map(|k| k.expose().to_string()), timeout)
                    .map(|e| Arc::new(e) as Arc<dyn Embedder>)
                    .map_err(|e| e.to_string())
            }),
            query_cache,
            timeout,
        ),
    };
    Some(move || {
        let embedder = embedder()?;
        let cache = runtime.block_on(VectorCache::in_store(store, embedder.id())).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read stored embeddings; re-embedding, vectors kept in memory");
            VectorCache::memory()
        });
        Ok(Semantic::new(embedder, cache, query_cache, query_timeout))
    })
}

/// Binds the configured address.
pub async fn bind(config: &Config) -> Result<(TcpListener, SocketAddr), StartError> {
    let addr = format!("{}:{}", config.gateway.host, config.gateway.port);
    let listener = TcpListener::bind(&addr).await.map_err(|source| StartError::Bind { addr: addr.clone(), source })?;
    let local = listener.local_addr().map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, local))
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
