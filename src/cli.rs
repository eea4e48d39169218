//! The `gatehouse` command line: argument parsing and the subcommands that are not the server
//! itself (`check`, `tools`, `search`, `bench …`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::config::{Config, Env};
use crate::evaluation::{self, QueryRecord, ToolRecord};
use crate::{gate, gateway, telemetry};

#[derive(Parser)]
#[command(name = "gatehouse", version, about = "An MCP gateway: routes, gates and guards tool calls")]
struct Cli {
    /// Config file [env: GATEHOUSE_CONFIG, then PANDA_GATEWAY_CONFIG]
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Serve the agent side on stdin/stdout instead of HTTP
    #[arg(long, global = true)]
    stdio: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default)
    Serve,
    /// Validate the config and print the resolved plan
    Check,
    /// Print the tool manifest an agent would get (with a task: core + tail), with token counts
    Tools {
        #[arg(long)]
        task: Option<String>,
    },
    /// Rank the catalog's tools for a query, with scores
    Search {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Tool contracts: list them, show a drift, approve it
    #[command(subcommand)]
    Contracts(Contracts),
    /// Explain a policy decision: may PRINCIPAL call TOOL (a tool of the live catalog)?
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Read the audit log, newest first
    Audit {
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        tool: Option<String>,
        /// `ok` or an error class (`unknown_tool`, `contract_drift`, `upstream_error`, …)
        #[arg(long)]
        outcome: Option<String>,
        /// Only events this recent: `30s`, `15m`, `2h`, `7d`
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// One JSON object per line instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Issue an EdDSA JWT for testing or small deployments (signs with a PEM private key)
    Token {
        /// Ed25519 private key, PEM (`openssl genpkey -algorithm ed25519`)
        #[arg(long)]
        key: PathBuf,
        #[arg(long)]
        kid: String,
        #[arg(long)]
        issuer: String,
        #[arg(long)]
        audience: String,
        /// The principal (`sub`)
        #[arg(long)]
        subject: String,
        #[arg(long = "role")]
        roles: Vec<String>,
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime in seconds
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
    },
    /// Benchmarks that print their figures
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Decide one call and say which rules decided it
    Check {
        #[arg(long)]
        principal: String,
        #[arg(long)]
        tool: String,
        /// The principal's roles (repeatable)
        #[arg(long = "role")]
        roles: Vec<String>,
        /// The principal's scopes (repeatable)
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
}

#[derive(Subcommand)]
enum Contracts {
    /// Every pinned contract, with its version and whether a drift awaits approval
    List {
        /// One JSON object per contract (full fingerprints and definitions)
        #[arg(long)]
        json: bool,
    },
    /// What changed in a drifted tool's definition (pinned vs now)
    Diff { name: String },
    /// Accept a drifted tool's new definition as its contract (next major version)
    Approve { name: String },
}

#[derive(Subcommand)]
enum Bench {
    /// Retrieval quality (R@k, C@10, MRR@20, nDCG@10) on a tool/query dataset
    Retrieval {
        #[command(flatten)]
        data: Dataset,
        /// bm25, dense or hybrid (dense and hybrid need --model)
        #[arg(long, default_value = "bm25")]
        ranker: String,
        #[command(flatten)]
        model: Model,
        /// Hybrid: weight of the dense score (the rest is BM25's)
        #[arg(long, default_value_t = crate::ranking::DENSE_WEIGHT)]
        dense_weight: f32,
    },
    /// Prompt-cache simulation: tokens sent and cached per turn under four exposure policies
    Cache {
        #[command(flatten)]
        data: Dataset,
    },
    /// Relevance-floor statistics on the tuning half (gold vs other hits, irrelevance queries)
    TuneFloor {
        #[command(flatten)]
        data: Dataset,
        #[arg(long, default_value = "bench/data/bfcl/queries_irrelevance.jsonl")]
        irrelevant: PathBuf,
    },
    /// Grid search of hybrid fusion (dense weight, normalisation) on the tuning half
    TuneHybrid {
        #[command(flatten)]
        data: Dataset,
        #[command(flatten)]
        model: Model,
    },
    /// How far any mix of BM25, dense and hybrid could go (best per query, with hindsight), and
    /// where hybrid's misses rank
    Ceiling {
        #[command(flatten)]
        data: Dataset,
        #[command(flatten)]
        model: Model,
    },
    /// Grid search of BM25 field weights on the tuning half of a dataset
    TuneBm25 {
        #[command(flatten)]
        data: Dataset,
    },
}

/// A retrieval dataset in the layout of `bench/data/` (BFCL by default).
#[derive(clap::Args)]
struct Dataset {
    /// Tools, one JSON object a line ({"id", "name", "description", "inputSchema", ...})
    #[arg(long, default_value = "bench/data/bfcl/tools.jsonl")]
    tools: PathBuf,
    /// Queries with their gold tools, one JSON object a line ({"id", "query", "gold", "meta"})
    #[arg(long, default_value = "bench/data/bfcl/queries.jsonl")]
    queries: PathBuf,
}

#[derive(clap::Args)]
struct Model {
    /// Directory of the local embedding model (scripts/fetch-model puts it in .models/)
    #[arg(long = "model", default_value = ".models/all-minilm-l6-v2")]
    dir: PathBuf,
}

/// Parses the command line and runs it. Exit codes: 0 ok, 1 failure, 2 bad usage or config.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Bench(bench)) => return report(run_bench(bench), 2),
        Some(Command::Token { key, kid, issuer, audience, subject, roles, scopes, ttl }) => {
            return report(token(&key, kid, &issuer, &audience, &subject, (roles, scopes), ttl), 2);
        }
        _ => {}
    }
    let path = cli.config.clone().or_else(|| {
        ["GATEHOUSE_CONFIG", "PANDA_GATEWAY_CONFIG"].iter().find_map(|k| std::env::var_os(k).map(PathBuf::from))
    });
    let Some(path) = path else {
        eprintln!("gatehouse: no config file: pass --config PATH or set GATEHOUSE_CONFIG");
        return ExitCode::from(2);
    };
    let config = match Config::load(&path, &Env::Process) {
        Ok(config) => config,
        Err(errors) => {
            eprint!("gatehouse: {errors}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Serve) {
        Command::Check => report(check(&config, &path), 2),
        Command::Policy(PolicyCommand::Check { principal, tool, roles, scopes }) => {
            let principal = crate::pipeline::Principal {
                id: principal.as_str().into(),
                roles: roles.into(),
                scopes: scopes.into(),
            };
            report(with_catalog(&config, async |gw| explain(gw, &config, &principal, &tool)), 1)
        }
        Command::Serve => report(serve(config, cli.stdio).map(|()| String::new()), 1),
        Command::Tools { task } => report(with_catalog(&config, async |gw| tools(gw, task.as_deref()).await), 1),
        Command::Search { query, limit } => {
            report(with_catalog(&config, async |gw| search(gw, &query, limit).await), 1)
        }
        Command::Contracts(command) => report(contracts(&config, command), 1),
        Command::Audit { principal, tool, outcome, since, limit, json } => report(
            audit(&config, crate::store::AuditQuery { principal, tool, outcome, since_ms: None, limit }, since, json),
            1,
        ),
        Command::Bench(_) | Command::Token { .. } => unreachable!("handled before loading a config"),
    }
}

fn report(result: Result<String, impl std::fmt::Display>, failure: u8) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gatehouse: {e:#}");
            ExitCode::from(failure)
        }
    }
}

