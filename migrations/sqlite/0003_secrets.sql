-- Per-deployment secrets the gateway generates itself (e.g. the key of the audit log's
-- argument hashes), shared by every replica on this store.
CREATE TABLE secrets (
    name    TEXT    PRIMARY KEY,
    value   BLOB    NOT NULL
);
