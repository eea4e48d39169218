-- Tool contracts (SPEC §9 stage 2) and the audit log (stage 10). Principals are plain text ids
-- everywhere, so confirmations, idempotency records, budgets and session state can key on them.

CREATE TABLE contracts (
    namespace          TEXT    NOT NULL,
    tool               TEXT    NOT NULL,   -- the upstream's own name
    exposed            TEXT    NOT NULL,   -- the name agents see
    version            TEXT    NOT NULL,   -- SemVer
    fingerprint        TEXT    NOT NULL,   -- SHA-256 of the RFC 8785 definition
    definition         TEXT    NOT NULL,
    drift_fingerprint  TEXT,               -- a changed definition awaiting approval
    drift_definition   TEXT,
    pinned_ms          BIGINT  NOT NULL,
    updated_ms         BIGINT  NOT NULL,
    PRIMARY KEY (namespace, tool)
);
CREATE INDEX contracts_exposed ON contracts (exposed);

CREATE TABLE audit_events (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms              BIGINT  NOT NULL,
    principal          TEXT    NOT NULL,
    tool               TEXT    NOT NULL,
    contract_version   TEXT,
    fingerprint        TEXT,
    decision           TEXT    NOT NULL,   -- allow | deny
    rule               TEXT,
    outcome            TEXT    NOT NULL,   -- ok or an error class
    latency_us         BIGINT  NOT NULL,
    args_hash          TEXT,
    trace_id           TEXT
);
CREATE INDEX audit_events_at ON audit_events (at_ms);
CREATE INDEX audit_events_principal ON audit_events (principal, at_ms);
CREATE INDEX audit_events_tool ON audit_events (tool, at_ms);
