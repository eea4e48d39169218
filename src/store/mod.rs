//! Durable state behind one API: SQLite (the embedded default, a file; in-memory for tests) or
//! PostgreSQL (so several gateway replicas share state). Migrations are embedded per engine and
//! run on open. Holds tool contracts and the audit log.
//!
//! Knows nothing of MCP or the pipeline: it stores and returns records.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store URL: {0}")]
    Url(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// One engine or the other; SQL is written once with `$n` placeholders, which both accept.
#[derive(Clone)]
pub enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs the same query code on whichever pool the store holds.
macro_rules! on_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match $store {
            Store::Sqlite($pool) => $body,
            Store::Postgres($pool) => $body,
        }
    };
}

/// A pinned tool contract.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Contract {
    pub namespace: String,
    pub tool: String,
    pub exposed: String,
    pub version: String,
    pub fingerprint: String,
    pub definition: String,
    /// A changed definition seen since, awaiting approval.
    pub drift: Option<Drift>,
    pub pinned_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Drift {
    pub fingerprint: String,
    pub definition: String,
}

type ContractRow = (String, String, String, String, String, String, Option<String>, Option<String>, i64, i64);

fn contract(row: ContractRow) -> Contract {
    let (namespace, tool, exposed, version, fingerprint, definition, drift_fp, drift_def, pinned_ms, updated_ms) = row;
    let drift = match (drift_fp, drift_def) {
        (Some(fingerprint), Some(definition)) => Some(Drift { fingerprint, definition }),
        _ => None,
    };
    Contract { namespace, tool, exposed, version, fingerprint, definition, drift, pinned_ms, updated_ms }
}

const CONTRACT_COLUMNS: &str = "namespace, tool, exposed, version, fingerprint, definition, drift_fingerprint, \
                                drift_definition, pinned_ms, updated_ms";

/// One payload-free audit record of a tool call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEvent {
    pub at_ms: i64,
    pub principal: String,
    pub tool: String,
    pub contract_version: Option<String>,
    pub fingerprint: Option<String>,
    /// `allow` or `deny`.
    pub decision: String,
    pub rule: Option<String>,
    /// `ok` or the error class.
    pub outcome: String,
    pub latency_us: i64,
    pub args_hash: Option<String>,
    pub trace_id: Option<String>,
}

type AuditRow = (
    i64,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    String,
    i64,
    Option<String>,
    Option<String>,
);

/// Which audit events to read (every filter optional), newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub principal: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    pub since_ms: Option<i64>,
    pub limit: i64,
}

