package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// lgFixture stores two LangGraph threads the way the savers do (a subgraph namespace, pending
// writes, metadata with source and step) plus a thread with only pending writes.
func lgFixture(t *testing.T) *cliDB {
	t.Helper()
	return fillLG(newCLIDB(t, nil))
}

// fillLG fills db as lgFixture does.
func fillLG(db *cliDB) *cliDB {
	t := db.t
	t.Helper()
	ctx := context.Background()
	put := func(thread, ns, id, parent, versions, meta string, blobs ...store.LGBlob) {
		req := store.LGPutRequest{ThreadID: thread, Namespace: ns, CheckpointID: id, ParentID: parent, Type: "json",
			Checkpoint: []byte(`{"v":4,"id":"` + id + `"}`), ChannelVersions: json.RawMessage(versions), Blobs: blobs}
		if meta != "" {
			req.Metadata = json.RawMessage(meta)
		}
		p, _ := db.st.LGPut(req)
		require.NoError(t, p.Wait(ctx))
	}
	blob := func(ch, v, data string) store.LGBlob {
		return store.LGBlob{Channel: ch, Version: v, Type: "json", Data: []byte(data)}
	}
	put("support-42", "", "1f0a-0001", "", `{"messages":1}`, `{"source":"input","step":-1,"parents":{}}`,
		blob("messages", "1", `[{"role":"user","content":"my order is late"}]`))
	put("support-42", "", "1f0a-0002", "1f0a-0001", `{"messages":2,"route":2}`, `{"source":"loop","step":0,"parents":{}}`,
		blob("messages", "2", `[{"role":"user","content":"my order is late"},{"role":"ai","content":"checking"}]`),
		blob("route", "2", `"tools"`))
	put("support-42", "tools:7d1e", "1f0a-0003", "", `{"query":1}`, `{"source":"loop","step":1,"parents":{"":"1f0a-0002"}}`,
		blob("query", "1", `"order 42"`))
	w, _ := db.st.LGPutWrites("support-42", "", "1f0a-0002", []store.LGWrite{
		{TaskID: "task-a", Idx: 0, Channel: "messages", Type: "json", Data: []byte(`{"role":"tool","content":"shipped"}`)},
		{TaskID: "task-a", Idx: 1, Channel: "route", Type: "json", Data: []byte(`"agent"`)}})
	require.NoError(t, w.Wait(ctx))
	put("triage-7", "", "1f0b-0001", "", `{"state":1}`, "",
		store.LGBlob{Channel: "state", Version: "1", Type: "msgpack", Data: []byte{0x81, 0xa1, 0x61, 0x01}})
	w, _ = db.st.LGPutWrites("orphan-writes", "", "1f0c-0001", []store.LGWrite{{TaskID: "t", Idx: 0, Channel: "x", Type: "json", Data: []byte(`1`)}})
	require.NoError(t, w.Wait(ctx))
	db.close()
	return db
}

