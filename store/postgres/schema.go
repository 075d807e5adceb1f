package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Advisory lock keys. Migrations take a session lock of the two-int form (classid, objid);
// writers take transaction locks of the bigint form, which PostgreSQL keeps apart from it.
const (
	lockClass   = 0x636b7074 // "ckpt"
	lockMigrate = 1
)

// migrations[i] brings the schema from version i to i+1, in one transaction recorded in
// schema_migrations. Append only: never edit a released step. Every text column that is
// compared or ordered uses the "C" collation: byte order, as SQLite's, whatever the database's
// locale (LangGraph checkpoint ids sort by their bytes).
var migrations = []struct {
	description string
	sql         string
}{
	{"core: workflows, deduplicated states, checkpoints, metadata index, pending writes", `
CREATE TABLE workflows (
	workflow_id  text COLLATE "C" PRIMARY KEY,
	next_seq     bigint NOT NULL DEFAULT 1,
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,  -- last save
	completed_at timestamptz,           -- NULL: not completed
	retention    jsonb,                 -- store.Retention, NULL: the server's default
	config       text                   -- JSON object (sources: the workflow's configured sources)
);

-- State bytes, stored once per SHA-256 of the raw state, counting the checkpoints that refer to
-- them (several processes save and delete at once: the row's lock orders them).
CREATE TABLE states (
	hash        bytea PRIMARY KEY,      -- SHA-256 of the raw state
	encoding    smallint NOT NULL,      -- store.EncRaw, EncZstd, EncZstdChunked
	size        bigint NOT NULL,        -- raw size
	stored_size bigint NOT NULL,        -- length(data)
	refs        bigint NOT NULL,        -- checkpoints referring to it; the row goes at 0
	data        bytea NOT NULL
);
ALTER TABLE states ALTER COLUMN data SET STORAGE EXTERNAL;  -- compressed already: no pglz
CREATE INDEX states_unreferenced ON states (hash) WHERE refs <= 0;

CREATE TABLE checkpoints (
	id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- save order
	checkpoint_id   text COLLATE "C" NOT NULL UNIQUE,
	workflow_id     text COLLATE "C" NOT NULL,
	namespace       text COLLATE "C" NOT NULL,
	seq             bigint NOT NULL,
	parent_id       text,
	phase           text NOT NULL,
	step            bigint NOT NULL,
	step_name       text,
	error           text,               -- {"message","retryable"} or NULL
	state_type      text NOT NULL,      -- json | bytes | none
	state_hash      bytea,              -- states.hash, NULL for none
	size            bigint NOT NULL,
	stored_size     bigint NOT NULL,
	dedup           boolean NOT NULL,   -- the state was already stored at save time
	completed_count integer NOT NULL,
	pending_count   integer NOT NULL,
	workflow_hash   text,
	created_at      timestamptz NOT NULL,
	format_version  integer NOT NULL,
	content_hash    bytea NOT NULL,     -- idempotency digest over every saved field
	metadata        bytea,              -- JSON object as sent
	completed_tasks bytea,              -- JSON array as sent
	pending_tasks   bytea               -- JSON array as sent
);
CREATE UNIQUE INDEX checkpoints_wf_seq ON checkpoints (workflow_id, seq);
CREATE INDEX checkpoints_wf_ns_seq ON checkpoints (workflow_id, namespace, seq);
CREATE INDEX checkpoints_ns_id ON checkpoints (namespace, id);
CREATE INDEX checkpoints_phase_id ON checkpoints (phase, id);
CREATE INDEX checkpoints_state ON checkpoints (state_hash);

-- Top-level metadata keys for exact-match filters; value is canonical compact JSON.
CREATE TABLE checkpoint_meta (
	key   text COLLATE "C" NOT NULL,
	value text COLLATE "C" NOT NULL,
	ckpt  bigint NOT NULL,  -- checkpoints.id
	PRIMARY KEY (key, value, ckpt)
);
CREATE INDEX checkpoint_meta_ckpt ON checkpoint_meta (ckpt);

CREATE TABLE writes (
	checkpoint_id text COLLATE "C" NOT NULL,
	task_id       text COLLATE "C" NOT NULL,
	idx           bigint NOT NULL,
	workflow_id   text COLLATE "C" NOT NULL,
	namespace     text NOT NULL,
	channel       text NOT NULL,
	type          text,
	task_path     text NOT NULL,
	is_bytes      boolean NOT NULL,
	value         bytea,
	PRIMARY KEY (checkpoint_id, task_id, idx)
);
CREATE INDEX writes_workflow ON writes (workflow_id);
`},
	{"LangGraph channel storage: checkpoints, channel values, pending writes, metadata index", `
CREATE TABLE lg_checkpoints (
	id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- storage order (ties in lg/list)
	thread_id        text COLLATE "C" NOT NULL,
	namespace        text COLLATE "C" NOT NULL,
	checkpoint_id    text COLLATE "C" NOT NULL,
	parent_id        text COLLATE "C",
	created_at       timestamptz NOT NULL,
	channel_versions text NOT NULL,     -- JSON object channel -> version, as sent
	metadata         bytea,             -- JSON object as sent
	type             text NOT NULL,     -- serializer tag of data
	encoding         smallint NOT NULL, -- store.EncRaw or EncS2
	size             bigint NOT NULL,   -- raw size
	sha256           bytea NOT NULL,    -- of data as stored
	data             bytea NOT NULL
);
ALTER TABLE lg_checkpoints ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX lg_checkpoints_key ON lg_checkpoints (thread_id, namespace, checkpoint_id);
CREATE INDEX lg_checkpoints_thread ON lg_checkpoints (thread_id, checkpoint_id);
CREATE INDEX lg_checkpoints_ns ON lg_checkpoints (namespace, checkpoint_id);
CREATE INDEX lg_checkpoints_id ON lg_checkpoints (checkpoint_id);

-- Top-level metadata keys for exact-match filters: vhash = first 16 bytes of SHA-256 of the
-- value's canonical JSON.
CREATE TABLE lg_meta (
	key           text COLLATE "C" NOT NULL,
	vhash         bytea NOT NULL,
	checkpoint_id text COLLATE "C" NOT NULL,
	ckpt          bigint NOT NULL,  -- lg_checkpoints.id
	PRIMARY KEY (key, vhash, checkpoint_id, ckpt)
);
CREATE INDEX lg_meta_ckpt ON lg_meta (ckpt);

-- Channel values; immutable once stored. version is the canonical JSON text of the version.
CREATE TABLE lg_blobs (
	id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	thread_id text COLLATE "C" NOT NULL,
	namespace text COLLATE "C" NOT NULL,
	channel   text COLLATE "C" NOT NULL,
	version   text COLLATE "C" NOT NULL,
	type      text NOT NULL,     -- serializer tag; "empty": no value
	encoding  smallint NOT NULL,
	size      bigint NOT NULL,
	sha256    bytea NOT NULL,
	data      bytea NOT NULL
);
ALTER TABLE lg_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX lg_blobs_key ON lg_blobs (thread_id, namespace, channel, version);

CREATE TABLE lg_writes (
	id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	thread_id     text COLLATE "C" NOT NULL,
	namespace     text COLLATE "C" NOT NULL,
	checkpoint_id text COLLATE "C" NOT NULL,
	task_id       text COLLATE "C" NOT NULL,
	idx           bigint NOT NULL,
	task_path     text COLLATE "C" NOT NULL,
	channel       text COLLATE "C" NOT NULL,
	type          text NOT NULL,
	encoding      smallint NOT NULL,
	size          bigint NOT NULL,
	sha256        bytea NOT NULL,
	data          bytea NOT NULL
);
ALTER TABLE lg_writes ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX lg_writes_key ON lg_writes (thread_id, namespace, checkpoint_id, task_id, idx);
`},
	{"source manifests recorded with checkpoints (drift)", `
CREATE TABLE drift_manifests (
	ckpt   bigint PRIMARY KEY,  -- checkpoints.id
	root   text COLLATE "C" NOT NULL,
	files  integer NOT NULL,
	header bytea NOT NULL,
	chunks bytea NOT NULL       -- drift_chunks.id (16 bytes) of each chunk of its entry keys, in order
);
-- A run of consecutive entry keys of a manifest; identical runs are shared by manifests.
CREATE TABLE drift_chunks (
	id   bytea PRIMARY KEY,
	refs bigint NOT NULL,       -- listings by manifests; the row goes at 0
	keys bytea NOT NULL
);
CREATE INDEX drift_chunks_unreferenced ON drift_chunks (id) WHERE refs <= 0;
CREATE TABLE drift_entries (
	key  bytea PRIMARY KEY,
	refs bigint NOT NULL,       -- listings by chunks; the row goes at 0
	data bytea NOT NULL
);
CREATE INDEX drift_entries_unreferenced ON drift_entries (key) WHERE refs <= 0;
`},
	{"validation checkpoints and the compensation log (saga)", `
-- A checkpoint's validation (store.EncodeValidation): its status and record; NULL: none.
ALTER TABLE checkpoints ADD COLUMN validation_status text, ADD COLUMN validation bytea;
CREATE INDEX checkpoints_validation ON checkpoints (workflow_id, namespace, seq) WHERE validation_status IS NOT NULL;
CREATE INDEX checkpoints_validation_id ON checkpoints (validation_status, id) WHERE validation_status IS NOT NULL;

-- Compensations registered per workflow: seq is the registration order within the workflow,
-- after_seq the workflow's newest checkpoint seq when it was registered. Both are handed out
-- under the workflow's advisory lock, which every writer of the workflow takes.
CREATE TABLE compensations (
	id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	compensation_id text COLLATE "C" NOT NULL UNIQUE,
	workflow_id     text COLLATE "C" NOT NULL,
	namespace       text COLLATE "C" NOT NULL,
	seq             bigint NOT NULL,
	after_seq       bigint NOT NULL,
	checkpoint_id   text COLLATE "C",
	step_name       text,
	task_id         text,
	description     text NOT NULL,
	status          text NOT NULL,      -- pending | done | failed
	error           text,               -- the last failure a rollback reported
	rollback_id     text COLLATE "C",   -- the rollback that ran it last
	created_at      timestamptz NOT NULL,
	done_at         timestamptz,
	action          bytea NOT NULL      -- opaque JSON as sent
);
CREATE UNIQUE INDEX compensations_wf_seq ON compensations (workflow_id, seq);
CREATE INDEX compensations_wf_ns_seq ON compensations (workflow_id, namespace, seq);
CREATE INDEX compensations_rollback ON compensations (rollback_id) WHERE rollback_id IS NOT NULL;

-- Rollbacks: at most one unfinished per (workflow, namespace).
CREATE TABLE rollbacks (
	id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- begin order
	rollback_id      text COLLATE "C" NOT NULL UNIQUE,
	workflow_id      text COLLATE "C" NOT NULL,
	namespace        text COLLATE "C" NOT NULL,
	to_checkpoint_id text COLLATE "C",  -- NULL: a full rollback
	to_seq           bigint NOT NULL,   -- the target's seq (0: full)
	max_seq          bigint NOT NULL,   -- the newest compensation seq of the workflow when begun
	created_at       timestamptz NOT NULL,
	completed_at     timestamptz        -- NULL: unfinished
);
CREATE UNIQUE INDEX rollbacks_unfinished ON rollbacks (workflow_id, namespace) WHERE completed_at IS NULL;
CREATE INDEX rollbacks_wf_ns ON rollbacks (workflow_id, namespace, id);
`},
	// Claims (store/postgres/claims.go): one row per workflow (or LangGraph thread) id ever
	// claimed, never deleted, so that its fencing token never goes back; writes read their id's
	// row in their own transaction. workflow/list {claimable} walks the workflows not completed
	// oldest first through workflows_claimable and probes claims by key. A step of its own: a
	// renumbering only moves it in this list.
	{"claims: leases and fencing tokens of workflows and threads; the claimable workflows' index", `
CREATE TABLE claims (
	workflow_id text COLLATE "C" PRIMARY KEY,  -- a workflowId or a LangGraph threadId
	token       bigint NOT NULL CHECK (token > 0),  -- fencing token of the latest claim (1, 2, ...)
	owner       text,                           -- NULL: released
	expires_at  timestamptz,                    -- the server's clock; NULL: released
	CHECK ((owner IS NULL) = (expires_at IS NULL))
);
CREATE INDEX workflows_claimable ON workflows (updated_at, workflow_id) WHERE completed_at IS NULL;
`},
	// Fewer index entries written per save (#18), as in the SQLite backend's step 8: the unique
	// (workflow_id, seq) index carries the namespace (INCLUDE), so per-workflow reads that filter
	// on a namespace need no second index; the cross-workflow namespace and phase indexes keep
	// only the rows a filter needs them for (namespace <> '', phase <> 'completed'); the
	// state_hash index (stats, inspect) leaves out checkpoints without a state.
	{"leaner checkpoints indexes: one per-workflow index, partial namespace/phase/state indexes", `
DROP INDEX checkpoints_wf_ns_seq;
DROP INDEX checkpoints_wf_seq;
CREATE UNIQUE INDEX checkpoints_wf_seq ON checkpoints (workflow_id, seq) INCLUDE (namespace);
DROP INDEX checkpoints_ns_id;
CREATE INDEX checkpoints_ns_id ON checkpoints (namespace, id) WHERE namespace <> '';
DROP INDEX checkpoints_phase_id;
CREATE INDEX checkpoints_phase_id ON checkpoints (phase, id) WHERE phase <> 'completed';
DROP INDEX checkpoints_state;
CREATE INDEX checkpoints_state ON checkpoints (state_hash) WHERE state_hash IS NOT NULL;
`},
	// LangGraph fidelity and retention (store/postgres/channels.go, lgmaint.go; the same as
	// SQLite's step 9): value variants and each checkpoint's value refs, values staged by
	// lg/putValue, one row per thread (its last put, its own retention and expiry), the
	// database's retention for threads without their own.
	{"LangGraph value variants and refs, staged values, threads and their retention", `
ALTER TABLE lg_blobs ADD COLUMN variant integer NOT NULL DEFAULT 0;
DROP INDEX lg_blobs_key;
CREATE UNIQUE INDEX lg_blobs_key ON lg_blobs (thread_id, namespace, channel, version, variant);
CREATE INDEX lg_blobs_variants ON lg_blobs (thread_id, namespace) WHERE variant > 0;
ALTER TABLE lg_checkpoints ADD COLUMN value_refs text;  -- JSON {channel: variant}; NULL: all variant 0

CREATE TABLE lg_staged (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	thread_id  text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL,
	type       text NOT NULL,
	encoding   smallint NOT NULL,
	size       bigint NOT NULL,
	sha256     bytea NOT NULL,
	data       bytea NOT NULL
);
ALTER TABLE lg_staged ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX lg_staged_created ON lg_staged (created_at);

CREATE TABLE lg_threads (
	thread_id  text COLLATE "C" PRIMARY KEY,
	updated_at timestamptz NOT NULL,  -- its last put
	retention  text,                  -- JSON Retention of its own; NULL: the database's or the daemon's
	expires_at timestamptz            -- with its own retention's idleTtlSeconds: updated_at + that
);
CREATE INDEX lg_threads_updated ON lg_threads (updated_at);
CREATE INDEX lg_threads_expires ON lg_threads (expires_at) WHERE expires_at IS NOT NULL;
INSERT INTO lg_threads (thread_id, updated_at) SELECT thread_id, max(created_at) FROM lg_checkpoints GROUP BY thread_id;

CREATE TABLE lg_config (
	name  text PRIMARY KEY,  -- 'retention'
	value text NOT NULL
);
`},
	// Kept figures (store/postgres/figures.go): every workflow's checkpoint count, stored bytes
	// and newest seq, kept in the transaction of every write that changes them (under the
	// workflow's lock), and the database's totals in counters, spread over rows ("shards") so
	// that processes committing at the same time do not queue on one row: a process adds its
	// changes to a shard of its own, the workflows trigger to the shard of the workflow's id;
	// the totals are the sum of the shards. workflows.updated_at only goes up. Lists walk
	// partial indexes, as SQLite's step 10 does: workflows_claimable (the resumable workflows by
	// update time), workflows_rest (the others by update time; the two merged: every workflow)
	// and workflows_open (the workflows not completed, by id). Existing databases get their
	// figures counted here.
	{"kept figures: per-workflow counts, sizes and newest seq; sharded totals; the listing indexes", `
ALTER TABLE workflows ADD COLUMN ckpt_count bigint NOT NULL DEFAULT 0,
	ADD COLUMN stored_bytes bigint NOT NULL DEFAULT 0,  -- sum of its checkpoints' stored_size
	ADD COLUMN latest_seq bigint NOT NULL DEFAULT 0;    -- its newest checkpoint's seq, 0: none

INSERT INTO workflows (workflow_id, next_seq, created_at, updated_at)
	SELECT c.workflow_id, max(c.seq) + 1, min(c.created_at), max(c.created_at) FROM checkpoints c
	WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.workflow_id = c.workflow_id) GROUP BY c.workflow_id;
UPDATE workflows w SET ckpt_count = x.n, stored_bytes = x.bytes, latest_seq = x.latest
	FROM (SELECT workflow_id, count(*) AS n, sum(stored_size) AS bytes, max(seq) AS latest
		FROM checkpoints GROUP BY workflow_id) AS x
	WHERE x.workflow_id = w.workflow_id;

CREATE TABLE counters (
	shard             smallint PRIMARY KEY,
	workflows         bigint NOT NULL DEFAULT 0,  -- rows of workflows (kept by the trigger below)
	checkpoints       bigint NOT NULL DEFAULT 0,
	state_bytes       bigint NOT NULL DEFAULT 0,  -- sum of checkpoints.size (states as sent)
	checkpoint_stored bigint NOT NULL DEFAULT 0,  -- sum of checkpoints.stored_size
	states            bigint NOT NULL DEFAULT 0,  -- rows of states
	states_stored     bigint NOT NULL DEFAULT 0   -- sum of states.stored_size
);
INSERT INTO counters VALUES (0, (SELECT count(*) FROM workflows), (SELECT count(*) FROM checkpoints),
	(SELECT coalesce(sum(size), 0) FROM checkpoints), (SELECT coalesce(sum(stored_size), 0) FROM checkpoints),
	(SELECT count(*) FROM states), (SELECT coalesce(sum(stored_size), 0) FROM states));
CREATE FUNCTION count_workflows() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO counters AS k (shard, workflows) VALUES (hashtext(NEW.workflow_id) & 15, 1)
			ON CONFLICT (shard) DO UPDATE SET workflows = k.workflows + 1;
	ELSE
		INSERT INTO counters AS k (shard, workflows) VALUES (hashtext(OLD.workflow_id) & 15, -1)
			ON CONFLICT (shard) DO UPDATE SET workflows = k.workflows - 1;
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER workflows_counted AFTER INSERT OR DELETE ON workflows FOR EACH ROW EXECUTE FUNCTION count_workflows();

DROP INDEX workflows_claimable;
CREATE INDEX workflows_claimable ON workflows (updated_at, workflow_id) WHERE completed_at IS NULL AND ckpt_count > 0;
CREATE INDEX workflows_rest ON workflows (updated_at, workflow_id) WHERE completed_at IS NOT NULL OR ckpt_count = 0;
CREATE INDEX workflows_open ON workflows (workflow_id) WHERE completed_at IS NULL;
`},
	// The LangGraph threads' kept list (store/postgres/lgthreadlist.go; SQLite's step 11): every
	// thread with any LangGraph row has its row in lg_threads, whose updated_at is its newest
	// checkpoint's creation time (the epoch: no checkpoint, only writes or values), kept by
	// triggers on lg_checkpoints, lg_writes and lg_blobs (whatever writes them; every writer of a
	// thread holds its advisory lock), so that 'ckptd threads' pages through lg_threads_updated
	// instead of grouping every LangGraph row. A put moves a thread's expiry with its update
	// time; a thread's row goes with its last LangGraph row, its own retention with it.
	{"the LangGraph threads' kept list", `
INSERT INTO lg_threads (thread_id, updated_at)
	SELECT thread_id, 'epoch'::timestamptz FROM (SELECT thread_id FROM lg_writes UNION SELECT thread_id FROM lg_blobs) AS x
	ON CONFLICT (thread_id) DO NOTHING;
DROP INDEX lg_threads_updated;
CREATE INDEX lg_threads_updated ON lg_threads (updated_at DESC, thread_id);
CREATE FUNCTION lg_threads_keep() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
	th text;
BEGIN
	IF TG_OP = 'INSERT' THEN
		IF TG_TABLE_NAME = 'lg_checkpoints' THEN
			INSERT INTO lg_threads AS t (thread_id, updated_at) VALUES (NEW.thread_id, NEW.created_at)
				ON CONFLICT (thread_id) DO UPDATE SET updated_at = greatest(t.updated_at, excluded.updated_at),
				expires_at = t.expires_at + greatest(interval '0', excluded.updated_at - t.updated_at);
		ELSE
			INSERT INTO lg_threads (thread_id, updated_at) VALUES (NEW.thread_id, 'epoch') ON CONFLICT (thread_id) DO NOTHING;
		END IF;
		RETURN NULL;
	END IF;
	IF TG_OP = 'UPDATE' THEN
		UPDATE lg_threads SET updated_at = (SELECT max(created_at) FROM lg_checkpoints WHERE thread_id = NEW.thread_id)
			WHERE thread_id = NEW.thread_id;
		RETURN NULL;
	END IF;
	th := OLD.thread_id;
	IF TG_TABLE_NAME = 'lg_checkpoints' THEN
		UPDATE lg_threads SET updated_at = coalesce((SELECT max(created_at) FROM lg_checkpoints WHERE thread_id = th), 'epoch')
			WHERE thread_id = th AND updated_at = OLD.created_at;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM lg_checkpoints WHERE thread_id = th) AND NOT EXISTS (SELECT 1 FROM lg_writes WHERE thread_id = th)
		AND NOT EXISTS (SELECT 1 FROM lg_blobs WHERE thread_id = th) THEN
		DELETE FROM lg_threads WHERE thread_id = th;
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER lg_threads_put AFTER INSERT ON lg_checkpoints FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
CREATE TRIGGER lg_threads_overwrite AFTER UPDATE OF created_at ON lg_checkpoints FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
CREATE TRIGGER lg_threads_delete AFTER DELETE ON lg_checkpoints FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
CREATE TRIGGER lg_threads_put_write AFTER INSERT ON lg_writes FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
CREATE TRIGGER lg_threads_delete_write AFTER DELETE ON lg_writes FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
CREATE TRIGGER lg_threads_put_value AFTER INSERT ON lg_blobs FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
CREATE TRIGGER lg_threads_delete_value AFTER DELETE ON lg_blobs FOR EACH ROW EXECUTE FUNCTION lg_threads_keep();
`},
	// Chunked values (docs/storage.md "Chunked values", store/postgres/chunks.go): states and
	// pending-write values larger than chunk.InlineMax are stored as content-defined chunks,
	// each once, shared by every value listing it; a value's row keeps the addresses of its runs
	// (encoding 4). Older builds must not read such rows (encoding 4 would be corrupt to them).
	{"chunked values: chunks and runs shared by states and pending writes, with reference counts", `
CREATE TABLE chunks (
	address  bytea PRIMARY KEY,   -- SHA-256 of the raw bytes
	refs     bigint NOT NULL,     -- listings in stored runs; the row goes at 0
	encoding smallint NOT NULL,   -- store.EncRaw or EncZstd
	size     bigint NOT NULL,     -- raw size
	data     bytea NOT NULL
) WITH (fillfactor = 80);         -- room for HOT updates of refs
ALTER TABLE chunks ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE chunk_runs (
	address bytea PRIMARY KEY,    -- SHA-256 of data (chunk.EncodeRun)
	refs    bigint NOT NULL,      -- listings in value indexes; the row goes at 0
	data    bytea NOT NULL
) WITH (fillfactor = 80);
ALTER TABLE writes ADD COLUMN encoding smallint NOT NULL DEFAULT 0,  -- 0: value holds the bytes; 4: chunked
	ADD COLUMN size bigint, ADD COLUMN sha256 bytea;                  -- of a chunked value
`},
	// The database's footprint kept (store/postgres/figures.go, store/footprint.go; SQLite's step
	// 13): what Footprints' total adds up besides the checkpoints' sizes (state_bytes) is counted
	// in counters, whatever writes the rows it adds up. A row trigger on each of those tables
	// notes its change in settings local to the transaction (ckptd.fp_*; a savepoint rolled back
	// takes its notes with it); a deferred trigger adds them to one shard of counters at COMMIT
	// (the shard the writer names in ckptd.shard, its own: the one its COMMIT's totals go to, so
	// a transaction locks one shard, last), so that no write waits on a counters row while it
	// runs and stats reads a few rows instead of every value. Existing databases get them counted
	// here.
	{"the database's footprint kept in counters", footprintStep},
	// Chunked LangGraph channel values (docs/storage.md "Chunked values",
	// store/postgres/lgchunks.go): an lg_blobs value larger than chunk.InlineMax is stored as
	// shared chunks like a state (encoding 4: data holds the index, size and sha256 the raw
	// value's), counted in chunks and chunk_runs. No table changes: the step makes an older
	// build, which would read encoding 4 in lg_blobs as corrupt, refuse the database.
	{"chunked LangGraph channel values (lg_blobs encoding 4)", `
COMMENT ON COLUMN lg_blobs.encoding IS '0 raw, 16 S2, 4 chunked: data holds the index of the value''s runs, size and sha256 are the raw value''s';
`},
	// chunked LangGraph pending writes and staged values (docs/storage.md "Chunked values",
	// store/postgres/lgchunks.go): an lg_writes or lg_staged value larger than chunk.InlineMax
	// is stored as shared chunks like a channel value (encoding 4). No table changes: the step
	// makes an older build, which would read encoding 4 in lg_writes as corrupt and delete such
	// rows without releasing their chunks, refuse the database. Rows stored whole keep reading.
	{"chunked LangGraph pending writes and staged values (lg_writes, lg_staged encoding 4)", `
COMMENT ON COLUMN lg_writes.encoding IS '0 raw, 16 S2, 4 chunked: data holds the index of the value''s runs, size and sha256 are the raw value''s';
COMMENT ON COLUMN lg_staged.encoding IS '0 raw, 16 S2, 4 chunked: data holds the index of the value''s runs, size and sha256 are the raw value''s';
`},
}