fn audit(config: &Config, mut query: crate::store::AuditQuery, since: Option<String>, json: bool) -> Result<String> {
    if let Some(since) = since {
        let (number, unit) = since.split_at(since.find(|c: char| !c.is_ascii_digit()).unwrap_or(since.len()));
        let seconds = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => bail!("--since {since:?}: expected a number and a unit, e.g. 30s, 15m, 2h, 7d"),
        };
        let number: i64 = number.parse().with_context(|| format!("--since {since:?}: expected e.g. 15m"))?;
        query.since_ms = Some(crate::store::now_ms() - number * seconds * 1000);
    }
    runtime()?.block_on(async {
        let store = crate::store::Store::open(&config.store.url)
            .await
            .with_context(|| format!("opening the store {}", crate::config::redact_url(&config.store.url)))?;
        let events = store.audit(&query).await?;
        let mut out = String::new();
        if json {
            for e in &events {
                let _ = writeln!(out, "{}", serde_json::to_string(e)?);
            }
            return Ok(out);
        }
        let _ = writeln!(
            out,
            "{:<13} {:<16} {:<36} {:<8} {:<20} {:>9}",
            "at_ms", "principal", "tool", "version", "outcome", "µs"
        );
        for e in &events {
            let _ = writeln!(
                out,
                "{:<13} {:<16} {:<36} {:<8} {:<20} {:>9}",
                e.at_ms,
                e.principal,
                e.tool,
                e.contract_version.as_deref().unwrap_or("-"),
                e.outcome,
                e.latency_us
            );
        }
        let _ = writeln!(out, "{} event(s)", events.len());
        Ok(out)
    })
}

