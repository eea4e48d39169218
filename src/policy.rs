//! Authorization (SPEC §9 stage 4): may this principal call this tool? Default deny; `allow`
//! rules permit, `deny` rules forbid and always win. The TOML rules compile to Cedar and run,
//! with any operator-written Cedar, on Cedar's authorizer, after validation against
//! Gatehouse's schema at load — an erroring `forbid` would otherwise silently not fire.
//!
//! Without a `[policy]` table every authenticated caller may call every tool (logged at start).
//! Knows principals and tools, not the wire: a denial is turned into "unknown tool" by callers.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    Policy as CedarPolicy, PolicyId, PolicySet, Request, RestrictedExpression, Schema, ValidationMode, Validator,
};
use serde_json::Value;

use crate::catalog::Tool;
use crate::config::{Access, PolicyConfig, Rule};
use crate::pipeline::Principal;

const SCHEMA: &str = r#"
entity Principal { roles: Set<String>, scopes: Set<String> };
entity Tool { name: String, namespace: String, mutating: Bool };
action "call" appliesTo { principal: [Principal], resource: [Tool] };
"#;

/// The outcome and what decided it (rule ids), for the audit log and `policy check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The rules that decided: the matching deny rules, or the allow rules, or
    /// `default-deny` / `no-policy`.
    pub rule: String,
}

pub struct Policy {
    rules: Option<Rules>,
    /// Operator overrides of read vs mutation, by exposed name.
    mutating: HashMap<String, bool>,
    /// Decisions by (principal, tool, definition fingerprint): everything a decision depends
    /// on, so a hit is exact. Building Cedar entities per call costs tens of microseconds.
    decided: Mutex<LruCache<(Principal, Arc<str>, Arc<str>), Decision>>,
}

const DECISION_CACHE: usize = 65_536;

struct Rules {
    set: PolicySet,
    schema: Schema,
    authorizer: Authorizer,
    action: EntityUid,
}

