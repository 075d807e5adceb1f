package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// applicationID marks a SQLite file as a ckptd database (PRAGMA application_id, "ckpt").
const applicationID = 0x636b7074

// migrations[i] brings the schema from user_version i to i+1. Append only: never edit a released
// step. Each step runs in its own IMMEDIATE transaction together with the user_version bump.
var migrations = []string{
	// 1: core schema: workflows, deduplicated states, checkpoints, metadata index.
	`
PRAGMA application_id = 1667985524;

CREATE TABLE workflows (
	workflow_id  TEXT PRIMARY KEY,
	next_seq     INTEGER NOT NULL DEFAULT 1,
	created_at   INTEGER NOT NULL,  -- unix micros
	updated_at   INTEGER NOT NULL,  -- last save (unix micros)
	completed_at INTEGER            -- NULL: not completed
);

-- State bytes, stored once per SHA-256 of the raw bytes as the client sent them.
CREATE TABLE states (
	id          INTEGER PRIMARY KEY,
	hash        BLOB NOT NULL UNIQUE,  -- sha256 of the raw state (32 bytes)
	encoding    INTEGER NOT NULL,      -- 0 raw, 1 zstd
	size        INTEGER NOT NULL,      -- raw size
	stored_size INTEGER NOT NULL,      -- length(data)
	data        BLOB NOT NULL          -- last: nothing is read after it
);

CREATE TABLE checkpoints (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,  -- save order
	checkpoint_id   TEXT NOT NULL UNIQUE,
	workflow_id     TEXT NOT NULL,
	namespace       TEXT NOT NULL,
	seq             INTEGER NOT NULL,
	parent_id       TEXT,
	phase           TEXT NOT NULL,
	step            INTEGER NOT NULL,
	step_name       TEXT,
	error           TEXT,               -- {"message","retryable"} or NULL
	state_type      TEXT NOT NULL,      -- json | bytes | none
	state_hash      BLOB,               -- states.hash, NULL for none
	size            INTEGER NOT NULL,
	stored_size     INTEGER NOT NULL,
	dedup           INTEGER NOT NULL,   -- the state was already stored at save time
	completed_count INTEGER NOT NULL,
	pending_count   INTEGER NOT NULL,
	workflow_hash   TEXT,
	created_at      INTEGER NOT NULL,   -- unix micros
	format_version  INTEGER NOT NULL,
	content_hash    BLOB NOT NULL,      -- idempotency digest over every saved field
	metadata        BLOB,               -- raw JSON object as sent
	completed_tasks BLOB,               -- raw JSON array as sent
	pending_tasks   BLOB                -- raw JSON array as sent (last: may be large)
);
CREATE UNIQUE INDEX checkpoints_wf_seq ON checkpoints(workflow_id, seq);
CREATE INDEX checkpoints_wf_ns_seq ON checkpoints(workflow_id, namespace, seq);
CREATE INDEX checkpoints_ns_id ON checkpoints(namespace, id);
CREATE INDEX checkpoints_phase_id ON checkpoints(phase, id);
CREATE INDEX checkpoints_state ON checkpoints(state_hash);

-- Top-level metadata keys for exact-match filters; value is canonical compact JSON.
CREATE TABLE checkpoint_meta (
	key   TEXT NOT NULL,
	value TEXT NOT NULL,
	ckpt  INTEGER NOT NULL,  -- checkpoints.id
	PRIMARY KEY (key, value, ckpt)
) WITHOUT ROWID;
CREATE INDEX checkpoint_meta_ckpt ON checkpoint_meta(ckpt);
`,
	// 2: workflow configuration (retention, free config) and pending writes.
	`
ALTER TABLE workflows ADD COLUMN retention TEXT;  -- JSON Retention, NULL: server default
ALTER TABLE workflows ADD COLUMN config TEXT;     -- free JSON object for later features

CREATE TABLE writes (
	checkpoint_id TEXT NOT NULL,
	task_id       TEXT NOT NULL,
	idx           INTEGER NOT NULL,
	workflow_id   TEXT NOT NULL,
	namespace     TEXT NOT NULL,
	channel       TEXT NOT NULL,
	type          TEXT,
	task_path     TEXT NOT NULL,
	is_bytes      INTEGER NOT NULL,
	value         BLOB,
	PRIMARY KEY (checkpoint_id, task_id, idx)
);
`,
	// 3: LangGraph channel storage (store/sqlite/channels.go): checkpoints keyed by (thread, namespace, id),
	// channel blobs keyed by (thread, namespace, channel, version), pending writes, metadata index.
	`
CREATE TABLE lg_checkpoints (
	id               INTEGER PRIMARY KEY,  -- storage order (ties in lg/list)
	thread_id        TEXT NOT NULL,
	namespace        TEXT NOT NULL,
	checkpoint_id    TEXT NOT NULL,
	parent_id        TEXT,
	created_at       INTEGER NOT NULL,     -- unix micros
	channel_versions TEXT NOT NULL,        -- JSON object channel -> version, as sent
	metadata         BLOB,                 -- JSON object as sent
	type             TEXT NOT NULL,        -- serializer tag of data
	encoding         INTEGER NOT NULL,     -- 0 raw, 1 zstd, 2 chunked zstd
	size             INTEGER NOT NULL,     -- raw size
	sha256           BLOB NOT NULL,        -- of the raw bytes
	data             BLOB NOT NULL         -- the serialized checkpoint (last)
);
CREATE UNIQUE INDEX lg_checkpoints_key ON lg_checkpoints(thread_id, namespace, checkpoint_id);
CREATE INDEX lg_checkpoints_thread ON lg_checkpoints(thread_id, checkpoint_id);
CREATE INDEX lg_checkpoints_ns ON lg_checkpoints(namespace, checkpoint_id);
CREATE INDEX lg_checkpoints_id ON lg_checkpoints(checkpoint_id);

-- Top-level metadata keys for exact-match filters: vhash = first 16 bytes of SHA-256 of the
-- value's canonical JSON. checkpoint_id is repeated so that filters walk it in list order.
CREATE TABLE lg_meta (
	key           TEXT NOT NULL,
	vhash         BLOB NOT NULL,
	checkpoint_id TEXT NOT NULL,
	ckpt          INTEGER NOT NULL,  -- lg_checkpoints.id
	PRIMARY KEY (key, vhash, checkpoint_id, ckpt)
) WITHOUT ROWID;
CREATE INDEX lg_meta_ckpt ON lg_meta(ckpt);

-- Channel values; immutable once stored. version is the canonical JSON text of the version.
CREATE TABLE lg_blobs (
	id        INTEGER PRIMARY KEY,
	thread_id TEXT NOT NULL,
	namespace TEXT NOT NULL,
	channel   TEXT NOT NULL,
	version   TEXT NOT NULL,
	type      TEXT NOT NULL,     -- serializer tag; "empty": no value
	encoding  INTEGER NOT NULL,
	size      INTEGER NOT NULL,
	sha256    BLOB NOT NULL,
	data      BLOB NOT NULL
);
CREATE UNIQUE INDEX lg_blobs_key ON lg_blobs(thread_id, namespace, channel, version);

CREATE TABLE lg_writes (
	id            INTEGER PRIMARY KEY,
	thread_id     TEXT NOT NULL,
	namespace     TEXT NOT NULL,
	checkpoint_id TEXT NOT NULL,
	task_id       TEXT NOT NULL,
	idx           INTEGER NOT NULL,
	task_path     TEXT NOT NULL,
	channel       TEXT NOT NULL,
	type          TEXT NOT NULL,
	encoding      INTEGER NOT NULL,
	size          INTEGER NOT NULL,
	sha256        BLOB NOT NULL,
	data          BLOB NOT NULL
);
CREATE UNIQUE INDEX lg_writes_key ON lg_writes(thread_id, namespace, checkpoint_id, task_id, idx);
`,
	// 4: source fingerprints (drift manifests) recorded with checkpoints (store/sqlite/manifests.go): a
	// header per checkpoint plus its ordered entry keys, cut into chunks stored once per content;
	// each distinct entry stored once. Reference counts let deletions collect what is unused.
	`
CREATE TABLE drift_manifests (
	ckpt   INTEGER PRIMARY KEY,  -- checkpoints.id
	root   TEXT NOT NULL,        -- absolute sources.root
	files  INTEGER NOT NULL,     -- number of entries
	header BLOB NOT NULL,        -- drift.MarshalManifest of the manifest without its entries
	chunks BLOB NOT NULL         -- drift_chunks.id (16 bytes) of each chunk of its entry keys, in order
);

-- A run of consecutive entry keys of a manifest; identical runs are shared by manifests.
CREATE TABLE drift_chunks (
	id   BLOB PRIMARY KEY,       -- first 16 bytes of BLAKE3(keys)
	refs INTEGER NOT NULL,       -- manifests listing it; the row goes at 0
	keys BLOB NOT NULL           -- drift.EntryKey (16 bytes) of each entry, in path order
) WITHOUT ROWID;

CREATE TABLE drift_entries (
	key  BLOB PRIMARY KEY,       -- drift.EntryKey
	refs INTEGER NOT NULL,       -- chunks listing it; the row goes at 0
	data BLOB NOT NULL           -- drift.EncodeEntry
) WITHOUT ROWID;
`,
	// 5: deferred compression (store/sqlite/compact.go): states saved raw with encoding 3 until the
	// compactor compresses them; this index finds the leftovers at start-up. Older builds must
	// not open such a database (they would read encoding 3 as corrupt), hence a schema step.
	`
CREATE INDEX states_pending ON states(encoding) WHERE encoding = 3;
`,
	// 6: validation checkpoints and the compensation log (store/saga.go): a checkpoint's
	// validation status and record; compensations registered per workflow (seq: registration
	// order; after_seq: the workflow's newest checkpoint seq when registered); rollbacks, at
	// most one unfinished per (workflow, namespace).
	`
ALTER TABLE checkpoints ADD COLUMN validation_status TEXT;  -- passed | warning | failed; NULL: none
ALTER TABLE checkpoints ADD COLUMN validation BLOB;         -- JSON {confidence, min, warning, message?, details?}
CREATE INDEX checkpoints_validation ON checkpoints(workflow_id, namespace, seq) WHERE validation_status IS NOT NULL;
CREATE INDEX checkpoints_validation_id ON checkpoints(validation_status, id) WHERE validation_status IS NOT NULL;

CREATE TABLE compensations (
	id              INTEGER PRIMARY KEY,
	compensation_id TEXT NOT NULL UNIQUE,
	workflow_id     TEXT NOT NULL,
	namespace       TEXT NOT NULL,
	seq             INTEGER NOT NULL,   -- registration order within the workflow
	after_seq       INTEGER NOT NULL,   -- workflows.next_seq - 1 when registered
	checkpoint_id   TEXT,
	step_name       TEXT,
	task_id         TEXT,
	description     TEXT NOT NULL,
	status          TEXT NOT NULL,      -- pending | done | failed
	error           TEXT,               -- the last failure a rollback reported
	rollback_id     TEXT,               -- the rollback that ran it last
	created_at      INTEGER NOT NULL,   -- unix micros
	done_at         INTEGER,
	action          BLOB NOT NULL       -- opaque JSON as sent (last)
);
CREATE UNIQUE INDEX compensations_wf_seq ON compensations(workflow_id, seq);
CREATE INDEX compensations_wf_ns_seq ON compensations(workflow_id, namespace, seq);

CREATE TABLE rollbacks (
	rollback_id      TEXT PRIMARY KEY,
	workflow_id      TEXT NOT NULL,
	namespace        TEXT NOT NULL,
	to_checkpoint_id TEXT,              -- NULL: a full rollback
	to_seq           INTEGER NOT NULL,  -- the target's seq (0: full)
	max_seq          INTEGER NOT NULL,  -- the newest compensation seq of the workflow when planned
	created_at       INTEGER NOT NULL,
	completed_at     INTEGER            -- NULL: unfinished
);
CREATE UNIQUE INDEX rollbacks_unfinished ON rollbacks(workflow_id, namespace) WHERE completed_at IS NULL;
CREATE INDEX rollbacks_wf ON rollbacks(workflow_id, created_at);
`,
	// 7: claims (store/sqlite/claims.go, store/claims.go): one row per workflow (or LangGraph
	// thread) id ever claimed, never deleted, so that its fencing token never goes back. Writes
	// look their id up here in their own transaction. workflow/list {claimable} walks the
	// resumable workflows oldest first through workflows_claimable and probes claims by key.
	`
CREATE TABLE claims (
	workflow_id TEXT PRIMARY KEY,  -- a workflowId or a LangGraph threadId
	token       INTEGER NOT NULL,  -- fencing token of the latest claim (1, 2, ...)
	owner       TEXT,              -- NULL: released
	expires_at  INTEGER            -- unix micros, the database's clock; NULL: released
) WITHOUT ROWID;
CREATE INDEX workflows_claimable ON workflows(updated_at, workflow_id) WHERE completed_at IS NULL;
`,
	// 8: fewer pages written per save (#18; measured by TestWALFramesPerSave). A 1 KB save wrote
	// ~16 WAL frames, one per b-tree it touched; this step takes four of them out of the
	// checkpoints table's:
	// - AUTOINCREMENT goes (sqlite_sequence was rewritten by every save). The b-tree is the same
	//   with or without it (id stays the INTEGER PRIMARY KEY, in save order), so the table's
	//   definition is edited in place instead of copying every row: the documented way to make a
	//   schema change that leaves the stored content as it is. Without it a new id is max(id)+1:
	//   an id is reused only after the newest checkpoint was deleted, which no reader keeps (rows
	//   that name a checkpoint by id go with it).
	// - (workflow_id, seq) and (workflow_id, namespace, seq) become one index, (workflow_id, seq,
	//   namespace): per-workflow reads walk it newest first as before; those that also filter on a
	//   namespace read the namespace from the index (a workflow's checkpoints are almost always in
	//   one namespace; else the walk skips the other namespaces' newer entries).
	// - the cross-workflow (namespace, id) and (phase, id) indexes keep only the rows a filter
	//   needs them for: namespace <> '' and phase <> 'completed'. Filters on '' or on completed
	//   (most checkpoints) walk the table in save order instead, stopping at the limit.
	// - the state_hash index leaves out checkpoints without a state.
	`
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'INTEGER PRIMARY KEY AUTOINCREMENT,', 'INTEGER PRIMARY KEY,')
	WHERE type = 'table' AND name = 'checkpoints';
PRAGMA writable_schema = OFF;
DELETE FROM sqlite_sequence WHERE name = 'checkpoints';
DROP INDEX checkpoints_wf_seq;
DROP INDEX checkpoints_wf_ns_seq;
DROP INDEX checkpoints_ns_id;
DROP INDEX checkpoints_phase_id;
DROP INDEX checkpoints_state;
CREATE UNIQUE INDEX checkpoints_wf_seq ON checkpoints(workflow_id, seq, namespace);
CREATE INDEX checkpoints_ns_id ON checkpoints(namespace, id) WHERE namespace <> '';
CREATE INDEX checkpoints_phase_id ON checkpoints(phase, id) WHERE phase <> 'completed';
CREATE INDEX checkpoints_state ON checkpoints(state_hash) WHERE state_hash IS NOT NULL;
`,
	// 9: LangGraph fidelity and retention (store/sqlite/channels.go, store/lgrefs.go,
	// store/lgretention.go). Values: a (channel, version) may hold several values (variants),
	// the first is 0; a checkpoint's value_refs names the variant of each channel whose value
	// is not variant 0 (NULL: none), so that replayed branches never read each other's values;
	// lg_blobs_variants finds the (thread, namespace) pairs that have other variants. Staged
	// values: stored ahead by lg/putValue, moved into lg_blobs or lg_writes by the put naming
	// them, collected after a while otherwise. Threads: one row per thread with checkpoints,
	// its last put and its own retention (its expiry repeated for the sweep); lg_config holds the
	// database's retention for threads without their own.
	`
ALTER TABLE lg_blobs ADD COLUMN variant INTEGER NOT NULL DEFAULT 0;
DROP INDEX lg_blobs_key;
CREATE UNIQUE INDEX lg_blobs_key ON lg_blobs(thread_id, namespace, channel, version, variant);
CREATE INDEX lg_blobs_variants ON lg_blobs(thread_id, namespace) WHERE variant > 0;
ALTER TABLE lg_checkpoints ADD COLUMN value_refs TEXT;  -- JSON {channel: variant}; NULL: all variant 0

CREATE TABLE lg_staged (
	id         INTEGER PRIMARY KEY,
	thread_id  TEXT NOT NULL,
	created_at INTEGER NOT NULL,  -- unix micros
	type       TEXT NOT NULL,
	encoding   INTEGER NOT NULL,
	size       INTEGER NOT NULL,
	sha256     BLOB NOT NULL,
	data       BLOB NOT NULL
);
CREATE INDEX lg_staged_created ON lg_staged(created_at);

CREATE TABLE lg_threads (
	thread_id  TEXT PRIMARY KEY,
	updated_at INTEGER NOT NULL,  -- unix micros of its last put
	retention  TEXT,              -- JSON Retention of its own; NULL: the database's or the daemon's
	expires_at INTEGER            -- with its own retention's idleTtlSeconds: updated_at + that
) WITHOUT ROWID;
CREATE INDEX lg_threads_updated ON lg_threads(updated_at);
CREATE INDEX lg_threads_expires ON lg_threads(expires_at) WHERE expires_at IS NOT NULL;
INSERT INTO lg_threads(thread_id, updated_at) SELECT thread_id, max(created_at) FROM lg_checkpoints GROUP BY thread_id;

CREATE TABLE lg_config (
	name  TEXT PRIMARY KEY,  -- 'retention'
	value TEXT NOT NULL
) WITHOUT ROWID;
`,
	// 10: kept figures (store/sqlite/figures.go): every workflow's checkpoint count, stored bytes and
	// newest seq, and the database's totals in counters (one row), kept up to date in the
	// transaction of every write that changes them, so that listing a page of workflows and
	// stats cost what they return. workflows.updated_at only goes up (a listing by update time
	// never meets a workflow twice). The listings walk three partial indexes
	// (store/sqlite/workflows.go), chosen so that a save writes one index page (#18) beside the
	// row's and the counters': workflows_claimable holds the resumable workflows by update time
	// (its key changes with every save), workflows_rest the others by update time (a save of a
	// resumable workflow neither leaves nor enters it), and the two together, merged, every
	// workflow by update time; both carry the listed columns, so a page reads no row at random.
	// workflows_open holds the workflows not completed by id (the save clears completed_at only
	// when it is set, so it is not rewritten either). Existing databases get their figures
	// counted here.
	`
ALTER TABLE workflows ADD COLUMN ckpt_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0;  -- sum of its checkpoints' stored_size
ALTER TABLE workflows ADD COLUMN latest_seq INTEGER NOT NULL DEFAULT 0;    -- its newest checkpoint's seq, 0: none

INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at)
	SELECT workflow_id, max(seq) + 1, min(created_at), max(created_at) FROM checkpoints
	WHERE workflow_id NOT IN (SELECT workflow_id FROM workflows) GROUP BY workflow_id;
UPDATE workflows SET ckpt_count = x.n, stored_bytes = x.bytes, latest_seq = x.latest
	FROM (SELECT workflow_id, count(*) AS n, sum(stored_size) AS bytes, max(seq) AS latest
		FROM checkpoints GROUP BY workflow_id) AS x
	WHERE x.workflow_id = workflows.workflow_id;

CREATE TABLE counters (
	id                INTEGER PRIMARY KEY CHECK (id = 1),
	workflows         INTEGER NOT NULL,  -- rows of workflows (kept by the triggers below)
	checkpoints       INTEGER NOT NULL,
	state_bytes       INTEGER NOT NULL,  -- sum of checkpoints.size (states as sent)
	checkpoint_stored INTEGER NOT NULL,  -- sum of checkpoints.stored_size
	states            INTEGER NOT NULL,  -- rows of states
	states_stored     INTEGER NOT NULL   -- sum of states.stored_size
);
INSERT INTO counters VALUES (1, (SELECT count(*) FROM workflows), (SELECT count(*) FROM checkpoints),
	(SELECT coalesce(sum(size), 0) FROM checkpoints), (SELECT coalesce(sum(stored_size), 0) FROM checkpoints),
	(SELECT count(*) FROM states), (SELECT coalesce(sum(stored_size), 0) FROM states));
CREATE TRIGGER workflows_counted AFTER INSERT ON workflows BEGIN
	UPDATE counters SET workflows = workflows + 1 WHERE id = 1;
END;
CREATE TRIGGER workflows_uncounted AFTER DELETE ON workflows BEGIN
	UPDATE counters SET workflows = workflows - 1 WHERE id = 1;
END;

DROP INDEX workflows_claimable;
CREATE INDEX workflows_claimable ON workflows(updated_at, workflow_id, completed_at, ckpt_count, stored_bytes, latest_seq)
	WHERE completed_at IS NULL AND ckpt_count > 0;
CREATE INDEX workflows_rest ON workflows(updated_at, workflow_id, completed_at, ckpt_count, stored_bytes, latest_seq)
	WHERE completed_at IS NOT NULL OR ckpt_count = 0;
CREATE INDEX workflows_open ON workflows(workflow_id) WHERE completed_at IS NULL;
`,
	// 11: the LangGraph threads' kept list (store/sqlite/lgthreadlist.go): every thread with any
	// LangGraph row has its row in lg_threads (step 9), whose updated_at is its newest checkpoint's
	// creation time (0: no checkpoint, only writes or values), kept by triggers on lg_checkpoints,
	// lg_writes and lg_blobs (whatever writes them), so that 'ckptd threads' pages through
	// lg_threads_updated instead of grouping every LangGraph row. A put moves a thread's expiry
	// (its own retention's idleTtlSeconds) with its update time; a thread's row goes with its last
	// LangGraph row, its own retention with it.
	`
INSERT OR IGNORE INTO lg_threads(thread_id, updated_at)
	SELECT thread_id, 0 FROM lg_writes UNION SELECT thread_id, 0 FROM lg_blobs;
DROP INDEX lg_threads_updated;
CREATE INDEX lg_threads_updated ON lg_threads(updated_at DESC, thread_id);
CREATE TRIGGER lg_threads_put AFTER INSERT ON lg_checkpoints BEGIN
	INSERT INTO lg_threads(thread_id, updated_at) VALUES (NEW.thread_id, NEW.created_at)
		ON CONFLICT(thread_id) DO UPDATE SET updated_at = max(updated_at, excluded.updated_at),
		expires_at = CASE WHEN expires_at IS NULL THEN NULL ELSE expires_at + max(0, excluded.updated_at - updated_at) END;
END;
CREATE TRIGGER lg_threads_put_write AFTER INSERT ON lg_writes BEGIN
	INSERT INTO lg_threads(thread_id, updated_at) VALUES (NEW.thread_id, 0) ON CONFLICT(thread_id) DO NOTHING;
END;
CREATE TRIGGER lg_threads_put_value AFTER INSERT ON lg_blobs BEGIN
	INSERT INTO lg_threads(thread_id, updated_at) VALUES (NEW.thread_id, 0) ON CONFLICT(thread_id) DO NOTHING;
END;
CREATE TRIGGER lg_threads_overwrite AFTER UPDATE OF created_at ON lg_checkpoints BEGIN
	UPDATE lg_threads SET updated_at = (SELECT max(created_at) FROM lg_checkpoints WHERE thread_id = NEW.thread_id)
		WHERE thread_id = NEW.thread_id;
END;
CREATE TRIGGER lg_threads_delete AFTER DELETE ON lg_checkpoints BEGIN
	UPDATE lg_threads SET updated_at = coalesce((SELECT max(created_at) FROM lg_checkpoints WHERE thread_id = OLD.thread_id), 0)
		WHERE thread_id = OLD.thread_id AND updated_at = OLD.created_at;
	DELETE FROM lg_threads WHERE thread_id = OLD.thread_id
		AND NOT EXISTS (SELECT 1 FROM lg_checkpoints WHERE thread_id = OLD.thread_id)
		AND NOT EXISTS (SELECT 1 FROM lg_writes WHERE thread_id = OLD.thread_id)
		AND NOT EXISTS (SELECT 1 FROM lg_blobs WHERE thread_id = OLD.thread_id);
END;
CREATE TRIGGER lg_threads_delete_write AFTER DELETE ON lg_writes BEGIN
	DELETE FROM lg_threads WHERE thread_id = OLD.thread_id
		AND NOT EXISTS (SELECT 1 FROM lg_checkpoints WHERE thread_id = OLD.thread_id)
		AND NOT EXISTS (SELECT 1 FROM lg_writes WHERE thread_id = OLD.thread_id)
		AND NOT EXISTS (SELECT 1 FROM lg_blobs WHERE thread_id = OLD.thread_id);
END;
CREATE TRIGGER lg_threads_delete_value AFTER DELETE ON lg_blobs BEGIN
	DELETE FROM lg_threads WHERE thread_id = OLD.thread_id
		AND NOT EXISTS (SELECT 1 FROM lg_checkpoints WHERE thread_id = OLD.thread_id)
		AND NOT EXISTS (SELECT 1 FROM lg_writes WHERE thread_id = OLD.thread_id)
		AND NOT EXISTS (SELECT 1 FROM lg_blobs WHERE thread_id = OLD.thread_id);
END;
`,
	// 12: chunked values (docs/storage.md "Chunked values", store/sqlite/chunks.go): states and
	// pending-write values larger than chunk.InlineMax are stored as content-defined chunks,
	// each stored once and shared by every value listing it; a value's row keeps the addresses
	// of its runs (encoding 4). Addresses map to row ids (chunk_addrs, run_addrs); reference
	// counts live in narrow tables keyed by those ids (chunk_refs, run_refs), so that the ~45
	// count updates of a save dirty a few adjacent pages (ids are handed out in save order)
	// rather than one page per randomly placed address. Older builds must not open such a
	// database (they would read encoding 4 as corrupt), hence a schema step.
	`
CREATE TABLE chunks (
	id       INTEGER PRIMARY KEY,
	encoding INTEGER NOT NULL,        -- 0 raw, 1 zstd
	size     INTEGER NOT NULL,        -- raw size
	data     BLOB NOT NULL
);
CREATE TABLE chunk_addrs (
	address BLOB PRIMARY KEY,         -- SHA-256 of the raw bytes
	id      INTEGER NOT NULL          -- chunks.id
) WITHOUT ROWID;
CREATE TABLE chunk_refs (
	id   INTEGER PRIMARY KEY,         -- chunks.id
	refs INTEGER NOT NULL             -- listings in stored runs; the chunk goes at 0
);

-- Runs of recipes (chunk.EncodeRun), stored once per content like chunks.
CREATE TABLE runs (
	id   INTEGER PRIMARY KEY,
	data BLOB NOT NULL
);
CREATE TABLE run_addrs (
	address BLOB PRIMARY KEY,         -- SHA-256 of data
	id      INTEGER NOT NULL          -- runs.id
) WITHOUT ROWID;
CREATE TABLE run_refs (
	id   INTEGER PRIMARY KEY,         -- runs.id
	refs INTEGER NOT NULL             -- listings in value indexes; the run goes at 0
);

-- Pending-write values: 0 as before (value holds the bytes), 4 chunked (value holds the index,
-- size and sha256 the value's).
ALTER TABLE writes ADD COLUMN encoding INTEGER NOT NULL DEFAULT 0;
ALTER TABLE writes ADD COLUMN size INTEGER;
ALTER TABLE writes ADD COLUMN sha256 BLOB;
`,
	// 13: the database's footprint kept (store/sqlite/figures.go, store/footprint.go): what
	// Footprints' total adds up besides the checkpoints' sizes (state_bytes) is counted in
	// counters by triggers on the rows it adds up (whatever writes them: saves, pending writes,
	// chunk and run bookkeeping, deferred compression and chunking, imports, deletions in bites,
	// LangGraph puts, copies, prunes and retention), so that stats reads one row instead of
	// every value. The triggers update the counters row, a page every save writes already (#18).
	// An UPSERT's DO UPDATE fires the UPDATE triggers; no statement on these tables replaces a
	// row with OR REPLACE (whose deletion fires no trigger). Existing databases get them counted
	// here.
	`
ALTER TABLE counters ADD COLUMN state_data INTEGER NOT NULL DEFAULT 0;     -- sum of length(states.data)
ALTER TABLE counters ADD COLUMN write_logical INTEGER NOT NULL DEFAULT 0;  -- pending-write values as sent
ALTER TABLE counters ADD COLUMN write_stored INTEGER NOT NULL DEFAULT 0;   -- sum of length(writes.value)
ALTER TABLE counters ADD COLUMN chunks INTEGER NOT NULL DEFAULT 0;         -- rows of chunks
ALTER TABLE counters ADD COLUMN chunk_bytes INTEGER NOT NULL DEFAULT 0;    -- sum of length(chunks.data)
ALTER TABLE counters ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;           -- rows of runs
ALTER TABLE counters ADD COLUMN run_bytes INTEGER NOT NULL DEFAULT 0;      -- sum of length(runs.data)
ALTER TABLE counters ADD COLUMN lg_logical INTEGER NOT NULL DEFAULT 0;     -- sum of size of lg_checkpoints, lg_blobs, lg_writes
ALTER TABLE counters ADD COLUMN lg_stored INTEGER NOT NULL DEFAULT 0;      -- sum of length(data) of the same
UPDATE counters SET
	state_data = (SELECT coalesce(sum(length(data)), 0) FROM states),
	write_logical = (SELECT coalesce(sum(CASE WHEN encoding = 4 THEN size ELSE length(value) END), 0) FROM writes),
	write_stored = (SELECT coalesce(sum(length(value)), 0) FROM writes),
	chunks = (SELECT count(*) FROM chunks), chunk_bytes = (SELECT coalesce(sum(length(data)), 0) FROM chunks),
	runs = (SELECT count(*) FROM runs), run_bytes = (SELECT coalesce(sum(length(data)), 0) FROM runs),
	lg_logical = (SELECT coalesce(sum(size), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(size), 0) FROM lg_blobs)
		+ (SELECT coalesce(sum(size), 0) FROM lg_writes),
	lg_stored = (SELECT coalesce(sum(length(data)), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(length(data)), 0) FROM lg_blobs)
		+ (SELECT coalesce(sum(length(data)), 0) FROM lg_writes)
	WHERE id = 1;

CREATE TRIGGER states_footprint_ins AFTER INSERT ON states BEGIN
	UPDATE counters SET state_data = state_data + coalesce(length(NEW.data), 0) WHERE id = 1;
END;
CREATE TRIGGER states_footprint_upd AFTER UPDATE OF data ON states BEGIN
	UPDATE counters SET state_data = state_data + coalesce(length(NEW.data), 0) - coalesce(length(OLD.data), 0) WHERE id = 1;
END;
CREATE TRIGGER states_footprint_del AFTER DELETE ON states BEGIN
	UPDATE counters SET state_data = state_data - coalesce(length(OLD.data), 0) WHERE id = 1;
END;

CREATE TRIGGER writes_footprint_ins AFTER INSERT ON writes BEGIN
	UPDATE counters SET write_logical = write_logical + coalesce(CASE WHEN NEW.encoding = 4 THEN NEW.size ELSE length(NEW.value) END, 0),
		write_stored = write_stored + coalesce(length(NEW.value), 0) WHERE id = 1;
END;
CREATE TRIGGER writes_footprint_upd AFTER UPDATE OF value, encoding, size ON writes BEGIN
	UPDATE counters SET write_logical = write_logical + coalesce(CASE WHEN NEW.encoding = 4 THEN NEW.size ELSE length(NEW.value) END, 0)
			- coalesce(CASE WHEN OLD.encoding = 4 THEN OLD.size ELSE length(OLD.value) END, 0),
		write_stored = write_stored + coalesce(length(NEW.value), 0) - coalesce(length(OLD.value), 0) WHERE id = 1;
END;
CREATE TRIGGER writes_footprint_del AFTER DELETE ON writes BEGIN
	UPDATE counters SET write_logical = write_logical - coalesce(CASE WHEN OLD.encoding = 4 THEN OLD.size ELSE length(OLD.value) END, 0),
		write_stored = write_stored - coalesce(length(OLD.value), 0) WHERE id = 1;
END;

CREATE TRIGGER chunks_footprint_ins AFTER INSERT ON chunks BEGIN
	UPDATE counters SET chunks = chunks + 1, chunk_bytes = chunk_bytes + length(NEW.data) WHERE id = 1;
END;
CREATE TRIGGER chunks_footprint_upd AFTER UPDATE OF data ON chunks BEGIN
	UPDATE counters SET chunk_bytes = chunk_bytes + length(NEW.data) - length(OLD.data) WHERE id = 1;
END;
CREATE TRIGGER chunks_footprint_del AFTER DELETE ON chunks BEGIN
	UPDATE counters SET chunks = chunks - 1, chunk_bytes = chunk_bytes - length(OLD.data) WHERE id = 1;
END;

CREATE TRIGGER runs_footprint_ins AFTER INSERT ON runs BEGIN
	UPDATE counters SET runs = runs + 1, run_bytes = run_bytes + length(NEW.data) WHERE id = 1;
END;
CREATE TRIGGER runs_footprint_upd AFTER UPDATE OF data ON runs BEGIN
	UPDATE counters SET run_bytes = run_bytes + length(NEW.data) - length(OLD.data) WHERE id = 1;
END;
CREATE TRIGGER runs_footprint_del AFTER DELETE ON runs BEGIN
	UPDATE counters SET runs = runs - 1, run_bytes = run_bytes - length(OLD.data) WHERE id = 1;
END;
` + lgFootprintTriggers("lg_checkpoints") + lgFootprintTriggers("lg_blobs") + lgFootprintTriggers("lg_writes"),
	// 14: chunked LangGraph channel values (docs/storage.md "Chunked values",
	// store/sqlite/lgchunks.go): an lg_blobs value larger than chunk.InlineMax is stored as
	// shared chunks like a state (encoding 4: data holds the index, size and sha256 the raw
	// value's), counted in chunk_refs and run_refs. No table changes; the step is there so that
	// an older build, which would read encoding 4 in lg_blobs as corrupt, refuses the database.
	`
UPDATE lg_blobs SET encoding = encoding WHERE 0;
`,
	// 15: the workflows with a retention of their own, for the idle sweep that runs when ckptd
	// opens a database (idleCandidates): without it, that sweep read every workflow row through
	// the primary key's index, ~150 ms before a database of 100,000 workflows answered
	// initialize. Saves do not touch it (neither workflow_id nor retention changes).
	`
CREATE INDEX workflows_retained ON workflows(workflow_id) WHERE retention IS NOT NULL;
`,
	// 16: chunked LangGraph pending writes and staged values (docs/storage.md "Chunked values",
	// store/sqlite/lgchunks.go): an lg_writes or lg_staged value larger than chunk.InlineMax is
	// stored as shared chunks like a channel value (encoding 4). No table changes: the step makes
	// an older build, which would read encoding 4 in lg_writes as corrupt and delete such rows
	// without releasing their chunks, refuse the database. Rows stored whole keep reading.
	`
UPDATE lg_writes SET encoding = encoding WHERE 0;
`,
	// 17: packs (store/sqlite/packs.go): the new chunks of one stored value go together
	// into one row of packs, so that a file of ~2 KiB chunk rows, one or two to a 4 KiB leaf,
	// does not keep a quarter of its chunk pages empty. packsStep finds it by content.
	packsMigration,
	// 18: listings logged, counted later (store/sqlite/reflog.go): a job appends the listings of
	// runs and chunks already stored to ref_log, one row per kind (row ids and how many more
	// listings each, uvarint pairs), instead of raising ~70 counts a save; every release takes
	// the whole log into its count changes first, and the writer raises the counts when idle.
	// An older build would count down and free what the log still lists: hence a schema step.
	`
CREATE TABLE ref_log (
	id   INTEGER PRIMARY KEY,
	kind INTEGER NOT NULL,  -- 0 runs (run_refs), 1 chunks (chunk_refs)
	ids  BLOB NOT NULL      -- (row id, more listings) pairs of uvarints, ids ascending
);
`,
}

