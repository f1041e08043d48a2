-- The outbox table for SQLite (delivery-core, rule 6 of the delivery spec).
--
-- `SqliteStore::migrate` runs this file with the placeholders replaced:
--   {table} the table (default `delivery_outbox`)
--   {name}  the same name, prefix of its index names
-- Times are milliseconds since the Unix epoch, read from SQLite's clock. The created order is the
-- rowid (records are never deleted by the relay, so it only grows).

CREATE TABLE IF NOT EXISTS {table} (
    id           TEXT PRIMARY KEY NOT NULL,
    topic        TEXT NOT NULL,
    key          TEXT,
    payload      BLOB NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    available_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_owner  TEXT,
    lease_until  INTEGER,
    created_at   INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    delivered_at INTEGER,
    -- Headers the sinks send with the record: the W3C trace context of the span it was written
    -- in, as a JSON object of strings; NULL for none. `migrate` adds it to tables made before it.
    headers      TEXT
);

CREATE INDEX IF NOT EXISTS {name}_pending ON {table} (status, available_at);
CREATE INDEX IF NOT EXISTS {name}_key ON {table} (key, status);
