-- The outbox table for SQLite (delivery-sqlite, rule 6 of the delivery spec).
--
-- `SqliteStore::migrate` runs this file with the placeholders replaced:
--   {table} the table (default `delivery_outbox`)
--   {name}  the same name, prefix of its index names
-- Times are milliseconds since the Unix epoch, read from SQLite's clock.
--
-- `migrate` upgrades a table made before `seq` (whose created order was the implicit rowid) by
-- copying it into this shape, each record's rowid as its `seq`.

CREATE TABLE IF NOT EXISTS {table} (
    -- The created order: the relay claims oldest first, and `ordered` holds a key behind it.
    -- Also the record's stamp (rule 4). AUTOINCREMENT: SQLite never hands out a value at or
    -- below one it handed out, even once the newest records are deleted (`retain`, a purge);
    -- a plain rowid would hand the deleted values out again, and a consumer guarding its
    -- writes with the stamp would drop the later records as older.
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Fixed at write time, in the writer's transaction; every attempt sends it.
    id           TEXT NOT NULL UNIQUE,
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
    -- in, as a JSON object of strings; NULL for none.
    headers      TEXT
);

CREATE INDEX IF NOT EXISTS {name}_pending ON {table} (status, available_at);
CREATE INDEX IF NOT EXISTS {name}_key ON {table} (key, status);
-- What `retain` deletes: delivered records, oldest delivery first.
CREATE INDEX IF NOT EXISTS {name}_delivered ON {table} (delivered_at) WHERE status = 'delivered';
