//! `tools/list` through the gate, and Gatehouse's own tools (`gateway__search_tools`,
//! `gateway__call_tool`).

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{Ctx, Era, Front, Reply};
use crate::error::{FieldError, GatewayError};
use crate::gate::tails::ConversationKey;
use crate::gate::{self, View};
use crate::protocol::jsonrpc::{self, parse_params};
use crate::protocol::meta;

/// Task hint keys on `tools/list` (`penumbra/task` is the gating seed's name).
const TASK_KEYS: [&str; 2] = ["gatehouse/task", "penumbra/task"];
const CONVERSATION_KEY: &str = "gatehouse/conversation";

#[derive(Deserialize, Default)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
    #[serde(rename = "_meta", default)]
    meta: Map<String, Value>,
}

impl Front {
    /// The gated listing: core, then the tail for the task hint (and the conversation's
    /// earlier tools). Without a hint: the core (plus the conversation's tail, if any); with
    /// gating off: everything.
    pub(super) async fn list_tools(&self, ctx: &Ctx, params: Option<&RawValue>) -> Result<Reply, GatewayError> {
        let ListParams { cursor, meta } = parse_params(params)?;
        if cursor.is_some() {
            return Err(invalid("params.cursor", "unknown cursor: lists are served as a single page"));
        }
        self.warm_up().await;
        let snapshot = self.catalog.snapshot();
        let view = self.gate.view(&snapshot);
        // Under a policy, a principal sees only what it may call.
        let visible = self.gate.visibility(&view, &snapshot, &ctx.principal);
        let visible = visible.as_deref();
        let settings = &self.gate.settings;
        if !settings.enabled {
            let full = visible.map_or_else(|| view.full_json.clone(), |v| v.full_json.clone());
            return Ok(self.tools_reply(ctx, vec![full], visible.is_some()));
        }
        let task = TASK_KEYS.iter().find_map(|k| meta.get(*k)).and_then(Value::as_str).filter(|t| !t.trim().is_empty());
        let conversation = self.conversation(ctx, &meta);
        let picks: Vec<usize> = match task {
            Some(task) => self
                .gate
                .rank(&view, task, settings.tail_k, settings.floor, visible)
                .await
                .into_iter()
                .map(|(i, _)| i)
                .collect(),
            None => Vec::new(),
        };
        let tail = match &conversation {
            Some(key) => self.stable_tail(&view, key, gate::canonical_order(picks), visible),
            None => gate::canonical_order(picks),
        };
        let manifest = view.manifest_for(tail, visible);
        let core_len = visible.map_or(view.core.len(), |v| v.core.len());
        let exposed = core_len + manifest.tail.len();
        self.metrics.gated(exposed, view.entries.len() - exposed, manifest.withheld_tokens);
        // A list that depends on the request (task, conversation, caller) must not be shared.
        let personal = task.is_some() || conversation.is_some() || visible.is_some();
        Ok(self.tools_reply(ctx, view.render_for(&manifest.tail, visible), personal))
    }

    fn tools_reply(&self, ctx: &Ctx, tools: Vec<Bytes>, personal: bool) -> Reply {
        let mut chunks = Vec::with_capacity(tools.len() + 2);
        chunks.push(Bytes::from_static(b"{\"tools\":"));
        chunks.extend(tools);
        let mut tail = String::with_capacity(160);
        if ctx.era == Era::Modern {
            let (ttl, scope) = if personal { (0, "private") } else { (self.settings.list_ttl.as_millis(), "public") };
            let _ = write!(
                tail,
                ",\"resultType\":\"complete\",\"ttlMs\":{ttl},\"cacheScope\":\"{scope}\",\"_meta\":{{\"{}\":{}}}",
                meta::SERVER_INFO,
                self.server_info
            );
        }
        tail.push('}');
        chunks.push(Bytes::from(tail));
        Reply::Chunks(chunks)
    }

