package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/pgtest"
	"github.com/ckptd/ckptd/store"
)

// corruptFn raises what PostgreSQL raises when it meets a damaged page.
const corruptFn = `CREATE FUNCTION corrupt() RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN
	RAISE EXCEPTION 'invalid page in block 7 of relation base/16384/16400' USING ERRCODE = 'data_corrupted';
END $$`

// TestCorruptionStopsWrites (#19 point 9 on PostgreSQL): when the server reports corrupted data
// (SQLSTATE XX001) to a write or to a read, the store stops writing for good: that write and
// every later one fail with reason "database damaged" even once the server answers again, reads
// that work keep answering, and Condition says what to do.
func TestCorruptionStopsWrites(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage []string // run on the database after one checkpoint is saved
		meet   func(t *testing.T, s *Store, id string)
	}{
		{"reported to a write", []string{corruptFn,
			`CREATE FUNCTION corrupt_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM corrupt(); RETURN NEW; END $$`,
			`CREATE TRIGGER corrupt BEFORE INSERT ON checkpoints FOR EACH ROW EXECUTE FUNCTION corrupt_row()`},
			func(t *testing.T, s *Store, _ string) {
				_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":2}`)})
				var ue *store.UnavailableError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, store.ReasonDamaged, ue.Reason)
			}},
		{"reported to a read", []string{corruptFn,
			`ALTER TABLE states RENAME TO states_intact`,
			`CREATE VIEW states AS SELECT * FROM states_intact WHERE corrupt()`},
			func(t *testing.T, s *Store, id string) {
				_, err := s.Load(ctx, id)
				require.Error(t, err)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := pgtest.Database(t)
			s := openURL(t, u)
			first, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":1}`)})
			require.NoError(t, err)
			require.True(t, s.Condition().Writable())
			c := rawConn(t, u)
			for _, q := range tc.damage {
				_, err := c.Exec(ctx, q)
				require.NoError(t, err, q)
			}
			tc.meet(t, s, first.CheckpointID)
			cond := s.Condition()
			require.Equal(t, store.ReasonDamaged, cond.Reason)
			assert.Contains(t, cond.Detail, "pg_amcheck")
			assert.True(t, cond.Failed())

			// the server answers again: writes stay stopped, reads work
			_, err = c.Exec(ctx, `DROP FUNCTION corrupt() CASCADE`)
			require.NoError(t, err)
			if tc.name == "reported to a read" {
				_, err = c.Exec(ctx, `ALTER TABLE states_intact RENAME TO states`)
				require.NoError(t, err)
			}
			_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":3}`)})
			var ue *store.UnavailableError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, store.ReasonDamaged, ue.Reason)
			cp, err := s.Load(ctx, first.CheckpointID)
			require.NoError(t, err)
			assert.JSONEq(t, `{"a":1}`, string(cp.State))
			lst, err := s.List(ctx, store.ListFilter{WorkflowID: "w"})
			require.NoError(t, err)
			assert.Len(t, lst, 1, "nothing written after the damage was reported")
		})
	}
}
