-- The records of the world's API keys: a key's public id and the SHA-256 digest of its secret,
-- never the key itself. Few rows, read whole by the HTTP server and written one at a time.
CREATE TABLE api_keys (
    id text PRIMARY KEY COLLATE "C",
    record text NOT NULL
);
