package sqlite

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ckptd/ckptd/store"
)

// walFrames reads the WAL file at path and returns the page number of every frame from byte
// offset from on (WAL frames: a 24-byte header whose first 4 bytes are the page number, then
// the page).
func walFrames(t testing.TB, path string, from int64, pageSize int) ([]uint32, int64) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if from < 32 {
		from = 32
	}
	var pages []uint32
	for off := from; off+24+int64(pageSize) <= int64(len(b)); off += 24 + int64(pageSize) {
		pages = append(pages, binary.BigEndian.Uint32(b[off:off+4]))
	}
	return pages, int64(len(b))
}

// TestWALFramesPerSave prints the WAL frames one 1 KB save writes (one save per transaction,
// as one client saving step after step does) and which b-trees they belong to. It measures
// (the target, at most 4 per save, is #18's and ./scripts/bench.sh reports it); with
// CKPTD_WALFRAMES_JSON set it writes the figures there as JSON.
func TestWALFramesPerSave(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	type result struct {
		Name     string             `json:"name"`
		PerSave  float64            `json:"frames_per_save"`
		ByBTree  map[string]float64 `json:"by_btree"`
		KeepLast int                `json:"keep_last"`
		Meta     bool               `json:"metadata"`
	}
	var out []result
	for _, c := range []struct {
		name     string
		keepLast int
		wfs      int
		meta     bool
	}{{"1 workflow", 0, 1, false}, {"100 workflows", 0, 100, false}, {"2 metadata keys", 0, 1, true},
		{"keepLast 10 (prunes one per save)", 10, 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			per, by := measureWALFrames(t, c.keepLast, c.wfs, c.meta, 400)
			keys := make([]string, 0, len(by))
			for k := range by {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return by[keys[i]] > by[keys[j]] })
			var sb strings.Builder
			for _, k := range keys {
				fmt.Fprintf(&sb, "%s %.2f, ", k, by[k])
			}
			t.Logf("%.2f frames per 1 KB save; by b-tree: %s", per, sb.String())
			out = append(out, result{Name: c.name, PerSave: per, ByBTree: by, KeepLast: c.keepLast, Meta: c.meta})
			// The count is deterministic for a schema: a guard that no change adds a b-tree write
			// to every save unnoticed. Raise it knowingly (and say so in the change), or better,
			// take one out: #18's budget is 4.
			if c.name == "1 workflow" && per > walFramesCeiling {
				t.Errorf("a 1 KB save writes %.2f WAL frames, more than the %.1f allowed: %s", per, walFramesCeiling, sb.String())
			}
		})
	}
	if p := os.Getenv("CKPTD_WALFRAMES_JSON"); p != "" {
		b, err := json.MarshalIndent(out, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// walFramesCeiling is the most WAL frames a 1 KB save (one workflow, no metadata) may write
// before TestWALFramesPerSave fails; schema step 8 brought it from ~13 to 8.9.
const walFramesCeiling = 9.5

func measureWALFrames(t testing.TB, keepLast, wfs int, meta bool, n int) (float64, map[string]float64) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "f.db")
	s, err := open(ctx, Options{Options: store.Options{Path: path, Durability: store.DurabilityFull,
		DefaultRetention: store.Retention{KeepLast: keepLast}}, noBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := checkpointJSON(rand.New(rand.NewPCG(1, 1)), 1<<10)
	var md []byte
	if meta {
		md = []byte(`{"source":"loop","step":1}`)
	}
	save := func(i int) {
		if _, err := s.Save(ctx, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i%wfs), Step: int64(i), State: uniqueState(base, i),
			StateType: store.StateJSON, Metadata: md, PendingTasks: []byte(`[{"id":"t","name":"agent"}]`)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 200; i++ { // past the first pages of every b-tree
		save(i)
	}
	_, start := walFrames(t, path+"-wal", 0, 4096)
	for i := 200; i < 200+n; i++ {
		save(i)
	}
	pages, _ := walFrames(t, path+"-wal", start, 4096)
	// Which b-tree each page belongs to (dbstat), as of now.
	owner := map[uint32]string{}
	rows, err := s.rdb.QueryContext(ctx, `SELECT name, pageno FROM dbstat`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var pg uint32
		if err := rows.Scan(&name, &pg); err != nil {
			t.Fatal(err)
		}
		owner[pg] = name
	}
	rows.Close()
	by := map[string]float64{}
	for _, p := range pages {
		name := owner[p]
		switch {
		case p == 1:
			name = "(header page 1)"
		case name == "":
			name = "(ptrmap/free)"
		}
		by[name] += 1 / float64(n)
	}
	return float64(len(pages)) / float64(n), by
}