// footprintCounters are the counters the footprint step adds: name, what it counts.
var footprintCounters = []struct{ name, recount string }{
	{"state_data", `(SELECT coalesce(sum(octet_length(data)), 0) FROM states)`},
	{"write_logical", `(SELECT coalesce(sum(CASE WHEN encoding = 4 THEN size ELSE octet_length(value) END), 0) FROM writes)`},
	{"write_stored", `(SELECT coalesce(sum(octet_length(value)), 0) FROM writes)`},
	{"chunks", `(SELECT count(*) FROM chunks)`},
	{"chunk_bytes", `(SELECT coalesce(sum(octet_length(data)), 0) FROM chunks)`},
	{"runs", `(SELECT count(*) FROM chunk_runs)`},
	{"run_bytes", `(SELECT coalesce(sum(octet_length(data)), 0) FROM chunk_runs)`},
	{"lg_logical", `((SELECT coalesce(sum(size), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(size), 0) FROM lg_blobs)
		+ (SELECT coalesce(sum(size), 0) FROM lg_writes))`},
	{"lg_stored", `((SELECT coalesce(sum(octet_length(data)), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(octet_length(data)), 0) FROM lg_blobs)
		+ (SELECT coalesce(sum(octet_length(data)), 0) FROM lg_writes))`},
}

