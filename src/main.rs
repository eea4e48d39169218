//! The `gatehouse` command: parse the CLI, load the config, run a subcommand.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gatehouse::config::{Config, Env};
use gatehouse::{gateway, telemetry};

#[derive(Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "An MCP gateway: routes, gates and guards tool calls"
)]
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let path = cli.config.clone().or_else(|| {
        ["GATEHOUSE_CONFIG", "PANDA_GATEWAY_CONFIG"]
            .iter()
            .find_map(|k| std::env::var_os(k).map(PathBuf::from))
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
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
