package engine

// Resuming on another machine: a source manifest records paths relative to its root, so the
// same tree checked out elsewhere (another host, another directory) is compared by moving the
// root and nothing else (like `ckptd import --sources-root OLD=NEW` moves the roots of imported
// manifests, cmd/ckptd/rebase.go). resume/plan and drift/status take the new root as
// sourcesRoot (CheckpointDriftAt, ResumeRequest.SourcesRoot).

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// CheckSourcesRoot validates a sourcesRoot param (field names it in a *SourcesError): an
// existing directory, a relative path taken relative to the working directory. It returns the
// root absolute and clean; "" stays "" (compare at the recorded root).
func CheckSourcesRoot(field, root string) (string, error) {
	if root == "" {
		return "", nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", &SourcesError{field, err.Error()}
	}
	fi, err := os.Stat(abs)
	switch {
	case os.IsNotExist(err):
		return "", &SourcesError{field, fmt.Sprintf("directory %s does not exist", strconv.Quote(root))}
	case err != nil:
		return "", &SourcesError{field, err.Error()}
	case !fi.IsDir():
		return "", &SourcesError{field, fmt.Sprintf("%s is not a directory", strconv.Quote(root))}
	}
	return abs, nil
}
