//! The schema: numbered migrations for each database, applied in order,
//! one transaction each (the index + 1 is the schema version, kept in
//! SQLite's `PRAGMA user_version` and Postgres's `shellgate_schema`).
//!
//! Postgres's list starts at the schema SQLite's sixteen migrations had
//! reached when the store learnt Postgres; from there on, a change to the
//! schema is a migration in both lists. The Postgres tables have the same
//! columns with the same meaning: integers are `BIGINT` (booleans too, 0 or
//! 1, so that one query text serves both), reals `DOUBLE PRECISION`, JSON
//! kept as text, and the tables SQLite pages by its implicit `rowid` have a
//! `rowid` column of their own.
//!
//! Migrations only go forward: none is ever undone, and a binary refuses a
//! database whose schema version is past its last migration (a newer
//! shellgate migrated it) instead of running on tables it does not know.

use crate::error::StoreError;

/// Refuses a schema `found` at a version past the `known` migrations'
/// (a newer binary's database), before anything is migrated or read.
pub(crate) fn check_schema_version(found: i64, known: usize) -> Result<(), StoreError> {
    if usize::try_from(found).is_ok_and(|found| found > known) {
        return Err(StoreError::NewerSchema { found, known });
    }
    Ok(())
}

/// SQLite's migrations, applied in order; the index + 1 is the schema
/// version.
pub(crate) const SQLITE_MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE api_keys (
        hash TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE containers (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_active_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        memory_limit TEXT NOT NULL,
        expires_minutes INTEGER NOT NULL,
        network_policy TEXT NOT NULL,
        skills TEXT NOT NULL,
        file_ids TEXT NOT NULL,
        billed_seconds REAL NOT NULL DEFAULT 0,
        session_seconds REAL NOT NULL DEFAULT 0,
        session_open INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX containers_by_project ON containers (project, seq);
    CREATE TABLE files (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX files_by_project ON files (project, seq);
    CREATE TABLE container_files (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        container_id TEXT NOT NULL,
        path TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        source TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (container_id, path)
    );
    CREATE TABLE usage (
        project TEXT PRIMARY KEY,
        billed_seconds REAL NOT NULL
    );
"#,
    r#"
    ALTER TABLE files ADD COLUMN expires_at INTEGER;
    CREATE INDEX files_by_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX container_files_by_container ON container_files (container_id, seq);
"#,
    r#"
    CREATE TABLE responses (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        previous_response_id TEXT,
        body TEXT NOT NULL,
        input_items TEXT NOT NULL,
        conversation TEXT NOT NULL
    );
    CREATE INDEX responses_by_project ON responses (project, seq);
    CREATE INDEX responses_by_status ON responses (status);
"#,
    r#"
    ALTER TABLE usage ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN responses INTEGER NOT NULL DEFAULT 0;
"#,
    r#"
    CREATE TABLE commands (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        container_id TEXT NOT NULL,
        response_id TEXT,
        command TEXT NOT NULL,
        outcome TEXT NOT NULL,
        exit_code INTEGER,
        duration_ms INTEGER NOT NULL,
        bytes_out INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX commands_by_container ON commands (container_id, seq);
"#,
    r#"
    CREATE TABLE egress (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        container_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        requested_name TEXT,
        server_name TEXT,
        address TEXT,
        port INTEGER NOT NULL,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        bytes_out INTEGER NOT NULL,
        bytes_in INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL
    );
    CREATE INDEX egress_by_container ON egress (container_id, seq);
"#,
    r#"
    ALTER TABLE containers ADD COLUMN image TEXT NOT NULL DEFAULT 'host';
"#,
    r#"
    CREATE TABLE skills (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        default_version INTEGER NOT NULL,
        latest_version INTEGER NOT NULL,
        -- The highest version number ever given: numbers are never reused.
        last_number INTEGER NOT NULL
    );
    CREATE INDEX skills_by_project ON skills (project, seq);
    CREATE TABLE skill_versions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        skill_id TEXT NOT NULL,
        project TEXT NOT NULL,
        version INTEGER NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        UNIQUE (skill_id, version)
    );
"#,
    r#"
    ALTER TABLE containers ADD COLUMN sleep_after_secs INTEGER;
    CREATE TABLE sessions (
        project TEXT NOT NULL,
        session TEXT NOT NULL,
        container_id TEXT NOT NULL,
        PRIMARY KEY (project, session)
    );
    CREATE INDEX sessions_by_container ON sessions (container_id);
"#,
    r#"
    ALTER TABLE egress ADD COLUMN aggregated INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE containers ADD COLUMN egress_unlogged INTEGER NOT NULL DEFAULT 0;
"#,
    // A response stores only its own items, linked to the response it
    // continues (see responses.rs). Existing responses: one whose previous
    // response is still stored, in its project, and whose conversation
    // starts with that one's, keeps only what follows it; any other keeps
    // its whole conversation as its own.
    r#"
    CREATE TABLE response_items (
        response_id TEXT NOT NULL,
        -- The item's index in the whole conversation.
        position INTEGER NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY (response_id, position)
    ) WITHOUT ROWID;
    ALTER TABLE responses ADD COLUMN parent_id TEXT;
    ALTER TABLE responses ADD COLUMN conversation_len INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE responses ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX responses_by_parent ON responses (parent_id) WHERE parent_id IS NOT NULL;
    UPDATE responses SET conversation_len = json_array_length(conversation);
    UPDATE responses SET parent_id = previous_response_id WHERE EXISTS (
        SELECT 1 FROM responses p
        WHERE p.id = responses.previous_response_id AND p.project = responses.project
        AND p.conversation_len <= responses.conversation_len
        AND NOT EXISTS (
            SELECT 1 FROM json_each(p.conversation) pe
            WHERE json_extract(responses.conversation, '$[' || pe.key || ']') IS NOT pe.value
        )
    );
    INSERT INTO response_items (response_id, position, item)
    SELECT r.id, j.key,
        CASE j.type WHEN 'object' THEN j.value WHEN 'array' THEN j.value WHEN 'true' THEN 'true'
        WHEN 'false' THEN 'false' WHEN 'null' THEN 'null' ELSE json_quote(j.value) END
    FROM responses r, json_each(r.conversation) j
    WHERE j.key >= COALESCE((SELECT p.conversation_len FROM responses p WHERE p.id = r.parent_id), 0);
    ALTER TABLE responses DROP COLUMN conversation;
"#,
    // A container's ports reachable through the server, and the
    // token that opens them (none for containers made before).
    r#"
    ALTER TABLE containers ADD COLUMN exposed_ports TEXT NOT NULL DEFAULT '';
    ALTER TABLE containers ADD COLUMN port_token TEXT;
"#,
    // E2B's sandboxes, each a container with E2B's own record
    // (its token, metadata, timeout and pause state). Removed with its
    // container (`delete_container`).
    r#"
    CREATE TABLE e2b_sandboxes (
        container_id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        template_id TEXT NOT NULL,
        -- JSON objects of strings, as given.
        metadata TEXT NOT NULL,
        env_vars TEXT NOT NULL,
        access_token TEXT NOT NULL,
        auto_pause INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        end_at INTEGER NOT NULL,
        paused INTEGER NOT NULL DEFAULT 0,
        idempotency_key TEXT,
        request_hash TEXT
    );
    CREATE INDEX e2b_sandboxes_by_project ON e2b_sandboxes (project);
    CREATE UNIQUE INDEX e2b_sandboxes_by_idempotency_key
        ON e2b_sandboxes (project, idempotency_key) WHERE idempotency_key IS NOT NULL;
"#,
    // Whose an access token is, so that a token of one project's
    // sandbox with another project's sandbox id is answered as an unknown id;
    // and `autoResume`, a paused sandbox woken by its in-sandbox traffic.
    r#"
    CREATE INDEX e2b_sandboxes_by_access_token ON e2b_sandboxes (access_token);
    ALTER TABLE e2b_sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;
"#,
    // A key's role (`member`, or `admin`: every project in the
    // console) and its revocation (a revoked key opens nothing, and its
    // console sessions end).
    r#"
    ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'member';
    ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER;
    CREATE TABLE console_sessions (
        -- SHA-256 of the cookie's token: a copy of the database opens no session.
        token_hash TEXT PRIMARY KEY,
        key_hash TEXT NOT NULL,
        csrf_token TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );
    CREATE INDEX console_sessions_by_key ON console_sessions (key_hash, created_at);
    -- Billed seconds by the UTC day their session closed, per container:
    -- the console's usage per day (the project's total stays in `usage`).
    CREATE TABLE usage_daily (
        project TEXT NOT NULL,
        day TEXT NOT NULL,
        container_id TEXT NOT NULL,
        billed_seconds REAL NOT NULL,
        PRIMARY KEY (project, day, container_id)
    ) WITHOUT ROWID;
    CREATE INDEX containers_by_project_seq ON containers (project, seq);
    -- What changed, for the console's live updates (`console_changes.rs`):
    -- written by triggers in the same transaction as the change itself, so
    -- no write path can forget to say it, and read and pruned by the server.
    CREATE TABLE console_changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        project TEXT NOT NULL,
        topic TEXT NOT NULL,
        object_id TEXT NOT NULL,
        container_id TEXT
    );
    CREATE TRIGGER console_container_inserted AFTER INSERT ON containers BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (NEW.project, 'container', NEW.id, NEW.id);
    END;
    CREATE TRIGGER console_container_updated
    AFTER UPDATE OF status, session_open, last_active_at, billed_seconds ON containers BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (NEW.project, 'container', NEW.id, NEW.id);
    END;
    CREATE TRIGGER console_container_deleted AFTER DELETE ON containers BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (OLD.project, 'container', OLD.id, OLD.id);
    END;
    CREATE TRIGGER console_command_inserted AFTER INSERT ON commands BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (NEW.project, 'command', NEW.id, NEW.container_id);
    END;
    CREATE TRIGGER console_egress_inserted AFTER INSERT ON egress BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (NEW.project, 'egress', NEW.id, NEW.container_id);
    END;
    CREATE TRIGGER console_response_inserted AFTER INSERT ON responses BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (NEW.project, 'response', NEW.id, NULL);
    END;
    CREATE TRIGGER console_response_updated AFTER UPDATE OF status, deleted ON responses BEGIN
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (NEW.project, 'response', NEW.id, NULL);
    END;
"#,
    // The nodes of a cluster (each registers itself and
    // heart-beats), and the node each container lives on ('' on a single
    // box).
    r#"
    ALTER TABLE containers ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
    CREATE INDEX containers_by_node ON containers (node_id, status);
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        status TEXT NOT NULL,
        memory_bytes INTEGER NOT NULL,
        max_containers INTEGER NOT NULL,
        -- JSON array of image names.
        images TEXT NOT NULL,
        cgroup_layout TEXT NOT NULL,
        version TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL
    );
    -- The node running a response (in a cluster): where its live events
    -- and its cancel are.
    CREATE TABLE response_nodes (
        response_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL
    );
