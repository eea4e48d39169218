//! The `gatehouse` command: parse the CLI, load the config, run a subcommand.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gatehouse::config::{Config, Env};
use gatehouse::{gateway, telemetry};

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
    /// Benchmarks that print their figures
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// Retrieval quality (R@k, C@10, MRR@20, nDCG@10) on a tool/query dataset
    Retrieval {
        #[arg(long, default_value = "bench/data/bfcl/tools.jsonl")]
        tools: PathBuf,
        #[arg(long, default_value = "bench/data/bfcl/queries.jsonl")]
        queries: PathBuf,
        #[arg(long, default_value = "bm25")]
        ranker: String,
    },
    /// Relevance-floor statistics on the tuning half (gold vs other hits, irrelevance queries)
    TuneFloor {
        #[arg(long, default_value = "bench/data/bfcl/tools.jsonl")]
        tools: PathBuf,
        #[arg(long, default_value = "bench/data/bfcl/queries.jsonl")]
        queries: PathBuf,
        #[arg(long, default_value = "bench/data/bfcl/queries_irrelevance.jsonl")]
        irrelevant: PathBuf,
    },
    /// Grid search of BM25 field weights on the tuning half of a dataset
    TuneBm25 {
        #[arg(long, default_value = "bench/data/bfcl/tools.jsonl")]
        tools: PathBuf,
        #[arg(long, default_value = "bench/data/bfcl/queries.jsonl")]
        queries: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Bench(bench)) = cli.command {
        return match run_bench(bench) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("gatehouse: {e}");
                ExitCode::from(2)
            }
        };
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
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Check => {
            print!("{}", gatehouse::config::plan(&config, &path));
            Ok(())
        }
        Command::Serve => serve(config, cli.stdio),
        Command::Bench(_) => unreachable!("handled before loading a config"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config, stdio: bool) -> Result<()> {
    telemetry::init_logging(config.gateway.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(async {
        let gateway = gateway::Gateway::start(&config)?;
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

fn run_bench(bench: Bench) -> Result<String, String> {
    use gatehouse::evaluation::{self, QueryRecord, ToolRecord};
    match bench {
        Bench::Retrieval { tools, queries, ranker } => {
            let tools: Vec<ToolRecord> = evaluation::read_jsonl(&tools)?;
            let queries: Vec<QueryRecord> = evaluation::read_jsonl(&queries)?;
            let run = match ranker.as_str() {
                "bm25" => evaluation::run_lexical(&tools, &queries),
                other => return Err(format!("--ranker {other:?}: expected bm25")),
            };
            Ok(format!("{} tools, {} queries\n{}", tools.len(), queries.len(), run.report(&ranker)))
        }
        Bench::TuneFloor { tools, queries, irrelevant } => {
            let tools: Vec<ToolRecord> = evaluation::read_jsonl(&tools)?;
            let queries: Vec<QueryRecord> = evaluation::read_jsonl(&queries)?;
            let irrelevant: Vec<QueryRecord> = evaluation::read_jsonl(&irrelevant)?;
            Ok(evaluation::tune_floor(&tools, &queries, &irrelevant))
        }
        Bench::TuneBm25 { tools, queries } => {
            let tools: Vec<ToolRecord> = evaluation::read_jsonl(&tools)?;
            let queries: Vec<QueryRecord> = evaluation::read_jsonl(&queries)?;
            Ok(evaluation::tune_weights(&tools, &queries))
        }
    }
}
