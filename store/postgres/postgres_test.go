package postgres

// What only the PostgreSQL backend has: migrations under an advisory lock, schemas of its own,
// URLs with passwords, LISTEN/NOTIFY, text PostgreSQL cannot store, and many processes saving
// to the same workflows at once.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/pgtest"
	"github.com/ckptd/ckptd/store"
)

func openURL(t *testing.T, u string, mut ...func(*Options)) *Store {
	t.Helper()
	o := Options{Options: store.Options{Path: u}, noBackground: true}
	for _, m := range mut {
		m(&o)
	}
	s, err := Open(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestOpenRace: processes starting at once on an empty database all succeed; the advisory lock
// lets one create the schema while the others wait for it.
func TestOpenRace(t *testing.T) {
	u := pgtest.Database(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]*Store, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = Open(context.Background(), Options{Options: store.Options{Path: u}, noBackground: true})
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "process %d", i)
		defer stores[i].Close()
	}
	require.Equal(t, SchemaVersion, schemaVersionOf(t, u))
	var steps int
	require.NoError(t, rawConn(t, u).QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&steps))
	require.Equal(t, SchemaVersion, steps, "each step applied once")
	res, err := stores[n-1].Save(context.Background(), store.SaveRequest{WorkflowID: "w", State: []byte(`{}`)})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Seq)
}