"#,
    // Leases, what a project holds open anywhere in a cluster
    // (the console's live streams), counted across nodes (leases.rs).
    r#"
    CREATE TABLE leases (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        project TEXT NOT NULL,
        node_id TEXT NOT NULL,
        taken_at INTEGER NOT NULL
    );
    CREATE INDEX leases_by_project ON leases (kind, project);
    CREATE INDEX leases_by_node ON leases (node_id);
"#,
    // A lost container's status when its node was declared lost, and
    // when: its node, back with its disk, restores it from these
    // (`Store::restore_lost_containers`).
    r#"
    ALTER TABLE containers ADD COLUMN lost_from TEXT;
    ALTER TABLE containers ADD COLUMN lost_at INTEGER;
"#,
    // Usage from one ledger per kind: billed seconds by (day, container) in
    // `usage_daily`, upstream tokens by (day, model) in `usage_tokens`; every
    // total and view (`/v1/usage`, the console, metrics) is a sum of their
    // rows. What was counted before them is carried over: tokens under day
    // and model '', seconds of each container not yet in `usage_daily` under
    // day '', and the rest of each project's total (containers deleted
    // before) under day and container ''. `usage` is then gone.
    r#"
    CREATE TABLE usage_tokens (
        project TEXT NOT NULL,
        day TEXT NOT NULL,
        model TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        responses INTEGER NOT NULL,
        PRIMARY KEY (project, day, model)
    ) WITHOUT ROWID;
    INSERT INTO usage_tokens (project, day, model, input_tokens, output_tokens, responses)
        SELECT project, '', '', input_tokens, output_tokens, responses FROM usage
        WHERE input_tokens > 0 OR output_tokens > 0 OR responses > 0;
    INSERT INTO usage_daily (project, day, container_id, billed_seconds)
        SELECT c.project, '', c.id, c.billed_seconds - COALESCE(d.seconds, 0)
        FROM containers c LEFT JOIN (
            SELECT container_id, SUM(billed_seconds) AS seconds FROM usage_daily GROUP BY container_id
        ) d ON d.container_id = c.id
        WHERE c.billed_seconds - COALESCE(d.seconds, 0) > 0.000001;
    INSERT INTO usage_daily (project, day, container_id, billed_seconds)
        SELECT u.project, '', '', u.billed_seconds - COALESCE(d.seconds, 0)
        FROM usage u LEFT JOIN (
            SELECT project, SUM(billed_seconds) AS seconds FROM usage_daily GROUP BY project
        ) d ON d.project = u.project
        WHERE u.billed_seconds - COALESCE(d.seconds, 0) > 0.000001;
    DROP TABLE usage;