func TestCLIThreads(t *testing.T) {
	t.Parallel()
	db := lgFixture(t)
	cliGolden(t, "threads", db.dir, cliRun(t, nil, "threads", "--db", db.path))
	cliGolden(t, "threads-json", db.dir, cliRun(t, nil, "threads", "--json", "--db", db.path))
	cliGolden(t, "threads-thread", db.dir, cliRun(t, nil, "threads", "support-42", "--db", db.path))
	cliGolden(t, "threads-thread-json", db.dir, cliRun(t, nil, "threads", "support-42", "--namespace", "", "--limit", "1", "--json", "--db", db.path))
	cliGolden(t, "threads-thread-subgraph", db.dir, cliRun(t, nil, "threads", "support-42", "--namespace", "tools:7d1e", "--db", db.path))
	cliGolden(t, "threads-writes-only", db.dir, cliRun(t, nil, "threads", "orphan-writes", "--db", db.path))
	cliGolden(t, "threads-unknown", db.dir, cliRun(t, nil, "threads", "nope", "--db", db.path))
	cliGolden(t, "threads-usage", db.dir, cliRun(t, nil, "threads", "--checkpoint", "latest", "--db", db.path))
	cliGolden(t, "threads-limit", db.dir, cliRun(t, nil, "threads", "--limit", "2", "--db", db.path))
	cliGolden(t, "threads-limit-json", db.dir, cliRun(t, nil, "threads", "--limit", "1", "--json", "--db", db.path))
	cliGolden(t, "threads-all", db.dir, cliRun(t, nil, "threads", "--all", "--db", db.path))
	cliGolden(t, "threads-usage-all", db.dir, cliRun(t, nil, "threads", "--all", "--limit", "3", "--db", db.path))

	cliGolden(t, "threads-checkpoint", db.dir, cliRun(t, nil, "threads", "support-42", "--checkpoint", "latest", "--db", db.path))
	cliGolden(t, "threads-checkpoint-values", db.dir, cliRun(t, nil, "threads", "support-42", "--checkpoint", "1f0a-0002", "--values", "--db", db.path))
	cliGolden(t, "threads-checkpoint-json", db.dir, cliRun(t, nil, "threads", "support-42", "--checkpoint", "1f0a-0003",
		"--namespace", "tools:7d1e", "--values", "--json", "--db", db.path))
	cliGolden(t, "threads-checkpoint-missing", db.dir, cliRun(t, nil, "threads", "support-42", "--checkpoint", "1f0a-0003", "--db", db.path))
	cliGolden(t, "threads-checkpoint-msgpack", db.dir, cliRun(t, nil, "threads", "triage-7", "--checkpoint", "latest", "--values", "--db", db.path))
	cliGolden(t, "threads-checkpoint-usage", db.dir, cliRun(t, nil, "threads", "support-42", "--values", "--db", db.path))

	empty := standardFixture(t) // workflows only
	cliGolden(t, "threads-empty", empty.dir, cliRun(t, nil, "threads", "--db", empty.path))

	var out struct {
		Threads []threadJSON `json:"threads"`
	}
	res := cliRun(t, nil, "threads", "--json", "--db", db.path)
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Len(t, out.Threads, 3)
	assert.Equal(t, "support-42", out.Threads[1].ThreadID)
	assert.Equal(t, 3, out.Threads[1].Checkpoints)
	assert.Equal(t, 2, out.Threads[1].Namespaces)
	assert.Equal(t, 2, out.Threads[1].Writes)
	assert.Equal(t, "1f0a-0002", out.Threads[1].LatestCheckpointID)
}

func TestMetadataSourceStep(t *testing.T) {
	t.Parallel()
	for meta, want := range map[string][2]string{
		`{"source":"loop","step":3}`:   {"loop", "3"},
		`{"source":"input","step":-1}`: {"input", "-1"},
		`{"step":2}`:                   {"-", "2"},
		`{"source":"","step":"x"}`:     {"-", "-"},
		`null`:                         {"-", "-"},
		``:                             {"-", "-"},
	} {
		s, st := metadataSourceStep(json.RawMessage(meta))
		assert.Equal(t, want, [2]string{s, st}, meta)
	}
}

// TestCLIThreadsIdle: 'ckptd threads --idle AGE' lists the threads idle that long, with the idle
// TTL of their retention and when the sweep deletes them.
func TestCLIThreadsIdle(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	ctx := context.Background()
	for _, thread := range []string{"quiet", "own-ttl"} {
		p, _ := db.st.LGPut(store.LGPutRequest{ThreadID: thread, CheckpointID: "c1", Type: "json", Checkpoint: []byte(`{}`),
			ChannelVersions: json.RawMessage(`{}`)})
		require.NoError(t, p.Wait(ctx))
	}
	own := "own-ttl"
	_, err := db.st.LGConfigure(ctx, &own, &store.Retention{IdleTTLSeconds: 3600}, false)
	require.NoError(t, err)
	db.close()
	// the fixture's clock is in the past: both are idle for days
	cliGolden(t, "threads-idle-json", db.dir, cliRun(t, nil, "threads", "--idle", "1d", "--json", "--db", db.path))
	res := cliRun(t, nil, "threads", "--idle", "1d", "--db", db.path)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `(?m)^quiet\s+2026-01-02T03:04:00Z\s+\S+d\s+-\s+never$`, res.stdout)
	assert.Regexp(t, `(?m)^own-ttl\s+2026-01-02T03:05:00Z\s+\S+d\s+1h\s+at the next sweep$`, res.stdout)
	assert.Contains(t, res.stderr, "2 thread(s) idle for 1d or more; 1 expire at the next sweep")
	res = cliRun(t, nil, "threads", "--idle", "10000d", "--db", db.path)
	assert.Equal(t, 0, res.code)
	assert.Contains(t, res.stderr, "no LangGraph thread idle for 10000d or more")
	res = cliRun(t, nil, "threads", "quiet", "--idle", "1d", "--db", db.path)
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "--idle lists threads")
}