// packsMigration is the schema step that adds packs (its number is packsStep).
const packsMigration = `
CREATE TABLE packs (
	id   INTEGER PRIMARY KEY,
	data BLOB NOT NULL                -- the stored bytes of its chunks, one after another
);
-- A chunk in a pack keeps an empty data; pack, pack_off and pack_len say where its bytes are.
ALTER TABLE chunks ADD COLUMN pack INTEGER;      -- packs.id; NULL: data holds the bytes
ALTER TABLE chunks ADD COLUMN pack_off INTEGER;  -- offset of its bytes in packs.data
ALTER TABLE chunks ADD COLUMN pack_len INTEGER;  -- their length
CREATE INDEX chunks_pack ON chunks(pack, pack_len) WHERE pack IS NOT NULL;

-- counters.chunk_bytes (step 13) counts the packs' bytes too, the bytes of chunks no value
-- lists any more that their pack keeps included.
CREATE TRIGGER packs_footprint_ins AFTER INSERT ON packs BEGIN
	UPDATE counters SET chunk_bytes = chunk_bytes + length(NEW.data) WHERE id = 1;
END;
CREATE TRIGGER packs_footprint_upd AFTER UPDATE OF data ON packs BEGIN
	UPDATE counters SET chunk_bytes = chunk_bytes + length(NEW.data) - length(OLD.data) WHERE id = 1;
END;
CREATE TRIGGER packs_footprint_del AFTER DELETE ON packs BEGIN
	UPDATE counters SET chunk_bytes = chunk_bytes - length(OLD.data) WHERE id = 1;
END;
`

