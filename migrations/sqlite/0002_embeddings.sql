-- Tool and task embeddings by model and SHA-256 of the embedded text, so a restart or a
-- catalog change (on any replica) re-embeds only what changed.
CREATE TABLE embeddings (
    model   TEXT    NOT NULL,
    key     BLOB    NOT NULL,   -- SHA-256 of the text (32 bytes)
    vector  BLOB    NOT NULL,   -- little-endian f32s
    PRIMARY KEY (model, key)
);
