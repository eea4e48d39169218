//! The MCP methods Gatehouse serves: listings from the cached catalog, and the proxied calls
//! routed by exposed name or URI.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use bytes::Bytes;

use super::session::Session;
use super::{Ctx, Era, Front, List, Reply};
use crate::catalog::Route;
use crate::error::{FieldError, GatewayError};
use crate::pipeline::{CallRequest, miss_error};
use crate::protocol::jsonrpc::{self, parse_params};
use crate::protocol::meta;
use crate::upstream::{State, Via};

#[derive(Deserialize)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
}

impl Front {
    /// Serves a listing from the current snapshot's pre-serialised bytes: no upstream I/O and
    /// no re-serialisation of the catalog per request.
    pub(super) async fn list(&self, ctx: &Ctx, kind: List, params: Option<&RawValue>) -> Result<Reply, GatewayError> {
        let ListParams { cursor } = parse_params(params)?;
        if cursor.is_some() {
            // We never hand out cursors (every list is one page), so any cursor is stale.
            return Err(invalid("params.cursor", "unknown cursor: lists are served as a single page"));
        }
        self.warm_up().await;
        let snapshot = self.catalog.snapshot();
        let (key, items) = match kind {
            List::Resources => ("resources", &snapshot.resources_json),
            List::Templates => ("resourceTemplates", &snapshot.templates_json),
            List::Prompts => ("prompts", &snapshot.prompts_json),
        };
        let head = Bytes::from(format!("{{\"{key}\":"));
        let mut tail = String::with_capacity(160);
        if ctx.era == Era::Modern {
            // Today every caller sees the same list, so it may be shared across callers for as
            // long as the catalog refresh period.
            let _ = write!(
                tail,
                ",\"resultType\":\"complete\",\"ttlMs\":{},\"cacheScope\":\"public\",\"_meta\":{{\"{}\":{}}}",
                self.settings.list_ttl.as_millis(),
                meta::SERVER_INFO,
                self.server_info
            );
        }
        tail.push('}');
        Ok(Reply::Chunks(vec![head, items.bytes(), Bytes::from(tail)]))
    }

    pub(super) async fn tools_call(&self, ctx: &Ctx, params: Option<&RawValue>) -> Result<Box<RawValue>, GatewayError> {
        let mut params: Map<String, Value> = parse_params(params)?;
        let name = take_string(&mut params, "name")?;
        if params.get("arguments").is_some_and(|a| !a.is_object()) {
            return Err(invalid("params.arguments", "expected an object"));
        }
        let arguments = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
        self.warm_up().await;
        if let Some(result) = self.own_tool(ctx, &name, arguments).await {
            return result;
        }
        strip_protocol_meta(ctx, &mut params);
        self.warm_up().await;
        let mut rounds = 0;
        loop {
            let result = self
                .pipeline
                .call_tool(CallRequest {
                    principal: &ctx.principal,
                    name: &name,
                    params: params.clone(),
                    via: ctx.via(),
                })
                .await;
            // Failures the model can act on travel as isError results, not protocol errors.
            let result = match result {
                Err(e) if e.is_tool_result() => jsonrpc::raw(&e.tool_result()),
                other => other?,
            };
            match self.bridge_input_required(ctx, &result, &mut rounds).await? {
                Some((responses, state)) => retry_with(&mut params, responses, state),
                None => return Ok(self.finish_raw(ctx, result)),
            }
        }
    }

