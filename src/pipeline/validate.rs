//! Stages 3 and 9: arguments against the tool's `inputSchema`, `structuredContent` against its
//! `outputSchema`. JSON Schema draft 2020-12 unless `$schema` names another dialect the
//! validator knows; each schema is compiled once per tool fingerprint into a bounded cache.
//! Remote `$ref`s are never fetched (the crate's HTTP and file resolvers are compiled out), so a
//! schema cannot make the gateway reach anywhere.
//!
//! A violation names the JSON path and the keyword, never the offending value: it goes back to
//! the model, and values may be secrets.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use serde_json::Value;

use crate::catalog::Tool;
use crate::error::FieldError;

const CACHE: usize = 4096;

/// A compiled schema, or why it could not be compiled (checked once, reported on each call).
enum Compiled {
    Ready(jsonschema::Validator),
    Unusable(String),
}

pub struct Validator {
    cache: Mutex<LruCache<(Arc<str>, Side), Arc<Compiled>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Side {
    Input,
    Output,
}

impl Default for Validator {
    fn default() -> Self {
        Self { cache: Mutex::new(LruCache::new(NonZeroUsize::new(CACHE).unwrap_or(NonZeroUsize::MIN))) }
    }
}

impl Validator {
    /// Checks a call's arguments; `Err` names the first violation (path under `arguments`).
    pub fn input(&self, tool: &Tool, arguments: &Value) -> Result<(), FieldError> {
        match tool.definition.get("inputSchema") {
            Some(schema) => self.check(tool, Side::Input, schema, arguments, "arguments"),
            None => Ok(()),
        }
    }

    /// Checks a result's `structuredContent` when the tool declares an `outputSchema`.
    pub fn output(&self, tool: &Tool, result: &Value) -> Result<(), FieldError> {
        let (Some(schema), false) =
            (tool.definition.get("outputSchema"), result.get("isError").and_then(Value::as_bool).unwrap_or(false))
        else {
            return Ok(());
        };
        match result.get("structuredContent") {
            Some(content) => self.check(tool, Side::Output, schema, content, "structuredContent"),
            None => Err(FieldError {
                path: "structuredContent".into(),
                rule: "missing, but the tool declares an outputSchema".into(),
            }),
        }
    }

    fn check(&self, tool: &Tool, side: Side, schema: &Value, instance: &Value, root: &str) -> Result<(), FieldError> {
        let compiled = self.compiled(tool, side, schema);
        match &*compiled {
            Compiled::Unusable(why) => Err(FieldError { path: root.into(), rule: why.clone() }),
            Compiled::Ready(validator) => match validator.iter_errors(instance).next() {
                None => Ok(()),
                // The path is made of the caller's own keys: printable and bounded before echoing.
                Some(error) => Err(FieldError {
                    path: format!("{root}{}", printable(&error.instance_path().to_string())),
                    rule: rule(&error),
                }),
            },
        }
    }

    fn compiled(&self, tool: &Tool, side: Side, schema: &Value) -> Arc<Compiled> {
        let key = (tool.fingerprint.clone(), side);
        if let Some(hit) = self.cache.lock().expect("schema cache poisoned").get(&key) {
            return hit.clone();
        }
        // Compiled outside the lock: a large schema must not stall other calls.
        let compiled = Arc::new(compile(schema));
        if let Compiled::Unusable(why) = &*compiled {
            tracing::warn!(tool = %tool.exposed, ?side, reason = %why, "tool schema cannot be used for validation");
        }
        self.cache.lock().expect("schema cache poisoned").put(key, compiled.clone());
        compiled
    }
}

fn compile(schema: &Value) -> Compiled {
    if let Some(dialect) = schema.get("$schema").and_then(Value::as_str) {
        if jsonschema::Draft::from_schema_uri(dialect) == jsonschema::Draft::Unknown {
            return Compiled::Unusable(format!(
                "the tool's schema uses an unsupported dialect ({})",
                printable(dialect)
            ));
        }
    }
    match jsonschema::options().should_validate_formats(true).build(schema) {
        Ok(validator) => Compiled::Ready(validator),
        // The compiler's message describes the schema (the tool's, not the caller's data).
        Err(e) => Compiled::Unusable(format!("the tool's schema is invalid ({})", e.kind().keyword())),
    }
}

/// The rule a value broke, without the value: the keyword, plus the schema-side detail where
/// that helps the model fix its call (which property is required, which are allowed).
fn rule(error: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    match error.kind() {
        Kind::Required { property } => format!("missing required property {property}"),
        Kind::AdditionalProperties { unexpected } => {
            format!("unexpected properties: {}", unexpected.iter().map(|p| printable(p)).collect::<Vec<_>>().join(", "))
        }
        Kind::Type { kind: jsonschema::error::TypeKind::Single(expected) } => format!("must be of type {expected}"),
        other => format!("violates \"{}\"", other.keyword()),
    }
}

/// Names from a schema or a caller, made safe to echo: printable and bounded.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(128).collect()
}

#[cfg(test)]
mod tests;