// packsStep is the schema version from which the database has packs.
var packsStep = func() int {
	for i, m := range migrations {
		if m == packsMigration {
			return i + 1
		}
	}
	panic("sqlite: the packs migration is not in migrations")
}()

// lgFootprintTriggers keeps counters.lg_logical and lg_stored for one LangGraph table (step 13).
func lgFootprintTriggers(table string) string {
	return strings.NewReplacer("TABLE", table).Replace(`
CREATE TRIGGER TABLE_footprint_ins AFTER INSERT ON TABLE BEGIN
	UPDATE counters SET lg_logical = lg_logical + NEW.size, lg_stored = lg_stored + length(NEW.data) WHERE id = 1;
END;
CREATE TRIGGER TABLE_footprint_upd AFTER UPDATE OF size, data ON TABLE BEGIN
	UPDATE counters SET lg_logical = lg_logical + NEW.size - OLD.size, lg_stored = lg_stored + length(NEW.data) - length(OLD.data) WHERE id = 1;
END;
CREATE TRIGGER TABLE_footprint_del AFTER DELETE ON TABLE BEGIN
	UPDATE counters SET lg_logical = lg_logical - OLD.size, lg_stored = lg_stored - length(OLD.data) WHERE id = 1;
END;
`)
}

// SchemaVersion is the user_version this build migrates databases to.
var SchemaVersion = len(migrations)

