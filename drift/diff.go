package drift

import (
	"strings"
	"time"
)

// FileChange is one path that differs from the base manifest. Old* fields are zero for an
// added path, New* fields for a deleted one.
type FileChange struct {
	Path    string    `json:"path"`
	OldType EntryType `json:"oldType,omitempty"`
	NewType EntryType `json:"newType,omitempty"`
	OldSize int64     `json:"oldSize"`
	NewSize int64     `json:"newSize"`
	OldHash Digest    `json:"oldHash,omitempty"`
	NewHash Digest    `json:"newHash,omitempty"`
	OldMode uint32    `json:"oldMode,omitempty"`
	NewMode uint32    `json:"newMode,omitempty"`
}

// Report says whether, and how, a tree drifted from a base manifest.
type Report struct {
	Drifted      bool          `json:"drifted"`
	Changed      []FileChange  `json:"changed"` // content, permission bits, symlink target or type differ
	Added        []FileChange  `json:"added"`
	Deleted      []FileChange  `json:"deleted"`
	FilesChecked int           `json:"filesChecked"` // entries in the current manifest
	Elapsed      time.Duration `json:"elapsedNs"`
	// FullScan: Check had to walk the whole tree (Reason says why: rules changed, ...).
	FullScan bool     `json:"fullScan,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Warnings []string `json:"warnings,omitempty"` // from the current manifest
	// Unreadable: paths whose current state could not be read (a directory, "dir/" or "./"
	// for the root, that could not be searched or listed; a file that could not be stat'ed).
	// They may have changed, so a report with any is Drifted.
	Unreadable []string `json:"unreadable,omitempty"`
}

// Diff compares two manifests (both sorted by path, as Scan/Check make them). A file whose
// hash and permission bits are equal is unchanged whatever its times or inode; a chmod,
// a new symlink target or a type change is a change.
func Diff(base, cur *Manifest) Report {
	var r Report
	var be, ce []Entry
	if base != nil {
		be = base.Entries
	}
	if cur != nil {
		ce = cur.Entries
		r.FilesChecked = len(ce)
		r.Warnings = cur.Warnings
	}
	i, j := 0, 0
	for i < len(be) || j < len(ce) {
		var c int
		switch {
		case i == len(be):
			c = 1
		case j == len(ce):
			c = -1
		default:
			c = strings.Compare(be[i].Path, ce[j].Path)
		}
		switch {
		case c < 0:
			r.Deleted = append(r.Deleted, change(&be[i], nil))
			i++
		case c > 0:
			r.Added = append(r.Added, change(nil, &ce[j]))
			j++
		default:
			if !sameContent(&be[i], &ce[j]) {
				r.Changed = append(r.Changed, change(&be[i], &ce[j]))
			}
			i++
			j++
		}
	}
	r.Drifted = len(r.Changed)+len(r.Added)+len(r.Deleted) > 0
	return r
}

func change(old, cur *Entry) FileChange {
	var fc FileChange
	if old != nil {
		fc.Path = old.Path
		fc.OldType, fc.OldSize, fc.OldHash, fc.OldMode = old.Type, old.Size, old.Hash, old.Mode
	}
	if cur != nil {
		fc.Path = cur.Path
		fc.NewType, fc.NewSize, fc.NewHash, fc.NewMode = cur.Type, cur.Size, cur.Hash, cur.Mode
	}
	return fc
}