impl Store {
    /// Opens (creating a SQLite file if needed) and migrates. `sqlite://PATH`, `sqlite::memory:`
    /// or `postgres://…`.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let store = if url.starts_with("sqlite:") {
            if let Some(parent) = url.strip_prefix("sqlite://").map(std::path::Path::new).and_then(|p| p.parent()) {
                if !parent.as_os_str().is_empty() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| StoreError::Url(format!("cannot create the database directory: {e}")))?;
                }
            }
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                // Readers (the CLI) never block the gateway's writer.
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(5));
            // An in-memory database exists per connection: keep exactly one.
            let max = if url.contains(":memory:") { 1 } else { 4 };
            Store::Sqlite(SqlitePoolOptions::new().max_connections(max).connect_with(options).await?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Store::Postgres(
                PgPoolOptions::new().max_connections(8).acquire_timeout(Duration::from_secs(5)).connect(url).await?,
            )
        } else {
            return Err(StoreError::Url("expected sqlite://PATH, sqlite::memory: or postgres://…".into()));
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(pool) => sqlx::migrate!("migrations/sqlite").run(pool).await?,
            Store::Postgres(pool) => sqlx::migrate!("migrations/postgres").run(pool).await?,
        }
        Ok(())
    }

    pub fn engine(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    pub async fn contracts(&self) -> Result<Vec<Contract>, StoreError> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {CONTRACT_COLUMNS} FROM contracts ORDER BY exposed"));
        let rows: Vec<ContractRow> = on_pool!(self, |pool| sqlx::query_as(sql).fetch_all(pool).await?);
        Ok(rows.into_iter().map(contract).collect())
    }

    pub async fn contract(&self, exposed: &str) -> Result<Option<Contract>, StoreError> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE exposed = $1"));
        let row: Option<ContractRow> =
            on_pool!(self, |pool| sqlx::query_as(sql).bind(exposed).fetch_optional(pool).await?);
        Ok(row.map(contract))
    }

    /// Pins a contract unless one exists for the tool (another replica may have pinned it
    /// first: theirs stands). Returns whether this call pinned it.
    pub async fn pin(&self, c: &Contract) -> Result<bool, StoreError> {
        Ok(self.pin_all(std::slice::from_ref(c)).await? == 1)
    }

    /// [`Store::pin`] for many, in one transaction (a new upstream brings its whole catalog at
    /// once). Returns how many were pinned.
    pub async fn pin_all(&self, contracts: &[Contract]) -> Result<u64, StoreError> {
        const SQL: &str = "INSERT INTO contracts (namespace, tool, exposed, version, fingerprint, definition, \
                           pinned_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                           ON CONFLICT (namespace, tool) DO NOTHING";
        let pinned = on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let mut pinned = 0;
            for c in contracts {
                pinned += sqlx::query(SQL)
                    .bind(&c.namespace)
                    .bind(&c.tool)
                    .bind(&c.exposed)
                    .bind(&c.version)
                    .bind(&c.fingerprint)
                    .bind(&c.definition)
                    .bind(c.pinned_ms)
                    .bind(c.updated_ms)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            pinned
        });
        Ok(pinned)
    }

    /// Records a changed definition for approval (the pinned one stays in force).
    pub async fn record_drift(
        &self,
        namespace: &str,
        tool: &str,
        drift: &Drift,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE contracts SET drift_fingerprint = $1, drift_definition = $2, updated_ms = $3 \
                           WHERE namespace = $4 AND tool = $5 \
                           AND (drift_fingerprint IS NULL OR drift_fingerprint <> $1)";
        on_pool!(self, |pool| {
            sqlx::query(SQL)
                .bind(&drift.fingerprint)
                .bind(&drift.definition)
                .bind(now_ms)
                .bind(namespace)
                .bind(tool)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Replaces the pinned definition of (namespace, tool) — an approved drift, `drift =
    /// "accept"`, a declared contract — and clears any pending drift, at `version`.
    pub async fn repin(
        &self,
        (namespace, tool): (&str, &str),
        version: &str,
        pinned: &Drift,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE contracts SET version = $1, fingerprint = $2, definition = $3, \
                           drift_fingerprint = NULL, drift_definition = NULL, pinned_ms = $4, updated_ms = $4 \
                           WHERE namespace = $5 AND tool = $6";
        let done = on_pool!(self, |pool| sqlx::query(SQL)
            .bind(version)
            .bind(&pinned.fingerprint)
            .bind(&pinned.definition)
            .bind(now_ms)
            .bind(namespace)
            .bind(tool)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(done > 0)
    }

    /// The contract of the upstream's own (namespace, tool), whatever it is exposed as.
    pub async fn contract_of(&self, namespace: &str, tool: &str) -> Result<Option<Contract>, StoreError> {
        let sql =
            sqlx::AssertSqlSafe(format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE namespace = $1 AND tool = $2"));
        let row: Option<ContractRow> =
            on_pool!(self, |pool| sqlx::query_as(sql).bind(namespace).bind(tool).fetch_optional(pool).await?);
        Ok(row.map(contract))
    }

    /// Records the name a contract's tool is exposed as now (prefix mode or separator changed).
    pub async fn rename(&self, namespace: &str, tool: &str, exposed: &str) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE contracts SET exposed = $1 WHERE namespace = $2 AND tool = $3";
        on_pool!(self, |pool| {
            sqlx::query(SQL).bind(exposed).bind(namespace).bind(tool).execute(pool).await?;
        });
        Ok(())
    }

    /// The latest change to any contract (cheap to poll: approvals come from other processes).
    pub async fn contracts_changed_ms(&self) -> Result<i64, StoreError> {
        const SQL: &str = "SELECT COALESCE(MAX(updated_ms), 0) FROM contracts";
        let (ms,): (i64,) = on_pool!(self, |pool| sqlx::query_as(SQL).fetch_one(pool).await?);
        Ok(ms)
    }

    /// Every stored vector of `model`: (text hash, little-endian f32 bytes).
    pub async fn embeddings(&self, model: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        const SQL: &str = "SELECT key, vector FROM embeddings WHERE model = $1";
        Ok(on_pool!(self, |pool| sqlx::query_as(SQL).bind(model).fetch_all(pool).await?))
    }

    /// Stores vectors (an existing one for the same text stays: it is the same vector).
    pub async fn put_embeddings(&self, model: &str, items: &[(Vec<u8>, Vec<u8>)]) -> Result<(), StoreError> {
        const SQL: &str =
            "INSERT INTO embeddings (model, key, vector) VALUES ($1, $2, $3) ON CONFLICT (model, key) DO NOTHING";
        on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            for (key, vector) in items {
                sqlx::query(SQL).bind(model).bind(key).bind(vector).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// A random 32-byte secret by name, created on first use; every replica gets the same one.
    pub async fn secret(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        const INSERT: &str = "INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
        const SELECT: &str = "SELECT value FROM secrets WHERE name = $1";
        let fresh: [u8; 32] = rand::random();
        let (value,): (Vec<u8>,) = on_pool!(self, |pool| {
            sqlx::query(INSERT).bind(name).bind(&fresh[..]).execute(pool).await?;
            sqlx::query_as(SELECT).bind(name).fetch_one(pool).await?
        });
        Ok(value)
    }

    /// Appends audit events in one transaction.
    pub async fn append_audit(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO audit_events (at_ms, principal, tool, contract_version, fingerprint, \
                           decision, rule, outcome, latency_us, args_hash, trace_id) \
                           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
        on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            for e in events {
                sqlx::query(SQL)
                    .bind(e.at_ms)
                    .bind(&e.principal)
                    .bind(&e.tool)
                    .bind(&e.contract_version)
                    .bind(&e.fingerprint)
                    .bind(&e.decision)
                    .bind(&e.rule)
                    .bind(&e.outcome)
                    .bind(e.latency_us)
                    .bind(&e.args_hash)
                    .bind(&e.trace_id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    pub async fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>, StoreError> {
        // NULL filters match everything, so one statement serves every combination.
        const SQL: &str = "SELECT at_ms, principal, tool, contract_version, fingerprint, decision, rule, outcome, \
                           latency_us, args_hash, trace_id FROM audit_events \
                           WHERE ($1 IS NULL OR principal = $1) AND ($2 IS NULL OR tool = $2) \
                           AND ($3 IS NULL OR outcome = $3) AND ($4 IS NULL OR at_ms >= $4) \
                           ORDER BY at_ms DESC, id DESC LIMIT $5";
        let rows: Vec<AuditRow> = on_pool!(self, |pool| sqlx::query_as(SQL)
            .bind(&q.principal)
            .bind(&q.tool)
            .bind(&q.outcome)
            .bind(q.since_ms)
            .bind(q.limit.max(1))
            .fetch_all(pool)
            .await?);
        Ok(rows
            .into_iter()
            .map(|r| AuditEvent {
                at_ms: r.0,
                principal: r.1,
                tool: r.2,
                contract_version: r.3,
                fingerprint: r.4,
                decision: r.5,
                rule: r.6,
                outcome: r.7,
                latency_us: r.8,
                args_hash: r.9,
                trace_id: r.10,
            })
            .collect())
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests;