var footprintStep = func() string {
	var b strings.Builder
	var cols, inits, vals, sets, resets []string
	for _, c := range footprintCounters {
		cols = append(cols, c.name)
		b.WriteString("ALTER TABLE counters ADD COLUMN " + c.name + " bigint NOT NULL DEFAULT 0;\n")
		inits = append(inits, c.recount+"::bigint")
		vals = append(vals, "coalesce(nullif(current_setting('ckptd.fp_"+c.name+"', true), '')::bigint, 0)")
		sets = append(sets, c.name+" = k."+c.name+" + excluded."+c.name)
		resets = append(resets, "\tPERFORM set_config('ckptd.fp_"+c.name+"', '', true);\n")
	}
	fmt.Fprintf(&b, "INSERT INTO counters AS k (shard, %s) VALUES (0, %s)\n\tON CONFLICT (shard) DO UPDATE SET %s;\n",
		strings.Join(cols, ", "), strings.Join(inits, ", "), strings.Join(sets, ", "))
	b.WriteString(`
-- footprint_note notes one row's change: touches no table (no search_path needed).
CREATE FUNCTION footprint_note() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	ka text; kb text; da bigint := 0; db bigint := 0;
BEGIN
	IF TG_TABLE_NAME = 'writes' THEN
		ka := 'ckptd.fp_write_logical'; kb := 'ckptd.fp_write_stored';
		IF TG_OP <> 'DELETE' THEN
			da := coalesce(CASE WHEN NEW.encoding = 4 THEN NEW.size ELSE octet_length(NEW.value) END, 0);
			db := coalesce(octet_length(NEW.value), 0);
		END IF;
		IF TG_OP <> 'INSERT' THEN
			da := da - coalesce(CASE WHEN OLD.encoding = 4 THEN OLD.size ELSE octet_length(OLD.value) END, 0);
			db := db - coalesce(octet_length(OLD.value), 0);
		END IF;
	ELSIF TG_TABLE_NAME = 'states' THEN
		ka := 'ckptd.fp_state_data'; kb := ka;
		IF TG_OP <> 'DELETE' THEN da := octet_length(NEW.data); END IF;
		IF TG_OP <> 'INSERT' THEN da := da - octet_length(OLD.data); END IF;
	ELSIF TG_TABLE_NAME IN ('chunks', 'chunk_runs') THEN
		IF TG_TABLE_NAME = 'chunks' THEN
			ka := 'ckptd.fp_chunks'; kb := 'ckptd.fp_chunk_bytes';
		ELSE
			ka := 'ckptd.fp_runs'; kb := 'ckptd.fp_run_bytes';
		END IF;
		IF TG_OP <> 'DELETE' THEN da := 1; db := octet_length(NEW.data); END IF;
		IF TG_OP <> 'INSERT' THEN da := da - 1; db := db - octet_length(OLD.data); END IF;
	ELSE -- lg_checkpoints, lg_blobs, lg_writes
		ka := 'ckptd.fp_lg_logical'; kb := 'ckptd.fp_lg_stored';
		IF TG_OP <> 'DELETE' THEN da := NEW.size; db := octet_length(NEW.data); END IF;
		IF TG_OP <> 'INSERT' THEN da := da - OLD.size; db := db - octet_length(OLD.data); END IF;
	END IF;
	IF da <> 0 THEN
		PERFORM set_config(ka, (coalesce(nullif(current_setting(ka, true), '')::bigint, 0) + da)::text, true);
	END IF;
	IF db <> 0 THEN
		PERFORM set_config(kb, (coalesce(nullif(current_setting(kb, true), '')::bigint, 0) + db)::text, true);
	END IF;
	IF da <> 0 OR db <> 0 THEN
		PERFORM set_config('ckptd.fp_dirty', '1', true);
	END IF;
	RETURN NULL;
END $$;

-- footprint_flush adds the transaction's notes to its shard, once (at COMMIT).
CREATE FUNCTION footprint_flush() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
	sh smallint;
BEGIN
	IF coalesce(current_setting('ckptd.fp_dirty', true), '') <> '1' THEN
		RETURN NULL;
	END IF;
	sh := coalesce(nullif(current_setting('ckptd.shard', true), '')::smallint, (16 + pg_backend_pid() % 48)::smallint);
`)
	fmt.Fprintf(&b, "\tINSERT INTO counters AS k (shard, %s) VALUES (sh, %s)\n\t\tON CONFLICT (shard) DO UPDATE SET %s;\n",
		strings.Join(cols, ", "), strings.Join(vals, ", "), strings.Join(sets, ", "))
	b.WriteString(strings.Join(resets, ""))
	b.WriteString(`	PERFORM set_config('ckptd.fp_dirty', '', true);
	RETURN NULL;
END $$;
`)
	for _, t := range []struct{ table, cols string }{
		{"states", "data"}, {"writes", "value, encoding, size"}, {"chunks", "data"}, {"chunk_runs", "data"},
		{"lg_checkpoints", "size, data"}, {"lg_blobs", "size, data"}, {"lg_writes", "size, data"},
	} {
		fmt.Fprintf(&b, `CREATE TRIGGER %[1]s_footprint AFTER INSERT OR DELETE OR UPDATE OF %[2]s ON %[1]s
	FOR EACH ROW EXECUTE FUNCTION footprint_note();
CREATE CONSTRAINT TRIGGER %[1]s_footprint_flush AFTER INSERT OR DELETE OR UPDATE OF %[2]s ON %[1]s
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION footprint_flush();
`, t.table, t.cols)
	}
	return b.String()
}()