    /// The conversation a request belongs to: a legacy session, or for 2026-07-28 an explicit
    /// `_meta["gatehouse/conversation"]` or W3C baggage `session.id` — scoped to the principal.
    fn conversation(&self, ctx: &Ctx, meta: &Map<String, Value>) -> Option<ConversationKey> {
        let id = match &ctx.session {
            Some(session) => Some(session.id.to_string()),
            None => meta
                .get(CONVERSATION_KEY)
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| ctx.baggage_session.clone()),
        }?;
        Some((ctx.principal.id.clone(), id))
    }

    /// Appends `picks` to the conversation's tail and returns the tail's entries in order.
    fn stable_tail(
        &self,
        view: &View,
        key: &ConversationKey,
        picks: Vec<usize>,
        visible: Option<&gate::Visibility>,
    ) -> Vec<usize> {
        let names: Vec<String> = picks.iter().map(|&i| view.entries[i].name.to_string()).collect();
        self.tails
            .extend(key, &names)
            .iter()
            // A tool that left the catalog leaves the tail; the rest keep their places.
            .filter_map(|n| view.index_of(n))
            .filter(|&i| !view.is_core(i) && visible.is_none_or(|v| v.allows(i)))
            .collect()
    }

    /// `gateway__search_tools` / `gateway__call_tool`, or None for any other name.
    pub(super) async fn own_tool(
        &self,
        ctx: &Ctx,
        name: &str,
        arguments: Value,
    ) -> Option<Result<Box<RawValue>, GatewayError>> {
        if self.gate.search_enabled && name == self.gate.own_tool(gate::SEARCH_TOOL) {
            return Some(self.search_tools(ctx, arguments).await);
        }
        if self.gate.settings.enabled && name == self.gate.own_tool(gate::CALL_TOOL) {
            return Some(self.call_through(ctx, arguments).await);
        }
        None
    }

    async fn search_tools(&self, ctx: &Ctx, arguments: Value) -> Result<Box<RawValue>, GatewayError> {
        #[derive(Deserialize)]
        struct Search {
            query: String,
            #[serde(default = "default_limit")]
            limit: usize,
        }
        fn default_limit() -> usize {
            8
        }
        let Search { query, limit } = parse_arguments(arguments)?;
        if !(1..=50).contains(&limit) {
            return Err(invalid("params.arguments.limit", "expected an integer from 1 to 50"));
        }
        let snapshot = self.catalog.snapshot();
        let view = self.gate.view(&snapshot);
        let visible = self.gate.visibility(&view, &snapshot, &ctx.principal);
        let hits = self.gate.rank(&view, &query, limit, 0.0, visible.as_deref()).await;
        let found: Vec<gate::Found> = hits.iter().map(|&(i, score)| view.found(i, score)).collect();
        // Found tools join the session's tail, and the agent is told its list changed, so
        // clients that re-list see them and keep them.
        if let (Some(session), false) = (&ctx.session, hits.is_empty()) {
            let key = (ctx.principal.id.clone(), session.id.to_string());
            let names: Vec<String> = found.iter().map(|f| f.name.clone()).collect();
            self.tails.extend(&key, &names);
            session.notify(&jsonrpc::notification_bytes("notifications/tools/list_changed", &json!({})));
        }
        let structured = json!({ "tools": found });
        let text = serde_json::to_string_pretty(&structured).map_err(GatewayError::internal)?;
        Ok(self.finish(
            ctx,
            json!({ "content": [{ "type": "text", "text": text }], "structuredContent": structured, "isError": false }),
        ))
    }

    /// `gateway__call_tool`: calls any catalog tool, for clients that never re-list.
    /// (call_tool → tools/call → call_tool is a recursion, so the future is boxed.)
    fn call_through<'a>(&'a self, ctx: &'a Ctx, arguments: Value) -> BoxedCall<'a> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Call {
                name: String,
                #[serde(default)]
                arguments: Option<Value>,
            }
            let Call { name, arguments } = parse_arguments(arguments)?;
            if name == self.gate.own_tool(gate::CALL_TOOL) {
                return Err(invalid("params.arguments.name", "call_tool cannot call itself"));
            }
            let mut params = Map::new();
            params.insert("name".into(), Value::String(name));
            params.insert("arguments".into(), arguments.unwrap_or_else(|| json!({})));
            let raw = jsonrpc::raw(&Value::Object(params));
            self.tools_call(ctx, Some(&raw)).await
        })
    }
}

type BoxedCall<'a> = Pin<Box<dyn Future<Output = Result<Box<RawValue>, GatewayError>> + Send + 'a>>;

fn parse_arguments<T: for<'de> Deserialize<'de>>(arguments: Value) -> Result<T, GatewayError> {
    let raw = jsonrpc::raw(&arguments);
    parse_params(Some(&raw)).map_err(|e| match e {
        GatewayError::InvalidParams(f) => invalid(&f.path.replacen("params", "params.arguments", 1), &f.rule),
        other => other,
    })
}

fn invalid(path: &str, rule: &str) -> GatewayError {
    GatewayError::InvalidParams(FieldError { path: path.into(), rule: rule.into() })
}
