package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

const showUsage = `usage: ckptd show CHECKPOINT_ID [flags]

Shows one checkpoint: ids, phase, step, error, metadata, sizes and storage, task lists, pending
writes, and integrity: the state's SHA-256 is recomputed, "ok" or "CORRUPT: reason" (exit 1).

--state prints the state instead: a JSON state pretty-printed, a bytes state raw (never to a
terminal). With -o FILE the state is written to FILE byte-for-byte as it was saved.

examples:
  ckptd show 0193a5c2-7f1e-7c3a-9b1d-2f0e4c6a8b10
  ckptd show c-3 --json
  ckptd show c-3 --state | less
  ckptd show c-3 --state -o state.bin
`

// showValueWidth is how much of a task, metadata or write value one line shows.
const showValueWidth = 100

func runShow(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "show", showUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON (the checkpoint/load fields without the state, plus storage and integrity)")
	state := fs.Bool("state", false, "print the state instead of the description")
	out := fs.String("o", "", "with --state: write the state byte-for-byte to `file`")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError{"missing CHECKPOINT_ID"}
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (show takes one CHECKPOINT_ID)", pos[1])}
	case *out != "" && !*state:
		return usageError{"-o needs --state"}
	case *asJSON && *state:
		return usageError{"--json and --state exclude each other"}
	}
	id := pos[0]
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		in, err := st.Inspect(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return showNotFound(ctx, st, id, err)
		}
		if err != nil {
			return err
		}
		switch {
		case *state:
			return showState(e, in, *out)
		case *asJSON:
			if err := printJSON(e.stdout, showJSON(in)); err != nil {
				return err
			}
		default:
			if err := showText(e.stdout, in); err != nil {
				return err
			}
		}
		if in.Corrupt != "" {
			return errProblemFound
		}
		return nil
	})
}

func showState(e *env, in store.Inspection, out string) error {
	switch {
	case in.Corrupt != "":
		return fmt.Errorf("checkpoint %s is CORRUPT (%s): its state is not printed", in.CheckpointID, in.Corrupt)
	case in.StateType == store.StateNone:
		return fmt.Errorf("checkpoint %s was saved without state", in.CheckpointID)
	case out != "":
		if err := os.WriteFile(out, in.State, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote the %s state of %s to %s (%d bytes)\n", in.StateType, in.CheckpointID, out, len(in.State))
		return nil
	case in.StateType == store.StateJSON:
		var buf bytes.Buffer
		if err := json.Indent(&buf, in.State, "", "  "); err != nil {
			buf.Reset()
			buf.Write(in.State)
		}
		buf.WriteByte('\n')
		_, err := e.stdout.Write(buf.Bytes())
		return err
	case isTerminal(e.stdout):
		return usageError{fmt.Sprintf("the state of %s is %s of binary data: not writing it to a terminal; "+
			"use -o FILE or redirect stdout", in.CheckpointID, fmtBytes(int64(len(in.State))))}
	default:
		_, err := e.stdout.Write(in.State)
		return err
	}
}

func showText(w io.Writer, in store.Inspection) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("checkpoint", in.CheckpointID)
	row("workflow", in.WorkflowID)
	row("namespace", orDash(in.Namespace))
	row("seq", fmt.Sprint(in.Seq))
	row("parent", orDash(in.ParentID))
	row("phase", string(in.Phase))
	step := fmt.Sprint(in.Step)
	if in.StepName != "" {
		step += " (" + in.StepName + ")"
	}
	row("step", step)
	if v := in.Validation; v != nil {
		row("validation", validationLine(v))
	}
	if in.Error != nil {
		r := "not retryable"
		if in.Error.Retryable {
			r = "retryable"
		}
		row("error", fmt.Sprintf("%s (%s)", oneLine(in.Error.Message), r))
	}
	row("workflow hash", orDash(in.WorkflowHash))
	row("created", timestamp(in.CreatedAt))
	row("format", fmt.Sprint(in.FormatVersion))
	row("metadata", orDash(compactJSON(in.Metadata)))
	row("state", stateLine(in))
	if in.SHA256 != "" {
		row("sha256", in.SHA256)
	}
	if in.Corrupt != "" {
		row("integrity", "CORRUPT: "+in.Corrupt)
	} else {
		row("integrity", "ok")
	}
	row("tasks", fmt.Sprintf("%d completed, %d pending, %s", in.CompletedTaskCount, in.PendingTaskCount,
		plural(len(in.PendingWrites), "pending write", "pending writes")))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range []struct {
		title string
		raw   json.RawMessage
	}{{"completed tasks", in.CompletedTasks}, {"pending tasks", in.PendingTasks}} {
		items := arrayItems(l.raw)
		if len(items) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d):\n", l.title, len(items))
		for _, it := range items {
			fmt.Fprintf(w, "  %s\n", it)
		}
	}
	if len(in.PendingWrites) > 0 {
		fmt.Fprintf(w, "\npending writes (%d):\n", len(in.PendingWrites))
		tw := newTable(w)
		fmt.Fprintln(tw, "  TASK\tIDX\tCHANNEL\tTYPE\tVALUE")
		for _, wr := range in.PendingWrites {
			v := "(" + fmtBytes(int64(len(wr.Value))) + " binary)"
			if !wr.IsBytes {
				v = orDash(compactJSON(wr.Value))
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", wr.TaskID, wr.Idx, wr.Channel, orDash(wr.Type), v)
		}
		return tw.Flush()
	}
	return nil
}

