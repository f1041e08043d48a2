-- The outbox table for PostgreSQL (delivery-postgres, rule 6 of the delivery spec).
--
-- `PgStore::migrate` runs this file with the placeholders replaced:
--   {table}   the table, optionally schema-qualified (default `delivery_outbox`)
--   {name}    the table's unqualified name, prefix of its index names
--   {channel} the LISTEN/NOTIFY channel that wakes relays after a commit (the table's name)
-- To run it by hand, replace them yourself; the statements are idempotent. PostgreSQL 14 or later.

CREATE TABLE IF NOT EXISTS {table} (
    -- Fixed at write time, in the writer's transaction; every attempt sends it (message id,
    -- idempotency key).
    id           TEXT PRIMARY KEY,
    -- The created order: relays claim oldest first, and `ordered` holds a key behind it. Also the
    -- record's stamp (rule 4): a sequence never hands out a value twice, nor one below a value
    -- it handed out, whatever rows are deleted (`retain`, a purge), so a later record's stamp is
    -- always above an earlier one's.
    seq          BIGSERIAL NOT NULL,
    topic        TEXT NOT NULL,
    key          TEXT,
    payload      BYTEA NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    -- Failed attempts so far, counted here, never in a relay process.
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    -- Not claimed before this time (the backoff after a failure). The database's clock.
    available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The relay holding the record, and until when; an expired lease is claimed again.
    lease_owner  TEXT,
    lease_until  TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivered_at TIMESTAMPTZ
-- Room in each page, so a claim (which changes only the lease) is a HOT update that touches no
-- index.
) WITH (fillfactor = 70);

-- Headers the sinks send with the record: the W3C trace context of the span it was written in
-- (`traceparent`, `tracestate`), as a JSON object of strings; NULL for none. Added to tables
-- made before it.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS headers TEXT;

-- What a claim scans: pending records in created order.
CREATE INDEX IF NOT EXISTS {name}_pending ON {table} (seq) WHERE status = 'pending';
-- What `ordered` looks up: a key's earlier pending records.
CREATE INDEX IF NOT EXISTS {name}_pending_key ON {table} (key, seq) WHERE status = 'pending';
-- What an operator lists.
CREATE INDEX IF NOT EXISTS {name}_dead ON {table} (seq) WHERE status = 'dead';
-- What `retain` deletes: delivered records, oldest delivery first. On a large table made before
-- it, this builds the index under a lock that holds writers back until it is built; to avoid
-- that, build it first with `CREATE INDEX CONCURRENTLY` (same name and definition).
CREATE INDEX IF NOT EXISTS {name}_delivered ON {table} (delivered_at) WHERE status = 'delivered';

-- A commit that wrote records wakes the relays at once; polling stays the fallback (a
-- notification is a hint, the table is the truth).
CREATE OR REPLACE FUNCTION {table}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{channel}', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER {name}_notify AFTER INSERT ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {table}_notify();
