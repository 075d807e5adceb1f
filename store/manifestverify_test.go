package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
)

// TestVerifyManifests: every kind of damage to the manifest tables is found, and named by the
// checkpoints whose manifest it breaks.
func TestVerifyManifests(t *testing.T) {
	root := srcTree(t, 40)
	m1 := scanTree(t, root, nil)
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg0", "extra.go"), []byte("package p\n"), 0o644))
	m2 := scanTree(t, root, m1)
	build := func(t *testing.T) *Store {
		s := openTest(t)
		em := saveWithManifest(t, s, "wf", "c-1", m1, nil)
		saveWithManifest(t, s, "wf", "c-2", m2, em) // shares most entries and chunks with c-1
		mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c-3", State: []byte(`{}`)})
		return s
	}
	s := build(t)
	counts, bad, err := s.VerifyManifests(context.Background())
	require.NoError(t, err)
	assert.Empty(t, bad)
	assert.Equal(t, 2, counts.Manifests)
	assert.Equal(t, len(m2.Entries), counts.Entries)

	shared := fmt.Sprintf("X'%x'", drift.EntryKey(m1.Entries[0])) // unchanged: in both manifests
	for _, tc := range []struct {
		name, sql, reason string
		ids               []string
	}{
		{"entry bytes", `UPDATE drift_entries SET data = data || X'00' WHERE key = ` + shared, "BLAKE3 mismatch", []string{"c-1", "c-2"}},
		{"entry missing", `DELETE FROM drift_entries WHERE key = ` + shared, "is missing", []string{"c-1", "c-2"}},
		{"chunk keys", `UPDATE drift_chunks SET keys = substr(keys, 17)`, "entry chunk", []string{"c-1", "c-2"}},
		{"chunk missing", `DELETE FROM drift_chunks`, "entry chunk", []string{"c-1", "c-2"}},
		{"header", `UPDATE drift_manifests SET header = X'00' WHERE ckpt = (SELECT id FROM checkpoints WHERE checkpoint_id = 'c-2')`,
			"source manifest header", []string{"c-2"}},
		{"chunk list", `UPDATE drift_manifests SET chunks = X'0102' WHERE ckpt = (SELECT id FROM checkpoints WHERE checkpoint_id = 'c-1')`,
			"chunk list of 2 bytes", []string{"c-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := build(t)
			_, err := rawDB(t, s.Path()).Exec(tc.sql)
			require.NoError(t, err)
			_, bad, err := s.VerifyManifests(context.Background())
			require.NoError(t, err)
			var ids []string
			for _, p := range bad {
				ids = append(ids, p.CheckpointID)
				assert.Equal(t, "wf", p.WorkflowID)
				assert.Contains(t, p.Reason, tc.reason)
			}
			assert.Equal(t, tc.ids, ids)
		})
	}
}
