//! Gatehouse: one MCP endpoint in front of many MCP servers — routes, gates and guards every call.
//!
//! Crate map (dependency direction: front → pipeline → {upstream, catalog} → {protocol, error}):
//! - [`cli`]: the `gatehouse` command line (serve, check, tools, search, bench).
//! - [`config`]: TOML image (`RawConfig`) validated into typed [`config::Config`].
//! - [`egress`]: the one outbound HTTP client (TLS roots, no redirects, no proxy).
//! - [`error`]: [`error::GatewayError`], the one place errors become wire errors.
//! - [`protocol`]: JSON-RPC envelopes, MCP revisions and era detection, SSE framing.
//! - [`upstream`]: the MCP client toward each upstream (transport, era probe, sessions, state).
//! - [`evaluation`]: retrieval-quality benchmark over a tool catalog and gold queries.
//! - [`ranking`]: which tools fit a task (BM25, dense embeddings, hybrid fusion).
//! - [`store`]: durable state (contracts, audit) on SQLite or PostgreSQL, migrations embedded.
//! - [`catalog`]: aggregation, reversible namespacing, fingerprints, routing table.
//! - [`gate`]: the manifest an agent sees — byte-stable core plus task tail, session tails.
//! - [`contracts`]: trust-on-first-use tool contracts, drift quarantine and approval.
//! - [`policy`]: default-deny authorization (TOML rules and Cedar, on Cedar's authorizer).
//! - [`pipeline`]: `Pipeline::call_tool`, the ordered stages every tool call goes through.
//! - [`front`]: the agent-facing MCP server (Streamable HTTP both eras, stdio) and ops endpoints.
//! - [`simulation`]: the prompt-cache simulation benchmark (four tool-exposure policies).
//! - [`telemetry`]: logging setup and the Prometheus registry.
//! - [`gateway`]: wiring — builds the parts from a `Config` and runs them.

pub mod catalog;
pub mod cli;
pub mod config;
pub mod contracts;
pub mod egress;
pub mod error;
pub mod evaluation;
pub mod front;
pub mod gate;
pub mod gateway;
pub mod pipeline;
pub mod policy;
pub mod protocol;
pub mod ranking;
pub mod simulation;
pub mod store;
pub mod telemetry;
pub mod upstream;
