-- worlds-engine PostgreSQL schema, version 1. Applied inside the store's schema (search_path).
-- Identifiers and names compare bytewise (COLLATE "C"), as the other backends order them.
-- Strings a user chooses (workflow ids, workflow names, idempotency keys, stream names, write
-- keys, schedule ids) may hold any Unicode, NUL included, which `text` cannot: they are stored
-- as their UTF-8 bytes (`bytea`, which also compares bytewise).

-- Runs: narrow hot columns for filters, claims and fencing, plus the state materialized from
-- the events (WorkflowState as JSON text, kept byte for byte).
CREATE TABLE runs (
    run_id          text COLLATE "C" PRIMARY KEY,
    workflow_id     bytea NOT NULL UNIQUE,
    name            bytea NOT NULL,
    status          text NOT NULL,
    finished        boolean NOT NULL DEFAULT false,
    parent_id       text COLLATE "C",
    idempotency_key bytea,
    created_at      bigint NOT NULL,
    quarantined     boolean NOT NULL DEFAULT false,
    -- Number of events: the seq the next append gets.
    next_seq        bigint NOT NULL,
    state           text NOT NULL,
    -- The member holding the run's lease, and the fencing epoch, bumped at every acquisition.
    owner           text COLLATE "C",
    epoch           bigint NOT NULL DEFAULT 0,
    -- The member that appended last.
    last_writer     text COLLATE "C"
);
CREATE INDEX runs_unfinished ON runs (run_id) WHERE NOT finished;
CREATE INDEX runs_status ON runs (status, run_id);
CREATE INDEX runs_name ON runs (name, run_id);
CREATE INDEX runs_parent ON runs (parent_id, run_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_idempotency_key ON runs (idempotency_key, created_at)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_owner ON runs (owner) WHERE NOT finished;

-- Each run's history: insert-only. The primary key makes a position in the log one event.
CREATE TABLE events (
    run_id         text COLLATE "C" NOT NULL,
    seq            bigint NOT NULL,
    -- The step, hook or child run the event concerns (WorkflowState::correlation_id).
    correlation_id text COLLATE "C",
    body           text NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX events_correlation ON events (correlation_id, run_id, seq)
    WHERE correlation_id IS NOT NULL;

-- Steps by id: the run and position they were scheduled at (the first run to record an id
-- keeps it).
CREATE TABLE steps (
    step_id  text COLLATE "C" PRIMARY KEY,
    run_id   text COLLATE "C" NOT NULL,
    position integer NOT NULL
);

-- Hooks by id and token digest. `live`: waiting for its payload; at most one live hook holds
-- a token. `run_over`: its run has finished (its token is free and no longer found).
CREATE TABLE hooks (
    hook_id      text COLLATE "C" PRIMARY KEY,
    run_id       text COLLATE "C" NOT NULL,
    position     integer NOT NULL,
    token_digest text COLLATE "C" NOT NULL,
    live         boolean NOT NULL,
    run_over     boolean NOT NULL DEFAULT false,
    created      bigserial NOT NULL
);
CREATE UNIQUE INDEX hooks_live_token ON hooks (token_digest) WHERE live;
CREATE INDEX hooks_token ON hooks (token_digest, created) WHERE NOT run_over;
CREATE INDEX hooks_waiting ON hooks (run_id, position) WHERE live;
CREATE INDEX hooks_run ON hooks (run_id);

-- Durable timers. The kind is kept as (tag, a, b) so timers order exactly as the engine's
-- `Timer` does: fire time, run id, kind.
CREATE TABLE timers (
    fire_at  bigint NOT NULL,
    run_id   text COLLATE "C" NOT NULL,
    kind_tag smallint NOT NULL,
    a        bigint NOT NULL,
    b        bigint NOT NULL,
    PRIMARY KEY (fire_at, run_id, kind_tag, a, b)
);
CREATE INDEX timers_run ON timers (run_id);

-- Streams and their chunks; `next_index` keeps indexes dense.
CREATE TABLE streams (
    run_id     text COLLATE "C" NOT NULL,
    name       bytea NOT NULL,
    done       boolean NOT NULL DEFAULT false,
    next_index bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE chunks (
    run_id     text COLLATE "C" NOT NULL,
    name       bytea NOT NULL,
    idx        bigint NOT NULL,
    chunk_id   text NOT NULL,
    write_key  bytea,
    data       bytea NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (run_id, name, idx)
);
CREATE UNIQUE INDEX chunks_key ON chunks (run_id, name, write_key) WHERE write_key IS NOT NULL;

-- Schedules: one record (ScheduleConfig as JSON text) per id.
CREATE TABLE schedules (
    id     bytea PRIMARY KEY,
    record text NOT NULL
);

-- Processes using the store: a heartbeat row each (time from the database clock).
CREATE TABLE members (
    member_id    text COLLATE "C" PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
