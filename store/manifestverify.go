package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"

	"github.com/ckptd/ckptd/drift"
)

// ManifestProblem is a checkpoint whose recorded source manifest cannot be read back whole.
type ManifestProblem struct {
	CheckpointID string
	WorkflowID   string
	Seq          int64
	Reason       string
}

// ManifestCounts are the drift manifest rows VerifyManifests checked.
type ManifestCounts struct {
	Manifests int // checkpoints with a manifest
	Entries   int // distinct file entries stored for them
}

// VerifyManifests re-checks every stored source manifest from the database: each entry row
// against its content address (BLAKE3 of its bytes) and its decoding, each chunk against its id
// and the entries it lists, each manifest's header and chunk list. It names every checkpoint
// whose manifest a drift check could not load, with the first reason. Reads only.
func (s *Store) VerifyManifests(ctx context.Context) (ManifestCounts, []ManifestProblem, error) {
	var counts ManifestCounts
	var out []ManifestProblem
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		counts, out = ManifestCounts{}, nil
		// entry key -> "" (sound) or the reason it is not; the same for chunk ids
		entries, chunks := map[string]string{}, map[string]string{}
		err := scanRows(ctx, tx, `SELECT key, data FROM drift_entries`, func(rows *sql.Rows) error {
			var key, data []byte
			if err := rows.Scan(&key, &data); err != nil {
				return err
			}
			counts.Entries++
			entries[string(key)] = entryProblem(key, data)
			return nil
		})
		if err != nil {
			return err
		}
		err = scanRows(ctx, tx, `SELECT id, keys FROM drift_chunks`, func(rows *sql.Rows) error {
			var id, keys []byte
			if err := rows.Scan(&id, &keys); err != nil {
				return err
			}
			chunks[string(id)] = chunkProblem(id, keys, entries)
			return nil
		})
		if err != nil {
			return err
		}
		return scanRows(ctx, tx, `SELECT c.checkpoint_id, c.workflow_id, c.seq, m.header, m.chunks
			FROM drift_manifests m JOIN checkpoints c ON c.id = m.ckpt ORDER BY c.workflow_id, c.seq`,
			func(rows *sql.Rows) error {
				var p ManifestProblem
				var header, ids []byte
				if err := rows.Scan(&p.CheckpointID, &p.WorkflowID, &p.Seq, &header, &ids); err != nil {
					return err
				}
				counts.Manifests++
				if p.Reason = manifestProblem(header, ids, chunks); p.Reason != "" {
					out = append(out, p)
				}
				return nil
			})
	})
	if err != nil {
		return ManifestCounts{}, nil, wrapDB("verify source manifests", err)
	}
	return counts, out, nil
}

// entryProblem checks one drift_entries row; "" when it is sound.
func entryProblem(key, data []byte) string {
	sum := blake3.Sum256(data)
	if string(sum[:entryKeyLen]) != string(key) {
		return fmt.Sprintf("file entry %s: BLAKE3 mismatch", hex.EncodeToString(key))
	}
	if _, err := drift.DecodeEntry(data); err != nil {
		return fmt.Sprintf("file entry %s: %v", hex.EncodeToString(key), err)
	}
	return ""
}

// chunkProblem checks one drift_chunks row against the entries found; "" when it is sound.
func chunkProblem(id, keys []byte, entries map[string]string) string {
	sum := blake3.Sum256(keys)
	switch {
	case string(sum[:chunkIDLen]) != string(id):
		return fmt.Sprintf("entry chunk %s: BLAKE3 mismatch", hex.EncodeToString(id))
	case len(keys)%entryKeyLen != 0:
		return fmt.Sprintf("entry chunk %s: key list of %d bytes", hex.EncodeToString(id), len(keys))
	}
	for i := 0; i < len(keys); i += entryKeyLen {
		k := keys[i : i+entryKeyLen]
		r, ok := entries[string(k)]
		if !ok {
			return fmt.Sprintf("entry chunk %s: file entry %s is missing", hex.EncodeToString(id), hex.EncodeToString(k))
		}
		if r != "" {
			return r
		}
	}
	return ""
}

// manifestProblem checks one drift_manifests row against the chunks found; "" when it is sound.
func manifestProblem(header, ids []byte, chunks map[string]string) string {
	if _, err := drift.UnmarshalManifest(header); err != nil {
		return "source manifest header: " + err.Error()
	}
	if len(ids)%chunkIDLen != 0 {
		return fmt.Sprintf("source manifest: chunk list of %d bytes", len(ids))
	}
	for i := 0; i < len(ids); i += chunkIDLen {
		id := ids[i : i+chunkIDLen]
		r, ok := chunks[string(id)]
		if !ok {
			return fmt.Sprintf("source manifest: entry chunk %s is missing", hex.EncodeToString(id))
		}
		if r != "" {
			return "source manifest: " + r
		}
	}
	return ""
}
