//! Wire vocabulary: JSON-RPC 2.0 envelopes, MCP protocol revisions, `_meta` keys, SSE framing.
//!
//! Owns parsing and formatting only; it must not know about sessions, upstreams or policy.

pub mod jsonrpc;
pub mod sse;

use std::fmt;

/// `_meta` keys defined by MCP 2026-07-28 (§2.1 of the digest).
pub mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// Gatehouse's own keys. The spec reserves `io.modelcontextprotocol/` and `*.mcp/`; ours are
    /// plain `gatehouse/…` so clients written for the gating seed (`penumbra/…`) stay compatible.
    pub const GATEHOUSE_ERROR: &str = "gatehouse/error";
}

/// HTTP headers of the Streamable HTTP transport.
pub mod header {
    pub const SESSION_ID: &str = "mcp-session-id";
    pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
    pub const METHOD: &str = "mcp-method";
    pub const NAME: &str = "mcp-name";
    pub const LAST_EVENT_ID: &str = "last-event-id";
}

/// The MCP revisions Gatehouse speaks, on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    V2026_07_28,
}

impl ProtocolVersion {
    /// Newest first: the order used when negotiating and when naming supported versions.
    pub const LEGACY: [ProtocolVersion; 3] = [Self::V2025_11_25, Self::V2025_06_18, Self::V2025_03_26];
    pub const LATEST_LEGACY: ProtocolVersion = Self::V2025_11_25;
    pub const MODERN: ProtocolVersion = Self::V2026_07_28;

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "2025-03-26" => Self::V2025_03_26,
            "2025-06-18" => Self::V2025_06_18,
            "2025-11-25" => Self::V2025_11_25,
            "2026-07-28" => Self::V2026_07_28,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// 2026-07-28 and later: stateless, no `initialize`.
    pub fn is_modern(self) -> bool {
        self >= Self::V2026_07_28
    }

    /// 2025-03-26 still allowed JSON-RPC batches; 2025-06-18 removed them.
    pub fn allows_batches(self) -> bool {
        self == Self::V2025_03_26
    }

    /// Legacy version negotiation: the requested version if we speak it, else our latest legacy
    /// one (an `initialize` naming 2026-07-28 is answered with 2025-11-25 and served as legacy).
    pub fn negotiate_legacy(requested: &str) -> Self {
        match Self::parse(requested) {
            Some(v) if !v.is_modern() => v,
            _ => Self::LATEST_LEGACY,
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ProtocolVersion as V;

    #[test]
    fn negotiation_answers_known_legacy_versions_with_themselves() {
        assert_eq!(V::negotiate_legacy("2025-06-18"), V::V2025_06_18);
        assert_eq!(V::negotiate_legacy("2025-03-26"), V::V2025_03_26);
    }

    #[test]
    fn negotiation_answers_modern_and_unknown_versions_with_latest_legacy() {
        assert_eq!(V::negotiate_legacy("2026-07-28"), V::V2025_11_25);
        assert_eq!(V::negotiate_legacy("1999-01-01"), V::V2025_11_25);
    }

    #[test]
    fn only_2025_03_26_allows_batches() {
        assert!(V::V2025_03_26.allows_batches());
        assert!(!V::V2025_06_18.allows_batches());
        assert!(!V::V2026_07_28.allows_batches());
    }
}