// SchemaVersion is the version this build migrates databases to.
var SchemaVersion = len(migrations)

var (
	errNoSchema    = errors.New("no ckptd schema in this database")
	errNewerSchema = errors.New("the ckptd schema is newer than this ckptd supports: upgrade ckptd")
	errNotOurs     = errors.New("the schema exists but holds no ckptd schema_migrations table: not ckptd's")
)

// migrate brings the ckptd schema up to target, creating it first unless mustExist. Two
// processes starting at once on an empty database both succeed: the second waits on the
// advisory lock, then finds the schema up to date. Only the lock's holder changes anything.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, target int, mustExist bool) (err error) {
	qs := pgx.Identifier{schema}.Sanitize()
	if target > len(migrations) {
		target = len(migrations)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// Fast path, no lock: an up-to-date schema (every start after the first).
	v, ours, err := schemaVersion(ctx, conn, schema)
	if err != nil {
		return err
	}
	switch {
	case v > len(migrations):
		return fmt.Errorf("%w (schema version %d, this ckptd knows %d)", errNewerSchema, v, len(migrations))
	case v >= target:
		return nil
	case v == 0 && !ours && mustExist:
		return errNoSchema
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, lockClass, lockMigrate); err != nil {
		return err
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, $2)`, lockClass, lockMigrate); uerr != nil {
			conn.Conn().PgConn().Close(context.Background()) //nolint:errcheck // dropping the session releases the lock
			if err == nil {
				err = uerr
			}
		}
	}()
	if v, ours, err = schemaVersion(ctx, conn, schema); err != nil { // again, under the lock
		return err
	}
	if v == 0 && !ours {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
			return err
		}
		if exists {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = $1`, schema).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("schema %s: %w", qs, errNotOurs)
			}
		} else if _, err := conn.Exec(ctx, `CREATE SCHEMA `+qs); err != nil {
			return fmt.Errorf("create schema %s: %w", qs, err)
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE `+qs+`.schema_migrations (
			version     integer PRIMARY KEY,
			description text NOT NULL,
			applied_at  timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
	}
	if v > len(migrations) {
		return fmt.Errorf("%w (schema version %d, this ckptd knows %d)", errNewerSchema, v, len(migrations))
	}
	for step := v + 1; step <= target; step++ {
		if err := migrateStep(ctx, conn, qs, step); err != nil {
			return fmt.Errorf("migrate the ckptd schema to version %d: %w", step, err)
		}
	}
	return nil
}

// schemaVersion reads the applied version; ours is false when there is no schema_migrations
// table (a database ckptd never set up).
func schemaVersion(ctx context.Context, conn *pgxpool.Conn, schema string) (v int, ours bool, err error) {
	var reg *string
	qs := pgx.Identifier{schema}.Sanitize()
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1)::text`, qs+".schema_migrations").Scan(&reg); err != nil {
		return 0, false, err
	}
	if reg == nil {
		return 0, false, nil
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+qs+`.schema_migrations`).Scan(&v); err != nil {
		return 0, true, err
	}
	return v, true, nil
}

func migrateStep(ctx context.Context, conn *pgxpool.Conn, qs string, step int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL search_path = `+qs); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, migrations[step-1].sql); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, description) VALUES ($1, $2)`,
		step, migrations[step-1].description); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