// TestSchemaChecks: an inspection command does not set up a database, and ckptd refuses a
// schema that is not its own or is newer than it knows.
func TestSchemaChecks(t *testing.T) {
	ctx := context.Background()
	u := pgtest.Database(t)
	_, err := Open(ctx, Options{Options: store.Options{Path: u}, MustExist: true})
	require.ErrorIs(t, err, errNoSchema)
	var n int
	require.NoError(t, rawConn(t, u).QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'ckptd'`).Scan(&n))
	require.Zero(t, n, "nothing created")

	openURL(t, u).Close()
	openURL(t, u, func(o *Options) { o.MustExist = true }).Close()

	_, err = rawConn(t, u).Exec(ctx, `INSERT INTO schema_migrations (version, description) VALUES (99, 'from the future')`)
	require.NoError(t, err)
	_, err = Open(ctx, Options{Options: store.Options{Path: u}})
	require.ErrorIs(t, err, errNewerSchema)

	other := pgtest.Database(t)
	_, err = rawConn(t, other).Exec(ctx, `CREATE SCHEMA ckptd; CREATE TABLE ckptd.checkpoints (x int)`)
	require.NoError(t, err)
	_, err = Open(ctx, Options{Options: store.Options{Path: other}})
	require.ErrorIs(t, err, errNotOurs)
}

// TestSchemaParam: ckptd_schema keeps several ckptd databases apart in one PostgreSQL database,
// and a bad one is refused.
func TestSchemaParam(t *testing.T) {
	ctx := context.Background()
	u := pgtest.Database(t)
	a := openURL(t, u+"&ckptd_schema=team_a")
	b := openURL(t, u+"&ckptd_schema=team_b")
	def := openURL(t, u)
	_, err := a.Save(ctx, store.SaveRequest{WorkflowID: "w", CheckpointID: "c", State: []byte(`{"team":"a"}`)})
	require.NoError(t, err)
	for _, s := range []*Store{b, def} {
		_, err := s.Load(ctx, "c")
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	_, err = b.Save(ctx, store.SaveRequest{WorkflowID: "w", CheckpointID: "c", State: []byte(`{"team":"b"}`)})
	require.NoError(t, err, "the same id in another schema is no conflict")
	cp, err := a.Load(ctx, "c")
	require.NoError(t, err)
	require.JSONEq(t, `{"team":"a"}`, string(cp.State))
	for _, bad := range []string{"Team", "1x", "a-b", strings.Repeat("x", 58), ""} {
		_, err := Open(ctx, Options{Options: store.Options{Path: u + "&ckptd_schema=" + url.QueryEscape(bad)}})
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie, bad)
		require.Contains(t, ie.Reason, SchemaParam)
	}
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:secret@db.example:5432/ckpt", "postgres://u:xxxxx@db.example:5432/ckpt"},
		{"postgresql://u@h/db?sslmode=require", "postgresql://u@h/db?sslmode=require"},
		{"postgres:///db?host=/tmp/s&password=secret", "postgres:///db?host=%2Ftmp%2Fs&password=xxxxx"},
		{"postgres://u:p%40ss@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:secret@h:notaport/db", "postgres://(URL does not parse)"},
		{"postgres://h/db", "postgres://h/db"},
	} {
		got := Redact(c.in)
		assert.Equal(t, c.want, got, c.in)
		assert.NotContains(t, got, "secret")
	}
}

// TestPasswordNeverShown: the URL's password appears in no error, location or figure.
func TestPasswordNeverShown(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(pgtest.Database(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "hunter2secret") // trust authentication: accepted
	s := openURL(t, u.String())
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	about := s.About()
	for _, text := range []string{st.Path, about.Location, fmt.Sprint(s.Health(ctx))} {
		assert.NotContains(t, text, "hunter2secret")
	}
	assert.Contains(t, about.Location, "xxxxx")

	// unreachable: the error names the database without the password
	bad := *u
	bad.RawQuery = url.Values{"host": {t.TempDir()}, "connect_timeout": {"2"}}.Encode()
	_, err = Open(ctx, Options{Options: store.Options{Path: bad.String()}, giveUp: time.Second})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2secret")
	assert.ErrorIs(t, err, store.ErrUnavailable)
	_, err = Open(ctx, Options{Options: store.Options{Path: "postgres://u:hunter2secret@h:bad/db"}})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2secret")
}

// TestNUL: text PostgreSQL cannot store is refused naming the field; nothing is stored.
func TestNUL(t *testing.T) {
	ctx := context.Background()
	s := openURL(t, pgtest.Database(t))
	for _, c := range []struct {
		req   store.SaveRequest
		field string
	}{
		{store.SaveRequest{WorkflowID: "w\x00"}, "workflowId"},
		{store.SaveRequest{WorkflowID: "w", StepName: "a\x00b"}, "stepName"},
		{store.SaveRequest{WorkflowID: "w", Metadata: []byte(`{"k\u0000":1}`)}, "metadata"},
	} {
		_, err := s.Save(ctx, c.req)
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, c.field, ie.Field)
	}
	p, _ := s.LGPut(store.LGPutRequest{ThreadID: "t\x00", CheckpointID: "c", Type: "json", ChannelVersions: []byte(`{}`)})
	var ie *store.InvalidError
	require.ErrorAs(t, p.Wait(ctx), &ie)
	assert.Equal(t, "threadId", ie.Field)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Checkpoints)
	// a metadata value with \u0000 is JSON text, stored as such
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "w", CheckpointID: "ok", Metadata: []byte(`{"k":"a\u0000b"}`)})
	require.NoError(t, err)
	lst, err := s.List(ctx, store.ListFilter{Metadata: map[string]json.RawMessage{"k": json.RawMessage(`"a\u0000b"`)}})
	require.NoError(t, err)
	require.Len(t, lst, 1)
}

// TestFeed: what one process commits reaches the subscribers of another, in commit order,
// without its own events and without rolled-back ones.
func TestFeed(t *testing.T) {
	ctx := context.Background()
	u := pgtest.Database(t)
	a := openURL(t, u)
	b := openURL(t, u, func(o *Options) { o.DefaultRetention = store.Retention{KeepLast: 2} })
	var mu sync.Mutex
	var got []store.Event
	cancel := a.Subscribe(func(e store.Event) {
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	})
	defer cancel()
	_, err := a.Save(ctx, store.SaveRequest{WorkflowID: "own", State: []byte(`1`)})
	require.NoError(t, err)
	var ids []string
	for i := range 3 {
		res, err := b.Save(ctx, store.SaveRequest{WorkflowID: "w", Namespace: "ns", Step: int64(i), State: []byte(`{}`)})
		require.NoError(t, err)
		ids = append(ids, res.CheckpointID)
	}
	_, err = b.Save(ctx, store.SaveRequest{WorkflowID: "w", CheckpointID: ids[2], State: []byte(`{"other":1}`)})
	require.ErrorIs(t, err, store.ErrConflict) // rolled back: not announced
	// a batch of many saves at once, and a prune
	var pend []*store.Pending
	for i := range 50 {
		pend = append(pend, b.Enqueue(store.SaveRequest{WorkflowID: fmt.Sprintf("many-%d", i), State: []byte(`{}`)}))
	}
	for _, p := range pend {
		_, err := p.Wait(ctx)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 3+1+50
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 3+1+50)
	for i := range 3 {
		sv := got[i].Saved
		require.NotNil(t, sv)
		assert.Equal(t, store.SavedEvent{CheckpointID: ids[i], WorkflowID: "w", Namespace: "ns", Seq: int64(i + 1),
			Phase: store.PhaseCompleted, Step: int64(i)}, *sv)
	}
	require.NotNil(t, got[3].Pruned, "retention ran in the third save's transaction, announced after it")
	assert.Equal(t, store.PrunedEvent{WorkflowID: "w", CheckpointIDs: []string{ids[0]}, Reason: "retention"}, *got[3].Pruned)
	for i, e := range got[4:] {
		require.NotNil(t, e.Saved)
		assert.Equal(t, fmt.Sprintf("many-%d", i), e.Saved.WorkflowID)
	}
}

// TestPayloadsSplit: large prunes are split over several NOTIFYs within PostgreSQL's limit.
func TestPayloadsSplit(t *testing.T) {
	s := &Store{origin: "o", log: discard()}
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = fmt.Sprintf("checkpoint-%06d", i)
	}
	ps := s.payloads([]store.Event{{Pruned: &store.PrunedEvent{WorkflowID: "w", CheckpointIDs: ids, Reason: "prune"}},
		{Saved: &store.SavedEvent{CheckpointID: "c", WorkflowID: "w"}}})
	require.Greater(t, len(ps), 1)
	var back []string
	saved := 0
	for _, p := range ps {
		require.LessOrEqual(t, len(p), maxPayload)
		var got []store.Event
		s2 := &Store{origin: "other", log: discard()}
		s2.feed.subs = map[int]func(store.Event){0: func(e store.Event) { got = append(got, e) }}
		s2.dispatch(p)
		for _, e := range got {
			if e.Pruned != nil {
				back = append(back, e.Pruned.CheckpointIDs...)
			} else {
				saved++
			}
		}
	}
	require.Equal(t, ids, back)
	require.Equal(t, 1, saved)
}

// TestManyProcessesOneWorkflow: processes saving to the same workflows at once, with retention
// and prunes: seqs stay unique and follow each process's save order, and every state and
// manifest row is counted exactly.
func TestManyProcessesOneWorkflow(t *testing.T) {
	ctx := context.Background()
	u := pgtest.Database(t)
	const procs, per = 4, 60
	stores := make([]*Store, procs)
	for i := range stores {
		stores[i] = openURL(t, u, func(o *Options) { o.DefaultRetention = store.Retention{KeepLast: 5} })
	}
	var wg sync.WaitGroup
	errs := make(chan error, procs*per)
	seqs := make([][]int64, procs)
	for p, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pend []*store.Pending
			for i := range per {
				// shared states (dedup across processes) and two shared workflows
				pend = append(pend, s.Enqueue(store.SaveRequest{WorkflowID: fmt.Sprintf("shared-%d", i%2),
					State: []byte(fmt.Sprintf(`{"v":%d}`, i%7))}))
				if i%20 == 0 {
					if _, err := s.Prune(ctx, store.PruneRequest{KeepLast: 3}); err != nil {
						errs <- err
					}
				}
			}
			for _, pe := range pend {
				res, err := pe.Wait(ctx)
				if err != nil {
					errs <- err
					continue
				}
				seqs[p] = append(seqs[p], res.Seq)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// per process and workflow, seqs strictly increase in Enqueue order
	for p := range procs {
		last := map[int]int64{}
		for i, seq := range seqs[p] {
			require.Greater(t, seq, last[i%2], "process %d save %d", p, i)
			last[i%2] = seq
		}
	}
	c := rawConn(t, u)
	var dups, wrongRefs, orphans int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM (SELECT workflow_id, seq FROM checkpoints
		GROUP BY workflow_id, seq HAVING count(*) > 1) d`).Scan(&dups))
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM states s WHERE s.refs <>
		(SELECT count(*) FROM checkpoints c WHERE c.state_hash = s.hash)`).Scan(&wrongRefs))
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM checkpoints c WHERE c.state_hash IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM states s WHERE s.hash = c.state_hash)`).Scan(&orphans))
	assert.Zero(t, dups)
	assert.Zero(t, wrongRefs)
	assert.Zero(t, orphans)
	bad, err := stores[0].Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	for _, wf := range []string{"shared-0", "shared-1"} {
		lst, err := stores[0].List(ctx, store.ListFilter{WorkflowID: wf})
		require.NoError(t, err)
		require.LessOrEqual(t, len(lst), 5)
		require.Equal(t, int64(procs*per/2), lst[0].Seq)
	}
}

