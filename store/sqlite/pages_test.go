package sqlite

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestDamagedPage wrecks the b-tree page holding one checkpoint's state, so that SQLite itself
// fails reading it (SQLITE_CORRUPT, "database disk image is malformed"): that checkpoint is
// reported corrupt by name (with its workflow), a latest-load falls back past it, and Verify
// still lists it although it can no longer scan the states table.
func TestDamagedPage(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/p.db"
	s, err := open(ctx, options(path))
	require.NoError(t, err)
	state := func(marker string) []byte { // raw (below the compression threshold), one page
		return []byte(`{"m":"` + marker + `","pad":"` + strings.Repeat("x", 3000) + `"}`)
	}
	first := mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "p-1", State: state("FIRST-STATE-MARKER")})
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "p-2", State: state("SECOND-STATE-MARKER")})
	mustSave(t, s, store.SaveRequest{WorkflowID: "other", CheckpointID: "o-1", State: []byte(`{"o":1}`)})
	require.NoError(t, s.Close()) // everything checkpointed into the main file

	file, err := os.ReadFile(path)
	require.NoError(t, err)
	pageSize := int(binary.BigEndian.Uint16(file[16:18]))
	at := bytes.Index(file, []byte("SECOND-STATE-MARKER"))
	require.Positive(t, at)
	require.NotEqual(t, at/pageSize, bytes.Index(file, []byte("FIRST-STATE-MARKER"))/pageSize)
	file[at/pageSize*pageSize] = 0x6b // page type byte: no b-tree page type
	require.NoError(t, os.WriteFile(path, file, 0o600))

	s, err = open(ctx, options(path))
	require.NoError(t, err)
	defer s.Close()

	_, err = s.Load(ctx, "p-2")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "p-2", ce.CheckpointID)
	assert.Equal(t, "wf", ce.WorkflowID)
	assert.Contains(t, ce.Reason, "database page corrupt")
	assert.False(t, errors.Is(err, store.ErrUnavailable))

	lr, err := s.LoadLatest(ctx, "wf", "")
	require.NoError(t, err)
	assert.Equal(t, first.CheckpointID, lr.CheckpointID)
	require.Len(t, lr.RecoveredFrom, 1)
	assert.Equal(t, "p-2", lr.RecoveredFrom[0].CheckpointID)

	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	var ids []string
	database := 0
	for _, b := range bad {
		if b.CheckpointID == "" {
			database++
			continue
		}
		ids = append(ids, b.CheckpointID)
	}
	// exactly the checkpoints that no longer load (o-1's small state may share the page)
	var failing []string
	for _, id := range []string{"p-1", "p-2", "o-1"} {
		if _, err := s.Load(ctx, id); err != nil {
			require.ErrorAs(t, err, &ce, id)
			failing = append(failing, id)
		}
	}
	assert.Contains(t, failing, "p-2")
	assert.NotContains(t, failing, "p-1")
	assert.ElementsMatch(t, failing, ids)
	assert.Positive(t, database, "the damage itself is reported too: %+v", bad)
}
