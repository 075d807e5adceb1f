package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ckptd/ckptd/store"
)

const threadsUsage = `usage: ckptd threads [THREAD] [flags]

LangGraph threads, stored by the LangGraph savers (ckptd.langgraph, ckptd/langgraph) through the
lg/* methods. Without THREAD: the 50 most recently updated threads (checkpoints, namespaces,
pending writes, newest checkpoint, last update, stored size), and how many more there are;
--limit N shows N, --all every one. With THREAD: its checkpoints,
namespace by namespace (root first), newest first, with their metadata's source and step.
Reads only the rows' headers and metadata, never a stored value.

With THREAD --checkpoint ID (or "latest"): that checkpoint of the namespace (default the root),
read and verified: its metadata, the channel values it names (version, serializer type, size)
and the pending writes stored against it; --values also prints the JSON-typed values.

With --idle AGE: the threads no put has touched for at least AGE, oldest first, with the idle
TTL of their retention (lg/configure, --lg-idle-ttl) and when the daemon's sweep deletes them.

examples:
  ckptd threads
  ckptd threads --idle 30d
  ckptd threads my-thread
  ckptd threads my-thread --namespace "" --limit 5 --json
  ckptd threads my-thread --checkpoint latest --values
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
	limit := fs.Int("limit", 0, "at most `n` threads (default 50), or with THREAD checkpoints (default all)")
	all := fs.Bool("all", false, "without THREAD: every thread")
	checkpoint := fs.String("checkpoint", "", "with THREAD: show this checkpoint `id` (or latest)")
	values := fs.Bool("values", false, "with --checkpoint: print JSON-typed channel values and writes too")
	idle := fs.String("idle", "", "list the threads no put has touched for at least `age` (e.g. 30d, 12h)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var idleFor time.Duration
	if *idle != "" {
		if idleFor, err = parseAge(*idle); err != nil {
			return usageError{"--idle: " + err.Error()}
		}
		if len(pos) > 0 || *checkpoint != "" || *limit > 0 || isSet(fs, "namespace") {
			return usageError{"--idle lists threads: it takes no THREAD, --checkpoint, --limit or --namespace"}
		}
	}
	switch {
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (threads takes at most one THREAD)", pos[1])}
	case *limit < 0:
		return usageError{"--limit must be >= 0"}
	case len(pos) == 0 && (isSet(fs, "namespace") || *checkpoint != ""):
		return usageError{"--namespace and --checkpoint need a THREAD"}
	case *all && (len(pos) > 0 || isSet(fs, "limit")):
		return usageError{"--all lists every thread: give no THREAD and no --limit"}
	case len(pos) == 0 && isSet(fs, "limit") && *limit < 1:
		return usageError{"--limit must be >= 1 (--all lists every thread)"}
	case *checkpoint != "" && *limit > 0:
		return usageError{"--limit lists checkpoints: it does not go with --checkpoint"}
	case *values && *checkpoint == "":
		return usageError{"--values needs --checkpoint"}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if *idle != "" {
			return lsIdleThreads(ctx, e, st, idleFor, *asJSON)
		}
		if len(pos) == 0 {
			n := lsDefault
			switch {
			case *all:
				n = 0
			case isSet(fs, "limit"):
				n = *limit
			}
			return lsThreads(ctx, e, st, n, *asJSON)
		}
		if *checkpoint != "" {
			return showThreadCheckpoint(ctx, e, st, pos[0], *namespace, *checkpoint, *values, *asJSON)
		}
		var ns *string
		if isSet(fs, "namespace") {
			ns = namespace
		}
		return lsThreadCheckpoints(ctx, e, st, pos[0], ns, *limit, *asJSON)
	})
}

// lsThreads lists the newest limit threads (0: all), page by page, then says how many more
// there are and how to see them (on stderr).
func lsThreads(ctx context.Context, e *env, st store.Backend, limit int, asJSON bool) error {
	var ts []store.LGThread
	cursor, total := "", 0
	for {
		n := store.MaxWorkflowPage
		if limit > 0 {
			n = min(n, limit-len(ts))
		}
		page, err := st.ListLGThreads(ctx, n, cursor)
		if err != nil {
			return err
		}
		ts = append(ts, page.Threads...)
		cursor, total = page.Cursor, page.Total
		if cursor == "" || (limit > 0 && len(ts) >= limit) {
			break
		}
	}
	if err := threadFootprints(ctx, st, ts); err != nil {
		return err
	}
	more := 0
	if cursor != "" {
		more = max(total-len(ts), 1)
	}
	defer lsMore(e, more, "thread", len(ts))
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

// idleThreadJSON is one thread in 'ckptd threads --idle AGE --json'.
type idleThreadJSON struct {
	ThreadID       string `json:"threadId"`
	UpdatedAt      string `json:"updatedAt"`
	IdleTTLSeconds int64  `json:"idleTtlSeconds"`
	ExpiresAt      string `json:"expiresAt,omitempty"`
}

func lsIdleThreads(ctx context.Context, e *env, st store.Backend, idle time.Duration, asJSON bool) error {
	now := time.Now()
	ts, err := st.LGIdleThreads(ctx, now.Add(-idle), 0)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Threads []idleThreadJSON `json:"threads"`
		}{Threads: make([]idleThreadJSON, 0, len(ts))}
		for _, t := range ts {
			j := idleThreadJSON{ThreadID: t.ThreadID, UpdatedAt: timestamp(t.UpdatedAt), IdleTTLSeconds: t.IdleTTLSeconds}
			if !t.ExpiresAt.IsZero() {
				j.ExpiresAt = timestamp(t.ExpiresAt)
			}
			out.Threads = append(out.Threads, j)
		}
		return printJSON(e.stdout, out)
	}
	if len(ts) == 0 {
		fmt.Fprintf(e.stderr, "no LangGraph thread idle for %s or more\n", fmtAge(idle))
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "THREAD\tLAST PUT\tIDLE\tIDLE TTL\tEXPIRES")
	expiring := 0
	for _, t := range ts {
		ttl, expires := "-", "never"
		if t.IdleTTLSeconds > 0 {
			ttl = fmtAge(time.Duration(t.IdleTTLSeconds) * time.Second)
			expires = fmtTime(t.ExpiresAt)
			if !t.ExpiresAt.After(now) {
				expires = "at the next sweep"
				expiring++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ThreadID, fmtTime(t.UpdatedAt), fmtAge(now.Sub(t.UpdatedAt)), ttl, expires)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d thread(s) idle for %s or more; %d expire at the next sweep of a daemon on this database (every minute)\n",
		len(ts), fmtAge(idle), expiring)
	return nil
}

// fmtAge prints a duration in the largest whole unit of d, h, m, s that fits.
func fmtAge(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= 24*time.Hour:
		return fmt.Sprintf("%.1fd", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

func lsThreadCheckpoints(ctx context.Context, e *env, st store.Backend, thread string, ns *string, limit int, asJSON bool) error {
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

// threadValueJSON is a channel value or pending write in 'ckptd threads T --checkpoint ID --json'.
type threadValueJSON struct {
	Channel   string          `json:"channel"`
	Version   json.RawMessage `json:"version,omitempty"` // channel values
	TaskID    string          `json:"taskId,omitempty"`  // writes
	TaskPath  string          `json:"taskPath,omitempty"`
	Idx       *int64          `json:"idx,omitempty"`
	Type      string          `json:"type"`
	SizeBytes int             `json:"sizeBytes"`
	Value     json.RawMessage `json:"value,omitempty"` // --values, JSON-typed only
}

type threadCheckpointDetailJSON struct {
	ThreadID        string            `json:"threadId"`
	Namespace       string            `json:"namespace"`
	CheckpointID    string            `json:"checkpointId"`
	ParentID        string            `json:"parentId,omitempty"`
	CreatedAt       string            `json:"createdAt"`
	Metadata        json.RawMessage   `json:"metadata"`
	Type            string            `json:"type"`
	SizeBytes       int               `json:"sizeBytes"`
	ChannelVersions json.RawMessage   `json:"channelVersions"`
	Channels        []threadValueJSON `json:"channels"`
	Writes          []threadValueJSON `json:"writes"`
}

// showThreadCheckpoint prints one LangGraph checkpoint, read (and so verified) like lg/get.
func showThreadCheckpoint(ctx context.Context, e *env, st store.Backend, thread, ns, id string, values, asJSON bool) error {
	want := id
	if id == "latest" {
		want = ""
	}
	tp, err := st.LGGet(ctx, thread, ns, want)
	if err != nil {
		return err
	}
	if tp == nil {
		where := "namespace " + strconv.Quote(ns)
		if ns == "" {
			where = "the root namespace"
		}
		what := "checkpoint " + id
		if id == "latest" {
			what = "checkpoints"
		}
		return fmt.Errorf("LangGraph thread %q has no %s in %s: %w", thread, what, where, store.ErrNotFound)
	}
	value := func(typ string, data []byte) json.RawMessage {
		if values && typ == "json" && json.Valid(data) {
			return json.RawMessage(data)
		}
		return nil
	}
	d := threadCheckpointDetailJSON{ThreadID: tp.ThreadID, Namespace: tp.Namespace, CheckpointID: tp.CheckpointID,
		ParentID: tp.ParentID, CreatedAt: timestamp(tp.CreatedAt), Metadata: tp.Metadata, Type: tp.Type,
		SizeBytes: len(tp.Checkpoint), ChannelVersions: tp.ChannelVersions, Channels: []threadValueJSON{}, Writes: []threadValueJSON{}}
	if d.Metadata == nil {
		d.Metadata = json.RawMessage("null")
	}
	for _, b := range tp.Blobs {
		d.Channels = append(d.Channels, threadValueJSON{Channel: b.Channel, Version: json.RawMessage(b.Version), Type: b.Type,
			SizeBytes: len(b.Data), Value: value(b.Type, b.Data)})
	}
	for _, w := range tp.Writes {
		idx := w.Idx
		d.Writes = append(d.Writes, threadValueJSON{Channel: w.Channel, TaskID: w.TaskID, TaskPath: w.TaskPath, Idx: &idx,
			Type: w.Type, SizeBytes: len(w.Data), Value: value(w.Type, w.Data)})
	}
	if asJSON {
		return printJSON(e.stdout, d)
	}
	tw := newTable(e.stdout)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("thread", d.ThreadID)
	row("namespace", orDash(d.Namespace))
	row("checkpoint", d.CheckpointID)
	row("parent", orDash(d.ParentID))
	row("created", fmtTime(tp.CreatedAt))
	row("metadata", string(d.Metadata))
	row("serialized", fmt.Sprintf("%s, %s", d.Type, fmtBytes(int64(d.SizeBytes))))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nchannel values (%d):\n", len(d.Channels))
	tw = newTable(e.stdout)
	fmt.Fprintln(tw, "  CHANNEL\tVERSION\tTYPE\tSIZE")
	for _, c := range d.Channels {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Channel, c.Version, c.Type, fmtBytes(int64(c.SizeBytes)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\npending writes (%d):\n", len(d.Writes))
	if len(d.Writes) > 0 {
		tw = newTable(e.stdout)
		fmt.Fprintln(tw, "  TASK\tIDX\tCHANNEL\tTYPE\tSIZE")
		for _, w := range d.Writes {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", w.TaskID, *w.Idx, w.Channel, w.Type, fmtBytes(int64(w.SizeBytes)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if !values {
		return nil
	}
	for _, c := range d.Channels {
		printValue(e, "channel "+c.Channel, c.Type, c.Value)
	}
	for _, w := range d.Writes {
		printValue(e, fmt.Sprintf("write %s/%d %s", w.TaskID, *w.Idx, w.Channel), w.Type, w.Value)
	}
	return nil
}

// printValue prints a JSON value indented under its name, or why it is not shown.
func printValue(e *env, name, typ string, v json.RawMessage) {
	if v == nil {
		fmt.Fprintf(e.stdout, "\n%s: (%s: not shown)\n", name, typ)
		return
	}
	var b bytes.Buffer
	if json.Indent(&b, v, "  ", "  ") != nil {
		b.Reset()
		b.Write(v)
	}
	fmt.Fprintf(e.stdout, "\n%s:\n  %s\n", name, b.String())
}

// threadFootprints replaces the listed threads' stored bytes (the kept list's cheap sum of their
// rows) by their footprints: the rows plus the distinct chunks and runs their chunked channel
// values list (docs/storage.md "Chunked values"), what `ckptd ls` shows for workflows.
func threadFootprints(ctx context.Context, st store.Backend, ts []store.LGThread) error {
	if len(ts) == 0 {
		return nil
	}
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ThreadID
	}
	fp, err := st.Footprints(ctx, store.FootprintRequest{Threads: ids, OmitTotal: true})
	if err != nil {
		return err
	}
	for i := range ts {
		if f, ok := fp.Threads[ts[i].ThreadID]; ok && f.StoredBytes > ts[i].StoredBytes {
			ts[i].ChannelBytes += f.StoredBytes - ts[i].StoredBytes // the chunks and runs of its channel values
			ts[i].StoredBytes = f.StoredBytes
		}
	}
	return nil
}