    /// 2026-07-28 upstreams ask for input with an `input_required` result (MRTR). A modern
    /// agent gets that result as is; for a legacy agent the gateway is the MRTR client: it
    /// asks the agent through ordinary server requests on the response stream and returns the
    /// answers and `requestState` for the retry. `None`: the result is final.
    async fn bridge_input_required(
        &self,
        ctx: &Ctx,
        result: &RawValue,
        rounds: &mut usize,
    ) -> Result<Option<(Map<String, Value>, Option<Value>)>, GatewayError> {
        const MAX_INPUT_ROUNDS: usize = 8;
        // Cheap test first: nearly every result is final.
        if ctx.era == Era::Modern || !result.get().contains("input_required") {
            return Ok(None);
        }
        let parsed: Value = serde_json::from_str(result.get()).map_err(GatewayError::internal)?;
        if parsed.get("resultType").and_then(Value::as_str) != Some("input_required") {
            return Ok(None);
        }
        *rounds += 1;
        let relay =
            ctx.relay.as_ref().filter(|_| *rounds <= MAX_INPUT_ROUNDS).ok_or_else(|| GatewayError::UpstreamError {
                namespace: "input".into(),
                source: Some("input rounds exhausted or no stream to ask the agent on".into()),
            })?;
        let mut responses = Map::new();
        let requests = parsed.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
            let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            let Some(answer) = relay.request(method, params) else {
                continue;
            };
            // An agent error leaves the key unanswered; the upstream asks again or gives up.
            if let Ok(Ok(value)) = answer.await {
                responses.insert(key, value);
            }
        }
        Ok(Some((responses, parsed.get("requestState").cloned())))
    }

    pub(super) async fn resources_read(
        &self,
        ctx: &Ctx,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, GatewayError> {
        let mut params: Map<String, Value> = parse_params(params)?;
        let uri = take_string(&mut params, "uri")?;
        self.warm_up().await;
        let snapshot = self.catalog.snapshot();
        let route = snapshot
            .resource(&uri)
            .map_err(|miss| miss_error(miss, || GatewayError::ResourceNotFound { uri: uri.clone() }))?;
        params.insert("uri".into(), json!(&*route.name));
        strip_protocol_meta(ctx, &mut params);
        let raw = self
            .pipeline
            .forward(&route, "resources/read", params, ctx.via())
            .await
            .map_err(resource_not_found(&uri))?;
        // Contents name the upstream's URIs; agents must see the exposed ones.
        let mut result: Value = serde_json::from_str(raw.get()).map_err(GatewayError::internal)?;
        if let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) {
            for item in contents {
                if let Some(inner) = item.get("uri").and_then(Value::as_str) {
                    item["uri"] = json!(snapshot.expose_uri(&route.namespace, inner));
                }
            }
        }
        Ok(self.finish(ctx, result))
    }

    /// `resources/subscribe` and `resources/unsubscribe` (legacy sessions); updates reach the
    /// session's stream through [`super::fan_out_resource_updates`].
    pub(super) async fn resources_subscribe(
        &self,
        ctx: &Ctx,
        params: Option<&RawValue>,
        subscribe: bool,
    ) -> Result<Box<RawValue>, GatewayError> {
        let Some(session) = ctx.session.clone() else {
            return Err(GatewayError::MethodNotFound);
        };
        let mut params: Map<String, Value> = parse_params(params)?;
        let uri = take_string(&mut params, "uri")?;
        self.change_subscription(&session, &uri, subscribe, ctx.via()).await?;
        Ok(self.finish(ctx, json!({})))
    }

    /// Adds (or removes) `subscriber`'s subscription to the resource the agent calls `uri`. The
    /// upstream is asked only for a resource's first subscriber and released by its last; per
    /// upstream, one change at a time, so the registry and the upstream never disagree.
    pub(super) async fn change_subscription(
        &self,
        subscriber: &Arc<Session>,
        uri: &str,
        on: bool,
        via: Via<'_>,
    ) -> Result<(), GatewayError> {
        self.warm_up().await;
        let route = self
            .catalog
            .snapshot()
            .resource(uri)
            .map_err(|miss| miss_error(miss, || GatewayError::ResourceNotFound { uri: uri.to_string() }))?;
        let own_upstream_session = via.session.is_some() && self.upstreams[route.upstream].is_per_client();
        let key = super::subscriptions::Key {
            upstream: route.upstream,
            session: own_upstream_session.then(|| subscriber.id.clone()),
            uri: route.name.to_string(),
        };
        let _one_at_a_time = self.subscribing[route.upstream].lock().await;
        if !on {
            if self.subscriptions.remove(&key, &subscriber.id) {
                self.pipeline.subscribe(&route, false, via).await.map_err(resource_not_found(uri))?;
            }
            return Ok(());
        }
        if !self.subscriptions.add(key.clone(), subscriber) {
            return Ok(());
        }
        // Recorded before the upstream answers; undone if it refuses, or if this request is
        // dropped meanwhile (the agent went away), so later subscribers ask again.
        let mut undo =
            UndoSubscription { subscriptions: &self.subscriptions, key, subscriber: &subscriber.id, armed: true };
        self.pipeline.subscribe(&route, true, via).await.map_err(resource_not_found(uri))?;
        undo.armed = false;
        Ok(())
    }

    pub(super) async fn prompts_get(
        &self,
        ctx: &Ctx,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, GatewayError> {
        let mut params: Map<String, Value> = parse_params(params)?;
        let name = take_string(&mut params, "name")?;
        self.warm_up().await;
        let route = self
            .catalog
            .snapshot()
            .prompt(&name)
            .cloned()
            .map_err(|miss| miss_error(miss, || GatewayError::UnknownPrompt { name: name.clone() }))?;
        params.insert("name".into(), json!(&*route.name));
        strip_protocol_meta(ctx, &mut params);
        let raw = self.pipeline.forward(&route, "prompts/get", params, ctx.via()).await?;
        Ok(self.finish_raw(ctx, raw))
    }

    /// `completion/complete` routes by the prompt or resource its `ref` names.
    pub(super) async fn complete(&self, ctx: &Ctx, params: Option<&RawValue>) -> Result<Box<RawValue>, GatewayError> {
        let mut params: Map<String, Value> = parse_params(params)?;
        let reference = params
            .get_mut("ref")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| invalid("params.ref", "required: an object with type and name or uri"))?;
        let kind = reference.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        self.warm_up().await;
        let snapshot = self.catalog.snapshot();
        let (field, route): (&str, Route) = match kind.as_str() {
            "ref/prompt" => {
                let name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("params.ref.name", "expected a string"))?;
                let route = snapshot.prompt(name).cloned();
                (
                    "name",
                    route
                        .map_err(|miss| miss_error(miss, || GatewayError::UnknownPrompt { name: name.to_string() }))?,
                )
            }
            "ref/resource" => {
                let uri = reference
                    .get("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("params.ref.uri", "expected a string"))?;
                (
                    "uri",
                    snapshot
                        .resource(uri)
                        .map_err(|miss| miss_error(miss, || GatewayError::ResourceNotFound { uri: uri.to_string() }))?,
                )
            }
            _ => {
                return Err(invalid("params.ref.type", "expected \"ref/prompt\" or \"ref/resource\""));
            }
        };
        reference.insert(field.into(), json!(&*route.name));
        strip_protocol_meta(ctx, &mut params);
        let raw = self.pipeline.forward(&route, "completion/complete", params, ctx.via()).await?;
        Ok(self.finish_raw(ctx, raw))
    }

    /// Legacy `logging/setLevel`: fanned out to every upstream that is up (best effort).
    pub(super) async fn set_log_level(
        &self,
        ctx: &Ctx,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, GatewayError> {
        #[derive(Deserialize)]
        struct SetLevel {
            level: String,
        }
        const LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
        let SetLevel { level } = parse_params(params)?;
        if !LEVELS.contains(&level.as_str()) {
            return Err(invalid("params.level", "expected an RFC 5424 level such as \"info\" or \"warning\""));
        }
        if let Some(session) = &ctx.session {
            session.set_log_level(&level);
        }
        let sends = self.upstreams.iter().filter(|u| u.state() == State::Up).map(|u| {
            let level = level.clone();
            async move {
                let params = json!({ "level": level }).as_object().cloned().unwrap_or_default();
                if let Err(e) = u.request("logging/setLevel", params, Via::default()).await {
                    tracing::debug!(namespace = %u.namespace, error = %e, "logging/setLevel not applied upstream");
                }
            }
        });
        futures_util::future::join_all(sends).await;
        Ok(jsonrpc::raw(&json!({})))
    }
}