// TestIntegrityCheck: amcheck runs over every table and index (the test cluster's superuser
// may create the extension) and finds nothing on a sound database.
func TestIntegrityCheck(t *testing.T) {
	ctx := context.Background()
	u := pgtest.Database(t)
	s := openURL(t, u)
	require.True(t, s.amcheck)
	require.Contains(t, s.About().Integrity, "amcheck")
	_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: []byte(`{}`)})
	require.NoError(t, err)
	problems, err := s.IntegrityCheck(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	var ext string
	require.NoError(t, rawConn(t, u).QueryRow(ctx, `SELECT extname FROM pg_extension WHERE extname = 'amcheck'`).Scan(&ext))
	h, err := s.Health(ctx)
	require.NoError(t, err)
	m := h.SettingsMap()
	assert.Equal(t, "on", m["synchronous_commit"])
	assert.Positive(t, h.Figure("databaseBytes"))
	n := openURL(t, u, func(o *Options) { o.Durability = store.DurabilityNormal })
	h, err = n.Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, "off", h.SettingsMap()["synchronous_commit"])
}

// TestClosedWhileUnreachable: errors while the server cannot be reached are ErrUnavailable.
func TestUnavailable(t *testing.T) {
	_, err := Open(context.Background(), Options{Options: store.Options{Path: "postgres://nobody@/db?host=" + url.QueryEscape(t.TempDir()) + "&connect_timeout=1"},
		giveUp: 500 * time.Millisecond})
	require.Error(t, err)
	require.True(t, errors.Is(err, store.ErrUnavailable), err)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
