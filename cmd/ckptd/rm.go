package main

import (
	"context"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

const rmUsage = `usage: ckptd rm CHECKPOINT_ID... | ckptd rm --workflow WORKFLOW

Deletes checkpoints (with their pending writes), or a whole workflow: every checkpoint and its
configuration. Freed space goes back to the file system. Exits 1 if an id was not found (the
others are still deleted).

examples:
  ckptd rm c-7 c-8
  ckptd rm --workflow wf-1
`

func runRm(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "rm", rmUsage)
	registerDBFlags(fs, &g)
	workflow := fs.String("workflow", "", "delete this whole `workflow`")
	ids, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *workflow == "" && len(ids) == 0:
		return usageError{"give CHECKPOINT_ID... or --workflow WORKFLOW"}
	case *workflow != "" && len(ids) > 0:
		return usageError{"give either CHECKPOINT_IDs or --workflow, not both"}
	}
	return withStore(ctx, e, &g, false, func(st *store.Store) error {
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