impl Policy {
    /// Compiles and validates. Errors are for the operator: rule ids and Cedar's messages.
    pub fn new(config: Option<&PolicyConfig>, mutating: HashMap<String, bool>) -> Result<Self, String> {
        let decided = Mutex::new(LruCache::new(NonZeroUsize::new(DECISION_CACHE).unwrap_or(NonZeroUsize::MIN)));
        let Some(config) = config else { return Ok(Self { rules: None, mutating, decided }) };
        let (schema, _) = Schema::from_cedarschema_str(SCHEMA).map_err(|e| format!("policy schema: {e}"))?;
        let mut set = PolicySet::new();
        for rule in &config.rules {
            let policy = CedarPolicy::parse(Some(PolicyId::new(&rule.id)), compile(rule))
                .map_err(|e| format!("policy.rules {}: {e}", rule.id))?;
            set.add(policy).map_err(|e| format!("policy.rules {}: {e}", rule.id))?;
        }
        if let Some((path, text)) = &config.cedar {
            let extra = PolicySet::from_str(text).map_err(|e| format!("{}: {e}", path.display()))?;
            for policy in extra.policies() {
                set.add(policy.clone()).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let validation = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
        if !validation.validation_passed() {
            let errors: Vec<String> = validation.validation_errors().map(|e| e.to_string()).collect();
            return Err(format!("policies do not validate against the schema: {}", errors.join("; ")));
        }
        let action = EntityUid::from_type_name_and_id(type_name("Action"), EntityId::new("call"));
        Ok(Self { rules: Some(Rules { set, schema, authorizer: Authorizer::new(), action }), mutating, decided })
    }

    pub fn is_active(&self) -> bool {
        self.rules.is_some()
    }

    /// Read vs mutation: the operator's override, else the tool's `readOnlyHint`, else mutation
    /// (the safe assumption for a tool that says nothing).
    pub fn is_mutating(&self, tool: &Tool) -> bool {
        if let Some(&m) = self.mutating.get(&*tool.exposed) {
            return m;
        }
        let read_only = tool.definition.get("annotations").and_then(|a| a.get("readOnlyHint")).and_then(Value::as_bool);
        read_only != Some(true)
    }

    pub fn decide(&self, principal: &Principal, tool: &Tool) -> Decision {
        let Some(rules) = &self.rules else { return Decision { allowed: true, rule: "no-policy".into() } };
        let key = (principal.clone(), tool.exposed.clone(), tool.fingerprint.clone());
        if let Some(hit) = self.decided.lock().expect("decision cache poisoned").get(&key) {
            return hit.clone();
        }
        match rules.evaluate(principal, tool, self.is_mutating(tool)) {
            Ok(decision) => {
                self.decided.lock().expect("decision cache poisoned").put(key, decision.clone());
                decision
            }
            Err(e) => {
                // Cannot happen for validated policies and well-formed entities; deny if it does.
                tracing::error!(error = %e, tool = %tool.exposed, "policy evaluation failed: denied");
                Decision { allowed: false, rule: "evaluation-error".into() }
            }
        }
    }
}

impl Rules {
    fn evaluate(&self, principal: &Principal, tool: &Tool, mutating: bool) -> Result<Decision, String> {
        let strings = |items: &[String]| {
            RestrictedExpression::new_set(items.iter().map(|s| RestrictedExpression::new_string(s.clone())))
        };
        let principal_uid = EntityUid::from_type_name_and_id(type_name("Principal"), EntityId::new(&*principal.id));
        let tool_uid = EntityUid::from_type_name_and_id(type_name("Tool"), EntityId::new(&*tool.exposed));
        let principal_entity = Entity::new(
            principal_uid.clone(),
            HashMap::from([("roles".into(), strings(&principal.roles)), ("scopes".into(), strings(&principal.scopes))]),
            HashSet::new(),
        )
        .map_err(|e| e.to_string())?;
        let tool_entity = Entity::new(
            tool_uid.clone(),
            HashMap::from([
                ("name".into(), RestrictedExpression::new_string(tool.exposed.to_string())),
                ("namespace".into(), RestrictedExpression::new_string(tool.route.namespace.to_string())),
                ("mutating".into(), RestrictedExpression::new_bool(mutating)),
            ]),
            HashSet::new(),
        )
        .map_err(|e| e.to_string())?;
        let entities =
            Entities::from_entities([principal_entity, tool_entity], Some(&self.schema)).map_err(|e| e.to_string())?;
        let request = Request::new(principal_uid, self.action.clone(), tool_uid, Context::empty(), Some(&self.schema))
            .map_err(|e| e.to_string())?;
        let response = self.authorizer.is_authorized(&request, &self.set, &entities);
        let mut reasons: Vec<String> = response.diagnostics().reason().map(ToString::to_string).collect();
        reasons.sort();
        let allowed = response.decision() == CedarDecision::Allow;
        let rule = if reasons.is_empty() { "default-deny".to_string() } else { reasons.join(",") };
        Ok(Decision { allowed, rule })
    }
}

fn type_name(name: &str) -> EntityTypeName {
    EntityTypeName::from_str(name).expect("a valid Cedar type name")
}

/// One TOML rule as a Cedar policy: every listed criterion must hold; within a list, any item.
fn compile(rule: &Rule) -> String {
    let set = |items: &[String], wrap: &dyn Fn(&str) -> String| {
        items.iter().map(|i| wrap(&cedar_string(i))).collect::<Vec<_>>().join(", ")
    };
    let mut conditions = Vec::new();
    if !rule.principals.is_empty() {
        conditions.push(format!("[{}].contains(principal)", set(&rule.principals, &|s| format!("Principal::{s}"))));
    }
    if !rule.roles.is_empty() {
        conditions.push(format!("principal.roles.containsAny([{}])", set(&rule.roles, &|s| s.to_string())));
    }
    if !rule.scopes.is_empty() {
        conditions.push(format!("principal.scopes.containsAny([{}])", set(&rule.scopes, &|s| s.to_string())));
    }
    if !rule.namespaces.is_empty() {
        conditions.push(format!("[{}].contains(resource.namespace)", set(&rule.namespaces, &|s| s.to_string())));
    }
    if !rule.tools.is_empty() {
        conditions.push(format!("[{}].contains(resource.name)", set(&rule.tools, &|s| s.to_string())));
    }
    match rule.access {
        Access::Any => {}
        Access::Read => conditions.push("!resource.mutating".into()),
        Access::Mutation => conditions.push("resource.mutating".into()),
    }
    let effect = if rule.allow { "permit" } else { "forbid" };
    let when = if conditions.is_empty() { String::new() } else { format!(" when {{ {} }}", conditions.join(" && ")) };
    format!("{effect} (principal, action == Action::\"call\", resource){when};")
}

/// A Cedar string literal (config validation already refused control characters).
fn cedar_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests;