"#,
    // The exec credits a cluster's nodes hold of each project's
    // concurrent-exec quota, and the projects that ran out of them lately
    // (exec_credits.rs).
    r#"
    CREATE TABLE exec_credits (
        project TEXT NOT NULL,
        node_id TEXT NOT NULL,
        held INTEGER NOT NULL,
        exact INTEGER NOT NULL,
        PRIMARY KEY (project, node_id)
    );
    CREATE INDEX exec_credits_by_node ON exec_credits (node_id);
    CREATE TABLE exec_credit_wants (
        project TEXT PRIMARY KEY,
        wanted_at INTEGER NOT NULL
    );
"#,
    // Whether an E2B sandbox's ports are open to anyone (E2B's
    // `network.allowPublicTraffic`, true unless the create said false).
    r#"
    ALTER TABLE e2b_sandboxes ADD COLUMN public_traffic INTEGER NOT NULL DEFAULT 1;
"#,
    // Anthropic's Message Batches (batches.rs): a batch, and its requests
    // with each one's outcome and result once it has one.
    r#"
    CREATE TABLE message_batches (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        cancel_initiated_at INTEGER,
        ended_at INTEGER
    );
    CREATE INDEX message_batches_by_project ON message_batches (project, seq);
    CREATE INDEX message_batches_by_status ON message_batches (status);
    CREATE TABLE message_batch_requests (
        batch_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        custom_id TEXT NOT NULL,
        params TEXT NOT NULL,
        outcome TEXT,
        result TEXT,
        PRIMARY KEY (batch_id, position)
    );
