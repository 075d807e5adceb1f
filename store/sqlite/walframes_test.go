package sqlite

import (
	"context"
	"encoding/binary"
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
// as one client saving step after step does) and which b-trees they belong to. It measures;
// the figure is reported by ./scripts/bench.sh (target: at most 4 per save).
func TestWALFramesPerSave(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	for _, c := range []struct {
		name     string
		keepLast int
		wfs      int
	}{{"keep-all/1wf", 0, 1}, {"keep-all/100wf", 0, 100}, {"keepLast10/1wf", 10, 1}} {
		t.Run(c.name, func(t *testing.T) {
			per, by := measureWALFrames(t, c.keepLast, c.wfs, 400)
			t.Logf("%.2f frames per 1 KB save; by b-tree: %s", per, by)
		})
	}
}

func measureWALFrames(t testing.TB, keepLast, wfs, n int) (float64, string) {
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
	save := func(i int) {
		if _, err := s.Save(ctx, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i%wfs), Step: int64(i), State: uniqueState(base, i),
			StateType: store.StateJSON, Metadata: []byte(`{"source":"loop","step":1}`),
			PendingTasks: []byte(`[{"id":"t","name":"agent"}]`)}); err != nil {
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
	count := map[string]int{}
	for _, p := range pages {
		name := owner[p]
		switch {
		case p == 1:
			name = "(header page 1)"
		case name == "":
			name = "(ptrmap/free)"
		}
		count[name]++
	}
	names := make([]string, 0, len(count))
	for k := range count {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return count[names[i]] > count[names[j]] })
	var sb strings.Builder
	for _, k := range names {
		fmt.Fprintf(&sb, "%s %.2f, ", k, float64(count[k])/float64(n))
	}
	return float64(len(pages)) / float64(n), sb.String()
}