// refLogStep is the schema step that adds ref_log (store/sqlite/reflog.go).
const refLogStep = 18

// checkSchema refuses databases this build must not touch: a newer schema version, another
// application's database. It only reads.
func checkSchema(ctx context.Context, conn *sql.Conn, retry func(context.Context, func() error) error) error {
	// One statement, so one snapshot: read separately, another ckptd creating the schema of a
	// new database at the same moment (migration 1 sets all three in one transaction) could be
	// seen half before and half after its commit ("schema objects but no ckptd schema version").
	var v, app, n int
	if err := retry(ctx, func() error {
		return conn.QueryRowContext(ctx, `SELECT (SELECT user_version FROM pragma_user_version),
			(SELECT application_id FROM pragma_application_id), (SELECT count(*) FROM sqlite_schema)`).Scan(&v, &app, &n)
	}); err != nil {
		return wrapDB("read user_version", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this ckptd supports (%d): upgrade ckptd", v, len(migrations))
	}
	if app != 0 && app != applicationID {
		return fmt.Errorf("not a ckptd database (application_id %#x)", app)
	}
	if v == 0 && n > 0 && app != applicationID {
		return fmt.Errorf("not a ckptd database: it has %d schema objects but no ckptd schema version", n)
	}
	return nil
}

// migrate brings the database on conn up to target (normally SchemaVersion). Safe against another
// process migrating at the same time: each step re-checks user_version inside its transaction.
func migrate(ctx context.Context, conn *sql.Conn, target int, retry func(context.Context, func() error) error) error {
	if target > len(migrations) {
		target = len(migrations)
	}
	var v int
	if err := retry(ctx, func() error {
		return conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	}); err != nil {
		return wrapDB("read user_version", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this ckptd supports (%d): upgrade ckptd", v, len(migrations))
	}
	for step := v + 1; step <= target; step++ {
		if err := retry(ctx, func() error { return migrateStep(ctx, conn, step) }); err != nil {
			return fmt.Errorf("migrate schema to version %d: %w", step, wrapDB("migrate", err))
		}
	}
	if v < target {
		// Step 8 edits a table's definition in place: have this connection parse the schema
		// anew (the others read it fresh anyway), or it would keep the table as it knew it.
		if _, err := conn.ExecContext(ctx, "PRAGMA writable_schema = RESET"); err != nil {
			return fmt.Errorf("migrate schema: %w", wrapDB("reload schema", err))
		}
	}
	return nil
}

func migrateStep(ctx context.Context, conn *sql.Conn, step int) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	var v int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	if v >= step { // someone else migrated meanwhile
		_, err = conn.ExecContext(ctx, "COMMIT")
		return err
	}
	if v != step-1 {
		return fmt.Errorf("schema version %d, expected %d", v, step-1)
	}
	if _, err := conn.ExecContext(ctx, migrations[step-1]); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", step)); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}

// initEmptySchema finishes setting up a database whose creation was interrupted after SQLite
// wrote its header and before the first migration committed (no schema objects, user_version
// 0): like a new file, it gets auto_vacuum=INCREMENTAL, which on a file that already has pages
// takes a VACUUM (instant: there is nothing in it). A database with a schema is left alone.
func (s *Store) initEmptySchema(ctx context.Context) error {
	var n, v, av int
	if err := s.retry(ctx, func() error {
		return s.wconn.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM sqlite_schema),
			(SELECT user_version FROM pragma_user_version), (SELECT auto_vacuum FROM pragma_auto_vacuum)`).Scan(&n, &v, &av)
	}); err != nil {
		return wrapDB("read schema", err)
	}
	if n > 0 || v > 0 || av == 2 {
		return nil
	}
	s.log.Info("ckptd store: the database has no schema yet (its creation was interrupted): setting it up", "path", s.path)
	return wrapDB("set up auto_vacuum", s.retry(ctx, func() error {
		if _, err := s.wconn.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
			return err
		}
		_, err := s.wconn.ExecContext(ctx, "VACUUM")
		return err
	}))
}