"#,
    // A file's MIME type as its uploader gave it (Google's Files API keeps
    // one per file); a file without one is typed by its name's extension.
    r#"
    ALTER TABLE files ADD COLUMN mime_type TEXT;
"#,
    // Volumes (volumes.rs): a project's persistent directories, and which
    // containers mount which (a row per mount, deleted with its container).
    r#"
    CREATE TABLE volumes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        token TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (project, name)
    );
    CREATE TABLE container_volumes (
        container_id TEXT NOT NULL,
        volume_id TEXT NOT NULL,
        path TEXT NOT NULL,
        PRIMARY KEY (container_id, path)
    );
    CREATE INDEX container_volumes_by_volume ON container_volumes (volume_id);
"#,
    // E2B's templates (e2b_templates.rs): a project's template, its
    // latest build (status, the build's steps as JSON, the failure) and the
    // size of the layer the build saved; a build's log entries (JSON), in
    // order.
    r#"
    CREATE TABLE e2b_templates (
        template_id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        build_id TEXT NOT NULL,
        status TEXT NOT NULL,
        spec TEXT NOT NULL,
        reason TEXT,
        failed_step TEXT,
        layer_bytes INTEGER NOT NULL DEFAULT 0,
        upload_token TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (project, name)
    );
    CREATE TABLE e2b_template_logs (
        build_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (build_id, seq)
    );
"#,
    // The node that runs a batch's requests, which resumes it after a
    // restart (empty on a single box).
    r#"
    ALTER TABLE message_batches ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
"#,
    // Snapshots (snapshots.rs): a container's files saved on a node (the
    // node that holds them), the image revision they need, and what copies
    // made from them inherit of the container (`source`, JSON).
    r#"
    CREATE TABLE snapshots (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        metadata TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        container_id TEXT NOT NULL,
        image TEXT NOT NULL,
        image_revision TEXT,
        memory_unavailable_reason TEXT,
        frozen_ms INTEGER NOT NULL,
        source TEXT NOT NULL,
        node_id TEXT NOT NULL
    );
    CREATE INDEX snapshots_by_project ON snapshots (project, seq);
"#,
    // A cluster's snapshot in the object store: the digest of its archive
    // (`snapshots/<id>.tar.zst`), which a node restoring it checks; none
    // for a snapshot only its node's engine holds.
    r#"
    ALTER TABLE snapshots ADD COLUMN archive_digest TEXT;
"#,
    // The node whose disk holds a volume (empty on a single box, and for
    // every volume made before clusters served them).
    r#"
    ALTER TABLE volumes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