func stateLine(in store.Inspection) string {
	if in.StateType == store.StateNone {
		return "none"
	}
	s := fmt.Sprintf("%s, %s", in.StateType, plural(int(in.SizeBytes), "byte", "bytes"))
	switch in.Encoding {
	case "":
		s += ", stored blob missing"
	case "raw":
		s += ", stored uncompressed"
	case "chunked":
		s += fmt.Sprintf(", stored in shared chunks (%s new when saved)", plural(int(in.StoredBytes), "byte", "bytes"))
	default:
		s += fmt.Sprintf(", stored %s-compressed in %s", in.Encoding, plural(int(in.StoredBytes), "byte", "bytes"))
	}
	if in.SharedWith > 0 {
		s += ", shared with " + plural(in.SharedWith, "other checkpoint", "other checkpoints")
	}
	return s
}

// compactJSON renders a raw JSON value on one line, shortened to showValueWidth.
func compactJSON(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return oneLine(string(raw))
	}
	return oneLine(buf.String())
}

// oneLine puts s on one line and shortens it to showValueWidth runes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= showValueWidth {
		return s
	}
	r := []rune(s)
	return string(r[:showValueWidth-1]) + "…"
}

// arrayItems renders each element of a JSON array on its own line; a value that is not an
// array comes back as one item.
func arrayItems(raw json.RawMessage) []string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return []string{compactJSON(raw)}
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, compactJSON(it))
	}
	return out
}

type showIntegrity struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

type showStorage struct {
	Encoding   string `json:"encoding"`
	SharedWith int    `json:"sharedWith"`
}

type showResult struct {
	protocol.Summary
	FormatVersion  int                     `json:"formatVersion"`
	CompletedTasks json.RawMessage         `json:"completedTasks"`
	PendingTasks   json.RawMessage         `json:"pendingTasks"`
	PendingWrites  []protocol.PendingWrite `json:"pendingWrites"`
	Storage        showStorage             `json:"storage"`
	Integrity      showIntegrity           `json:"integrity"`
}

func showJSON(in store.Inspection) showResult {
	out := showResult{
		Summary:        engine.SummaryOf(in.Summary),
		FormatVersion:  in.FormatVersion,
		CompletedTasks: orEmptyArray(in.CompletedTasks),
		PendingTasks:   orEmptyArray(in.PendingTasks),
		PendingWrites:  engine.PendingWritesOf(in.PendingWrites),
		Storage:        showStorage{Encoding: in.Encoding, SharedWith: in.SharedWith},
		Integrity:      showIntegrity{OK: in.Corrupt == "", Reason: in.Corrupt},
	}
	return out
}

func orEmptyArray(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("[]")
	}
	return raw
}

// showNotFound explains an unknown checkpoint id: when it names a LangGraph checkpoint (saved by
// a LangGraph saver, listed by ckptd threads), it says which command shows it.
func showNotFound(ctx context.Context, st store.Backend, id string, notFound error) error {
	threads, err := st.LGThreads(ctx)
	if err != nil {
		return notFound
	}
	var cmds []string
	for _, t := range threads {
		if tu, err := st.LGGet(ctx, t.ThreadID, "", id); err == nil && tu != nil {
			cmds = append(cmds, fmt.Sprintf("ckptd threads %s --checkpoint %s", t.ThreadID, id))
			continue
		}
		if t.Namespaces < 2 {
			continue
		}
		infos, err := st.LGThreadCheckpoints(ctx, t.ThreadID, nil, 0)
		if err != nil {
			continue
		}
		for _, in := range infos {
			if in.CheckpointID == id && in.Namespace != "" {
				cmds = append(cmds, fmt.Sprintf("ckptd threads %s --checkpoint %s --namespace %s", t.ThreadID, id, in.Namespace))
			}
		}
	}
	if len(cmds) == 0 {
		return notFound
	}
	return fmt.Errorf("%s is not a checkpoint of a workflow but a LangGraph checkpoint (saved by a LangGraph saver); "+
		"show it with: %s", id, strings.Join(cmds, ", or "))
}
