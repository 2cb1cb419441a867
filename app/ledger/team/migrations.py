"""The team store's schema in PostgreSQL, versioned, and its roles (`rentwatch team init URL`). The
controller role may SELECT and INSERT, never UPDATE, DELETE or TRUNCATE; a trigger stamps each
event's inserting user and refuses a gap or a fork in a ledger's events."""

from __future__ import annotations

SCHEMA = "rentwatch"
CONTROLLER_ROLE = "rentwatch_controller"
SCHEMA_VERSION = 1

MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE rentwatch.ledgers (
    ledger_id TEXT PRIMARY KEY,
    operator TEXT NOT NULL,
    db_user TEXT NOT NULL DEFAULT session_user,
    first_seen TIMESTAMPTZ NOT NULL DEFAULT now());

CREATE TABLE rentwatch.events (
    ledger_id TEXT NOT NULL REFERENCES rentwatch.ledgers (ledger_id),
    seq BIGINT NOT NULL CHECK (seq > 0),
    operator TEXT NOT NULL,
    ts DOUBLE PRECISION NOT NULL, wall DOUBLE PRECISION, campaign TEXT, instance_id BIGINT,
    machine_id BIGINT, host_id BIGINT, offer_id BIGINT, gpu_name TEXT,
    gpu_dph DOUBLE PRECISION, storage_dph DOUBLE PRECISION, actor TEXT NOT NULL,
    kind TEXT NOT NULL, phase TEXT NOT NULL, ok BOOLEAN, reason TEXT, detail TEXT,
    intent_seq BIGINT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
    db_user TEXT NOT NULL DEFAULT session_user,
    stored_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger_id, seq));
CREATE INDEX events_machine ON rentwatch.events (machine_id) WHERE machine_id IS NOT NULL;

-- who inserted an event is the server's word, not the inserter's; an event follows its
-- ledger's previous one (same hash link) or is refused
CREATE FUNCTION rentwatch.events_follow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_hash TEXT;
BEGIN
    NEW.db_user := session_user;
    NEW.stored_at := now();
    IF NEW.seq = 1 THEN
        IF NEW.prev_hash <> repeat('0', 64) THEN
            RAISE EXCEPTION 'rentwatch: event 1 of ledger % must start its chain', NEW.ledger_id;
        END IF;
        RETURN NEW;
    END IF;
    SELECT hash INTO before_hash FROM rentwatch.events
     WHERE ledger_id = NEW.ledger_id AND seq = NEW.seq - 1;
    IF before_hash IS NULL THEN
        RAISE EXCEPTION 'rentwatch: event % of ledger % has no event before it in the store',
            NEW.seq, NEW.ledger_id;
    END IF;
    IF before_hash <> NEW.prev_hash THEN
        RAISE EXCEPTION 'rentwatch: event % of ledger % does not follow event %',
            NEW.seq, NEW.ledger_id, NEW.seq - 1;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER events_follow BEFORE INSERT ON rentwatch.events
    FOR EACH ROW EXECUTE FUNCTION rentwatch.events_follow();

-- a controller's sign of life: appended (a controller may not update), the latest one counts
CREATE TABLE rentwatch.heartbeats (
    ledger_id TEXT NOT NULL,
    operator TEXT NOT NULL,
    campaign TEXT,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    shipped_seq BIGINT NOT NULL DEFAULT 0,
    ended BOOLEAN NOT NULL DEFAULT false,
    db_user TEXT NOT NULL DEFAULT session_user,
    at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE INDEX heartbeats_at ON rentwatch.heartbeats (at);
CREATE INDEX heartbeats_ledger ON rentwatch.heartbeats (ledger_id, at);
""",
}


def role_sql(role: str = CONTROLLER_ROLE) -> list[str]:
    """The controller role: no login of its own (grant it to each operator's login role),
    SELECT and INSERT on the store, nothing else."""
    return [
        f"""DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
        CREATE ROLE {role} NOLOGIN;
    END IF;
END $$""",
        f"REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {SCHEMA} FROM PUBLIC",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {SCHEMA} FROM {role}",
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {role}",
        f"GRANT SELECT, INSERT ON {SCHEMA}.ledgers, {SCHEMA}.events, {SCHEMA}.heartbeats TO {role}",
        f"GRANT SELECT ON {SCHEMA}.migrations TO {role}",
    ]