fn invalid(path: &str, rule: &str) -> GatewayError {
    GatewayError::InvalidParams(FieldError { path: path.into(), rule: rule.into() })
}

fn take_string(params: &mut Map<String, Value>, key: &str) -> Result<String, GatewayError> {
    match params.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(invalid(&format!("params.{key}"), "expected a string")),
        None => Err(invalid(&format!("params.{key}"), "required")),
    }
}

/// The agent's protocol `_meta` (version, client info) describes the agent's hop, not ours; the
/// upstream transport adds its own. What the agent can be asked (its relayable capabilities)
/// and a 2026-07-28 agent's log level travel on, so a 2026-07-28 upstream may ask for input
/// and log; legacy upstreams never see these keys. Everything else (`progressToken`, …) passes.
fn strip_protocol_meta(ctx: &Ctx, params: &mut Map<String, Value>) {
    let legacy_session = ctx.session.as_ref().filter(|_| ctx.era != Era::Modern);
    let capabilities = legacy_session.and_then(|session| {
        let declared: Map<String, Value> = super::RELAYABLE_CAPABILITIES
            .iter()
            .filter_map(|c| session.client_capabilities.get(*c).map(|v| (c.to_string(), v.clone())))
            .collect();
        (!declared.is_empty()).then_some(Value::Object(declared))
    });
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.retain(|k, _| {
            (ctx.era == Era::Modern && (k == meta::CLIENT_CAPABILITIES || k == meta::LOG_LEVEL))
                || (!k.starts_with("io.modelcontextprotocol/") && !k.starts_with("gatehouse/"))
        });
        if let Some(capabilities) = capabilities {
            meta.insert(meta::CLIENT_CAPABILITIES.into(), capabilities);
        }
        if let Some(session) = legacy_session {
            meta.insert(meta::LOG_LEVEL.into(), json!(session.log_level()));
        }
    }
    if params.get("_meta").and_then(Value::as_object).is_some_and(Map::is_empty) {
        params.remove("_meta");
    }
}

/// Adds MRTR answers and the echoed state to the params for the retry.
fn retry_with(params: &mut Map<String, Value>, responses: Map<String, Value>, state: Option<Value>) {
    params.insert("inputResponses".into(), Value::Object(responses));
    match state {
        Some(state) => params.insert("requestState".into(), state),
        None => params.remove("requestState"),
    };
}

/// An upstream's "no such resource" as the agent's: 2026-07-28 upstreams say it with -32602;
/// either way the agent gets the not-found of its own era, naming its own URI.
fn resource_not_found(uri: &str) -> impl FnOnce(GatewayError) -> GatewayError + '_ {
    move |e| match e {
        GatewayError::ResourceNotFound { .. } | GatewayError::InvalidParams(_) => {
            GatewayError::ResourceNotFound { uri: uri.to_string() }
        }
        other => other,
    }
}

/// Removes a subscription from the registry when dropped: see [`Front::change_subscription`].
struct UndoSubscription<'a> {
    subscriptions: &'a super::subscriptions::Subscriptions,
    key: super::subscriptions::Key,
    subscriber: &'a str,
    armed: bool,
}

impl Drop for UndoSubscription<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.subscriptions.remove(&self.key, self.subscriber);
        }
    }
}
