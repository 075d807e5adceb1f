package sqlite

import (
	"context"
	"database/sql"

	"github.com/ckptd/ckptd/store"
)

// ScanManifests reads every stored manifest row from one read transaction: each distinct entry,
// each distinct chunk, then each checkpoint's manifest by workflow and seq (store.VerifyManifests
// checks them). Reads only.
func (s *Store) ScanManifests(ctx context.Context, scan store.ManifestScan) error {
	err := s.readTx(ctx, func(tx *rtx) error {
		err := scanRows(ctx, tx, `SELECT key, data FROM drift_entries`, func(rows *sql.Rows) error {
			var key, data []byte
			if err := rows.Scan(&key, &data); err != nil {
				return err
			}
			return scan.Entry(key, data)
		})
		if err != nil {
			return err
		}
		err = scanRows(ctx, tx, `SELECT id, keys FROM drift_chunks`, func(rows *sql.Rows) error {
			var id, keys []byte
			if err := rows.Scan(&id, &keys); err != nil {
				return err
			}
			return scan.Chunk(id, keys)
		})
		if err != nil {
			return err
		}
		return scanRows(ctx, tx, `SELECT c.checkpoint_id, c.workflow_id, c.seq, m.header, m.chunks
			FROM drift_manifests m JOIN checkpoints c ON c.id = m.ckpt ORDER BY c.workflow_id, c.seq`,
			func(rows *sql.Rows) error {
				var m store.StoredManifest
				if err := rows.Scan(&m.CheckpointID, &m.WorkflowID, &m.Seq, &m.Header, &m.ChunkIDs); err != nil {
					return err
				}
				return scan.Manifest(m)
			})
	})
	if err != nil {
		return wrapDB("verify source manifests", err)
	}
	return nil
}
