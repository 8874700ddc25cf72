"""The `tasks` table on PostgreSQL: its migrations, in the order they were made.

Kept apart from the store's statements (`postgres.py`) because it is the one part a running
deployment cannot change in place: a step, once shipped, is never edited, only followed.
"""

from __future__ import annotations

from aml_mcp.store.migrations import Migration

COMPONENT = "tasks"

MIGRATIONS: list[str] = [
    """
    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        owner_issuer BYTEA NOT NULL,
        owner_subject BYTEA NOT NULL,
        owner_tenant BYTEA NOT NULL,
        owner_client_id BYTEA NOT NULL,
        tool TEXT NOT NULL,
        required_scope TEXT,
        arguments TEXT NOT NULL,
        client_capabilities TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
        status_message TEXT,
        input_requests TEXT NOT NULL DEFAULT '{}',
        input_responses TEXT NOT NULL DEFAULT '{}',
        result TEXT,
        error TEXT,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        ttl_ms BIGINT NOT NULL CHECK (ttl_ms > 0),
        expires_at BIGINT NOT NULL,
        version BIGINT NOT NULL,
        lease_holder TEXT,
        lease_expires_at BIGINT,
        attempts INTEGER NOT NULL DEFAULT 0,
        handovers INTEGER NOT NULL DEFAULT 0,
        CHECK ((status = 'completed') = (result IS NOT NULL)),
        CHECK ((status = 'failed') = (error IS NOT NULL))
    );
    CREATE INDEX tasks_by_expiry ON tasks (expires_at);
    CREATE INDEX tasks_claimable ON tasks (created_at) WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_by_holder ON tasks (lease_holder) WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_active_by_owner ON tasks (owner_tenant, owner_issuer, owner_subject, expires_at)
        WHERE status IN ('working', 'input_required');
    CREATE FUNCTION tasks_guard() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.status IN ('completed', 'failed', 'cancelled') THEN
            RAISE EXCEPTION 'a terminal task never changes' USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        IF NEW.task_id IS DISTINCT FROM OLD.task_id
           OR NEW.owner_issuer IS DISTINCT FROM OLD.owner_issuer
           OR NEW.owner_subject IS DISTINCT FROM OLD.owner_subject
           OR NEW.owner_tenant IS DISTINCT FROM OLD.owner_tenant
           OR NEW.owner_client_id IS DISTINCT FROM OLD.owner_client_id
           OR NEW.tool IS DISTINCT FROM OLD.tool
           OR NEW.required_scope IS DISTINCT FROM OLD.required_scope
           OR NEW.created_at IS DISTINCT FROM OLD.created_at
           OR NEW.ttl_ms IS DISTINCT FROM OLD.ttl_ms
           OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
           OR NEW.version < OLD.version THEN
            RAISE EXCEPTION 'a task''s identity, owner, tool, scope and expiry never change'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END;
    $$;
    CREATE TRIGGER tasks_guard BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION tasks_guard();
    """,
    # The create-rate window counts every task a principal created lately, finished or not: one
    # short index range, read newest first. The subject leads so that the tenant-wide count of
    # unfinished tasks keeps its partial index (this one would match its prefix and scan finished rows).
    """
    CREATE INDEX tasks_created_by_principal ON tasks (owner_subject, owner_tenant, owner_issuer, created_at);
    """,
    # A retried create names the task the first attempt made: the client's idempotency key is kept
    # with the task, unique per owner, and never changes (the guard is the second wall).
    """
    ALTER TABLE tasks ADD COLUMN idempotency_key TEXT;
    CREATE UNIQUE INDEX tasks_by_idempotency_key
        ON tasks (idempotency_key, owner_issuer, owner_subject, owner_tenant, owner_client_id)
        WHERE idempotency_key IS NOT NULL;
    CREATE OR REPLACE FUNCTION tasks_guard() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.status IN ('completed', 'failed', 'cancelled') THEN
            RAISE EXCEPTION 'a terminal task never changes' USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        IF NEW.task_id IS DISTINCT FROM OLD.task_id
           OR NEW.owner_issuer IS DISTINCT FROM OLD.owner_issuer
           OR NEW.owner_subject IS DISTINCT FROM OLD.owner_subject
           OR NEW.owner_tenant IS DISTINCT FROM OLD.owner_tenant
           OR NEW.owner_client_id IS DISTINCT FROM OLD.owner_client_id
           OR NEW.tool IS DISTINCT FROM OLD.tool
           OR NEW.required_scope IS DISTINCT FROM OLD.required_scope
           OR NEW.created_at IS DISTINCT FROM OLD.created_at
           OR NEW.ttl_ms IS DISTINCT FROM OLD.ttl_ms
           OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
           OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
           OR NEW.version < OLD.version THEN
            RAISE EXCEPTION 'a task''s identity, owner, tool, scope, key and expiry never change'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END;
    $$;
    """,
    # A body's structured progress (`_meta["aml-mcp/progress"]`: done, total) is kept with its task,
    # so every replica answers it; compact JSON of two numbers, changed like the status message
    # (only while the task is active: the guard keeps a terminal row as it is).
    """
    ALTER TABLE tasks ADD COLUMN progress TEXT;
    """,
    # A create counts its tenant's quota and inserts in one statement (`CREATE_TASK` in
    # `postgres.py`): this function takes the tenant's lock, then counts. In PL/pgSQL every statement
    # of a VOLATILE function takes a snapshot of its own, so the counts are read after the lock and
    # see every task committed before it (no overshoot, whatever the concurrency), and the lock is
    # held to the commit with no client round trip inside: one tenant's creates queue for the
    # lock-count-insert-commit section alone, not for the client's next statement.
    """
    CREATE FUNCTION tasks_room(
        p_lock_class INTEGER, p_lock_name TEXT,
        p_issuer BYTEA, p_subject BYTEA, p_tenant BYTEA, p_client BYTEA,
        p_now BIGINT, p_window_opens_after BIGINT, p_rate_limit BIGINT, p_counted BOOLEAN, p_key TEXT,
        OUT room_tenant BIGINT, OUT room_principal BIGINT, OUT room_made BIGINT, OUT room_oldest BIGINT,
        OUT room_held TEXT
    ) LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock(p_lock_class, hashtext(p_lock_name));
        room_tenant := 0;
        room_principal := 0;
        room_made := 0;
        IF p_key IS NOT NULL THEN
            -- An expired task still holding the key (not yet swept) gives it up; a live one is the answer.
            DELETE FROM tasks t WHERE t.idempotency_key = p_key AND t.owner_issuer = p_issuer
                AND t.owner_subject = p_subject AND t.owner_tenant = p_tenant
                AND t.owner_client_id = p_client AND t.expires_at <= p_now;
            SELECT t.task_id INTO room_held FROM tasks t WHERE t.idempotency_key = p_key
                AND t.owner_issuer = p_issuer AND t.owner_subject = p_subject
                AND t.owner_tenant = p_tenant AND t.owner_client_id = p_client;
            IF room_held IS NOT NULL THEN
                RETURN;
            END IF;
        END IF;
        IF p_counted THEN
            SELECT COUNT(*), COUNT(*) FILTER (WHERE t.owner_subject = p_subject)
                INTO room_tenant, room_principal
                FROM tasks t WHERE t.owner_tenant = p_tenant AND t.owner_issuer = p_issuer
                AND t.status IN ('working', 'input_required') AND t.expires_at > p_now;
            -- The window: the principal's newest creates (at most its limit of them).
            SELECT COUNT(*), MIN(r.created_at) INTO room_made, room_oldest
                FROM (SELECT t.created_at FROM tasks t WHERE t.owner_tenant = p_tenant
                      AND t.owner_issuer = p_issuer AND t.owner_subject = p_subject
                      AND t.created_at > p_window_opens_after
                      ORDER BY t.created_at DESC LIMIT p_rate_limit) r;
        END IF;
    END;
    $$;
    """,
]

MIGRATION = Migration(COMPONENT, MIGRATIONS)
