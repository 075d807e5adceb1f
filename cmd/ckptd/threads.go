package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

const threadsUsage = `usage: ckptd threads [THREAD] [flags]

LangGraph threads, stored by the LangGraph savers (ckptd.langgraph, ckptd/langgraph) through the
lg/* methods. Without THREAD: every thread, most recently updated first (checkpoints, namespaces,
pending writes, newest checkpoint, last update, stored size). With THREAD: its checkpoints,
namespace by namespace (root first), newest first, with their metadata's source and step.
Reads only the rows' headers and metadata, never a stored value.

examples:
  ckptd threads
  ckptd threads my-thread
  ckptd threads my-thread --namespace "" --limit 5 --json
`

// threadJSON is one thread in 'ckptd threads --json'.
type threadJSON struct {
	ThreadID           string `json:"threadId"`
	Checkpoints        int    `json:"checkpoints"`
	Namespaces         int    `json:"namespaces"`
	Writes             int    `json:"writes"`
	LatestCheckpointID string `json:"latestCheckpointId,omitempty"`
	UpdatedAt          string `json:"updatedAt,omitempty"`
	StoredBytes        int64  `json:"storedBytes"`
	ChannelBytes       int64  `json:"channelBytes"`
}

// threadCheckpointJSON is one checkpoint in 'ckptd threads THREAD --json'.
type threadCheckpointJSON struct {
	ThreadID     string          `json:"threadId"`
	Namespace    string          `json:"namespace"`
	CheckpointID string          `json:"checkpointId"`
	ParentID     string          `json:"parentId,omitempty"`
	CreatedAt    string          `json:"createdAt"`
	Metadata     json.RawMessage `json:"metadata"`
	Channels     int             `json:"channels"`
	Writes       int             `json:"writes"`
	SizeBytes    int64           `json:"sizeBytes"`
	StoredBytes  int64           `json:"storedBytes"`
}

func runThreads(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "threads", threadsUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	namespace := fs.String("namespace", "", "with THREAD: only this `namespace` (\"\" is the root; default: every namespace)")
	limit := fs.Int("limit", 0, "with THREAD: at most `n` checkpoints (0 = all)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (threads takes at most one THREAD)", pos[1])}
	case *limit < 0:
		return usageError{"--limit must be >= 0"}
	case len(pos) == 0 && (isSet(fs, "namespace") || *limit > 0):
		return usageError{"--namespace and --limit need a THREAD"}
	}
	return withStore(ctx, e, &g, false, func(st *store.Store) error {
		if len(pos) == 0 {
			return lsThreads(ctx, e, st, *asJSON)
		}
		var ns *string
		if isSet(fs, "namespace") {
			ns = namespace
		}
		return lsThreadCheckpoints(ctx, e, st, pos[0], ns, *limit, *asJSON)
	})
}

func lsThreads(ctx context.Context, e *env, st *store.Store, asJSON bool) error {
	ts, err := st.LGThreads(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Threads []threadJSON `json:"threads"`
		}{Threads: make([]threadJSON, 0, len(ts))}
		for _, t := range ts {
			out.Threads = append(out.Threads, threadJSON{ThreadID: t.ThreadID, Checkpoints: t.Checkpoints,
				Namespaces: t.Namespaces, Writes: t.Writes, LatestCheckpointID: t.LatestID, UpdatedAt: timestamp(t.UpdatedAt),
				StoredBytes: t.StoredBytes, ChannelBytes: t.ChannelBytes})
		}
		return printJSON(e.stdout, out)
	}
	if len(ts) == 0 {
		fmt.Fprintln(e.stderr, "no LangGraph threads")
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "THREAD\tCHECKPOINTS\tNAMESPACES\tWRITES\tLATEST\tUPDATED\tSTORED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", t.ThreadID, t.Checkpoints, t.Namespaces, t.Writes,
			orDash(t.LatestID), fmtTime(t.UpdatedAt), fmtBytes(t.StoredBytes))
	}
	return tw.Flush()
}

func lsThreadCheckpoints(ctx context.Context, e *env, st *store.Store, thread string, ns *string, limit int, asJSON bool) error {
	cps, err := st.LGThreadCheckpoints(ctx, thread, ns, limit)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Checkpoints []threadCheckpointJSON `json:"checkpoints"`
		}{Checkpoints: make([]threadCheckpointJSON, 0, len(cps))}
		for _, c := range cps {
			meta := c.Metadata
			if meta == nil {
				meta = json.RawMessage("null")
			}
			out.Checkpoints = append(out.Checkpoints, threadCheckpointJSON{ThreadID: c.ThreadID, Namespace: c.Namespace,
				CheckpointID: c.CheckpointID, ParentID: c.ParentID, CreatedAt: timestamp(c.CreatedAt), Metadata: meta,
				Channels: c.Channels, Writes: c.Writes, SizeBytes: c.SizeBytes, StoredBytes: c.StoredBytes})
		}
		return printJSON(e.stdout, out)
	}
	if len(cps) == 0 {
		fmt.Fprintf(e.stderr, "LangGraph thread %s has no checkpoints here\n", thread)
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "NAMESPACE\tCHECKPOINT\tPARENT\tCREATED\tSOURCE\tSTEP\tCHANNELS\tWRITES\tSIZE")
	for _, c := range cps {
		source, step := metadataSourceStep(c.Metadata)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", orDash(c.Namespace), c.CheckpointID, orDash(c.ParentID),
			fmtTime(c.CreatedAt), source, step, c.Channels, c.Writes, fmtBytes(c.SizeBytes))
	}
	return tw.Flush()
}

// metadataSourceStep reads LangGraph's "source" and "step" from checkpoint metadata, "-" where
// absent.
func metadataSourceStep(meta json.RawMessage) (source, step string) {
	var m struct {
		Source *string      `json:"source"`
		Step   *json.Number `json:"step"`
	}
	source, step = "-", "-"
	if json.Unmarshal(meta, &m) != nil {
		return source, step
	}
	if m.Source != nil && *m.Source != "" {
		source = *m.Source
	}
	if m.Step != nil {
		step = m.Step.String()
	}
	return source, step
}