"#,
    // Image builds and imports (image_builds.rs): a job of a project, the
    // image it makes, its status, why it failed and the node that runs
    // it; its log entries (JSON), in order.
    r#"
    CREATE TABLE image_builds (
        id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        image TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT,
        failed_step INTEGER,
        revision TEXT,
        node_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX image_builds_by_status ON image_builds (status);
    CREATE TABLE image_build_logs (
        build_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (build_id, seq)
    );
"#,
    // A cluster's project images in the object store (images.rs): the
    // owner, the revision, its archive's digest and the engine's details.
    r#"
    CREATE TABLE images (
        name TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        revision TEXT NOT NULL,
        archive_digest TEXT NOT NULL,
        details TEXT NOT NULL,
        node_id TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
"#,
    // The containers that hold processes (a session open, or being made),
    // indexed apart: admission (each create and wake) and a cluster's
    // placement count them and their memory limits, and read only them, not
    // every suspended container of a project or node.
    r#"
    CREATE INDEX containers_active_by_project ON containers (project, memory_limit)
        WHERE session_open = 1 OR status = 'creating';
    CREATE INDEX containers_active_by_node ON containers (node_id, memory_limit)
        WHERE session_open = 1 OR status = 'creating';
"#,
    // The node running an E2B template's build (empty on a single box, and
    // while it waits for its start): a node's restart, or its loss, fails
    // the builds it ran.
    r#"
    ALTER TABLE e2b_templates ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
"#,
    // What the lifecycle sweeper acts on, found by index ranges rather than
    // by reading every container of its node (`sweep.rs`): each container's
    // expiry time; its idle time, for open sessions with and without a
    // `sleep_after_secs` of their own; a suspended one's last activity per
    // status (retention; lost ones); running E2B sandboxes by `end_at`. An
    // E2B sandbox's container is marked (`e2b_sandbox`, with its
    // `e2b_sandboxes` row), as idle expiry never applies to it: its paused
    // ones, kept for days, stay out of the expiry range.
    r#"
    ALTER TABLE containers ADD COLUMN e2b_sandbox INTEGER NOT NULL DEFAULT 0;
    UPDATE containers SET e2b_sandbox = 1 WHERE id IN (SELECT container_id FROM e2b_sandboxes);
    DROP INDEX containers_by_node;
    CREATE INDEX containers_by_node ON containers (node_id, status, last_active_at);
    CREATE INDEX containers_expiring
        ON containers (node_id, e2b_sandbox, (last_active_at + expires_minutes * 60));
    CREATE INDEX containers_idle ON containers (node_id, last_active_at)
        WHERE session_open = 1 AND sleep_after_secs IS NULL;
    CREATE INDEX containers_idle_own ON containers (node_id, (last_active_at + sleep_after_secs))
        WHERE session_open = 1 AND sleep_after_secs IS NOT NULL;
    CREATE INDEX e2b_sandboxes_running_by_end ON e2b_sandboxes (end_at) WHERE paused = 0;
"#,
    // A project's containers of one name, newest first (`GET
    // /v1/containers?name=`): by index, not by reading every container of
    // the project.
    r#"
    CREATE INDEX containers_by_project_name ON containers (project, name, seq);
"#,
];

/// Postgres's migrations, applied in order; the index + 1 is the schema
/// version.
pub(crate) const POSTGRES_MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE api_keys (
        hash TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        role TEXT NOT NULL DEFAULT 'member',
        revoked_at BIGINT
    );
    CREATE TABLE containers (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        last_active_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        memory_limit TEXT NOT NULL,
        expires_minutes BIGINT NOT NULL,
        network_policy TEXT NOT NULL,
        skills TEXT NOT NULL,
        file_ids TEXT NOT NULL,
        billed_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
        session_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
        session_open BIGINT NOT NULL DEFAULT 0,
        image TEXT NOT NULL DEFAULT 'host',
        sleep_after_secs BIGINT,
        egress_unlogged BIGINT NOT NULL DEFAULT 0,
        exposed_ports TEXT NOT NULL DEFAULT '',
        port_token TEXT
    );
    CREATE INDEX containers_by_project ON containers (project, seq);
    CREATE INDEX containers_by_status ON containers (status);
    CREATE TABLE files (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT
    );
    CREATE INDEX files_by_project ON files (project, seq);
    CREATE INDEX files_by_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
    CREATE TABLE container_files (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        container_id TEXT NOT NULL,
        path TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        source TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        UNIQUE (container_id, path)
    );
    CREATE INDEX container_files_by_container ON container_files (container_id, seq);
    CREATE TABLE usage (
        project TEXT PRIMARY KEY,
        billed_seconds DOUBLE PRECISION NOT NULL,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        responses BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE responses (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        previous_response_id TEXT,
        body TEXT NOT NULL,
        input_items TEXT NOT NULL,
        parent_id TEXT,
        conversation_len BIGINT NOT NULL DEFAULT 0,
        deleted BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX responses_by_project ON responses (project, seq);
    CREATE INDEX responses_by_status ON responses (status);
    CREATE INDEX responses_by_parent ON responses (parent_id) WHERE parent_id IS NOT NULL;
    CREATE TABLE response_items (
        response_id TEXT NOT NULL,
        position BIGINT NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY (response_id, position)
    );
    CREATE TABLE commands (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        container_id TEXT NOT NULL,
        response_id TEXT,
        command TEXT NOT NULL,
        outcome TEXT NOT NULL,
        exit_code BIGINT,
        duration_ms BIGINT NOT NULL,
        bytes_out BIGINT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX commands_by_container ON commands (container_id, seq);
    CREATE TABLE egress (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        container_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        kind TEXT NOT NULL,
        requested_name TEXT,
        server_name TEXT,
        address TEXT,
        port BIGINT NOT NULL,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        bytes_out BIGINT NOT NULL,
        bytes_in BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        aggregated BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX egress_by_container ON egress (container_id, seq);
    CREATE TABLE skills (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        default_version BIGINT NOT NULL,
        latest_version BIGINT NOT NULL,
        last_number BIGINT NOT NULL
    );
    CREATE INDEX skills_by_project ON skills (project, seq);
    CREATE TABLE skill_versions (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        skill_id TEXT NOT NULL,
        project TEXT NOT NULL,
        version BIGINT NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        bytes BIGINT NOT NULL,
        UNIQUE (skill_id, version)
    );
    CREATE TABLE sessions (
        project TEXT NOT NULL,
        session TEXT NOT NULL,
        container_id TEXT NOT NULL,
        PRIMARY KEY (project, session)
    );
    CREATE INDEX sessions_by_container ON sessions (container_id);
    CREATE TABLE e2b_sandboxes (
        rowid BIGSERIAL UNIQUE,
        container_id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        template_id TEXT NOT NULL,
        metadata TEXT NOT NULL,
        env_vars TEXT NOT NULL,
        access_token TEXT NOT NULL,
        auto_pause BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        started_at BIGINT NOT NULL,
        end_at BIGINT NOT NULL,
        paused BIGINT NOT NULL DEFAULT 0,
        idempotency_key TEXT,
        request_hash TEXT,
        auto_resume BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX e2b_sandboxes_by_project ON e2b_sandboxes (project);
    CREATE UNIQUE INDEX e2b_sandboxes_by_idempotency_key
        ON e2b_sandboxes (project, idempotency_key) WHERE idempotency_key IS NOT NULL;
    CREATE INDEX e2b_sandboxes_by_access_token ON e2b_sandboxes (access_token);
    CREATE TABLE console_sessions (
        rowid BIGSERIAL UNIQUE,
        token_hash TEXT PRIMARY KEY,
        key_hash TEXT NOT NULL,
        csrf_token TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    );
    CREATE INDEX console_sessions_by_key ON console_sessions (key_hash, created_at);
    CREATE TABLE usage_daily (
        project TEXT NOT NULL,
        day TEXT NOT NULL,
        container_id TEXT NOT NULL,
        billed_seconds DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (project, day, container_id)
    );
    CREATE TABLE console_changes (
        seq BIGSERIAL PRIMARY KEY,
        project TEXT NOT NULL,
        topic TEXT NOT NULL,
        object_id TEXT NOT NULL,
        container_id TEXT
    );
    -- One function writes the change row of every trigger below (its
    -- arguments: the topic, and whether the object is a container, whose
    -- id is then also its container's) and tells the listeners.
    CREATE FUNCTION shellgate_console_change() RETURNS trigger AS $body$
    DECLARE
        changed RECORD;
        container TEXT;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD; ELSE changed := NEW; END IF;
        IF TG_ARGV[0] = 'container' THEN
            container := changed.id;
        ELSIF TG_ARGV[0] = 'response' THEN
            container := NULL;
        ELSE
            container := changed.container_id;
        END IF;
        INSERT INTO console_changes (project, topic, object_id, container_id)
        VALUES (changed.project, TG_ARGV[0], changed.id, container);
        PERFORM pg_notify('shellgate_changes', '');
        RETURN NULL;
    END
    $body$ LANGUAGE plpgsql;
    CREATE TRIGGER console_container_inserted AFTER INSERT ON containers
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('container');
    CREATE TRIGGER console_container_updated
        AFTER UPDATE OF status, session_open, last_active_at, billed_seconds ON containers
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('container');
    CREATE TRIGGER console_container_deleted AFTER DELETE ON containers
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('container');
    CREATE TRIGGER console_command_inserted AFTER INSERT ON commands
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('command');
    CREATE TRIGGER console_egress_inserted AFTER INSERT ON egress
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('egress');
    CREATE TRIGGER console_response_inserted AFTER INSERT ON responses
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('response');
    CREATE TRIGGER console_response_updated AFTER UPDATE OF status, deleted ON responses
        FOR EACH ROW EXECUTE FUNCTION shellgate_console_change('response');
"#,
    // The nodes of a cluster: as SQLite's migration 17.
    r#"
    ALTER TABLE containers ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
    CREATE INDEX containers_by_node ON containers (node_id, status);
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        status TEXT NOT NULL,
        memory_bytes BIGINT NOT NULL,
        max_containers BIGINT NOT NULL,
        images TEXT NOT NULL,
        cgroup_layout TEXT NOT NULL,
        version TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        heartbeat_at BIGINT NOT NULL
    );
    CREATE TABLE response_nodes (
        response_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL
    );
"#,
    // Leases: as SQLite's migration 18.
    r#"
    CREATE TABLE leases (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        project TEXT NOT NULL,
        node_id TEXT NOT NULL,
        taken_at BIGINT NOT NULL
    );
    CREATE INDEX leases_by_project ON leases (kind, project);
    CREATE INDEX leases_by_node ON leases (node_id);
"#,
    r#"
    ALTER TABLE containers ADD COLUMN lost_from TEXT;
    ALTER TABLE containers ADD COLUMN lost_at BIGINT;
"#,
    // Usage from one ledger per kind (see SQLite's migration that makes usage_tokens).
    r#"
    CREATE TABLE usage_tokens (
        project TEXT NOT NULL,
        day TEXT NOT NULL,
        model TEXT NOT NULL,
        input_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL,
        responses BIGINT NOT NULL,
        PRIMARY KEY (project, day, model)
    );
    INSERT INTO usage_tokens (project, day, model, input_tokens, output_tokens, responses)
        SELECT project, '', '', input_tokens, output_tokens, responses FROM usage
        WHERE input_tokens > 0 OR output_tokens > 0 OR responses > 0;
    INSERT INTO usage_daily (project, day, container_id, billed_seconds)
        SELECT c.project, '', c.id, c.billed_seconds - COALESCE(d.seconds, 0)
        FROM containers c LEFT JOIN (
            SELECT container_id, SUM(billed_seconds) AS seconds FROM usage_daily GROUP BY container_id
        ) d ON d.container_id = c.id
        WHERE c.billed_seconds - COALESCE(d.seconds, 0) > 0.000001;
    INSERT INTO usage_daily (project, day, container_id, billed_seconds)
        SELECT u.project, '', '', u.billed_seconds - COALESCE(d.seconds, 0)
        FROM usage u LEFT JOIN (
            SELECT project, SUM(billed_seconds) AS seconds FROM usage_daily GROUP BY project
        ) d ON d.project = u.project
        WHERE u.billed_seconds - COALESCE(d.seconds, 0) > 0.000001;
    DROP TABLE usage;
"#,
    // The exec credits (see SQLite's migration that makes exec_credits).
    r#"
    CREATE TABLE exec_credits (
        project TEXT NOT NULL,
        node_id TEXT NOT NULL,
        held BIGINT NOT NULL,
        exact BIGINT NOT NULL,
        PRIMARY KEY (project, node_id)
    );
    CREATE INDEX exec_credits_by_node ON exec_credits (node_id);
    CREATE TABLE exec_credit_wants (
        project TEXT PRIMARY KEY,
        wanted_at BIGINT NOT NULL
    );
"#,
    // An E2B sandbox's `allowPublicTraffic` (see SQLite's migration).
    r#"
    ALTER TABLE e2b_sandboxes ADD COLUMN public_traffic BIGINT NOT NULL DEFAULT 1;
"#,
    // Anthropic's Message Batches: as SQLite's migration that makes message_batches.
    r#"
    CREATE TABLE message_batches (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        cancel_initiated_at BIGINT,
        ended_at BIGINT
    );
    CREATE INDEX message_batches_by_project ON message_batches (project, seq);
    CREATE INDEX message_batches_by_status ON message_batches (status);
    CREATE TABLE message_batch_requests (
        batch_id TEXT NOT NULL,
        position BIGINT NOT NULL,
        custom_id TEXT NOT NULL,
        params TEXT NOT NULL,
        outcome TEXT,
        result TEXT,
        PRIMARY KEY (batch_id, position)
    );
"#,
    // A file's MIME type: as SQLite's migration that adds files.mime_type.
    r#"
    ALTER TABLE files ADD COLUMN mime_type TEXT;
"#,
    // Volumes: as SQLite's migration that makes volumes.
    r#"
    CREATE TABLE volumes (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        token TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        UNIQUE (project, name)
    );
    CREATE TABLE container_volumes (
        container_id TEXT NOT NULL,
        volume_id TEXT NOT NULL,
        path TEXT NOT NULL,
        PRIMARY KEY (container_id, path)
    );
    CREATE INDEX container_volumes_by_volume ON container_volumes (volume_id);
"#,
    // E2B's templates (see SQLite's migration that makes e2b_templates).
    r#"
    CREATE TABLE e2b_templates (
        template_id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        build_id TEXT NOT NULL,
        status TEXT NOT NULL,
        spec TEXT NOT NULL,
        reason TEXT,
        failed_step TEXT,
        layer_bytes BIGINT NOT NULL DEFAULT 0,
        upload_token TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        UNIQUE (project, name)
    );
    CREATE TABLE e2b_template_logs (
        build_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (build_id, seq)
    );
"#,
    // A batch's node: as SQLite's migration that adds message_batches.node_id.
    r#"
    ALTER TABLE message_batches ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
"#,
    // Snapshots: as SQLite's migration that makes snapshots.
    r#"
    CREATE TABLE snapshots (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        metadata TEXT NOT NULL,
        size_bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        container_id TEXT NOT NULL,
        image TEXT NOT NULL,
        image_revision TEXT,
        memory_unavailable_reason TEXT,
        frozen_ms BIGINT NOT NULL,
        source TEXT NOT NULL,
        node_id TEXT NOT NULL
    );
    CREATE INDEX snapshots_by_project ON snapshots (project, seq);
"#,
    // A snapshot's archive: as SQLite's migration that adds
    // snapshots.archive_digest.
    r#"
    ALTER TABLE snapshots ADD COLUMN archive_digest TEXT;
"#,
    // A volume's node: as SQLite's migration that adds volumes.node_id.
    r#"
    ALTER TABLE volumes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
"#,
    // Image builds: as SQLite's migration that makes image_builds.
    r#"
    CREATE TABLE image_builds (
        id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        image TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT,
        failed_step BIGINT,
        revision TEXT,
        node_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    );
    CREATE INDEX image_builds_by_status ON image_builds (status);
    CREATE TABLE image_build_logs (
        build_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (build_id, seq)
    );
"#,
    // A cluster's project images: as SQLite's migration that makes images.
    r#"
    CREATE TABLE images (
        name TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        revision TEXT NOT NULL,
        archive_digest TEXT NOT NULL,
        details TEXT NOT NULL,
        node_id TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
"#,
    // The containers that hold processes: as SQLite's migration that makes
    // containers_active_by_project.
    r#"
    CREATE INDEX containers_active_by_project ON containers (project, memory_limit)
        WHERE session_open = 1 OR status = 'creating';
    CREATE INDEX containers_active_by_node ON containers (node_id, memory_limit)
        WHERE session_open = 1 OR status = 'creating';
"#,
    // The node running an E2B template's build: as SQLite's.
    r#"
    ALTER TABLE e2b_templates ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
"#,
    // The lifecycle sweeper's indexes: as SQLite's migration that adds
    // containers.e2b_sandbox.
    r#"
    ALTER TABLE containers ADD COLUMN e2b_sandbox BIGINT NOT NULL DEFAULT 0;
    UPDATE containers SET e2b_sandbox = 1 WHERE id IN (SELECT container_id FROM e2b_sandboxes);
    DROP INDEX containers_by_node;
    CREATE INDEX containers_by_node ON containers (node_id, status, last_active_at);
    CREATE INDEX containers_expiring
        ON containers (node_id, e2b_sandbox, (last_active_at + expires_minutes * 60));
    CREATE INDEX containers_idle ON containers (node_id, last_active_at)
        WHERE session_open = 1 AND sleep_after_secs IS NULL;
    CREATE INDEX containers_idle_own ON containers (node_id, (last_active_at + sleep_after_secs))
        WHERE session_open = 1 AND sleep_after_secs IS NOT NULL;
    CREATE INDEX e2b_sandboxes_running_by_end ON e2b_sandboxes (end_at) WHERE paused = 0;
"#,
    // A project's containers of one name: as SQLite's.
    r#"
    CREATE INDEX containers_by_project_name ON containers (project, name, seq);
"#,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::Store;
    use crate::sql::{PostgresDatabase, PostgresOptions};

    #[test]
    fn sqlite_refuses_a_schema_newer_than_its_migrations() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let newer = SQLITE_MIGRATIONS.len() as i64 + 1;
        conn.pragma_update(None, "user_version", newer).unwrap();
        let refusal = match Store::from_sqlite_connection(conn) {
            Ok(_) => panic!("a store opened on a schema at version {newer}"),
            Err(error) => error,
        };
        assert!(
            matches!(refusal, StoreError::NewerSchema { found, known }
                if found == newer && known == SQLITE_MIGRATIONS.len()),
            "expected a newer-schema refusal, got: {refusal}"
        );
        let message = refusal.to_string();
        assert!(
            message.contains(&format!("version {newer}")) && message.contains("backup"),
            "the refusal says the version found and how to go back: {message}"
        );
    }

    #[test]
    fn sqlite_opens_its_own_schema_again() {
        let directory =
            std::env::temp_dir().join(format!("shellgate-store-schema-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("shellgate.db");
        drop(Store::open(&path).unwrap());
        let reopened = Store::open(&path);
        let _ = std::fs::remove_dir_all(&directory);
        if let Err(error) = reopened {
            panic!("a database at this binary's own schema version did not open again: {error}");
        }
    }

    #[test]
    fn postgres_refuses_a_schema_newer_than_its_migrations() {
        let Some(url) = crate::testing::postgres_url() else {
            return;
        };
        let options = PostgresOptions {
            url,
            schema: Some(format!("test_newer_schema_{}", std::process::id())),
            pool_size: 1,
            ca_file: std::env::var("SHELLGATE_TEST_POSTGRES_CA")
                .ok()
                .map(Into::into),
        };
        let owner = PostgresDatabase::open(&options).unwrap();
        let newer = POSTGRES_MIGRATIONS.len() as i64 + 1;
        let store = Store::open_postgres(&options).unwrap();
        store
            .write(|sql| sql.execute("UPDATE shellgate_schema SET version = ?1", &[&newer]))
            .unwrap();
        store.close();
        let reopened = Store::open_postgres(&options);
        let _ = owner.drop_schema();
        let refusal = match reopened {
            Ok(_) => panic!("a store opened on a schema at version {newer}"),
            Err(error) => error,
        };
        assert!(
            matches!(refusal, StoreError::NewerSchema { found, known }
                if found == newer && known == POSTGRES_MIGRATIONS.len()),
            "expected a newer-schema refusal, got: {refusal}"
        );
    }
}
