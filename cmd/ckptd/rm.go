package main

import (
	"context"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

const rmUsage = `usage: ckptd rm CHECKPOINT_ID... | ckptd rm --workflow WORKFLOW | ckptd rm --thread THREAD

Deletes checkpoints (with their pending writes), or a whole workflow: every checkpoint and its
configuration, or a whole LangGraph thread (what thread/delete does: every checkpoint, channel
value and pending write of it, in every namespace). Freed space goes back to the file system.
Exits 1 if an id, the workflow or the thread was not found (other ids are still deleted).

examples:
  ckptd rm c-7 c-8
  ckptd rm --workflow wf-1
  ckptd rm --thread support-42
`

func runRm(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "rm", rmUsage)
	registerDBFlags(fs, &g)
	workflow := fs.String("workflow", "", "delete this whole `workflow`")
	thread := fs.String("thread", "", "delete this whole LangGraph `thread`")
	ids, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	given := 0
	for _, set := range []bool{len(ids) > 0, *workflow != "", *thread != ""} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		return usageError{"give CHECKPOINT_ID..., --workflow WORKFLOW or --thread THREAD"}
	case given > 1:
		return usageError{"give one of CHECKPOINT_IDs, --workflow and --thread"}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if *thread != "" {
			// LGThreadCheckpoints tells an unknown thread (ErrNotFound) from an empty one.
			if _, err := st.LGThreadCheckpoints(ctx, *thread, nil, 1); err != nil {
				return err
			}
			n, err := st.LGDeleteThread(ctx, *thread)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "deleted LangGraph thread %s (%s)\n", *thread, plural(n, "checkpoint", "checkpoints"))
			return nil
		}
		if *workflow != "" {
			if _, err := st.Workflow(ctx, *workflow); err != nil {
				return err
			}
			n, err := st.DeleteWorkflow(ctx, *workflow)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "deleted workflow %s (%s)\n", *workflow, plural(n, "checkpoint", "checkpoints"))
			return nil
		}
		missing := 0
		for _, id := range ids {
			n, err := st.Delete(ctx, id)
			if err != nil {
				return err
			}
			if n == 0 {
				fmt.Fprintf(e.stderr, "ckptd rm: checkpoint %q not found\n", id)
				missing++
				continue
			}
			fmt.Fprintf(e.stdout, "deleted %s\n", id)
		}
		if missing > 0 {
			return errProblemFound
		}
		return nil
	})
}