/// `gatehouse token`: a signed EdDSA JWT with the claims Gatehouse checks.
fn token(
    key: &Path,
    kid: String,
    issuer: &str,
    audience: &str,
    subject: &str,
    (roles, scopes): (Vec<String>, Vec<String>),
    ttl: u64,
) -> Result<String> {
    let pem = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
    let key = jsonwebtoken::EncodingKey::from_ed_pem(&pem).context("--key: expected an Ed25519 private key in PEM")?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let claims = serde_json::json!({
        "iss": issuer, "aud": audience, "sub": subject, "iat": now, "exp": now + ttl,
        "roles": roles, "scope": scopes.join(" "),
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some(kid);
    Ok(format!("{}\n", jsonwebtoken::encode(&header, &claims, &key)?))
}

/// `gatehouse check`: the plan, after compiling the policy (its errors are config errors).
fn check(config: &Config, path: &Path) -> Result<String> {
    let policy = crate::policy::Policy::new(config.policy.as_ref(), config.mutating.clone())
        .map_err(|e| anyhow::anyhow!("invalid policy in {}: {e}", path.display()))?;
    let mut plan = crate::config::plan(config, path);
    let summary = match &config.policy {
        None => "none: every authenticated caller may call every tool".to_string(),
        Some(p) => format!(
            "default deny; {} rule(s){}",
            p.rules.len(),
            p.cedar.as_ref().map_or_else(String::new, |(f, _)| format!(" + Cedar from {}", f.display()))
        ),
    };
    debug_assert_eq!(policy.is_active(), config.policy.is_some());
    let _ = writeln!(plan, "policy: {summary}");
    Ok(plan)
}

fn explain(
    gateway: &gateway::Gateway,
    config: &Config,
    principal: &crate::pipeline::Principal,
    name: &str,
) -> Result<String> {
    let policy =
        crate::policy::Policy::new(config.policy.as_ref(), config.mutating.clone()).map_err(anyhow::Error::msg)?;
    let snapshot = gateway.front.catalog.snapshot();
    let Ok(tool) = snapshot.tool(name) else { bail!("no tool {name:?} in the live catalog (see `gatehouse tools`)") };
    let decision = policy.decide(principal, tool);
    let access = if policy.is_mutating(tool) { "a mutation" } else { "a read" };
    let why = if config.mutating.contains_key(name) {
        "[tools] override"
    } else if tool.definition.get("annotations").and_then(|a| a.get("readOnlyHint")).is_some() {
        "its readOnlyHint"
    } else {
        "no readOnlyHint: mutation assumed"
    };
    Ok(format!(
        "{}: {} may {}call {name} ({access}, by {why})\ndecided by: {}\n",
        if decision.allowed { "ALLOW" } else { "DENY" },
        principal.id,
        if decision.allowed { "" } else { "not " },
        decision.rule
    ))
}

fn contracts(config: &Config, command: Contracts) -> Result<String> {
    runtime()?.block_on(async {
        let store = crate::store::Store::open(&config.store.url)
            .await
            .with_context(|| format!("opening the store {}", crate::config::redact_url(&config.store.url)))?;
        let mut out = String::new();
        match command {
            Contracts::List { json: true } => {
                for c in store.contracts().await? {
                    let _ = writeln!(out, "{}", serde_json::to_string(&c)?);
                }
            }
            Contracts::List { json: false } => {
                let all = store.contracts().await?;
                let _ = writeln!(out, "{:<48} {:>8}  {:<14} status", "tool", "version", "fingerprint");
                for c in &all {
                    let status = if c.drift.is_some() { "DRIFTED: run `contracts diff`" } else { "pinned" };
                    let _ = writeln!(out, "{:<48} {:>8}  {:<14} {status}", c.exposed, c.version, &c.fingerprint[..12]);
                }
                let _ = writeln!(out, "{} contract(s)", all.len());
            }
            Contracts::Diff { name } => {
                let Some(c) = store.contract(&name).await? else {
                    bail!("no contract for {name:?} (see `contracts list`)")
                };
                let Some(drift) = &c.drift else {
                    bail!("{name} has not drifted: it matches its contract {}", c.version)
                };
                let pinned: serde_json::Value = serde_json::from_str(&c.definition)?;
                let now: serde_json::Value = serde_json::from_str(&drift.definition)?;
                let _ = writeln!(
                    out,
                    "{name}: pinned {} ({}) → now {}",
                    c.version,
                    &c.fingerprint[..12],
                    &drift.fingerprint[..12]
                );
                for line in json_diff(&pinned, &now, "") {
                    let _ = writeln!(out, "{line}");
                }
            }
            Contracts::Approve { name } => match crate::contracts::approve(&store, &name).await? {
                Some(version) => {
                    let _ = writeln!(
                        out,
                        "approved: {name} is now contract {version}; running gateways pick it up within seconds"
                    );
                }
                None if store.contract(&name).await?.is_some() => bail!("{name} has no pending drift to approve"),
                None => bail!("no contract for {name:?} (see `contracts list`)"),
            },
        }
        Ok(out)
    })
}

/// The leaves that differ between two JSON values, as `- path: old` / `+ path: new` lines.
fn json_diff(old: &serde_json::Value, new: &serde_json::Value, path: &str) -> Vec<String> {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .flat_map(|k| {
                    let path = format!("{path}/{k}");
                    match (a.get(k), b.get(k)) {
                        (Some(x), Some(y)) => json_diff(x, y, &path),
                        (Some(x), None) => vec![format!("- {path}: {x}")],
                        (None, Some(y)) => vec![format!("+ {path}: {y}")],
                        (None, None) => Vec::new(),
                    }
                })
                .collect()
        }
        (a, b) if a == b => Vec::new(),
        (a, b) => vec![
            format!("- {}: {a}", if path.is_empty() { "/" } else { path }),
            format!("+ {}: {b}", if path.is_empty() { "/" } else { path }),
        ],
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")
}

fn serve(config: Config, stdio: bool) -> Result<()> {
    telemetry::init_logging(config.gateway.log_format);
    runtime()?.block_on(async {
        let gateway = gateway::Gateway::start(&config).await?;
        if stdio {
            return gateway.serve_stdio().await.map_err(Into::into);
        }
        let (listener, addr) = gateway::bind(&config).await?;
        // One line on stdout says where we listen (port 0 picks one); everything else is logs.
        println!("gatehouse listening on http://{addr}{}", config.gateway.path);
        tracing::info!(%addr, path = %config.gateway.path, upstreams = config.upstreams.len(), "gatehouse serving");
        gateway.serve_http(listener, gateway::shutdown_signal()).await.map_err(Into::into)
    })
}

/// Connects to every upstream (bounded by `cold_start_wait`), waits for the catalog's
/// embeddings if an embedder is configured, runs `f` on the loaded catalog, then stops any
/// child processes.
fn with_catalog(config: &Config, f: impl AsyncFnOnce(&gateway::Gateway) -> Result<String>) -> Result<String> {
    runtime()?.block_on(async {
        let gateway = gateway::Gateway::start(config).await?;
        gateway.front.ready().await;
        let front = &gateway.front;
        let version = front.catalog.snapshot().version;
        if front.gate.indexing_of(version) == gate::Indexing::Loading {
            eprintln!("gatehouse: embedding the catalog for hybrid ranking…");
            let _ = front
                .gate
                .indexing()
                .wait_for(|s| match *s {
                    gate::Indexing::Ready { version: v } => v >= version,
                    s => s != gate::Indexing::Loading,
                })
                .await;
        }
        let out = f(&gateway).await;
        gateway.stop_upstreams().await;
        out
    })
}

async fn tools(gateway: &gateway::Gateway, task: Option<&str>) -> Result<String> {
    let front = &gateway.front;
    let view = front.gate.view(&front.catalog.snapshot());
    let settings = &front.gate.settings;
    let tail = match task {
        Some(task) => gate::canonical_order(
            front
                .gate
                .rank(&view, task, settings.tail_k, settings.floor, None)
                .await
                .into_iter()
                .map(|(i, _)| i)
                .collect(),
        ),
        None => Vec::new(),
    };
    let manifest = view.manifest(tail);
    let mut out = String::new();
    let _ = writeln!(out, "core ({} tools, hash {}):", view.core.len(), view.core_hash);
    for &i in &view.core {
        let _ = writeln!(out, "  {:<48} {:>6} tokens", view.entries[i].name, view.entries[i].tokens);
    }
    let _ = writeln!(out, "tail ({} tools):", manifest.tail.len());
    for &i in &manifest.tail {
        let _ = writeln!(out, "  {:<48} {:>6} tokens", view.entries[i].name, view.entries[i].tokens);
    }
    let ranking = match front.gate.indexing_of(view.version) {
        gate::Indexing::Ready { .. } => "hybrid (BM25 + embeddings)",
        gate::Indexing::Off => "BM25",
        gate::Indexing::Loading | gate::Indexing::Failing => "BM25 (the embedder failed: see the log)",
    };
    let _ = writeln!(out, "ranking: {ranking}");
    let _ = writeln!(
        out,
        "tokens (o200k): full catalog {} ({} tools), manifest {}, withheld {}{}",
        view.all_tokens,
        view.entries.len(),
        manifest.exposed_tokens,
        manifest.withheld_tokens,
        if settings.enabled { "" } else { "  [gating is off: agents get the full catalog]" }
    );
    Ok(out)
}

async fn search(gateway: &gateway::Gateway, query: &str, limit: usize) -> Result<String> {
    if limit == 0 {
        bail!("--limit must be at least 1");
    }
    let front = &gateway.front;
    let view = front.gate.view(&front.catalog.snapshot());
    let mut out = String::new();
    for (rank, (i, score)) in front.gate.rank(&view, query, limit, 0.0, None).await.into_iter().enumerate() {
        let found = view.found(i, score);
        let _ = writeln!(
            out,
            "{:>3}. {:<48} {:.3}  {}",
            rank + 1,
            found.name,
            found.score,
            found.description.lines().next().unwrap_or("")
        );
    }
    if out.is_empty() {
        out.push_str("no tool matches\n");
    }
    Ok(out)
}

fn run_bench(bench: Bench) -> Result<String, String> {
    let load = |data: &Dataset| -> Result<(Vec<ToolRecord>, Vec<QueryRecord>), String> {
        Ok((evaluation::read_jsonl(&data.tools)?, evaluation::read_jsonl(&data.queries)?))
    };
    match bench {
        Bench::Retrieval { data, ranker, model, dense_weight } => {
            let (tools, queries) = load(&data)?;
            let run = match ranker.as_str() {
                "bm25" => evaluation::run_lexical(&tools, &queries),
                "dense" | "hybrid" => {
                    let embedded = embed_dataset(&model.dir, &tools, &queries)?;
                    let weight = (ranker == "hybrid").then_some(dense_weight);
                    evaluation::run_embedded(&tools, &queries, &embedded, weight)
                }
                other => return Err(format!("--ranker {other:?}: expected bm25, dense or hybrid")),
            };
            Ok(format!("{} tools, {} queries\n{}", tools.len(), queries.len(), run.report(&ranker)))
        }
        Bench::Cache { data } => {
            let (tools, queries) = load(&data)?;
            Ok(crate::simulation::prompt_cache(&tools, &queries))
        }
        Bench::TuneFloor { data, irrelevant } => {
            let (tools, queries) = load(&data)?;
            let irrelevant: Vec<QueryRecord> = evaluation::read_jsonl(&irrelevant)?;
            Ok(evaluation::tune_floor(&tools, &queries, &irrelevant))
        }
        Bench::TuneHybrid { data, model } => {
            let (tools, queries) = load(&data)?;
            let embedded = embed_dataset(&model.dir, &tools, &queries)?;
            Ok(evaluation::tune_hybrid(&tools, &queries, &embedded))
        }
        Bench::Ceiling { data, model } => {
            let (tools, queries) = load(&data)?;
            let embedded = embed_dataset(&model.dir, &tools, &queries)?;
            Ok(evaluation::ceiling(&tools, &queries, &embedded))
        }
        Bench::TuneBm25 { data } => {
            let (tools, queries) = load(&data)?;
            Ok(evaluation::tune_weights(&tools, &queries))
        }
    }
}

#[cfg(feature = "local-embeddings")]
fn embed_dataset(model: &Path, tools: &[ToolRecord], queries: &[QueryRecord]) -> Result<evaluation::Embedded, String> {
    let embedder = crate::ranking::embed::Local::load(model).map_err(|e| format!("{e} (run scripts/fetch-model)"))?;
    // Vectors are kept beside the model, so reruns embed nothing.
    let cache = crate::ranking::cache::VectorCache::open(
        &model.join("vectors"),
        crate::ranking::embed::Embedder::id(&embedder),
    )
    .map_err(|e| e.to_string())?;
    runtime().map_err(|e| e.to_string())?.block_on(evaluation::embed_all(&embedder, &cache, tools, queries))
}

#[cfg(not(feature = "local-embeddings"))]
fn embed_dataset(_: &Path, _: &[ToolRecord], _: &[QueryRecord]) -> Result<evaluation::Embedded, String> {
    Err("this build has no local embedding model (feature local-embeddings)".into())
}
